"""Entry points from conversation: pasted messages, shared files, @mentions, the message shortcut,
and replies in an incident thread."""

from __future__ import annotations

import html
import logging
import re
from contextlib import AbstractContextManager, nullcontext
from pathlib import PurePath
from typing import TYPE_CHECKING

from bot.redact import redact
from bot.store import Incident
from bot.store import lifecycle as lc
from bot.store.models import paste_member_id

from .answer import esc
from .errors import UserFacingError
from .evidence import Piece, prepare, unique_name
from .grouping import PasteGrouping, Placement, paste_facts
from .inputs import FileRef, MessageIn
from .unpack import read_archive
from .workflow import Outcome, Workflow, implicated_hosts

if TYPE_CHECKING:
    from bot.engine.model import Report

    from .lifecycle import Lifecycle

log = logging.getLogger(__name__)

PROGRESS = "hourglass_flowing_sand"  # reaction shown while a slow diagnosis runs; removed after
ADDED = "memo"  # reaction on a thread reply that was added to the evidence without changing anything

TEXT_SUFFIXES = {".log", ".txt", ".out", ".err", ".gz", ".zst", ".stdout", ".stderr", ".trace", ".json",
                 ".zip", ".tar", ".tgz", ".tzst"}
TEXT_MIMETYPES = ("text/", "application/gzip", "application/x-gzip", "application/zstd", "application/json",
                  "application/zip", "application/x-zip-compressed", "application/x-tar", "application/x-gtar",
                  "application/x-compressed-tar")
TEXT_FILETYPES = {"text", "log", "gzip", "gz", "zst", "json", "javascript", "python", "shell", "csv", "markdown",
                  "zip", "tar", "tgz"}

# A prose one-liner that quotes an error ("Killed", "my loss is nan again, any ideas?") is chat, not a
# paste: it gets a one-line hint only its writer sees, and no incident. A log is recognised by the
# shapes real logs have: a code block, several lines, or one line with a log's marks.
LOG_MIN_LINES = 4
_LOG_LINE = re.compile(
    r"\d{2}:\d{2}:\d{2}"  # a clock
    r"|^\s*\[(?:rank\s*)?\d+\]:?"  # [rank3]: / [3]:
    r"|^\s*[\w.-]+:\d+:\d+ \[\d+\]"  # NCCL's host:pid:tid [dev]
    r"|\bNCCL (?:WARN|INFO)\b|Traceback \(most recent call last\)|File \"[^\"]+\", line \d+"
    r"|^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failure)\b:?"  # torch.OutOfMemoryError: ...
    r"|^\s*(?:srun|slurmstepd|sbatch|salloc|mpirun|torchrun)(?:\[\d+\])?: |NVRM: |\bXid\b.*: \d+|\bkernel: "
    r"|^\s*(?:E|W|F)\d{4} ",
    re.M)


def looks_like_log(text: str) -> bool:
    """Pasted output rather than a sentence: a code block, several lines, or a line with a log's marks."""
    if "```" in text:
        return True
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return len(lines) >= LOG_MIN_LINES or any(_LOG_LINE.search(ln) for ln in lines)

_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|[^>]*)?>")
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


def slack_text_to_log(text: str, bot_user_id: str | None = None) -> str:
    """Undo what Slack did to a pasted log: code fences, auto-links, &lt;/&gt;/&amp; escapes."""
    if bot_user_id:
        text = text.replace(f"<@{bot_user_id}>", "")
    text = _LINK.sub(r"\1", text)
    text = text.replace("```", "\n")
    return html.unescape(text).strip("\n")


def readable_file(f: FileRef) -> bool:
    suffixes = [s.lower() for s in PurePath(f.name).suffixes]
    if any(s in TEXT_SUFFIXES for s in suffixes[-2:]):
        return True
    if f.mimetype and f.mimetype.startswith(TEXT_MIMETYPES):
        return True
    return (f.filetype or "").lower() in TEXT_FILETYPES


class ChatFlows:
    def __init__(self, wf: Workflow) -> None:
        self.wf = wf
        self.lifecycle: Lifecycle | None = None  # mutes apply to watched bots' posts (people asked: no mute)
        self.pastes: PasteGrouping | None = None  # pastes of one job (one failure on one host) join one incident

    @property
    def bot_user_id(self) -> str | None:
        return self.wf.chat.identity().get("user_id")

    # -- gathering evidence ------------------------------------------------------------------------

    def text_piece(self, kind: str, name: str, msg: MessageIn) -> Piece | None:
        text = slack_text_to_log(msg.text or "", self.bot_user_id)
        if not text.strip():
            return None
        return prepare(kind, name, text.encode("utf-8"),
                       author=msg.user, ref={"channel": msg.channel, "ts": msg.ts})

    def file_pieces(self, files: list[FileRef], taken: set[str], author: str | None,
                    explicit: bool = True) -> tuple[list[Piece], list[str]]:
        """Download and prepare each readable file (each member of a .zip / .tar(.gz) is one piece);
        problems become notes (one bad file loses nothing else). A file that is no text log (an
        image, a PDF) is passed over without a word unless someone asked the bot."""
        pieces: list[Piece] = []
        notes: list[str] = []
        limit = self.wf.limits.max_upload
        for f in files:
            try:
                if not f.url or f.size is None:
                    f = self.wf.chat.file_info(f.id)
                if not readable_file(f):
                    if explicit:
                        notes.append(f"Skipped {f.name} ({f.mimetype or f.filetype or 'unknown type'}): "
                                     "I read text logs, .gz, .zst, .zip and .tar(.gz) files.")
                    continue
                if f.size is not None and f.size > limit:
                    notes.append(f"{f.name} is {f.size / (1 << 20):.0f} MB, over the {limit >> 20} MB limit "
                                 "(TRIAGE_MAX_UPLOAD_MB). Upload the failing rank's log or the end of it: "
                                 f"`tail -n 200000 {f.name} | gzip > tail.log.gz`")
                    continue
                data = self.wf.chat.download(f, limit)
                archive = read_archive(data, f.name, self.wf.limits.max_unpacked)
                if archive is None:
                    pieces.append(prepare("file", unique_name(f.name, taken), data, author=author,
                                          ref={"file_id": f.id}))
                    continue
                first = len(pieces)
                for m in archive.members:
                    piece = prepare("file", unique_name(f"{f.name}/{m.name}", taken), m.data, author=author,
                                    ref={"file_id": f.id, "member": m.name})
                    if any("looks like binary data" in x for x in piece.problems):
                        taken.discard(piece.name)
                        continue  # a binary member (a core file, a model shard) is no source
                    pieces.append(piece)
                problems = [f"{f.name}: {x}" for x in archive.problems]
                if len(pieces) > first:  # said with the answer, if there is one; no message of its own
                    pieces[first].problems += problems
                elif explicit:
                    notes += problems
            except UserFacingError as exc:
                notes.append(str(exc))
        return pieces, notes

    def gather(self, msg: MessageIn, kind: str, name: str, taken: set[str],
               explicit: bool = True) -> tuple[list[Piece], list[str]]:
        pieces: list[Piece] = []
        text = self.text_piece(kind, unique_name(name, taken), msg)
        if text is not None:
            pieces.append(text)
        files, notes = self.file_pieces(msg.files, taken, msg.user, explicit)
        return pieces + files, notes

    # -- entry points ------------------------------------------------------------------------------

    def on_message(self, msg: MessageIn) -> None:
        """A message in a channel the bot is in (or a DM): a reply in an incident thread adds
        evidence; anything else is a paste, answered only when it holds a recognised failure."""
        if msg.is_reply:
            incident = self.wf.store.find_incident(msg.channel, msg.root)
            if incident is not None:
                self.follow_up(msg, explicit=msg.channel_type == "im")
                return
        self.paste(msg, origin="file" if msg.files else "message", explicit=msg.channel_type == "im")

    def on_mention(self, msg: MessageIn) -> None:
        """@bot: diagnose this message and its files; in a thread, the whole thread."""
        if msg.is_reply:
            if self.wf.store.find_incident(msg.channel, msg.root) is not None:
                self.follow_up(msg, explicit=True)
                return
            self.diagnose_thread(msg)
            return
        has_text = bool(slack_text_to_log(msg.text, self.bot_user_id).strip())
        if not has_text and not msg.files:
            self.wf.chat.post_notice(
                msg.channel, msg.ts,
                "Paste a failed job's log (or attach it: .log, .txt, .gz) with the mention, mention me in the "
                "failing job's thread, or use `/diagnose &lt;log | job id | hosts ...&gt;`.")
            return
        self.paste(msg, origin="mention", explicit=True)

    def on_shortcut(self, msg: MessageIn, user: str, response_url: str | None) -> None:
        """"Diagnose this message" on any message: answer in its thread, or tell only the asker."""
        if self.wf.store.find_incident(msg.channel, msg.root) is not None:
            self.follow_up(msg, explicit=True)
            return
        outcome = self.paste(msg, origin="shortcut", explicit=False, prose_hint=False)
        if outcome is None:
            text = "I found no known failure signature in that message."
            if response_url:
                self.wf.chat.respond(response_url, text)
            else:
                self.wf.chat.post_ephemeral(msg.channel, user, text)

    def on_bot_post(self, msg: MessageIn) -> None:
        """A post of a watched bot (TRIAGE_BOT_SOURCES: a scheduler, CI or Alertmanager notifier): its
        text is diagnosed like a paste, one-liner or not; a post with nothing recognised stays unanswered."""
        if msg.is_reply and self.wf.store.find_incident(msg.channel, msg.root) is not None:
            self.follow_up(msg, explicit=False)
            return
        self.paste(msg, origin="bot", explicit=False, prose_hint=False)

    def _hint(self, msg: MessageIn, signature: str) -> None:
        """One line for the writer of a chat message that quotes an error: no incident, no thread."""
        if not msg.user:
            return
        self.wf.chat.post_ephemeral(
            msg.channel, msg.user,
            f"That reads like *{esc(signature)}*. To diagnose a failed job, paste its log (or attach it) "
            "or mention me.", thread_ts=msg.thread_ts)

    def paste(self, msg: MessageIn, *, origin: str, explicit: bool, prose_hint: bool = True) -> Outcome | None:
        """Diagnose one message (text and files). Opens an incident in its thread if a failure is found.

        Chatter costs one engine pass over a short text and no Slack call; a progress reaction is
        shown only for work that takes a while (downloads, probes). A prose one-liner that quotes an
        error opens no incident unless the bot was asked (`explicit`).
        """
        thread = msg.root
        with self.wf.locks.hold(f"{msg.channel}:{thread}"):
            found = self.wf.store.find_incident(msg.channel, thread)
            if found is not None and found.thread_ts != thread and not msg.is_reply:
                return self._resume_join(msg, found)  # this message joined another's incident (work resumed)
            if found is not None:
                return self._follow_up_locked(msg, explicit=explicit)
            reacted = False
            try:
                if any(readable_file(f) or not (f.mimetype or f.filetype) for f in msg.files):
                    self.wf.chat.react(msg.channel, msg.ts, PROGRESS)
                    reacted = True
                kind = "shortcut" if origin == "shortcut" else "message"
                pieces, notes = self.gather(msg, kind, "message", set(), explicit)
                report, more = self.wf.engine(pieces) if pieces else (None, [])
                if report is None or not report.diagnoses:
                    if notes or explicit:
                        self._say_nothing_found(msg.channel, thread, notes, pieces)
                    return None
                only_text = all(p.kind != "file" for p in pieces)
                if prose_hint and not explicit and only_text and not looks_like_log(msg.text or ""):
                    self._hint(msg, report.diagnoses[0].signature)
                    return None
                if origin == "bot" and self.lifecycle is not None:
                    hit = self.lifecycle.muted(signature=report.diagnoses[0].signature,
                                               hosts=implicated_hosts(report))
                    if hit is not None:
                        log.info("bot post %s/%s not answered: %s", msg.channel, msg.ts, hit.describe())
                        return None
                if self.wf.prober.enabled and not reacted:
                    self.wf.chat.react(msg.channel, msg.ts, PROGRESS)
                    reacted = True
                placed = self._place(msg, origin, report, pieces)
                if placed is not None and placed.kind != "new":
                    return self._join(msg, placed.incident, placed.kind, pieces, notes)
                report, probe_notes, run = self.wf.probe(report)
                incident = placed.incident if placed is not None else self._create(msg, origin)
                answer, _ = self.wf.record(incident, report, trigger="initial", notes=notes + more + probe_notes,
                                           new_pieces=pieces, probe_run=run)
                self.wf.post_card(incident, thread, answer)
                self._tell_redacted(msg.channel, thread, pieces)
                return Outcome(incident, answer, report, [], True)
            finally:
                if reacted:
                    self.wf.chat.unreact(msg.channel, msg.ts, PROGRESS)

    def _create(self, msg: MessageIn, origin: str) -> Incident:
        return self.wf.store.create_incident(origin=origin, channel=msg.channel, thread_ts=msg.root,
                                             requester=msg.user, team=msg.team)[0]

    # -- pastes that join another paste's incident (bot.service.grouping.PasteGrouping) -----------------

    def _place(self, msg: MessageIn, origin: str, report: Report, pieces: list[Piece]) -> Placement | None:
        """None when grouping does not apply (a reply, the shortcut, TRIAGE_GROUP_PASTE_WINDOW_S=0)."""
        if self.pastes is None or not self.pastes.applies(origin, msg.is_reply):
            return None
        facts = paste_facts(report, [p.name for p in pieces])
        return self.pastes.place(msg.channel, msg.ts, facts, lambda: self._create(msg, origin))

    def _joined_lock(self, incident: Incident, root: str) -> AbstractContextManager[None]:
        """In the thread of a paste that joined another message's incident, that incident's own thread lock
        is held too (always after the message's own), so its re-diagnoses never run two at once."""
        if incident.thread_ts == root:
            return nullcontext()
        return self.wf.locks.hold(f"{incident.channel}:{incident.thread_ts}")

    def _join(self, msg: MessageIn, incident: Incident, kind: str, pieces: list[Piece],
              notes: list[str]) -> Outcome | None:
        """This paste is more evidence of an open incident of an earlier message: add it there, re-diagnose
        (the card is edited in place, its thread hears what changed) and say so in one line here."""
        fresh: list[Piece] = []
        outcome = None
        with self._joined_lock(incident, msg.root):  # waits for the first paste's answer to be out
            current = self.wf.store.get_incident(incident.id) or incident
            existing = self.wf.store.list_evidence(current.id)
            taken, known = {e.name for e in existing}, {e.sha256 for e in existing}
            for p in pieces:
                if p.sha256 not in known:  # the same log pasted twice adds nothing
                    p.name = unique_name(p.name, taken)
                    fresh.append(p)
            if fresh or current.summary_ts is None:
                outcome = self.wf.rediagnose(current, fresh, trigger="grouped")
            current = self.wf.store.get_incident(current.id) or current
        member = lc.member_by_event(self.wf.store, paste_member_id(msg.channel, msg.ts))
        self.wf.chat.post_notice(msg.channel, msg.ts, self._pointer(current, kind, member, notes))
        if member is not None:
            lc.set_member_state(self.wf.store, member.id, "joined")
        self._tell_redacted(msg.channel, msg.ts, fresh)
        return outcome

    def _resume_join(self, msg: MessageIn, incident: Incident) -> Outcome | None:
        """The work item of a paste that joined an incident ran again (the bot died mid-way): finish it."""
        member = lc.member_by_event(self.wf.store, paste_member_id(msg.channel, msg.ts))
        if member is None or member.state == "joined":
            return None  # done already: a retried event
        pieces, notes = self.gather(msg, "message", "message", set(), explicit=False)
        return self._join(msg, incident, str(member.job.get("match") or "job"), pieces, notes)

    def _incident_ref(self, incident: Incident) -> str:
        link = self.wf.chat.permalink(incident.channel, incident.thread_ts)
        return f"<{link}|incident #{incident.id}>" if link else f"incident #{incident.id}"

    def _pointer(self, incident: Incident, kind: str, member: lc.Member | None, notes: list[str]) -> str:
        if kind == "job" and member is not None and member.job_id:
            why = f"job {esc(member.job_id)}"
        else:
            hosts = ", ".join((member.hosts if member else [])[:3]) or "the same host"
            why = f"failure on {esc(hosts)}"
        now = f" (now *{esc(incident.signature)}*)" if incident.signature else ""
        text = (f":link: Same {why} as {self._incident_ref(incident)}: I added this log to it and re-diagnosed "
                f"it there{now}. Replies here reach it too.")
        return "\n".join([text, *(f":warning: {esc(redact(n))}" for n in notes)])

    def _tell_redacted(self, channel: str, thread_ts: str | None, pieces: list[Piece]) -> None:
        """Each poster, and only that poster, learns that their message held secrets: the bot kept
        them out of the store and the answer, but the Slack message still shows them."""
        counts: dict[str, int] = {}
        for p in pieces:
            if p.redactions and p.author:
                counts[p.author] = counts.get(p.author, 0) + p.redactions
        for user, count in counts.items():
            text = (f":lock: Your message held {count} secret{'s' if count != 1 else ''} (tokens, passwords or "
                    "keys). I stored and showed it with them as `[REDACTED]`, but your Slack message still shows "
                    "them: edit or delete it, and rotate them.")
            try:
                self.wf.chat.post_ephemeral(channel, user, text, thread_ts=thread_ts)
            except Exception as exc:  # the answer is out; a failed private note must not fail the work item
                log.info("could not tell %s about redacted secrets: %s", user, exc)

    def _say_nothing_found(self, channel: str, thread: str, notes: list[str], pieces: list[Piece]) -> None:
        names = [p.name for p in pieces]
        read = esc(", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")) or "nothing readable"
        text = "\n".join(f":warning: {esc(redact(n))}" for n in notes)
        if pieces or not text:
            text = (text + "\n" if text else "") + (
                f"I found no known failure signature in {read}. If the job failed, the cause may be in another "
                "rank's log or in the host's kernel log (`journalctl -k`): attach it here and mention me.")
        self.wf.chat.post_notice(channel, thread, text)

    def follow_up(self, msg: MessageIn, *, explicit: bool) -> Outcome | None:
        with self.wf.locks.hold(f"{msg.channel}:{msg.root}"):
            return self._follow_up_locked(msg, explicit=explicit)

    def _follow_up_locked(self, msg: MessageIn, *, explicit: bool) -> Outcome | None:
        incident = self.wf.store.find_incident(msg.channel, msg.root)
        if incident is None:
            return None
        if incident.thread_ts == msg.root:
            return self._add_follow_up(incident, msg, explicit)
        # A reply in the thread of a paste that joined another message's incident: evidence of that
        # incident, whose own thread hears what changed; this thread gets a line pointing there.
        with self._joined_lock(incident, msg.root):
            incident = self.wf.store.get_incident(incident.id) or incident
            outcome = self._add_follow_up(incident, msg, explicit)
        if outcome is not None and outcome.answer is not None and (outcome.changed or explicit):
            sig = f": *{esc(outcome.answer.signature)}*" if outcome.answer.signature else ""
            self.wf.chat.post_notice(msg.channel, msg.root, f":arrows_counterclockwise: Re-diagnosed "
                                     f"{self._incident_ref(incident)} with this{sig}; what changed is in its thread.")
        return outcome

    def _add_follow_up(self, incident: Incident, msg: MessageIn, explicit: bool) -> Outcome | None:
        existing = self.wf.store.list_evidence(incident.id)
        taken = {e.name for e in existing}
        n = 1 + sum(1 for e in existing if e.kind == "reply")
        busy = any(readable_file(f) or not (f.mimetype or f.filetype) for f in msg.files)
        if busy:
            self.wf.chat.react(msg.channel, msg.ts, PROGRESS)
        try:
            pieces, notes = self.gather(msg, "reply", f"reply {n}", taken, explicit)
            known = {e.sha256 for e in existing}
            pieces = [p for p in pieces if p.sha256 not in known]  # the same paste twice adds nothing
            if incident.summary_ts is None:
                # A diagnosis is stored but its answer never reached the thread (the bot died or Slack
                # refused it past the deadline): post it now, whatever this message adds.
                return self.wf.rediagnose(incident, pieces, trigger="follow-up", force_post=False)
            if not pieces and msg.ts == incident.thread_ts and incident.summary_ts:
                return None  # the incident's own message again (a resumed work item): answered already
            if notes:
                self.wf.chat.post_notice(msg.channel, msg.root, "\n".join(f":warning: {esc(redact(x))}" for x in notes))
            if not pieces and not explicit:
                return None
            outcome = self.wf.rediagnose(incident, pieces, trigger="follow-up", force_post=explicit)
            self._tell_redacted(msg.channel, msg.root, pieces)
            if pieces and not outcome.changed and not explicit:
                self.wf.chat.react(msg.channel, msg.ts, ADDED)
            return outcome
        finally:
            if busy:
                self.wf.chat.unreact(msg.channel, msg.ts, PROGRESS)

    def on_edit(self, msg: MessageIn) -> Outcome | None:
        """An edited message is read again: in an incident thread its new text replaces the old one
        as evidence (same source name) and the thread is re-diagnosed; elsewhere it is a paste."""
        with self.wf.locks.hold(f"{msg.channel}:{msg.root}"):
            incident = self.wf.store.find_incident(msg.channel, msg.root)
            if incident is None:
                if msg.is_reply:
                    return None
                return self.paste(msg, origin="message", explicit=False, prose_hint=False)
            existing = self.wf.store.list_evidence(incident.id)
            mine = [e for e in existing if e.ref.get("ts") == msg.ts and e.kind in ("message", "reply", "shortcut")]
            if not mine:
                return self._follow_up_locked(msg, explicit=False)
            piece = self.text_piece(mine[-1].kind, mine[-1].name, msg)
            if piece is None or piece.sha256 == mine[-1].sha256:
                return None  # emptied, or the text did not change (an unfurl, a reaction)
            piece.ref["edited"] = True
            with self._joined_lock(incident, msg.root):
                outcome = self.wf.rediagnose(self.wf.store.get_incident(incident.id) or incident, [piece],
                                             trigger="edit")
            if not outcome.changed:
                self.wf.chat.react(msg.channel, msg.ts, ADDED)
            return outcome

    def diagnose_thread(self, mention: MessageIn) -> Outcome | None:
        """@bot inside a thread that is no incident yet: read the whole thread as one incident."""
        thread = mention.root
        messages = self.wf.chat.thread_messages(mention.channel, thread)
        me = self.wf.chat.identity()
        taken: set[str] = set()
        pieces: list[Piece] = []
        notes: list[str] = []
        with self.wf.locks.hold(f"{mention.channel}:{thread}"):
            self.wf.chat.react(mention.channel, mention.ts, PROGRESS)
            try:
                for i, m in enumerate(messages):
                    # Other bots' posts (a scheduler's "job failed", an alert) are what the mention is
                    # about; only the bot's own answers are left out.
                    if m.get("user") == me.get("user_id") or (m.get("bot_id") and m.get("bot_id") == me.get("bot_id")):
                        continue
                    files = [FileRef(id=f["id"], name=f.get("name") or f["id"], size=f.get("size"),
                                     mimetype=f.get("mimetype"), filetype=f.get("filetype"),
                                     url=f.get("url_private_download")) for f in m.get("files") or []]
                    sub = MessageIn(channel=mention.channel, ts=m.get("ts", ""), user=m.get("user"),
                                    text=m.get("text") or "", thread_ts=thread, files=files)
                    got, nts = self.gather(sub, "message" if i == 0 else "reply",
                                           "message" if i == 0 else f"reply {i}", taken)
                    pieces += got
                    notes += nts
                report, more, run = self.wf.diagnose(pieces) if pieces else (None, [], None)
                if report is None or not report.diagnoses:
                    self._say_nothing_found(mention.channel, thread, notes, pieces)
                    return None
                incident, _ = self.wf.store.create_incident(origin="mention", channel=mention.channel,
                                                            thread_ts=thread, requester=mention.user,
                                                            team=mention.team)
                answer, _ = self.wf.record(incident, report, trigger="initial", notes=notes + more,
                                           new_pieces=pieces, probe_run=run)
                self.wf.post_card(incident, thread, answer)
                self._tell_redacted(mention.channel, thread, pieces)
                return Outcome(incident, answer, report, [], True)
            finally:
                self.wf.chat.unreact(mention.channel, mention.ts, PROGRESS)
