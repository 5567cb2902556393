"""The audit of host actions (m004): drains approved in Slack and "Host repaired" (resume).

Functions over a Store, like stats.py and lifecycle.py. A row is written for every attempt, done
or refused by the scheduler, so the audit says who asked for what even when Slurm said no.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from bot.redact import redact

from .store import Store, new_id


@dataclass
class HostAction:
    host: str
    action: str  # drain | repaired
    user: str
    ok: bool
    reason: str | None = None
    incident_id: int | None = None
    channel: str | None = None
    thread_ts: str | None = None
    command: list[str] = field(default_factory=list)
    node_state: str | None = None
    closed: list[int] = field(default_factory=list)
    error: str | None = None
    created_at: float = 0.0
    id: int = 0


def record(store: Store, a: HostAction) -> HostAction:
    now = store.clock()
    row = {"created_at": now, "host": a.host, "action": a.action, "user": a.user, "ok": int(a.ok),
           "reason": redact(a.reason) if a.reason else None, "incident_id": a.incident_id, "channel": a.channel,
           "thread_ts": a.thread_ts, "command": json.dumps([redact(x) for x in a.command]),
           "node_state": a.node_state, "closed": json.dumps(a.closed),
           "error": redact(a.error)[:2000] if a.error else None}
    with store._tx() as db:
        pk = new_id(db.table("host_actions").insert(row))
    a.id, a.created_at = pk, now
    return a


def _action(r: dict) -> HostAction:
    return HostAction(id=r["id"], created_at=r["created_at"], host=r["host"], action=r["action"], user=r["user"],
                      ok=bool(r["ok"]), reason=r["reason"], incident_id=r["incident_id"], channel=r["channel"],
                      thread_ts=r["thread_ts"], command=json.loads(r["command"] or "[]"), node_state=r["node_state"],
                      closed=json.loads(r["closed"] or "[]"), error=r["error"])


def actions_for(store: Store, host: str, limit: int = 50) -> list[HostAction]:
    """The host's audit, newest first."""
    rows = store.query("SELECT * FROM host_actions WHERE host = ? ORDER BY created_at DESC, id DESC LIMIT ?",
                       [host, limit])
    return [_action(r) for r in rows]


def last_done(store: Store, host: str) -> HostAction | None:
    """The host's latest action that the scheduler carried out."""
    rows = store.query("SELECT * FROM host_actions WHERE host = ? AND ok = 1 ORDER BY created_at DESC, id DESC"
                       " LIMIT 1", [host])
    return _action(rows[0]) if rows else None


def last_repaired_at(store: Store, host: str) -> float | None:
    """When the host was last marked repaired: its recurrence counts incidents after this only."""
    rows = store.query("SELECT MAX(created_at) AS t FROM host_actions WHERE host = ? AND action = 'repaired'"
                       " AND ok = 1", [host])
    return rows[0]["t"] if rows and rows[0]["t"] is not None else None
