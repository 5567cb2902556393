"""Forget old incidents (TRIAGE_RETENTION_DAYS) and old Slack event ids."""

from __future__ import annotations

from dataclasses import dataclass

from .stats import DAY
from .store import Store

EVENT_KEEP_DAYS = 2  # Slack retries within minutes; two days covers any replay of a stored event


@dataclass
class Pruned:
    incidents: int
    events: int


def prune(store: Store, retention_days: int, now: float | None = None) -> Pruned:
    """Delete incidents older than `retention_days` with everything that hangs off them."""
    now = now if now is not None else store.clock()
    cutoff = now - retention_days * DAY
    with store._tx() as db:
        ids = [r[0] for r in db.execute("SELECT id FROM incidents WHERE created_at < ?", [cutoff]).fetchall()]
        for table in ("evidence", "diagnoses", "probe_runs", "feedback", "incident_hosts",
                      "incident_members"):
            db.execute(f"DELETE FROM {table} WHERE incident_id IN (SELECT id FROM incidents WHERE created_at < ?)",
                       [cutoff])
        db.execute("DELETE FROM incidents WHERE created_at < ?", [cutoff])
        db.execute("DELETE FROM work WHERE state IN ('done', 'failed') AND updated_at < ?",
                   [now - EVENT_KEEP_DAYS * DAY])
        events = db.execute("DELETE FROM processed_events WHERE created_at < ?",
                            [now - EVENT_KEEP_DAYS * DAY]).rowcount
    return Pruned(incidents=len(ids), events=events)
