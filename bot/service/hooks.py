"""POST /hooks/job-failed: schedulers report a failed job; the bot opens an incident for it.

Authenticated like the node agent's API (node_agent/auth.py, scheme v1): X-Triage-Timestamp and
X-Triage-Signature = v1=<hex HMAC-SHA256(secret, "v1:" + timestamp + ":" + body)>, a 5-minute window,
each signature accepted once. A scheduler that retries must sign each attempt afresh; retries are
idempotent on `event_id` (200 with the existing incident, never a second post).

Answers: 202 accepted (work continues on the pool; "grouped" when the failure joins an open incident
or a storm, bot.service.grouping), 200 already known or muted (bot.service.lifecycle), 400 bad JSON
or fields, 401 bad/old/replayed signature, 413 body too large, 503 not configured or busy.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.jobs.base import is_log_path
from bot.store import Incident
from bot.store import lifecycle as lc
from bot.store.lifecycle import Member
from node_agent.auth import HEADER_SIGNATURE, HEADER_TIMESTAMP, AuthError, ReplayCache, verify

from .grouping import Grouping
from .jobs import JobEvent, JobFlows, parse_nodes
from .lifecycle import Lifecycle
from .pool import PoolBusy
from .routing import Routes
from .work import WorkQueue

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
_FIELD = re.compile(r"^[\w.:@+\-\[\], /#=]{1,200}$")  # printable, bounded; ids never reach a shell anyway
_UNSAFE = re.compile(r"[^\w.:@+\-\[\], /#=]")
_DISPLAY_ONLY = {"name"}  # a job name like "train (v2)" is free text


@dataclass
class HookResponse:
    status: int
    body: dict[str, Any]


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


def json_object(body: bytes) -> dict[str, Any]:
    """A webhook body as a JSON object; raises ValueError with the reason (answered as 400)."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("body must be a JSON object")
    return data


def parse_event(body: bytes) -> JobEvent:
    """Validate the JSON body; raises ValueError with the reason."""
    data = json_object(body)
    out: dict[str, str] = {}
    for key in ("event_id", "job_id", "state", "exit_code", "name", "user", "partition", "cluster"):
        v = data.get(key)
        if v is None or v == "":
            continue
        if not isinstance(v, (str, int)):
            raise ValueError(f"{key} must be a string")
        v = str(v)
        if key in _DISPLAY_ONLY:  # shown, never looked up: clean it rather than lose the event
            v = _UNSAFE.sub("_", v)[:200] or "_"
        if not _FIELD.match(v):
            raise ValueError(f"{key} holds characters or a length not allowed in a job field")
        out[key] = v
    for key in ("event_id", "job_id"):
        if key not in out:
            raise ValueError(f"{key} is required")
    paths: dict[str, str] = {}
    for key in ("stdout", "stderr", "work_dir"):
        v = data.get(key)
        if v is None or v == "":
            continue
        if not is_log_path(v):
            raise ValueError(f"{key} must be an absolute path of printable characters")
        paths[key] = v
    nodes = data.get("nodes")
    if nodes is not None and not isinstance(nodes, (str, list)):
        raise ValueError("nodes must be a host list string (gpu[01-02]) or a list")
    return JobEvent(
        job_id=out["job_id"], event_id=out["event_id"], state=out.get("state"), exit_code=out.get("exit_code"),
        name=out.get("name"), user=out.get("user"), partition=out.get("partition"), cluster=out.get("cluster"),
        nodes=parse_nodes(nodes)[:512] if nodes else [], **paths,
    )


class JobHooks:
    def __init__(self, jobs: JobFlows, work: WorkQueue, routes: Routes, secret: bytes | None,
                 grouping: Grouping | None = None, lifecycle: Lifecycle | None = None) -> None:
        self.jobs = jobs
        self.work = work
        self.routes = routes
        self.secret = secret
        self.replays = ReplayCache()
        self.grouping = grouping
        self.lifecycle = lifecycle

    def handle(self, headers: Mapping[str, str], body: bytes) -> HookResponse:
        if self.secret is None:
            return HookResponse(503, {"error": "webhook disabled: set TRIAGE_WEBHOOK_SECRET_FILE"})
        if len(body) > MAX_BODY:
            return HookResponse(413, {"error": f"body larger than {MAX_BODY} bytes"})
        try:
            verify(self.secret, _header(headers, HEADER_TIMESTAMP), _header(headers, HEADER_SIGNATURE), body,
                   replay_cache=self.replays)
        except AuthError as exc:
            return HookResponse(401, {"error": exc.reason})
        try:
            event = parse_event(body)
        except ValueError as exc:
            return HookResponse(400, {"error": str(exc)})
        store = self.jobs.wf.store
        existing = store.find_hook_incident(event.event_id or "")
        if existing is not None and existing.state == "error" and not existing.headline_ts:
            # The first attempt never reached the channel (bot not invited, Slack down): this retry
            # is the scheduler's way of not losing the job, so try again.
            store.update_incident(existing.id, state="diagnosing")
            return self._submit(existing, event, existing.channel or "", retry=True)
        if existing is not None and existing.state == "diagnosing" and not existing.summary_ts \
                and not store.has_open_work(work_key(existing, event)):
            # Opened, but its work never got queued (the bot died in between): queue it now.
            return self._submit(existing, event, existing.channel or "", retry=True)
        if existing is not None:
            return HookResponse(200, {"incident": existing.id, "status": "exists", "state": existing.state})
        member = lc.member_by_event(store, event.event_id or "")
        if member is not None:  # a retry of a failure that joined a group
            if not store.seen_event(f"hook:{event.event_id}"):  # joined, but the bot died before queueing it
                return self._submit_join(member, event)
            return HookResponse(200, {"incident": member.incident_id, "status": "exists"})
        hit = self.lifecycle.muted(hosts=event.nodes, job=event.to_dict()) if self.lifecycle else None
        if hit is not None:  # 2xx: the scheduler's notifier drops it instead of retrying
            return HookResponse(200, {"status": "muted", "mute": hit.mute.id, "until": hit.mute.expires_at})
        channel = self.routes.channel_for(event.routing_fields())
        if not channel:
            return HookResponse(503, {"error": "no channel for this job: set TRIAGE_CHANNEL or a TRIAGE_ROUTES rule"})
        if self.grouping is not None:
            placed = self.grouping.place(event, channel)
            incident, created = placed.incident, placed.member is not None
            if created and placed.kind != "new":
                assert placed.member is not None
                return self._submit_join(placed.member, event, placed.kind)
        else:
            incident, created = store.create_incident(
                origin="webhook", channel=channel, thread_ts=None, hook_event_id=event.event_id, job_id=event.job_id,
                job=event.to_dict(), hosts=event.nodes)
        if not created:
            return HookResponse(200, {"incident": incident.id, "status": "exists", "state": incident.state})
        return self._submit(incident, event, channel)

    def _submit_join(self, member: Member, event: JobEvent, kind: str = "job") -> HookResponse:
        """Queue a failure that joins an open incident (one job, one host) or a storm's summary."""
        try:
            self.work.submit("hook-join", {"incident": member.incident_id, "event": event.to_dict()},
                             [f"hook:{event.event_id}"])
        except PoolBusy as exc:
            lc.delete_member(self.jobs.wf.store, member.id)  # the scheduler's retry joins it later
            return HookResponse(503, {"error": f"busy: {exc}; retry later"})
        return HookResponse(202, {"incident": member.incident_id, "status": "grouped", "group": kind})

    def _submit(self, incident: Incident, event: JobEvent, channel: str, retry: bool = False) -> HookResponse:
        store = self.jobs.wf.store
        try:
            self.work.submit("hook", {"incident": incident.id, "event": event.to_dict()},
                             [work_key(incident, event, store)])
        except PoolBusy as exc:
            if retry:
                store.update_incident(incident.id, state="error")
            else:
                store.delete_incident(incident.id)  # let the scheduler's retry open it later
            return HookResponse(503, {"error": f"busy: {exc}; retry later"})
        return HookResponse(202, {"incident": incident.id, "status": "retrying" if retry else "accepted",
                                  "channel": channel})

    def resume_orphans(self) -> int:
        """At start: webhook incidents still diagnosing with no queued work (the bot died between
        opening one and queueing it) are queued again. Returns how many."""
        store = self.jobs.wf.store
        n = 0
        for row in store.query("SELECT id FROM incidents WHERE origin = 'webhook' AND state = 'diagnosing'"
                               " AND summary_ts IS NULL"):
            incident = store.get_incident(row["id"])
            if incident is None or not incident.job:
                continue
            event = JobEvent(**incident.job)
            if store.has_open_work(work_key(incident, event)):
                continue
            try:
                self.work.submit("hook", {"incident": incident.id, "event": event.to_dict()},
                                 [work_key(incident, event, store)])
                n += 1
            except PoolBusy:
                break
        return n


def work_key(incident: Incident, event: JobEvent, store: Any = None) -> str:
    """hook:<event_id>, then hook:<event_id>:<n> for a retry of an attempt that failed for good."""
    base = f"hook:{event.event_id or incident.hook_event_id or incident.id}"
    if store is None or not store.seen_event(base):
        return base
    n = 1 + len(store.query("SELECT 1 FROM work WHERE key LIKE ?", [base + ":%"]))
    return f"{base}:{n}"
