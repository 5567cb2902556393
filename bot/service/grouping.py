"""Grouping scheduler failures: one job, one host, one storm -> one incident and one thread.

Where a webhook event goes (decided under one lock, so two events racing never open two threads):

1. **one job**: an array task (`1234_7`) or het job component (`1234+1`) of a job that already has an
   open incident (within TRIAGE_GROUP_JOB_WINDOW_S of its last failure) joins it;
2. **one host**: a failure on a node that failed another job within TRIAGE_GROUP_HOST_WINDOW_S joins
   that incident;
3. **a storm**: when TRIAGE_STORM_THRESHOLD separate incidents opened in one partition within
   TRIAGE_STORM_WINDOW_S, further failures there are rows of one summary post (a table per host),
   edited as the storm grows, instead of posts of their own;
4. otherwise a new incident.

A joined event's logs are added to the incident and re-diagnosed (the thread hears only what
changed); the channel headline counts the failures it collects.

Pasted logs (`PasteGrouping`): a top-level paste that names the same job as an open paste incident of
the same channel (or, when either names no job, shows one of its failures on one of its hosts), within
TRIAGE_GROUP_PASTE_WINDOW_S of its last paste, joins it (bot.service.chat does the join).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.jobs import JobInfo, JobSourceError
from bot.store import Incident
from bot.store import lifecycle as lc
from bot.store.lifecycle import Member
from bot.store.models import PASTE_ORIGINS, PASTE_PREFIX, paste_member_id

from .answer import Headline
from .evidence import unique_name
from .jobsource import job_pieces

if TYPE_CHECKING:
    from bot.engine.model import Report

    from .jobs import JobEvent, JobFlows
    from .workflow import Workflow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupingSettings:
    job_window_s: float = 24 * 3600  # array tasks fail over hours as the array runs
    host_window_s: float = 15 * 60
    storm_threshold: int = 5  # incidents in one partition within storm_window_s; 0 turns storms off
    storm_window_s: float = 10 * 60
    paste_window_s: float = 30 * 60  # pasted logs of one job (or one failure on one host); 0: off


@dataclass
class Placement:
    incident: Incident
    kind: str  # new | job | host | storm (pastes: new | job | host)
    member: Member | None  # None: this event_id is known already (a retry)


@dataclass
class StormHost:
    host: str
    jobs: list[str]
    states: list[str]
    signatures: list[str]


@dataclass
class StormSummary:
    """The storm post as data (bot.slack.blocks renders it)."""

    incident_id: int
    partition: str
    cluster: str | None
    jobs: int
    minutes: int
    states: list[tuple[str, int]]
    hosts: list[StormHost] = field(default_factory=list)
    earlier: list[int] = field(default_factory=list)  # incidents of the partition opened before the storm


def base_job(job_id: str) -> str:
    """1234_7 and 1234+1 belong to job 1234 (steps 1234.0 too)."""
    return re.split(r"[_+.]", job_id, maxsplit=1)[0]


def job_key(event: JobEvent, channel: str) -> str:
    """The routed channel comes first: a failure joins a thread only in the channel it would post to."""
    return f"{channel}|job:{event.cluster or '-'}:{base_job(event.job_id)}"


def compact_ids(ids: list[str], limit: int = 8) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


class Grouping:
    def __init__(self, jobs: JobFlows, settings: GroupingSettings | None = None) -> None:
        self.jobs = jobs
        self.wf = jobs.wf
        self.settings = settings or GroupingSettings()
        self._lock = threading.Lock()

    @property
    def store(self) -> Any:
        return self.wf.store

    # -- placing an event (the webhook's request thread) ----------------------------------------------

    def place(self, event: JobEvent, channel: str) -> Placement:
        with self._lock:
            now = self.wf.clock()
            for kind, found in (("job", self._job_group(event, channel, now)),
                                ("host", self._host_group(event, channel, now)),
                                ("storm", self._storm(event, channel, now))):
                if found is not None:
                    return Placement(found, kind, self._member(found, event, now))
            incident, created = self.store.create_incident(
                origin="webhook", channel=channel, thread_ts=None, hook_event_id=event.event_id,
                job_id=event.job_id, job=event.to_dict(), hosts=event.nodes, group_key=job_key(event, channel),
                partition=event.partition, cluster=event.cluster)
            return Placement(incident, "new", self._member(incident, event, now) if created else None)

    def _member(self, incident: Incident, event: JobEvent, now: float) -> Member | None:
        return lc.add_member(self.store, incident.id, event_id=event.event_id or "", job_id=event.job_id,
                             job=event.to_dict(), hosts=event.nodes, state=event.state, now=now)

    def _latest(self, where: str, params: list[Any], since: float) -> Incident | None:
        rows = self.store.query(
            "SELECT m.incident_id AS id, MAX(m.created_at) AS last FROM incident_members m"
            f" JOIN incidents i ON i.id = m.incident_id WHERE i.resolved_at IS NULL AND {where}"
            " GROUP BY m.incident_id HAVING last >= ? ORDER BY last DESC LIMIT 1", [*params, since])
        return self.store.get_incident(rows[0]["id"]) if rows else None

    def _job_group(self, event: JobEvent, channel: str, now: float) -> Incident | None:
        if not self.settings.job_window_s:
            return None
        return self._latest("i.origin = 'webhook' AND i.group_key = ?", [job_key(event, channel)],
                            now - self.settings.job_window_s)

    def _host_group(self, event: JobEvent, channel: str, now: float) -> Incident | None:
        if not self.settings.host_window_s or not event.nodes:
            return None
        import json

        since = now - self.settings.host_window_s
        rows = self.store.query(
            "SELECT m.incident_id AS id, MAX(m.created_at) AS last FROM incident_members m, json_each(m.hosts) h"
            " JOIN incidents i ON i.id = m.incident_id WHERE i.resolved_at IS NULL AND i.origin = 'webhook'"
            " AND i.cluster IS ? AND substr(i.group_key, 1, ?) = ? AND h.value IN (SELECT value FROM json_each(?))"
            " AND m.created_at >= ? GROUP BY m.incident_id ORDER BY last DESC LIMIT 1",
            [event.cluster, len(channel) + 1, channel + "|", json.dumps(event.nodes), since])
        return self.store.get_incident(rows[0]["id"]) if rows else None

    def _storm(self, event: JobEvent, channel: str, now: float) -> Incident | None:
        s = self.settings
        if not s.storm_threshold or not event.partition:
            return None
        since = now - s.storm_window_s
        storm = self._latest("i.origin = 'storm' AND i.partition = ? AND i.cluster IS ?",
                             [event.partition, event.cluster], since)
        if storm is not None:
            return storm
        rows = self.store.query(
            "SELECT COUNT(DISTINCT m.incident_id) AS n FROM incident_members m JOIN incidents i ON i.id = m.incident_id"
            " WHERE i.origin = 'webhook' AND i.partition = ? AND i.cluster IS ? AND m.created_at >= ?",
            [event.partition, event.cluster, since])
        if not rows or rows[0]["n"] < s.storm_threshold:
            return None
        incident, _ = self.store.create_incident(
            origin="storm", channel=channel, thread_ts=None, state="storm", partition=event.partition,
            cluster=event.cluster, group_key=f"storm:{event.cluster or '-'}:{event.partition}",
            subject=f"Failure storm in partition {event.partition}")
        return incident

    # -- running a joined event (a worker) ----------------------------------------------------------

    def run_join(self, payload: dict[str, Any], attempt: int = 1) -> None:
        from .jobs import JobEvent

        event = JobEvent(**payload["event"])
        with self.wf.locks.hold(f"incident:{payload['incident']}"):
            incident = self.store.get_incident(int(payload["incident"]))
            member = lc.member_by_event(self.store, event.event_id or "")
            if incident is None or member is None:
                return
            if incident.origin == "storm":
                self._storm_join(incident, event, member)
            else:
                self._job_join(incident, event)

    def _resolve(self, event: JobEvent) -> JobInfo | None:
        try:
            return self.wf.job_source.resolve(event.job_id, hints=event.log_hints())
        except JobSourceError as exc:
            log.info("job %s of a grouped failure not resolved: %s", event.job_id, exc)
            return None

    def _job_join(self, incident: Incident, event: JobEvent) -> None:
        wf = self.wf
        if not incident.headline_ts:
            # The first failure never reached the channel (Slack refused, the bot was not invited yet):
            # this one posts the incident.
            self.jobs.run(incident, event)
            incident = self.store.get_incident(incident.id) or incident
        subj = self.group_subject(incident)
        self.store.update_incident(incident.id, subject=subj)
        incident.subject = subj
        job = self._resolve(event)
        pieces = job_pieces(job, limit=wf.limits.max_upload)[0] if job else []
        taken = {e.name for e in self.store.list_evidence(incident.id)}
        for p in pieces:
            p.name = unique_name(p.name, taken)
        with wf.locks.hold(f"{incident.channel}:{incident.thread_ts}"):
            lifecycle = self.jobs.lifecycle
            if pieces and lifecycle is not None and lifecycle.snoozed(incident):
                # Snoozed: kept as evidence, no re-diagnosis and no thread post until the snooze ends
                # (the next failure after it re-reads everything).
                from .evidence import to_record

                alone, _ = wf.engine(pieces)  # what a big log's stored excerpt keeps
                for p in pieces:
                    self.store.add_evidence(incident.id, to_record(p, alone))
            elif pieces:
                wf.rediagnose(incident, pieces, trigger="grouped")
                incident = self.store.get_incident(incident.id) or incident
            answer = wf.previous_answer(incident)
            if answer is not None:
                from .workflow import headline_for

                headline = headline_for(answer, subj, incident.requester)
            else:
                headline = Headline(subj, "No known failure in the logs read so far.", state="unknown",
                                    notify=(incident.job or {}).get("slack_user"))
            wf.chat.update_headline(incident.channel or "", incident.headline_ts or "", headline)

    def group_subject(self, incident: Incident) -> str:
        """The first failure's subject, then how many this thread collects."""
        from .jobs import JobEvent, subject

        members = lc.list_members(self.store, incident.id)
        first = JobEvent(**incident.job) if incident.job else None
        head = incident.subject or (subject(first) if first else f"Incident #{incident.id}")
        head = head.split(" · failures here: ")[0]
        if len(members) <= 1:
            return head
        ids = [m.job_id or "?" for m in members]
        same_job = len({base_job(i) for i in ids}) == 1
        what = f"{len(members)} {'tasks of job ' + base_job(ids[0]) if same_job else 'jobs'} failed"
        return f"{head} · failures here: {what} ({compact_ids(ids)})"

    # -- storms ------------------------------------------------------------------------------------------

    def _storm_join(self, incident: Incident, event: JobEvent, member: Member) -> None:
        wf = self.wf
        job = self._resolve(event)
        if job is not None:
            pieces = job_pieces(job, limit=wf.limits.max_upload)[0]
            if pieces:
                report, _ = wf.engine(pieces)  # no probes and no post per job: the table is the answer
                if report.diagnoses:
                    lc.set_member_signature(self.store, member.id, report.diagnoses[0].signature)
        summary = self.storm_summary(incident)
        if not incident.headline_ts:
            channel, ts = wf.chat.post_storm(incident.channel or "", summary)
            self.store.update_incident(incident.id, channel=channel, thread_ts=ts, headline_ts=ts)
        else:
            wf.chat.update_storm(incident.channel or "", incident.headline_ts, summary)

    def storm_summary(self, incident: Incident) -> StormSummary:
        """Every failure of the storm's partition since the storm began (one window before its first
        row, so the incidents that made it a storm are in the table too), per host."""
        s = self.settings
        first = self.store.query("SELECT MIN(created_at) AS t, MAX(created_at) AS last FROM incident_members"
                                 " WHERE incident_id = ?", [incident.id])
        start = (first[0]["t"] or self.wf.clock()) - s.storm_window_s
        last = first[0]["last"] or self.wf.clock()
        rows = self.store.query(
            "SELECT m.*, i.origin AS origin, i.signature AS inc_signature FROM incident_members m"
            " JOIN incidents i ON i.id = m.incident_id WHERE (m.incident_id = ? OR (i.origin = 'webhook'"
            " AND i.partition = ? AND i.cluster IS ?)) AND m.created_at >= ? ORDER BY m.created_at",
            [incident.id, incident.partition, incident.cluster, start])
        import json

        hosts: dict[str, StormHost] = {}
        states: dict[str, int] = {}
        earlier: list[int] = []
        for r in rows:
            sig = r["signature"] if r["origin"] == "storm" else r["inc_signature"]
            if r["origin"] != "storm" and r["incident_id"] not in earlier:
                earlier.append(r["incident_id"])
            states[r["state"] or "?"] = states.get(r["state"] or "?", 0) + 1
            for h in json.loads(r["hosts"] or "[]") or ["(no node)"]:
                row = hosts.setdefault(h, StormHost(h, [], [], []))
                row.jobs.append(r["job_id"] or "?")
                row.states.append(r["state"] or "?")
                if sig and sig not in row.signatures:
                    row.signatures.append(sig)
        ordered = sorted(hosts.values(), key=lambda h: (-len(h.jobs), h.host))
        minutes = max(1, round((last - (first[0]["t"] or last)) / 60) + 1)
        return StormSummary(incident_id=incident.id, partition=incident.partition or "?", cluster=incident.cluster,
                            jobs=len(rows), minutes=minutes,
                            states=sorted(states.items(), key=lambda kv: (-kv[1], kv[0])), hosts=ordered,
                            earlier=earlier)


# -- pasted logs ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PasteFacts:
    """What the engine found in one paste that decides whether it joins another paste's incident."""

    job_id: str | None  # the job the logs name (SLURM_JOB_ID, "*** JOB 1234 ON host", slurm-1234.out), base id
    hosts: tuple[str, ...]
    signatures: tuple[str, ...]  # every diagnosis, best first
    waiting: bool = False  # only downstream reports (a watchdog timeout, an abort): it waited on someone

    @property
    def signature(self) -> str | None:
        return self.signatures[0] if self.signatures else None


def paste_facts(report: Report, source_names: list[str]) -> PasteFacts:
    from bot.engine.context import parse_source_name

    from .workflow import implicated_hosts

    job = report.facts.get("job_id")
    if not job:
        for name in source_names:  # an upload named slurm-1234.out says which job wrote it
            job = parse_source_name(name).job_id
            if job:
                break
    hosts = set(report.facts.get("hosts") or []) | set(implicated_hosts(report))
    return PasteFacts(base_job(str(job)) if job else None, tuple(sorted(hosts)),
                      tuple(dict.fromkeys(d.signature for d in report.diagnoses)),
                      waiting=bool(report.diagnoses) and all(d.downstream for d in report.diagnoses))


def paste_match(facts: PasteFacts, members: list[Member]) -> str | None:
    """"job" when the paste names the job the incident's pastes name; "host" when a job id is missing
    on one side and, on a shared host, one paste's headline failure is among the other's, or one of
    them only waited (a watchdog timeout on the host where the other failed); else None. Two different
    job ids never join, whatever their hosts."""
    jobs = {m.job_id for m in members if m.job_id}
    if facts.job_id and jobs:
        return "job" if facts.job_id in jobs else None
    for m in members:
        theirs = [str(s) for s in m.job.get("signatures") or []]
        same = (facts.signature in theirs) or (bool(theirs) and theirs[0] in facts.signatures)
        waited = facts.waiting or bool(m.job.get("waiting"))
        if (same or waited) and set(facts.hosts) & set(m.hosts):
            return "host"
    return None


class PasteGrouping:
    """Where a top-level paste goes: a new incident, or the open paste incident of its job / its failure
    on its hosts in the same channel within the window. Decided under one lock, so four pastes racing
    through the worker pool open one incident."""

    def __init__(self, wf: Workflow, settings: GroupingSettings | None = None) -> None:
        self.wf = wf
        self.settings = settings or GroupingSettings()
        self._lock = threading.Lock()

    def applies(self, origin: str, is_reply: bool) -> bool:
        return bool(self.settings.paste_window_s) and origin in PASTE_ORIGINS and not is_reply

    def place(self, channel: str, ts: str, facts: PasteFacts, create: Callable[[], Incident]) -> Placement:
        """`create` opens the incident of this message's own thread when it joins none."""
        store = self.wf.store
        with self._lock:
            now = self.wf.clock()
            incident, kind = self._find(channel, facts, now)
            if incident is None:
                incident, kind = create(), "new"
            member = lc.add_member(store, incident.id, event_id=paste_member_id(channel, ts), job_id=facts.job_id,
                                   job={"kind": "paste", "ts": ts, "match": kind, "signatures": list(facts.signatures),
                                        "waiting": facts.waiting},
                                   hosts=list(facts.hosts), state="first" if kind == "new" else "joining", now=now)
            if member is not None:
                lc.set_member_signature(store, member.id, facts.signature)
            return Placement(incident, kind, member)

    def _find(self, channel: str, facts: PasteFacts, now: float) -> tuple[Incident | None, str]:
        store = self.wf.store
        marks = ", ".join("?" for _ in PASTE_ORIGINS)
        rows = store.query(
            "SELECT m.incident_id AS id, MAX(m.created_at) AS last FROM incident_members m"
            " JOIN incidents i ON i.id = m.incident_id WHERE i.resolved_at IS NULL AND i.channel = ?"
            f" AND i.origin IN ({marks}) AND substr(m.event_id, 1, ?) = ? GROUP BY m.incident_id"
            " HAVING last >= ? ORDER BY last DESC LIMIT 20",
            [channel, *PASTE_ORIGINS, len(PASTE_PREFIX), PASTE_PREFIX, now - self.settings.paste_window_s])
        for r in rows:
            members = [m for m in lc.list_members(store, r["id"]) if m.event_id.startswith(PASTE_PREFIX)]
            kind = paste_match(facts, members)
            if kind is not None:
                return store.get_incident(r["id"]), kind
        return None, "new"
