"""Rows of the incident lifecycle (m003): the scheduler events an incident collects, and mutes.

Functions over a Store, like stats.py: the Store keeps the connection and its lock; these know the
two tables. Lifecycle fields of an incident itself (acked_by, owner, resolved_*, snoozed_until) are
plain columns written with Store.update_incident.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bot.redact import redact, redact_deep

from .models import Incident
from .store import Store


@dataclass
class Member:
    id: int
    incident_id: int
    event_id: str
    job_id: str | None
    job: dict[str, Any]
    hosts: list[str]
    state: str | None
    signature: str | None
    created_at: float


@dataclass
class Mute:
    id: int
    kind: str  # signature | host | job
    spec: str
    patterns: list[str]
    created_by: str | None
    channel: str | None
    reason: str | None
    created_at: float
    expires_at: float
    ended_at: float | None = None
    suppressed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def active(self, now: float) -> bool:
        return self.ended_at is None and now < self.expires_at


# -- members ---------------------------------------------------------------------------------------

# Pasted logs are members too: PASTE_ORIGINS, paste_member_id (bot.store.models, which the store reads).


def add_member(store: Store, incident_id: int, *, event_id: str, job_id: str | None, job: dict[str, Any],
               hosts: list[str], state: str | None, now: float) -> Member | None:
    """Record one scheduler event on an incident; None when the event_id is known already (a retry).
    `now` is the grouping clock's: group windows are measured on these rows."""
    with store._tx() as db:
        cur = db.execute(
            "INSERT OR IGNORE INTO incident_members (incident_id, event_id, job_id, job_json, hosts, state,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [incident_id, event_id, job_id, json.dumps(redact_deep(job), default=str), json.dumps(sorted(set(hosts))),
             state, now])
        if cur.rowcount != 1:
            return None
        mid = int(cur.lastrowid or 0)
    return Member(mid, incident_id, event_id, job_id, job, sorted(set(hosts)), state, None, now)


def _member(r: dict[str, Any]) -> Member:
    return Member(id=r["id"], incident_id=r["incident_id"], event_id=r["event_id"], job_id=r["job_id"],
                  job=json.loads(r["job_json"] or "{}"), hosts=json.loads(r["hosts"] or "[]"), state=r["state"],
                  signature=r["signature"], created_at=r["created_at"])


def member_by_event(store: Store, event_id: str) -> Member | None:
    rows = store.query("SELECT * FROM incident_members WHERE event_id = ?", [event_id])
    return _member(rows[0]) if rows else None


def list_members(store: Store, incident_id: int) -> list[Member]:
    return [_member(r) for r in store.query("SELECT * FROM incident_members WHERE incident_id = ? ORDER BY id",
                                            [incident_id])]


def count_members(store: Store, incident_id: int) -> int:
    rows = store.query("SELECT COUNT(*) AS n FROM incident_members WHERE incident_id = ?", [incident_id])
    return int(rows[0]["n"]) if rows else 0


def delete_member(store: Store, member_id: int) -> None:
    with store._tx() as db:
        db.execute("DELETE FROM incident_members WHERE id = ?", [member_id])


def set_member_signature(store: Store, member_id: int, signature: str | None) -> None:
    with store._tx() as db:
        db.execute("UPDATE incident_members SET signature = ? WHERE id = ?", [signature, member_id])


def set_member_state(store: Store, member_id: int, state: str | None) -> None:
    with store._tx() as db:
        db.execute("UPDATE incident_members SET state = ? WHERE id = ?", [state, member_id])


def last_activity(store: Store, incident_id: int) -> float | None:
    rows = store.query("SELECT MAX(created_at) AS t FROM incident_members WHERE incident_id = ?", [incident_id])
    return rows[0]["t"] if rows and rows[0]["t"] is not None else None


# -- finding incidents ------------------------------------------------------------------------------

def incidents_where(store: Store, where: str, params: list[Any], order: str = "created_at DESC, id DESC",
                    limit: int = 50) -> list[Incident]:
    with store._lock:
        rows = list(store.db.table("incidents").rows_where(where, params, order_by=order, limit=limit))
    return [store._decode(r) for r in rows]


def incidents_on_host(store: Store, host_patterns: list[str], since: float, limit: int = 20) -> list[Incident]:
    """Incidents that named a host matching one of the globs (implicated, or one of a job's nodes)."""
    pats = json.dumps(host_patterns)
    sql = ("id IN (SELECT ih.incident_id FROM incident_hosts ih, json_each(?) p WHERE ih.host GLOB p.value"
           " UNION SELECT m.incident_id FROM incident_members m, json_each(m.hosts) h, json_each(?) p"
           " WHERE h.value GLOB p.value) AND created_at >= ?")
    return incidents_where(store, sql, [pats, pats, since], limit=limit)


# -- mutes ----------------------------------------------------------------------------------------------

def add_mute(store: Store, *, kind: str, spec: str, patterns: list[str], created_by: str | None,
             channel: str | None, reason: str | None, now: float, expires_at: float) -> Mute:
    spec, reason = redact(spec), redact(reason) if reason else None
    with store._tx() as db:
        cur = db.execute(
            "INSERT INTO mutes (kind, spec, patterns, created_by, channel, reason, created_at, expires_at, suppressed)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
            [kind, spec, json.dumps(patterns), created_by, channel, reason, now, expires_at])
        pk = int(cur.lastrowid or 0)
    return Mute(pk, kind, spec, patterns, created_by, channel, reason, now, expires_at)


def _mute(r: dict[str, Any]) -> Mute:
    return Mute(id=r["id"], kind=r["kind"], spec=r["spec"], patterns=json.loads(r["patterns"] or "[]"),
                created_by=r["created_by"], channel=r["channel"], reason=r["reason"], created_at=r["created_at"],
                expires_at=r["expires_at"], ended_at=r["ended_at"], suppressed=r["suppressed"] or 0)


def active_mutes(store: Store, now: float, kind: str | None = None) -> list[Mute]:
    sql = "SELECT * FROM mutes WHERE ended_at IS NULL AND expires_at > ?"
    params: list[Any] = [now]
    if kind:
        sql += " AND kind = ?"
        params.append(kind)
    return [_mute(r) for r in store.query(sql + " ORDER BY id", params)]


def get_mute(store: Store, mute_id: int) -> Mute | None:
    rows = store.query("SELECT * FROM mutes WHERE id = ?", [mute_id])
    return _mute(rows[0]) if rows else None


def end_mute(store: Store, mute_id: int, now: float) -> bool:
    with store._tx() as db:
        cur = db.execute("UPDATE mutes SET ended_at = ? WHERE id = ? AND ended_at IS NULL", [now, mute_id])
        return cur.rowcount == 1


def count_suppressed(store: Store, mute_id: int) -> None:
    with store._tx() as db:
        db.execute("UPDATE mutes SET suppressed = COALESCE(suppressed, 0) + 1 WHERE id = ?", [mute_id])
