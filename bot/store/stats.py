"""Read-only questions over past incidents: host recurrence, App Home figures, feedback precision."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .store import Store

DAY = 86400.0


@dataclass
class HostHistory:
    host: str
    incidents: int  # incidents on this host within the window, this one included
    signatures: list[str]  # most recent first, distinct


@dataclass
class RecentIncident:
    id: int
    created_at: float
    channel: str | None
    thread_ts: str | None
    signature: str | None
    confidence: float | None
    job_id: str | None
    hosts: list[str]
    origin: str


@dataclass
class Precision:
    signature: str
    right: int
    wrong: int

    @property
    def ratio(self) -> float:
        total = self.right + self.wrong
        return self.right / total if total else 0.0


def host_recurrence(store: Store, hosts: list[str], days: int = 7, now: float | None = None,
                    exclude_incident: int | None = None) -> list[HostHistory]:
    """For each host: how many incidents named it in the last `days` days, and with which signatures.
    A host marked repaired ("Host repaired", bot/store/host_actions.py) counts again from then."""
    if not hosts:
        return []
    since = (now if now is not None else store.clock()) - days * DAY
    out = []
    for host in sorted(set(hosts)):
        rows = store.query(
            "SELECT ih.incident_id, ih.signature FROM incident_hosts ih "
            "WHERE ih.host = ? AND ih.created_at >= ? AND ih.incident_id != ? "
            "AND ih.created_at > COALESCE((SELECT MAX(ha.created_at) FROM host_actions ha WHERE ha.host = ih.host"
            " AND ha.action = 'repaired' AND ha.ok = 1), 0) "
            "ORDER BY ih.created_at DESC, ih.incident_id DESC",
            [host, since, exclude_incident if exclude_incident is not None else -1],
        )
        sigs: list[str] = []
        for r in rows:
            if r["signature"] and r["signature"] not in sigs:
                sigs.append(r["signature"])
        out.append(HostHistory(host=host, incidents=len(rows), signatures=sigs))
    return out


def recent_incidents(store: Store, limit: int = 10) -> list[RecentIncident]:
    import json

    rows = store.query(
        "SELECT id, created_at, channel, thread_ts, signature, confidence, job_id, hosts, origin FROM incidents "
        "WHERE state = 'open' ORDER BY created_at DESC, id DESC LIMIT ?", [limit])
    return [RecentIncident(**{**r, "hosts": json.loads(r["hosts"]) if r["hosts"] else []}) for r in rows]


def top_signatures(store: Store, days: int = 7, limit: int = 5, now: float | None = None) -> list[tuple[str, int]]:
    since = (now if now is not None else store.clock()) - days * DAY
    rows = store.query(
        "SELECT signature, COUNT(*) AS n FROM incidents WHERE state = 'open' AND signature IS NOT NULL "
        "AND created_at >= ? GROUP BY signature ORDER BY n DESC, signature LIMIT ?", [since, limit])
    return [(r["signature"], r["n"]) for r in rows]


def top_hosts(store: Store, days: int = 30, limit: int = 5, now: float | None = None) -> list[tuple[str, int]]:
    since = (now if now is not None else store.clock()) - days * DAY
    rows = store.query(
        "SELECT host, COUNT(*) AS n FROM incident_hosts WHERE created_at >= ? "
        "GROUP BY host ORDER BY n DESC, host LIMIT ?", [since, limit])
    return [(r["host"], r["n"]) for r in rows]


def feedback_precision(store: Store, limit: int = 10) -> list[Precision]:
    """Per judged signature: incidents marked right vs wrong (a user's latest verdict per incident counts)."""
    rows = store.query(
        "SELECT f.signature, f.verdict FROM feedback f JOIN ("
        "  SELECT incident_id, user, MAX(id) AS id FROM feedback GROUP BY incident_id, user"
        ") latest ON latest.id = f.id WHERE f.signature IS NOT NULL")
    acc: dict[str, Precision] = {}
    for r in rows:
        p = acc.setdefault(r["signature"], Precision(r["signature"], 0, 0))
        if r["verdict"] == "right":
            p.right += 1
        else:
            p.wrong += 1
    ranked = sorted(acc.values(), key=lambda p: (-(p.right + p.wrong), p.signature))
    return ranked[:limit]


# ---- per-viewer figures (App Home): only incidents from conversations the viewer may see ----------
# `channels` is the allow-list the caller worked out (bot/slack/visibility.py); it travels as one JSON
# parameter, so its length never meets SQLite's limit on bound variables.

def incident_channels(store: Store, limit: int = 100) -> list[str]:
    """Conversations that hold incidents, the most recently used first (what a viewer's access is checked for)."""
    rows = store.query(
        "SELECT channel, MAX(created_at) AS last FROM incidents WHERE channel IS NOT NULL AND channel != '' "
        "GROUP BY channel ORDER BY last DESC, channel LIMIT ?", [limit])
    return [r["channel"] for r in rows]


def recent_incidents_in(store: Store, channels: list[str], limit: int = 10) -> list[RecentIncident]:
    if not channels:
        return []
    rows = store.query(
        "SELECT id, created_at, channel, thread_ts, signature, confidence, job_id, hosts, origin FROM incidents "
        "WHERE state = 'open' AND channel IN (SELECT value FROM json_each(?)) "
        "ORDER BY created_at DESC, id DESC LIMIT ?", [json.dumps(sorted(set(channels))), limit])
    return [RecentIncident(**{**r, "hosts": json.loads(r["hosts"]) if r["hosts"] else []}) for r in rows]


def top_signatures_in(store: Store, channels: list[str], days: int = 7, limit: int = 5,
                      now: float | None = None) -> list[tuple[str, int]]:
    if not channels:
        return []
    since = (now if now is not None else store.clock()) - days * DAY
    rows = store.query(
        "SELECT signature, COUNT(*) AS n FROM incidents WHERE state = 'open' AND signature IS NOT NULL "
        "AND created_at >= ? AND channel IN (SELECT value FROM json_each(?)) "
        "GROUP BY signature ORDER BY n DESC, signature LIMIT ?", [since, json.dumps(sorted(set(channels))), limit])
    return [(r["signature"], r["n"]) for r in rows]


def top_hosts_in(store: Store, channels: list[str], days: int = 30, limit: int = 5,
                 now: float | None = None) -> list[tuple[str, int]]:
    if not channels:
        return []
    since = (now if now is not None else store.clock()) - days * DAY
    rows = store.query(
        "SELECT ih.host, COUNT(*) AS n FROM incident_hosts ih JOIN incidents i ON i.id = ih.incident_id "
        "WHERE ih.created_at >= ? AND i.channel IN (SELECT value FROM json_each(?)) "
        "GROUP BY ih.host ORDER BY n DESC, ih.host LIMIT ?", [since, json.dumps(sorted(set(channels))), limit])
    return [(r["host"], r["n"]) for r in rows]
