"""Entry points from conversation: pasted messages, shared files, @mentions, the message shortcut,
and replies in an incident thread."""

from __future__ import annotations

import html
import logging
import re
from pathlib import PurePath

from bot.redact import redact

from .answer import esc
from .errors import UserFacingError
from .evidence import Piece, prepare, unique_name
from .inputs import FileRef, MessageIn
from .workflow import Outcome, Workflow

log = logging.getLogger(__name__)

PROGRESS = "hourglass_flowing_sand"  # reaction shown while a slow diagnosis runs; removed after
ADDED = "memo"  # reaction on a thread reply that was added to the evidence without changing anything

TEXT_SUFFIXES = {".log", ".txt", ".out", ".err", ".gz", ".zst", ".stdout", ".stderr", ".trace", ".json"}
TEXT_MIMETYPES = ("text/", "application/gzip", "application/x-gzip", "application/zstd", "application/json")
TEXT_FILETYPES = {"text", "log", "gzip", "gz", "zst", "json", "javascript", "python", "shell", "csv", "markdown"}

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

    def file_pieces(self, files: list[FileRef], taken: set[str], author: str | None) -> tuple[list[Piece], list[str]]:
        """Download and prepare each readable file; problems become notes (one bad file loses nothing else)."""
        pieces: list[Piece] = []
        notes: list[str] = []
        limit = self.wf.limits.max_upload
        for f in files:
            try:
                if not f.url or f.size is None:
                    f = self.wf.chat.file_info(f.id)
                if not readable_file(f):
                    notes.append(f"Skipped {f.name} ({f.mimetype or f.filetype or 'unknown type'}): "
                                 "I read text logs, .gz and .zst files.")
                    continue
                if f.size is not None and f.size > limit:
                    notes.append(f"{f.name} is {f.size / (1 << 20):.0f} MB, over the {limit >> 20} MB limit "
                                 "(TRIAGE_MAX_UPLOAD_MB). Upload the failing rank's log or the end of it: "
                                 f"`tail -n 200000 {f.name} | gzip > tail.log.gz`")
                    continue
                data = self.wf.chat.download(f, limit)
                pieces.append(prepare("file", unique_name(f.name, taken), data, author=author,
                                      ref={"file_id": f.id}))
            except UserFacingError as exc:
                notes.append(str(exc))
        return pieces, notes

    def gather(self, msg: MessageIn, kind: str, name: str, taken: set[str]) -> tuple[list[Piece], list[str]]:
        pieces: list[Piece] = []
        text = self.text_piece(kind, unique_name(name, taken), msg)
        if text is not None:
            pieces.append(text)
        files, notes = self.file_pieces(msg.files, taken, msg.user)
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
                "failing job's thread, or use `/diagnose <log | job id | hosts ...>`.")
            return
        self.paste(msg, origin="mention", explicit=True)

    def on_shortcut(self, msg: MessageIn, user: str, response_url: str | None) -> None:
        """"Diagnose this message" on any message: answer in its thread, or tell only the asker."""
        if self.wf.store.find_incident(msg.channel, msg.root) is not None:
            self.follow_up(msg, explicit=True)
            return
        outcome = self.paste(msg, origin="shortcut", explicit=False)
        if outcome is None:
            text = "I found no known failure signature in that message."
            if response_url:
                self.wf.chat.respond(response_url, text)
            else:
                self.wf.chat.post_ephemeral(msg.channel, user, text)

    def paste(self, msg: MessageIn, *, origin: str, explicit: bool) -> Outcome | None:
        """Diagnose one message (text and files). Opens an incident in its thread if a failure is found.

        Chatter costs one engine pass over a short text and no Slack call; a progress reaction is
        shown only for work that takes a while (downloads, probes).
        """
        thread = msg.root
        with self.wf.locks.hold(f"{msg.channel}:{thread}"):
            if self.wf.store.find_incident(msg.channel, thread) is not None:
                return self._follow_up_locked(msg, explicit=explicit)
            reacted = False
            try:
                if msg.files:
                    self.wf.chat.react(msg.channel, msg.ts, PROGRESS)
                    reacted = True
                kind = "shortcut" if origin == "shortcut" else "message"
                pieces, notes = self.gather(msg, kind, "message", set())
                report, more = self.wf.engine(pieces) if pieces else (None, [])
                if report is None or not report.diagnoses:
                    if notes or explicit:
                        self._say_nothing_found(msg.channel, thread, notes, pieces)
                    return None
                if self.wf.prober.enabled and not reacted:
                    self.wf.chat.react(msg.channel, msg.ts, PROGRESS)
                    reacted = True
                report, probe_notes, run = self.wf.probe(report)
                incident, _ = self.wf.store.create_incident(
                    origin=origin, channel=msg.channel, thread_ts=thread, requester=msg.user, team=msg.team)
                answer, _ = self.wf.record(incident, report, trigger="initial", notes=notes + more + probe_notes,
                                           new_pieces=pieces, probe_run=run)
                ts = self.wf.chat.post_answer(msg.channel, thread, answer)
                self.wf.store.update_incident(incident.id, summary_ts=ts)
                incident.summary_ts = ts
                return Outcome(incident, answer, report, [], True)
            finally:
                if reacted:
                    self.wf.chat.unreact(msg.channel, msg.ts, PROGRESS)

    def _say_nothing_found(self, channel: str, thread: str, notes: list[str], pieces: list[Piece]) -> None:
        read = esc(", ".join(p.name for p in pieces)) or "nothing readable"
        text = "\n".join(f":warning: {esc(redact(n))}" for n in notes)
        if pieces:
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
        existing = self.wf.store.list_evidence(incident.id)
        taken = {e.name for e in existing}
        n = 1 + sum(1 for e in existing if e.kind == "reply")
        if msg.files:
            self.wf.chat.react(msg.channel, msg.ts, PROGRESS)
        try:
            pieces, notes = self.gather(msg, "reply", f"reply {n}", taken)
            known = {e.sha256 for e in existing}
            pieces = [p for p in pieces if p.sha256 not in known]  # the same paste twice adds nothing
            if notes:
                self.wf.chat.post_notice(msg.channel, msg.root, "\n".join(f":warning: {esc(redact(x))}" for x in notes))
            if not pieces and not explicit:
                return None
            outcome = self.wf.rediagnose(incident, pieces, trigger="follow-up", force_post=explicit)
            if pieces and not outcome.changed and not explicit:
                self.wf.chat.react(msg.channel, msg.ts, ADDED)
            return outcome
        finally:
            if msg.files:
                self.wf.chat.unreact(msg.channel, msg.ts, PROGRESS)

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
                    if m.get("bot_id") or m.get("user") == me.get("user_id"):
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
                ts = self.wf.chat.post_answer(mention.channel, thread, answer)
                self.wf.store.update_incident(incident.id, summary_ts=ts)
                return Outcome(incident, answer, report, [], True)
            finally:
                self.wf.chat.unreact(mention.channel, mention.ts, PROGRESS)
