"""The incident workflow shared by every entry point: diagnose, probe, remember, answer, update.

Entry points (pastes, files, mentions, /diagnose, the shortcut, thread replies, the scheduler
webhook) gather evidence pieces and call `open_incident` or `rediagnose`; this module owns the
order of things: engine → probes → store → Slack, and what a re-diagnosis says changed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from bot import metrics
from bot.engine import Report
from bot.jobs import JobSource
from bot.store import Incident, Store
from bot.store.stats import host_recurrence

from . import engine_gate
from .answer import Answer, Headline, build_answer, ordinal, what_changed
from .evidence import Piece, from_record, to_record
from .inputs import FileRef
from .probing import Prober
from .status import status_lines, status_word

log = logging.getLogger(__name__)

RECURRENCE_DAYS = 7


class Chat(Protocol):
    """What the workflow needs from Slack (bot.slack.gateway.SlackGateway implements it)."""

    def post_answer(self, channel: str, thread_ts: str | None, answer: Answer) -> str: ...
    def update_answer(self, channel: str, ts: str, answer: Answer) -> None: ...
    def post_headline(self, channel: str, headline: Headline, mark: str | None = None) -> tuple[str, str]: ...
    def find_headline(self, channel: str, mark: str, oldest: float) -> tuple[str, str] | None: ...
    def update_headline(self, channel: str, ts: str, headline: Headline) -> None: ...
    def post_changes(self, channel: str, thread_ts: str, changes: list[str], answer: Answer) -> str: ...
    def post_details(self, channel: str, thread_ts: str | None, answer: Answer) -> str: ...
    def post_notice(self, channel: str, thread_ts: str | None, text: str) -> str: ...
    def post_ephemeral(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> None: ...
    def respond(self, response_url: str, text: str, ephemeral: bool = True) -> None: ...
    def react(self, channel: str, ts: str, name: str) -> None: ...
    def unreact(self, channel: str, ts: str, name: str) -> None: ...
    def file_info(self, file_id: str) -> FileRef: ...
    def download(self, f: FileRef, limit: int) -> bytes: ...
    def upload_text(self, channel: str, thread_ts: str | None, filename: str, title: str, content: str,
                    comment: str | None = None) -> None: ...
    def thread_messages(self, channel: str, thread_ts: str, limit: int = 200) -> list[dict[str, Any]]: ...
    def permalink(self, channel: str | None, ts: str | None) -> str | None: ...
    def identity(self) -> dict[str, Any]: ...
    def post_storm(self, channel: str, summary: Any) -> tuple[str, str]: ...
    def update_storm(self, channel: str, ts: str, summary: Any) -> None: ...
    def post_host_action(self, channel: str, thread_ts: str | None, text: str,
                         repaired_value: str | None = None) -> str: ...
    def usergroup_members(self, group: str) -> set[str]: ...
    def post_host_answer(self, channel: str, thread_ts: str | None, answer: Any) -> str: ...


@dataclass
class Limits:
    max_upload: int  # bytes
    max_unpacked: int  # bytes


@dataclass
class Outcome:
    """What a diagnosis round produced (for callers that post more, e.g. a headline)."""

    incident: Incident
    answer: Answer | None
    report: Report
    changes: list[str]
    changed: bool


class KeyedLocks:
    """One lock per thread: a paste, its @mention and a reply must not diagnose the same thread at once."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._users: dict[str, int] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
            self._users[key] = self._users.get(key, 0) + 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                self._users[key] -= 1
                if not self._users[key]:
                    del self._users[key]
                    del self._locks[key]


ALL_EVIDENCE_MAX = 500  # per diagnosis, for "Show all evidence"


def full_report_dict(report: Report) -> dict[str, Any]:
    """Report.to_dict() keeps 20 lines per diagnosis; the store keeps more for "Show all evidence"."""
    out = report.to_dict()
    for d, diag in zip(out["diagnoses"], report.diagnoses, strict=True):
        d["evidence"] = [e.to_dict() for e in diag.evidence[:ALL_EVIDENCE_MAX]]
    return out


def implicated_hosts(report: Report, job_nodes: list[str] | None = None) -> list[str]:
    """The host that started it if known, else the top diagnosis's hosts, else the job's nodes."""
    if report.initiating and report.initiating.host:
        return [report.initiating.host]
    if report.diagnoses and report.diagnoses[0].hosts:
        return list(report.diagnoses[0].hosts)
    return list(job_nodes or [])


def recurrence_lines(store: Store, hosts: list[str], signature: str, exclude: int) -> list[str]:
    """"gpu-node-17: 3rd incident in 7 days: xid-79-fallen-off-bus, nccl-cuda-999" (only repeat hosts)."""
    out = []
    for h in host_recurrence(store, hosts, RECURRENCE_DAYS, exclude_incident=exclude):
        if h.incidents == 0:
            continue
        sigs = [signature] + [s for s in h.signatures if s != signature]
        out.append(f"{h.host}: {ordinal(h.incidents + 1)} incident in {RECURRENCE_DAYS} days: {', '.join(sigs[:6])}")
    return out


class Workflow:
    def __init__(self, *, store: Store, chat: Chat, prober: Prober, job_source: JobSource, limits: Limits) -> None:
        self.store = store
        self.chat = chat
        self.prober = prober
        self.job_source = job_source
        self.limits = limits
        self.locks = KeyedLocks()
        # What "now" is for lifecycle decisions (snooze and mute expiry, grouping windows): a test
        # moves it instead of sleeping.
        self.clock: Callable[[], float] = lambda: store.clock()
        self.drain: Any = None  # bot.service.drain.DrainFlows, set by build_service

    # -- engine and probes -----------------------------------------------------------------------

    def engine(self, pieces: list[Piece]) -> tuple[Report, list[str]]:
        started, t0 = time.time(), time.monotonic()
        report = engine_gate.diagnose([(p.name, p.data) for p in pieces], max_bytes=self.limits.max_unpacked)
        metrics.engine_run(started, time.monotonic() - t0)
        return report, [n for p in pieces for n in p.problems]

    def probe(self, report: Report, job_nodes: list[str] | None = None,
              job_id: str | None = None) -> tuple[Report, list[str], dict[str, Any] | None]:
        """Ask the agents when configured and something was diagnosed. Returns (report, notes, probe run)."""
        if not (self.prober.enabled and report.diagnoses):
            return report, [], None
        out = self.prober.fuse(report, hosts=job_nodes or None, job_id=job_id)
        metrics.PROBE_SECONDS.observe(out.duration_s)
        run = {"hosts": out.hosts, "duration_s": out.duration_s, "results": out.report.probes or {},
               "error": out.error}
        return out.report, [out.error] if out.error else [], run

    def diagnose(self, pieces: list[Piece], job_nodes: list[str] | None = None,
                 job_id: str | None = None) -> tuple[Report, list[str], dict[str, Any] | None]:
        """Engine, then probes. Returns (report, notes, probe run)."""
        report, notes = self.engine(pieces)
        report, more, run = self.probe(report, job_nodes, job_id)
        return report, notes + more, run

    # -- incidents -------------------------------------------------------------------------------

    def record(self, incident: Incident, report: Report, *, trigger: str, notes: list[str],
               new_pieces: list[Piece], probe_run: dict[str, Any] | None, job_summary: str | None = None,
               job_nodes: list[str] | None = None, previous: Answer | None = None,
               feedback: list[str] | None = None) -> tuple[Answer, list[str]]:
        """Store evidence, probe run and the next diagnosis version; returns (answer, what changed)."""
        for p in new_pieces:
            self.store.add_evidence(incident.id, to_record(p, report))
        if probe_run is not None:
            self.store.add_probe_run(incident.id, probe_run["hosts"], probe_run["duration_s"], probe_run["results"],
                                     probe_run["error"])
        top = report.diagnoses[0]
        hosts = implicated_hosts(report, job_nodes)
        version = incident.version + 1
        answer = build_answer(
            report, incident_id=incident.id, version=version, job=job_summary,
            recurrence=recurrence_lines(self.store, hosts, top.signature, incident.id),
            probes_enabled=self.prober.enabled, extra_warnings=notes,
            redactions=self.redactions(incident.id),
        )
        answer.feedback = list(feedback or (previous.feedback if previous else []))
        answer.status = status_lines(incident, self.clock())
        answer.lifecycle = status_word(incident, self.clock())
        answer.mention = (incident.job or {}).get("slack_user")
        if self.drain is not None:  # "Drain host" where the next step is a drain (bot.service.drain)
            self.drain.annotate(answer, hosts, job_nodes)
        changes = what_changed(previous, answer)
        answer.changes = changes
        self.store.add_diagnosis(incident.id, version=version, trigger=trigger, signature=top.signature,
                                 confidence=top.confidence, report=full_report_dict(report), answer=answer.to_dict(),
                                 changes=changes, hosts=hosts)
        incident.version = version
        latency = metrics.diagnosis(top.signature, trigger)
        # One line per diagnosis (redacted like every record: bot.logsafe); the JSON log has the fields apart.
        log.info("diagnosis incident=%d version=%d signature=%s confidence=%.2f trigger=%s latency_ms=%d",
                 incident.id, version, top.signature, top.confidence, trigger, latency * 1000,
                 extra={"incident": incident.id, "version": version, "signature": top.signature,
                        "confidence": round(float(top.confidence), 3), "trigger": trigger,
                        "latency_ms": int(latency * 1000)})
        return answer, changes

    def redactions(self, incident_id: int) -> int:
        """Secrets removed from the incident's evidence so far (the answer tells the thread)."""
        rows = self.store.query("SELECT COALESCE(SUM(redactions), 0) AS n FROM evidence WHERE incident_id = ?",
                                [incident_id])
        return int(rows[0]["n"]) if rows else 0

    # -- the answer card on Slack ----------------------------------------------------------------

    def post_card(self, incident: Incident, thread_ts: str | None, answer: Answer) -> str:
        """Post the answer in the thread; the incident remembers the message and the version it shows."""
        ts = self._posted_before(incident, thread_ts) if incident.card_version == 0 else None
        if ts is not None:  # a previous attempt posted it and died before noting it: edit that one
            self.chat.update_answer(incident.channel or "", ts, answer)
        else:
            # card_version 0 = "a post may be under way": a resumed attempt looks in the thread first.
            self.store.update_incident(incident.id, card_version=0)
            ts = self.chat.post_answer(incident.channel or "", thread_ts, answer)
        self.store.update_incident(incident.id, summary_ts=ts, card_version=answer.version)
        incident.summary_ts, incident.card_version = ts, answer.version
        return ts

    def _posted_before(self, incident: Incident, thread_ts: str | None) -> str | None:
        """The ts of this incident's answer if it is in the thread already (found by its footer)."""
        if not (incident.channel and thread_ts):
            return None
        mark = f"Incident #{incident.id} \u00b7 diagnosis v"
        try:
            me = self.chat.identity()
            for m in self.chat.thread_messages(incident.channel, thread_ts):
                mine = m.get("bot_id") and m.get("bot_id") == me.get("bot_id") or m.get("user") == me.get("user_id")
                if mine and mark in json.dumps(m.get("blocks") or [], ensure_ascii=False):
                    return str(m["ts"])
        except Exception as exc:
            log.info("could not read thread %s to find an earlier answer: %s", thread_ts, exc)
        return None

    def update_card(self, incident: Incident, answer: Answer) -> bool:
        """Edit the answer to `answer`. A refusal that outlived the retries leaves the card marked
        stale (card_version behind): the repair sweep and the next touch bring it up to date."""
        try:
            self.chat.update_answer(incident.channel or "", incident.summary_ts or "", answer)
        except Exception as exc:
            log.warning("chat.update of incident %s failed (%s); the card will be repaired from the store",
                        incident.id, exc)
            return False
        self.store.update_incident(incident.id, card_version=answer.version)
        incident.card_version = answer.version
        return True

    def repair_cards(self, limit: int = 50) -> int:
        """Bring every card that shows an older diagnosis than the store up to date. Returns how many."""
        fixed = 0
        for incident in self.store.stale_cards(limit):
            with self.locks.hold(f"{incident.channel}:{incident.thread_ts}"):
                current = self.store.get_incident(incident.id)
                if current is None or not current.summary_ts:
                    continue
                answer = self.previous_answer(current)
                if answer is None or (current.card_version or 0) >= answer.version:
                    continue
                if self.update_card(current, answer):
                    fixed += 1
                    if current.headline_ts:
                        try:
                            self.chat.update_headline(current.channel or "", current.headline_ts,
                                                      headline_for(answer, current.subject, current.requester))
                        except Exception as exc:
                            log.info("headline of incident %s not updated: %s", current.id, exc)
        return fixed

    def load_pieces(self, incident: Incident) -> list[Piece]:
        """Every stored evidence item, re-fetched from Slack / the job's files when only an excerpt was kept."""
        from .jobsource import read_tail

        pieces = []
        for rec in self.store.list_evidence(incident.id):
            data = None
            if rec.text is None:
                try:
                    if rec.ref.get("file_id"):
                        f = self.chat.file_info(rec.ref["file_id"])
                        data = self.chat.download(f, self.limits.max_upload)
                        if rec.ref.get("member"):  # one file of a .zip / .tar upload
                            from .unpack import read_archive

                            arch = read_archive(data, f.name, self.limits.max_unpacked)
                            data = next((m.data for m in (arch.members if arch else [])
                                         if m.name == rec.ref["member"]), None)
                    elif rec.ref.get("path"):
                        data, _ = read_tail(rec.ref["path"], self.limits.max_upload)
                except Exception as exc:  # gone from Slack / the filesystem: fall back to the excerpt
                    log.info("re-fetching %s failed: %s", rec.name, exc)
            pieces.append(from_record(rec, data))
        return pieces

    def previous_answer(self, incident: Incident) -> Answer | None:
        rec = self.store.get_diagnosis(incident.id)
        return Answer.from_dict(rec.answer) if rec and rec.answer else None

    def rediagnose(self, incident: Incident, new_pieces: list[Piece], *, trigger: str,
                   force_post: bool = False) -> Outcome:
        """Re-run the engine over all of the incident's evidence plus `new_pieces`.

        When the answer changed: update the summary message (and the channel headline) and say what
        changed in the thread. When not: stay quiet unless `force_post` (someone asked the bot).
        """
        previous = self.previous_answer(incident)
        if new_pieces and not force_post and previous is not None:
            # A "thanks, draining it" reply must not cost a full re-read (big uploads are fetched
            # from Slack again): if the new text alone matches nothing and states no fact, nothing
            # can change.
            alone, _ = self.engine(new_pieces)
            if not alone.diagnoses and not _has_facts(alone.facts) and not alone.pasted:
                for p in new_pieces:
                    self.store.add_evidence(incident.id, to_record(p, alone))
                return Outcome(incident, previous, alone, [], False)
        pieces = latest_versions(self.load_pieces(incident) + new_pieces)
        job_nodes = (incident.job or {}).get("nodes") or None
        report, notes, run = self.diagnose(pieces, job_nodes=job_nodes, job_id=incident.job_id)
        if not report.diagnoses:
            for p in new_pieces:  # keep the evidence even when it proves nothing yet
                self.store.add_evidence(incident.id, to_record(p, report))
            if force_post:
                self.chat.post_notice(incident.channel or "", incident.thread_ts,
                                      "I re-read the whole thread and found no known failure signature.")
            return Outcome(incident, None, report, [], False)
        answer, changes = self.record(incident, report, trigger=trigger, notes=notes, new_pieces=new_pieces,
                                      probe_run=run,
                                      job_summary=previous.job if previous else (incident.subject if incident.job_id else None),
                                      job_nodes=job_nodes, previous=previous)
        changed = bool(changes) or previous is None
        stale = incident.card_version is not None and incident.card_version < incident.version - 1
        if incident.summary_ts and incident.channel:
            if changed or stale:  # a card left on an older diagnosis is repaired on this touch
                self.update_card(incident, answer)
        elif incident.channel:
            self.post_card(incident, incident.thread_ts, answer)
        if incident.headline_ts and changed and incident.channel:
            self.chat.update_headline(incident.channel, incident.headline_ts,
                                      headline_for(answer, incident.subject, incident.requester))
        if incident.channel and incident.thread_ts and previous is not None and (changed or force_post):
            self.chat.post_changes(incident.channel, incident.thread_ts, changes, answer)
        return Outcome(incident, answer, report, changes, changed)


def latest_versions(pieces: list[Piece]) -> list[Piece]:
    """An edited message is stored again under its first name; only its last version is evidence."""
    last: dict[tuple[str, str], int] = {}
    for i, p in enumerate(pieces):
        if p.ref.get("ts") and p.kind in ("message", "reply", "shortcut"):
            last[(p.ref.get("channel") or "", p.ref["ts"])] = i
    return [p for i, p in enumerate(pieces)
            if not (p.ref.get("ts") and p.kind in ("message", "reply", "shortcut"))
            or last[(p.ref.get("channel") or "", p.ref["ts"])] == i]


def _has_facts(facts: dict[str, Any]) -> bool:
    return any(v not in (None, "", [], {}) for v in facts.values())


def headline_for(answer: Answer, subject: str | None = None, requester: str | None = None) -> Headline:
    detail = f"Started by {answer.initiating}" if answer.initiating else None
    return Headline(subject=subject or answer.job or "Diagnosis", status=answer.headline, detail=detail,
                    state="diagnosed", requester=requester, lifecycle=list(answer.status), notify=answer.mention)
