"""POST /hooks/alertmanager: an Alertmanager webhook (payload version 4) starts a host-centric answer.

A dcgm-exporter rule (Xid, ECC) names the host in its labels (`Hostname`, else `instance` without
its port, ...). For each host with newly firing alerts the bot posts one message in the routed
channel and answers in its thread with what it knows about that host: the alerts, the node agent's
probe (through the probe allow-list), the host's recent incidents and the jobs running there (job
source). Alertmanager re-sends a firing group every repeat_interval: an alert already answered (same
fingerprint and startsAt) is not posted again; its resolution is one reply in the same thread.

Authenticated with the shared secret of TRIAGE_ALERTMANAGER_SECRET_FILE: Alertmanager sends it as
`Authorization: Bearer <secret>` (http_config.authorization.credentials_file; basic_auth with the
secret as password works too); a relay may sign like the job webhook (X-Triage-Signature, v1).
Answers: 202 accepted, 200 nothing new, 400 bad payload, 401 bad credentials, 413 too large,
503 not configured, no channel, or busy.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.jobs import JobSourceError, node_control
from bot.jobs.slurm_nodes import check_reason
from bot.probes.targets import host_name_problem
from bot.redact import redact
from bot.store import Incident
from bot.store import host_actions as ha
from bot.store import lifecycle as lc
from bot.store.stats import DAY
from node_agent.auth import HEADER_SIGNATURE, HEADER_TIMESTAMP, AuthError, ReplayCache, verify

from .answer import Headline, HostProbe, esc, probe_host_lines
from .hooks import HookResponse, json_object
from .pool import PoolBusy
from .routing import Routes
from .work import WorkQueue
from .workflow import Workflow

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # a group of a few hundred alerts with their annotations
MAX_ALERTS = 500
MAX_LABELS = 64
RECENT_DAYS = 7
# Where the host is, best first: dcgm-exporter's Hostname, node-exporter's/relabelled host names,
# then the scrape target (`instance`, "gpu01:9400").
HOST_LABELS = ("Hostname", "hostname", "host", "node", "nodename", "kubernetes_node", "instance", "exported_instance")
_FINGERPRINT = re.compile(r"[0-9a-fA-F]{1,64}")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,20}(?:Z|[+-][0-9]{2}:[0-9]{2})")
_NEVER = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt for an alert still firing


@dataclass
class Alert:
    status: str  # firing | resolved
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    fingerprint: str
    ends_at: str | None = None
    generator_url: str | None = None

    @property
    def name(self) -> str:
        return self.labels.get("alertname") or "alert"

    @property
    def key(self) -> str:
        """One firing of one alert: Alertmanager's fingerprint (its labels) and when it started."""
        return f"am:{self.fingerprint}:{self.starts_at}"

    @property
    def host(self) -> str | None:
        return host_of(self.labels)

    def summary(self) -> str:
        a = self.annotations
        return redact(a.get("summary") or a.get("description") or a.get("message") or self.name)[:300]

    def detail(self) -> str:
        """What dcgm-exporter's labels add to the summary: "Xid 79 · GPU 3 · NVIDIA H100 · severity critical"."""
        lb = self.labels
        summary = self.summary()
        parts = []
        if lb.get("err_code") and f"Xid {lb['err_code']}" not in summary:
            parts.append(f"Xid {lb['err_code']}" + (f" ({lb['err_msg']})" if lb.get("err_msg") else ""))
        if lb.get("gpu") and f"GPU {lb['gpu']}" not in summary:
            parts.append(f"GPU {lb['gpu']}")
        if lb.get("modelName"):
            parts.append(lb["modelName"])
        if lb.get("severity"):
            parts.append(f"severity {lb['severity']}")
        return redact(" · ".join(parts))[:300]


@dataclass
class AlertBatch:
    status: str
    receiver: str
    group_key: str
    alerts: list[Alert]
    external_url: str | None = None


def host_of(labels: Mapping[str, str]) -> str | None:
    """The host an alert is about, as a valid host name (an `instance` loses its port), or None."""
    for key in HOST_LABELS:
        raw = (labels.get(key) or "").strip()
        if not raw:
            continue
        if key in ("instance", "exported_instance"):
            raw = re.sub(r":[0-9]{1,5}$", "", raw.removeprefix("http://").removeprefix("https://").split("/")[0])
        if host_name_problem(raw) is None:
            return raw.lower()
    return None


def _strings(obj: Any, what: str) -> dict[str, str]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"{what} must be an object of strings")
    out = {}
    for k, v in list(obj.items())[:MAX_LABELS]:
        if isinstance(k, str) and isinstance(v, (str, int, float)) and len(k) <= 100:
            out[k] = str(v)[:2000]
    return out


def parse_payload(body: bytes) -> AlertBatch:
    """Alertmanager's webhook JSON (version 4); raises ValueError with the reason."""
    data = json_object(body)
    if str(data.get("version", "")) != "4":
        raise ValueError("expected Alertmanager's webhook payload, version 4 (\"version\": \"4\")")
    raw = data.get("alerts")
    if not isinstance(raw, list) or not raw:
        raise ValueError("alerts must be a non-empty list")
    if len(raw) > MAX_ALERTS:
        raise ValueError(f"more than {MAX_ALERTS} alerts in one notification; set max_alerts in the receiver")
    alerts = []
    for i, a in enumerate(raw):
        if not isinstance(a, dict):
            raise ValueError(f"alerts[{i}] must be an object")
        status = a.get("status")
        if status not in ("firing", "resolved"):
            raise ValueError(f"alerts[{i}].status must be firing or resolved")
        starts = str(a.get("startsAt") or "")
        if not _TIME.fullmatch(starts):
            raise ValueError(f"alerts[{i}].startsAt is not an RFC 3339 time")
        fp = str(a.get("fingerprint") or "")
        if not _FINGERPRINT.fullmatch(fp):
            raise ValueError(f"alerts[{i}].fingerprint must be hex (Alertmanager sends it)")
        ends = str(a.get("endsAt") or "")
        gen = a.get("generatorURL")
        alerts.append(Alert(
            status=status, labels=_strings(a.get("labels"), f"alerts[{i}].labels"),
            annotations=_strings(a.get("annotations"), f"alerts[{i}].annotations"), starts_at=starts,
            fingerprint=fp.lower(), ends_at=ends if _TIME.fullmatch(ends) and ends != _NEVER else None,
            generator_url=gen if isinstance(gen, str) and gen.startswith(("http://", "https://")) else None))
    ext = data.get("externalURL")
    return AlertBatch(status=str(data.get("status") or ""), receiver=str(data.get("receiver") or "")[:200],
                      group_key=str(data.get("groupKey") or "")[:500], alerts=alerts,
                      external_url=ext if isinstance(ext, str) and ext.startswith(("http://", "https://")) else None)


def alert_from_dict(d: dict[str, Any]) -> Alert:
    return Alert(**{k: v for k, v in d.items() if k in Alert.__dataclass_fields__})


def drain_reason(alerts: list[Alert]) -> str | None:
    """"DCGMXidErrors Xid 79 GPU 3": what an admin reading `sinfo -R` needs."""
    a = alerts[0]
    parts = [a.name]
    if a.labels.get("err_code"):
        parts.append(f"Xid {a.labels['err_code']}")
    if a.labels.get("gpu"):
        parts.append(f"GPU {a.labels['gpu']}")
    try:
        return check_reason(" ".join(parts)[:150])
    except ValueError:
        return None


def compact(lines: list[str], limit: int = 6) -> list[str]:
    """A lost GPU fails every probe with the same words: say each thing once."""
    out, seen = [], set()
    for line in lines:
        said = line.split(": ", 1)[-1].strip()
        if said in seen:
            continue
        seen.add(said)
        out.append(line)
    return out[:limit] + ([f"…{len(out) - limit} more in the probe run"] if len(out) > limit else [])


@dataclass
class HostAnswer:
    """The host-centric answer in an alert's thread (rendered by bot.slack.blocks.host_answer_blocks)."""

    incident_id: int
    host: str
    alerts: list[str]  # one line per alert (plain text)
    probes: list[HostProbe] = field(default_factory=list)
    probe_note: str | None = None  # why the host was not probed
    incidents: list[tuple[str, str | None]] = field(default_factory=list)  # (line, link)
    incidents_note: str | None = None
    jobs: list[str] = field(default_factory=list)
    jobs_note: str | None = None
    drain_value: str | None = None  # "Drain host" button value (incident:0) when a drain is offered

    @property
    def problems(self) -> int:
        return sum(1 for p in self.probes if not p.ok)


class _Credentials:
    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.replays = ReplayCache()

    def problem(self, headers: Mapping[str, str], body: bytes) -> str | None:
        hdr = {k.lower(): v for k, v in headers.items()}
        auth = hdr.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and value:
            return None if hmac.compare_digest(value.encode(), self.secret) else "wrong bearer token"
        if scheme.lower() == "basic" and value:
            try:
                _, _, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return "unreadable basic credentials"
            return None if hmac.compare_digest(password.encode(), self.secret) else "wrong basic password"
        if HEADER_SIGNATURE.lower() in hdr:
            try:
                verify(self.secret, hdr.get(HEADER_TIMESTAMP.lower()), hdr.get(HEADER_SIGNATURE.lower()), body,
                       replay_cache=self.replays)
                return None
            except AuthError as exc:
                return exc.reason
        return ("no credentials: send Authorization: Bearer <secret> (Alertmanager http_config.authorization "
                "with credentials_file) or sign the body (X-Triage-Signature)")


class AlertHooks:
    def __init__(self, wf: Workflow, work: WorkQueue, routes: Routes, secret: bytes | None) -> None:
        self.wf = wf
        self.work = work
        self.routes = routes
        self.creds = _Credentials(secret) if secret else None

    def handle(self, headers: Mapping[str, str], body: bytes) -> HookResponse:
        if self.creds is None:
            return HookResponse(503, {"error": "alert webhook disabled: set TRIAGE_ALERTMANAGER_SECRET_FILE"})
        if len(body) > MAX_BODY:
            return HookResponse(413, {"error": f"body larger than {MAX_BODY} bytes"})
        problem = self.creds.problem(headers, body)
        if problem:
            return HookResponse(401, {"error": problem})
        try:
            batch = parse_payload(body)
        except ValueError as exc:
            return HookResponse(400, {"error": str(exc)})
        by_host: dict[str, list[Alert]] = {}
        skipped = 0
        for a in batch.alerts:
            host = a.host
            if host is None:
                skipped += 1
                continue
            by_host.setdefault(host, []).append(a)
        if not by_host:
            return HookResponse(400, {"error": "no alert names its host: a label " + ", ".join(HOST_LABELS[:7])
                                      + " is needed (dcgm-exporter sets Hostname)"})
        accepted: dict[str, int] = {}
        resolved = 0
        store = self.wf.store
        for host, alerts in sorted(by_host.items()):
            firing = [a for a in alerts if a.status == "firing" and not store.seen_event(a.key)]
            if firing:
                try:
                    out = self._open(host, firing, batch)
                except PoolBusy as exc:
                    return HookResponse(503, {"error": f"busy: {exc}; retry later", "accepted": accepted})
                if isinstance(out, HookResponse):
                    return out
                if out is not None:
                    accepted[host] = out
            for a in alerts:
                if a.status == "resolved" and self._resolved(a):
                    resolved += 1
        if not accepted and not resolved:
            return HookResponse(200, {"status": "nothing new", "skipped": skipped})
        return HookResponse(202, {"status": "accepted", "incidents": accepted, "resolved": resolved,
                                  "skipped": skipped})

    def _open(self, host: str, alerts: list[Alert], batch: AlertBatch) -> int | HookResponse | None:
        first = alerts[0]
        fields = {"cluster": first.labels.get("cluster"), "partition": first.labels.get("partition"),
                  "name": first.name, "state": first.status, "alertname": first.name,
                  "severity": first.labels.get("severity"), "host": host}
        channel = self.routes.channel_for(fields)
        if not channel:
            return HookResponse(503, {"error": "no channel for this alert: set TRIAGE_CHANNEL or a TRIAGE_ROUTES rule"})
        store = self.wf.store
        subject = redact(f"Alert {first.name} on {host}" + (f" ({len(alerts)} alerts)" if len(alerts) > 1 else ""))
        job = {"nodes": [host], "alerts": [dict(asdict(a), key=a.key) for a in alerts],
               "receiver": batch.receiver, "group_key": batch.group_key}
        incident, created = store.create_incident(
            origin="alert", channel=channel, thread_ts=None, hook_event_id=f"am:{host}:{first.key}", job=job,
            hosts=[host], subject=subject)
        if not created:
            return None
        try:
            wid = self.work.submit("alert", {"incident": incident.id, "mode": "firing"}, [a.key for a in alerts])
        except PoolBusy:
            store.delete_incident(incident.id)
            raise
        if wid is None:  # another delivery of the same alerts got there first
            store.delete_incident(incident.id)
            return None
        return incident.id

    def _resolved(self, a: Alert) -> bool:
        store = self.wf.store
        rows = store.query(
            "SELECT i.id FROM incidents i, json_each(i.job_json, '$.alerts') x WHERE i.origin = 'alert'"
            " AND json_extract(x.value, '$.key') = ? ORDER BY i.id DESC LIMIT 1", [a.key])
        if not rows:
            return False
        wid = self.work.submit("alert", {"incident": rows[0]["id"], "mode": "resolved", "alert": asdict(a)},
                               [f"am-resolved:{a.fingerprint}:{a.starts_at}"])
        return wid is not None


class AlertFlows:
    """The queued work of an alert: post the host answer (or the resolution) in its thread."""

    def __init__(self, wf: Workflow) -> None:
        self.wf = wf

    def run_work(self, payload: dict[str, Any], attempt: int = 1) -> None:
        incident = self.wf.store.get_incident(int(payload["incident"]))
        if incident is None:
            return
        if payload.get("mode") == "resolved":
            self._say_resolved(incident, alert_from_dict(payload["alert"]))
            return
        if (incident.job or {}).get("answer_ts"):
            return  # answered already (the process died before the work was marked done)
        self.answer(incident)

    def answer(self, incident: Incident) -> None:
        wf = self.wf
        job = dict(incident.job or {})
        alerts = [alert_from_dict(a) for a in job.get("alerts") or []]
        host = (job.get("nodes") or incident.hosts or [""])[0]
        status = alerts[0].summary() if alerts else "alert"
        if incident.headline_ts is None:
            channel, ts = wf.chat.post_headline(incident.channel or "", Headline(incident.subject or host,
                                                                                 "Checking the host…"))
            wf.store.update_incident(incident.id, channel=channel, thread_ts=ts, headline_ts=ts)
            incident.channel, incident.thread_ts, incident.headline_ts = channel, ts, ts
        with wf.locks.hold(f"{incident.channel}:{incident.thread_ts}"):
            out = self.gather(incident, host, alerts)
            drain = getattr(wf, "drain", None)
            reason = drain_reason(alerts) if alerts else None
            if drain is not None and drain.enabled and reason:
                job["drain"] = {"host": host, "reason": reason}
                out.drain_value = f"{incident.id}:0"
            ts = wf.chat.post_host_answer(incident.channel or "", incident.thread_ts, out)
            job["answer_ts"] = ts
            wf.store.update_incident(incident.id, job=job, state="open")
            with wf.store._tx() as db:  # the alert counts as an incident on the host (recurrence, App Home)
                db.execute("INSERT OR IGNORE INTO incident_hosts (incident_id, host, signature, created_at)"
                           " VALUES (?, ?, ?, ?)", [incident.id, host, alerts[0].name if alerts else None,
                                                    incident.created_at])
            bits = [status]
            bits.append(f"probe: {out.problems} problem(s)" if out.probes and out.problems else
                        "probe: healthy" if out.probes and all(p.ok for p in out.probes) else "not probed")
            bits.append(f"{len(out.incidents)} earlier incident(s) in {RECENT_DAYS} days")
            if not out.jobs_note:
                bits.append(f"{len(out.jobs)} job(s) running there")
            wf.chat.update_headline(incident.channel or "", incident.headline_ts or "", Headline(
                incident.subject or host, " · ".join(bits), state="diagnosed" if out.problems or alerts else "ok"))

    def gather(self, incident: Incident, host: str, alerts: list[Alert]) -> HostAnswer:
        wf = self.wf
        lines = []
        for a in alerts:
            since = a.starts_at.replace("T", " ")[:16] + " UTC" if a.starts_at.endswith("Z") else a.starts_at
            detail = a.detail()
            lines.append(f"{a.name} firing since {since}: {a.summary()}" + (f" ({detail})" if detail else ""))
        out = HostAnswer(incident_id=incident.id, host=host, alerts=lines)
        # the node agent, through the probe allow-list (a refused host says why)
        if not wf.prober.enabled:
            out.probe_note = f"not probed: {wf.prober.problem}"
        else:
            try:
                results = wf.prober.probe([host])
                out.probes = [HostProbe(p.host, p.ok, compact(p.lines)) for p in probe_host_lines(results)]
                wf.store.add_probe_run(incident.id, [host], 0.0, results)
            except Exception as exc:  # agents are advisory: the answer goes out without them
                log.warning("probing %s for an alert failed: %s", host, exc)
                out.probe_note = f"probe failed: {exc}"
        # the host's recent incidents (after its last repair)
        now = wf.store.clock()
        repaired = ha.last_repaired_at(wf.store, host) or 0.0
        from .feedback import ago

        for inc in lc.incidents_on_host(wf.store, [host], now - RECENT_DAYS * DAY, limit=20):
            if inc.id == incident.id or inc.created_at <= repaired:
                continue
            what = inc.signature or inc.subject or inc.origin
            state = "resolved" if inc.resolved_at else inc.state
            job = f" · job {inc.job_id}" if inc.job_id else ""
            out.incidents.append((f"#{inc.id} {what}{job} · {ago(now - inc.created_at)} · {state}",
                                  wf.chat.permalink(inc.channel, inc.thread_ts)))
            if len(out.incidents) >= 5:
                break
        if repaired:
            out.incidents_note = "counted since it was marked repaired"
        # the jobs running there (job source)
        nodes = node_control(wf.job_source)
        if nodes is None:
            out.jobs_note = "no job source configured (TRIAGE_JOB_SOURCE=slurm lists them)"
        else:
            try:
                running, total = nodes.jobs_on_node(host, 10)
                out.jobs = [redact(f"job {j.job_id} ({j.name}) · {j.user} · {j.state} for {j.elapsed}"
                                   f" · partition {j.partition} · on {j.nodes}") for j in running]
                if total > len(running):
                    out.jobs.append(f"…and {total - len(running)} more")
            except JobSourceError as exc:
                out.jobs_note = str(exc)
        return out

    def _say_resolved(self, incident: Incident, a: Alert) -> None:
        if not (incident.channel and incident.thread_ts):
            return
        when = f" at {a.ends_at.replace('T', ' ')[:16]} UTC" if a.ends_at and a.ends_at.endswith("Z") else ""
        self.wf.chat.post_notice(incident.channel, incident.thread_ts,
                                 f":white_check_mark: Alertmanager reports *{esc(a.name)}* resolved{when}. "
                                 "The incident stays open until someone resolves it (or marks the host repaired).")
