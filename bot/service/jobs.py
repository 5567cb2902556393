"""Job incidents (`/diagnose <job id>` and the scheduler webhook): a channel message naming the job,
its nodes, state and exit code, and the diagnosis of its logs in the thread."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.jobs import JobInfo, JobSourceError, LogHints
from bot.redact import redact
from bot.store import Incident

from .answer import Headline, esc
from .hostlist import HostListError, expand_hostlist
from .inputs import Where
from .jobsource import job_pieces

if TYPE_CHECKING:
    from .lifecycle import Lifecycle
    from .people import People
from .workflow import Workflow, headline_for

log = logging.getLogger(__name__)


@dataclass
class JobEvent:
    """What is known about a job before the job source is asked (webhook fields, or just an id)."""

    job_id: str
    event_id: str | None = None
    state: str | None = None
    exit_code: str | None = None
    name: str | None = None
    user: str | None = None
    partition: str | None = None
    cluster: str | None = None
    nodes: list[str] = field(default_factory=list)
    stdout: str | None = None  # output paths the scheduler's hook passed along (bot.jobs.LogHints)
    stderr: str | None = None
    work_dir: str | None = None
    requester: str | None = None  # Slack user who asked (/diagnose)
    slack_user: str | None = None  # the job's user on Slack (bot.service.people), mentioned on the post

    def routing_fields(self) -> dict[str, Any]:
        return {"partition": self.partition, "cluster": self.cluster, "user": self.user, "name": self.name,
                "state": self.state}

    def log_hints(self) -> LogHints | None:
        if not (self.stdout or self.stderr or self.work_dir):
            return None
        return LogHints(stdout=self.stdout, stderr=self.stderr, work_dir=self.work_dir)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [], "")}


def merge(event: JobEvent, job: JobInfo | None) -> JobEvent:
    """The job source knows more (expanded nodes, final state); the event fills what it lacks."""
    if job is None:
        return event
    return JobEvent(
        job_id=job.job_id or event.job_id, event_id=event.event_id, state=job.state or event.state,
        exit_code=job.exit_code or event.exit_code, name=job.name or event.name, user=job.user or event.user,
        partition=job.partition or event.partition, cluster=job.cluster or event.cluster,
        nodes=list(job.nodes) or event.nodes, requester=event.requester, slack_user=event.slack_user,
    )


def subject(ev: JobEvent) -> str:
    """"Job 1234 (train-llama) FAILED, exit 1:0, on gpu01, gpu02 · user alice · partition h200"."""
    head = f"Job {ev.job_id}" + (f" ({ev.name})" if ev.name else "")
    parts = [head + (f" {ev.state}" if ev.state else " ended")]
    if ev.exit_code:
        parts.append(f"exit {ev.exit_code}")
    if ev.nodes:
        shown = ", ".join(ev.nodes[:6]) + (f" and {len(ev.nodes) - 6} more" if len(ev.nodes) > 6 else "")
        parts.append(f"on {shown}")
    text = ", ".join(parts)
    extra = [f"{k} {v}" for k, v in (("user", ev.user), ("partition", ev.partition), ("cluster", ev.cluster)) if v]
    return redact(text + (" · " + " · ".join(extra) if extra else ""))


def parse_nodes(raw: Any) -> list[str]:
    try:
        return expand_hostlist(raw if isinstance(raw, list) else str(raw or ""))
    except HostListError:
        return [str(raw)]


class JobFlows:
    def __init__(self, wf: Workflow, people: People | None = None, lifecycle: Lifecycle | None = None) -> None:
        self.wf = wf
        self.people = people
        self.lifecycle = lifecycle

    def _defer_headline(self, incident: Incident) -> bool:
        """A signature mute can only be checked once the logs are diagnosed: while one is active, a
        scheduler incident posts after its diagnosis, so a muted one posts nothing at all."""
        return (incident.origin == "webhook" and not incident.headline_ts and self.lifecycle is not None
                and self.lifecycle.signature_mutes_active())

    def run_work(self, payload: dict[str, Any], attempt: int = 1) -> None:
        """A queued webhook job (bot.service.work): resumed after a crash, it carries on from what the
        store says was done (headline posted, answer posted) instead of posting twice."""
        incident = self.wf.store.get_incident(int(payload["incident"]))
        if incident is None:
            return
        if incident.summary_ts or incident.state == "no-failure":
            return  # answered already (the process died between the answer and marking the work done)
        if attempt > 1 or incident.state == "error":
            self.wf.store.update_incident(incident.id, state="diagnosing")
        where = Where(channel=incident.channel, thread_ts=incident.thread_ts)
        try:
            self.run(incident, JobEvent(**payload["event"]), where, resumed=attempt > 1)
        except Exception as exc:
            exc.triage_where = where  # type: ignore[attr-defined]  # where the error is told
            raise

    def run(self, incident: Incident, event: JobEvent, where: Where | None = None,
            job: JobInfo | None = None, *, resumed: bool = False) -> None:
        try:
            self._run(incident, event, where, job, resumed)
        except Exception:
            self.wf.store.update_incident(incident.id, state="error")  # not "diagnosing" forever
            raise

    def _run(self, incident: Incident, event: JobEvent, where: Where | None, job: JobInfo | None,
             resumed: bool = False) -> None:
        """Post the channel message, resolve the job, diagnose its logs, answer in the thread.

        `where` (the error handler's target) learns the thread as soon as it exists; `job` is the
        job already resolved (by /diagnose), else the job source is asked here.
        """
        wf = self.wf
        if job is not None:
            event = merge(event, job)
        subj = subject(event)
        if incident.origin == "webhook" and event.slack_user is None and self.people is not None:
            event.slack_user = self.people.slack_user(event.user)
        defer = self._defer_headline(incident)
        if incident.headline_ts is None and not defer:
            mark = f"incident:{incident.id}"
            found = self._headline_posted_before(incident, mark) if resumed else None
            channel, ts = found or wf.chat.post_headline(incident.channel or "",
                                                         Headline(subj, "Diagnosing…", requester=event.requester,
                                                                  notify=event.slack_user),
                                                         mark=mark)
            wf.store.update_incident(incident.id, channel=channel, thread_ts=ts, headline_ts=ts, subject=subj)
            incident.channel, incident.thread_ts, incident.headline_ts, incident.subject = channel, ts, ts, subj
        if where is not None:
            where.channel, where.thread_ts = incident.channel, incident.thread_ts
        channel, thread = incident.channel or "", incident.thread_ts
        with wf.locks.hold(f"{channel}:{thread}" if thread else f"unposted:{incident.id}"):
            notes: list[str] = []
            if job is None:
                try:
                    job = wf.job_source.resolve(event.job_id, hints=event.log_hints())
                except JobSourceError as exc:
                    notes.append(str(exc))
            event = merge(event, job)
            subj = subject(event)
            wf.store.update_incident(incident.id, subject=subj, job=event.to_dict(), hosts=event.nodes)
            incident.subject, incident.job = subj, event.to_dict()
            pieces, more = job_pieces(job, limit=wf.limits.max_upload) \
                if job else ([], [])
            notes += more
            if job is not None:  # why a log was not read (not found, not the job user's, glob cap)
                notes += [str(p) for p in job.extra.get("log_problems") or []]
                if job.extra.get("note"):
                    notes.append(str(job.extra["note"]))
            if not pieces:
                self._finish_without_diagnosis(incident, subj, "I could not read any of the job's logs.", notes)
                return
            report, more, run = wf.diagnose(pieces, job_nodes=event.nodes, job_id=event.job_id)
            notes += more
            if not report.diagnoses:
                names = ", ".join(p.name for p in pieces)
                self._finish_without_diagnosis(
                    incident, subj, f"No known failure signature in the job's logs ({names}).", notes, pieces, report)
                return
            answer, _ = wf.record(incident, report, trigger="initial", notes=notes, new_pieces=pieces,
                                  probe_run=run, job_summary=subj, job_nodes=event.nodes or None)
            if defer and self._muted(incident, event, answer.signature, report):
                return
            if incident.headline_ts is None:  # deferred: the channel message comes with the verdict
                self._post_headline(incident, headline_for(answer, subj, requester=event.requester))
                channel, thread = incident.channel or "", incident.thread_ts
            wf.post_card(incident, thread, answer)
            wf.chat.update_headline(channel, incident.headline_ts or "",
                                    headline_for(answer, subj, requester=event.requester))

    def _headline_posted_before(self, incident: Incident, mark: str) -> tuple[str, str] | None:
        """A killed attempt may have posted the headline and died before the store noted it."""
        try:
            return self.wf.chat.find_headline(incident.channel or "", mark, oldest=incident.created_at - 60)
        except Exception as exc:  # no history scope, a #name instead of an id: post again rather than fail
            log.info("could not look for an earlier headline of incident %s: %s", incident.id, exc)
            return None

    def _muted(self, incident: Incident, event: JobEvent, signature: str, report: Any) -> bool:
        from .workflow import implicated_hosts

        assert self.lifecycle is not None
        hit = self.lifecycle.muted(signature=signature, hosts=implicated_hosts(report, event.nodes) + event.nodes,
                                   job=event.to_dict())
        if hit is None:
            return False
        log.info("incident %s not posted: %s", incident.id, hit.describe())
        self.wf.store.update_incident(incident.id, state="muted")
        return True

    def _post_headline(self, incident: Incident, headline: Headline) -> None:
        channel, ts = self.wf.chat.post_headline(incident.channel or "", headline, mark=f"incident:{incident.id}")
        self.wf.store.update_incident(incident.id, channel=channel, thread_ts=ts, headline_ts=ts)
        incident.channel, incident.thread_ts, incident.headline_ts = channel, ts, ts

    def _finish_without_diagnosis(self, incident: Incident, subj: str, status: str, notes: list[str],
                                  pieces: list | None = None, report: Any = None) -> None:
        wf = self.wf
        from .evidence import to_record

        for p in pieces or []:
            wf.store.add_evidence(incident.id, to_record(p, report))
        wf.store.update_incident(incident.id, state="no-failure")
        headline = Headline(subj, status, state="unknown", requester=incident.requester,
                            notify=(incident.job or {}).get("slack_user"))
        if incident.headline_ts is None:  # deferred (a signature mute is active): nothing to mute here
            self._post_headline(incident, headline)
        else:
            wf.chat.update_headline(incident.channel or "", incident.headline_ts or "", headline)
        body = esc(status)
        if notes:
            body += "\n" + "\n".join(f"• {esc(redact(n))}" for n in notes[:10])
        body += ("\nIf you have the failing rank's log or the host's kernel log (`journalctl -k`), paste or "
                 "attach it in this thread and I will diagnose again.")
        wf.chat.post_notice(incident.channel or "", incident.thread_ts, body)
