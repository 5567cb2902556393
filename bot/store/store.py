"""The incident store: incidents, evidence, versioned diagnoses, probe runs, feedback, seen events.

One SQLite connection shared by the worker threads behind a lock: writes are a few rows per
incident, so a lock is simpler than a connection per thread and still far from the bottleneck.
Callers hand in text that is already redacted; `add_evidence` redacts again anyway (cheap insurance).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlite_utils import Database
from sqlite_utils.db import Table

from bot.redact import redact, redact_deep

from .db import StoreError, open_db
from .models import (
    PASTE_ORIGINS,
    DiagnosisRecord,
    EvidenceRecord,
    Feedback,
    Incident,
    NewEvidence,
    paste_member_id,
)

_INCIDENT_JSON = {"job": "job_json", "hosts": "hosts"}


def _redact_texts(obj: Any) -> Any:
    """The free text in a work payload (a message's or a command's `text`) is redacted before it is
    stored, like evidence; ids, timestamps and URLs stay as they are."""
    if isinstance(obj, dict):
        return {k: redact(v) if k == "text" and isinstance(v, str) else _redact_texts(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_texts(v) for v in obj]
    return obj



def new_id(table: Table) -> int:
    """The integer key of the row `table` just inserted (sqlite-utils types it as optional)."""
    if table.last_pk is None:
        raise StoreError(f"an insert into {table.name} returned no key")
    return int(table.last_pk)

class Store:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock
        self._lock = threading.RLock()

    @classmethod
    def open(cls, path: str, clock: Callable[[], float] = time.time) -> Store:
        return cls(open_db(path), clock)

    def close(self) -> None:
        with self._lock:
            self.db.close()

    @contextmanager
    def _tx(self) -> Iterator[Database]:
        with self._lock, self.db.atomic():
            yield self.db

    def query(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.db.query(sql, params))

    # -- processed events -------------------------------------------------------------------

    def claim_event(self, key: str) -> bool:
        """True the first time `key` is seen (process it); False for a duplicate delivery."""
        with self._tx() as db:
            cur = db.execute("INSERT OR IGNORE INTO processed_events (key, created_at) VALUES (?, ?)",
                             [key, self.clock()])
            return cur.rowcount == 1

    def seen_event(self, key: str) -> bool:
        """Whether `key` was recorded (a work item holds it, or an event was claimed); reads only."""
        with self._lock:
            return bool(self.db.execute("SELECT 1 FROM processed_events WHERE key = ?", [key]).fetchone())

    # -- durable work -------------------------------------------------------------------------

    def enqueue_work(self, kind: str, payload: dict[str, Any], keys: list[str], *,
                     fingerprint: str | None = None, window_s: float = 0) -> int | None:
        """Queue one item of work, once: every key in `keys` is recorded with it in one transaction.

        Returns the item's id, or None when a key is known already (Slack's retry of a queued event,
        a replayed request) or an item with the same `fingerprint` was queued in the last `window_s`.
        """
        now = self.clock()
        data = json.dumps(_redact_texts(payload), default=str)
        with self._tx() as db:
            for key in keys:
                if db.execute("SELECT 1 FROM processed_events WHERE key = ?", [key]).fetchone():
                    return None
            if fingerprint and window_s > 0 and db.execute(
                    "SELECT 1 FROM work WHERE fingerprint = ? AND created_at > ? LIMIT 1",
                    [fingerprint, now - window_s]).fetchone():
                return None
            for key in keys:
                db.execute("INSERT INTO processed_events (key, created_at) VALUES (?, ?)", [key, now])
            cur = db.execute(
                "INSERT INTO work (key, kind, payload, fingerprint, state, attempts, lease_until, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, 'queued', 0, 0, ?, ?)",
                [keys[0], kind, data, fingerprint, now, now])
            return int(cur.lastrowid or 0)

    def claim_work(self, limit: int, lease_s: float) -> list[dict[str, Any]]:
        """Take up to `limit` items: queued ones, and running ones whose lease ran out (oldest first)."""
        now = self.clock()
        with self._tx() as db:
            rows = list(db.query(
                "SELECT * FROM work WHERE state = 'queued' OR (state = 'running' AND lease_until < ?)"
                " ORDER BY id LIMIT ?", [now, limit]))
            for r in rows:
                db.execute("UPDATE work SET state = 'running', attempts = attempts + 1, lease_until = ?,"
                           " updated_at = ? WHERE id = ?", [now + lease_s, now, r["id"]])
                r["attempts"] += 1
        for r in rows:
            r["payload"] = json.loads(r["payload"])
        return rows

    def finish_work(self, work_id: int, *, error: str | None = None, retry: bool = False) -> None:
        """Done (or failed for good); `retry` puts it back in the queue instead."""
        state = "queued" if retry else ("failed" if error else "done")
        with self._tx() as db:
            db.execute("UPDATE work SET state = ?, error = ?, lease_until = 0, updated_at = ? WHERE id = ?",
                       [state, redact(error)[:2000] if error else None, self.clock(), work_id])

    def release_running_work(self) -> int:
        """At start (one bot per store): what a dead process was running is queued again."""
        with self._tx() as db:
            cur = db.execute("UPDATE work SET state = 'queued', lease_until = 0 WHERE state = 'running'")
            return cur.rowcount

    def work_counts(self) -> dict[str, int]:
        with self._lock:
            return {r["state"]: r["n"] for r in self.db.query("SELECT state, COUNT(*) AS n FROM work GROUP BY state")}

    def has_open_work(self, key: str) -> bool:
        with self._lock:
            return bool(self.db.execute("SELECT 1 FROM work WHERE key = ? AND state IN ('queued', 'running')",
                                        [key]).fetchone())

    def stale_cards(self, limit: int = 50) -> list[Incident]:
        """Incidents whose Slack card shows an older diagnosis than the store holds."""
        with self._lock:
            rows = list(self.db.table("incidents").rows_where(
                "summary_ts IS NOT NULL AND card_version IS NOT NULL AND card_version < version",
                order_by="updated_at", limit=limit))
        return [self._decode(r) for r in rows]

    # -- incidents ----------------------------------------------------------------------------

    def create_incident(self, *, origin: str, channel: str | None, thread_ts: str | None,
                        **fields: Any) -> tuple[Incident, bool]:
        """Create the incident for a thread, or return the one that already lives there.

        Returns (incident, created). Thread and webhook event id are unique, so two workers racing
        on the same thread (a paste and its @mention) end up with one incident.
        """
        now = self.clock()
        row = {"origin": origin, "channel": channel, "thread_ts": thread_ts, "created_at": now,
               "updated_at": now, "state": fields.pop("state", "diagnosing"), "version": 0}
        row.update(self._encode(fields))
        with self._tx() as db:
            try:
                pk = new_id(db.table("incidents").insert(row))
            except sqlite3.IntegrityError:
                existing = None
                if row.get("hook_event_id"):
                    existing = self._find(db, "hook_event_id = ?", [row["hook_event_id"]])
                if existing is None and channel and thread_ts:
                    existing = self._find(db, "channel = ? AND thread_ts = ?", [channel, thread_ts])
                if existing is None:
                    raise
                return existing, False
            return self._decode(db.table("incidents").get(pk)), True

    def get_incident(self, incident_id: int) -> Incident | None:
        with self._lock:
            return self._find(self.db, "id = ?", [incident_id])

    def find_incident(self, channel: str, thread_ts: str) -> Incident | None:
        """The incident of a thread: its own, or the one its top-level paste joined (bot.service.grouping),
        so replies there reach that incident."""

        with self._lock:
            found = self._find(self.db, "channel = ? AND thread_ts = ?", [channel, thread_ts])
            if found is None:
                found = self._find(self.db, "id = (SELECT incident_id FROM incident_members WHERE event_id = ?)"
                                   f" AND channel = ? AND origin IN ({', '.join('?' for _ in PASTE_ORIGINS)})",
                                   [paste_member_id(channel, thread_ts), channel, *PASTE_ORIGINS])
            return found

    def find_hook_incident(self, event_id: str) -> Incident | None:
        with self._lock:
            return self._find(self.db, "hook_event_id = ?", [event_id])

    def update_incident(self, incident_id: int, **fields: Any) -> None:
        fields = self._encode(fields)
        fields["updated_at"] = self.clock()
        with self._tx() as db:
            db.table("incidents").update(incident_id, fields)

    def delete_incident(self, incident_id: int) -> None:
        with self._tx() as db:
            for table in ("evidence", "diagnoses", "probe_runs", "feedback", "incident_hosts",
                          "incident_members"):
                db.execute(f"DELETE FROM {table} WHERE incident_id = ?", [incident_id])
            db.execute("DELETE FROM incidents WHERE id = ?", [incident_id])

    @staticmethod
    def _find(db: Database, where: str, params: list[Any]) -> Incident | None:
        rows = list(db.table("incidents").rows_where(where, params, limit=1))
        return Store._decode(rows[0]) if rows else None

    @staticmethod
    def _encode(fields: dict[str, Any]) -> dict[str, Any]:
        out = dict(fields)
        if "job" in out:
            out["job_json"] = json.dumps(redact_deep(out.pop("job")), default=str) if fields["job"] else None
        if "hosts" in out:
            out["hosts"] = json.dumps(sorted(set(out["hosts"] or [])))
        return out

    @staticmethod
    def _decode(row: dict[str, Any]) -> Incident:
        row = dict(row)
        raw_job = row.pop("job_json", None)
        job = json.loads(raw_job) if raw_job else None
        hosts = json.loads(row["hosts"]) if row.get("hosts") else []
        row["hosts"] = hosts
        return Incident(job=job, **row)

    # -- evidence -------------------------------------------------------------------------------

    def add_evidence(self, incident_id: int, item: NewEvidence) -> int:
        content = zlib.compress(redact(item.text).encode("utf-8"), 6) if item.text is not None else None
        row = {
            "incident_id": incident_id,
            "created_at": self.clock(),
            "kind": item.kind,
            "name": redact(item.name),
            "author": item.author,
            "ref": json.dumps(redact_deep(item.ref)),
            "size": item.size,
            "sha256": item.sha256,
            "redactions": item.redactions,
            "content": content,
            "excerpt": redact(item.excerpt) if item.excerpt is not None else None,
        }
        with self._tx() as db:
            return new_id(db.table("evidence").insert(row))

    def has_evidence(self, incident_id: int, sha256: str) -> bool:
        with self._lock:
            return bool(self.db.table("evidence").count_where("incident_id = ? AND sha256 = ?", [incident_id, sha256]))

    def list_evidence(self, incident_id: int) -> list[EvidenceRecord]:
        with self._lock:
            rows = list(self.db.table("evidence").rows_where("incident_id = ?", [incident_id], order_by="id"))
        out = []
        for r in rows:
            text = zlib.decompress(r["content"]).decode("utf-8") if r["content"] is not None else None
            out.append(EvidenceRecord(
                id=r["id"], incident_id=r["incident_id"], created_at=r["created_at"], kind=r["kind"],
                name=r["name"], size=r["size"], sha256=r["sha256"], redactions=r["redactions"], text=text,
                excerpt=r["excerpt"], author=r["author"], ref=json.loads(r["ref"] or "{}"),
            ))
        return out

    # -- diagnoses --------------------------------------------------------------------------------

    def add_diagnosis(self, incident_id: int, *, trigger: str, signature: str | None, confidence: float | None,
                      report: dict[str, Any], answer: dict[str, Any], changes: list[str],
                      hosts: list[str] | None = None, state: str = "open", version: int | None = None) -> int:
        """Store a diagnosis version (the next one unless given; versions are unique per incident).

        The incident's current signature/confidence/version/hosts follow it. Returns the version.
        """
        now = self.clock()
        # Serialise before taking the lock: other threads (the event de-duplication on Slack's ack
        # path among them) wait on it.
        row = {"incident_id": incident_id, "created_at": now, "trigger": trigger, "signature": signature,
               "confidence": confidence, "report_json": json.dumps(redact_deep(report), default=str),
               "answer_json": json.dumps(redact_deep(answer), default=str), "changes": json.dumps(redact_deep(changes))}
        update: dict[str, Any] = {"signature": signature, "confidence": confidence, "state": state, "updated_at": now}
        host_list = sorted(set(hosts)) if hosts is not None else None
        if host_list is not None:
            update["hosts"] = json.dumps(host_list)
        with self._tx() as db:
            if version is None:
                cur = db.execute("SELECT COALESCE(MAX(version), 0) + 1 FROM diagnoses WHERE incident_id = ?",
                                 [incident_id])
                version = int(cur.fetchone()[0])
            db.table("diagnoses").insert({**row, "version": version})
            update["version"] = version
            if host_list is not None:
                db.execute("DELETE FROM incident_hosts WHERE incident_id = ?", [incident_id])
                created = db.table("incidents").get(incident_id)["created_at"]
                for host in host_list:
                    db.table("incident_hosts").insert({"incident_id": incident_id, "host": host,
                                                 "signature": signature, "created_at": created})
            db.table("incidents").update(incident_id, update)
            return version

    def get_diagnosis(self, incident_id: int, version: int | None = None) -> DiagnosisRecord | None:
        with self._lock:
            if version is None:
                rows = list(self.db.table("diagnoses").rows_where("incident_id = ?", [incident_id],
                                                            order_by="version desc", limit=1))
            else:
                rows = list(self.db.table("diagnoses").rows_where("incident_id = ? AND version = ?",
                                                            [incident_id, version], limit=1))
        if not rows:
            return None
        r = rows[0]
        return DiagnosisRecord(
            incident_id=incident_id, version=r["version"], created_at=r["created_at"], trigger=r["trigger"],
            signature=r["signature"], confidence=r["confidence"], report=json.loads(r["report_json"]),
            answer=json.loads(r["answer_json"]), changes=json.loads(r["changes"] or "[]"),
        )

    def update_answer(self, incident_id: int, version: int, answer: dict[str, Any]) -> None:
        data = json.dumps(redact_deep(answer), default=str)
        with self._tx() as db:
            db.execute("UPDATE diagnoses SET answer_json = ? WHERE incident_id = ? AND version = ?",
                       [data, incident_id, version])

    # -- probes and feedback ------------------------------------------------------------------------

    def add_probe_run(self, incident_id: int, hosts: list[str], duration_s: float,
                      results: dict[str, Any], error: str | None = None) -> int:
        row = {"incident_id": incident_id, "created_at": self.clock(), "hosts": json.dumps(hosts),
               "duration_s": round(duration_s, 3), "results_json": json.dumps(redact_deep(results), default=str),
               "error": redact(error) if error else None}
        with self._tx() as db:
            return new_id(db.table("probe_runs").insert(row))

    def list_probe_runs(self, incident_id: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = list(self.db.table("probe_runs").rows_where("incident_id = ?", [incident_id], order_by="id"))
        for r in rows:
            r["hosts"] = json.loads(r["hosts"])
            r["results"] = json.loads(r.pop("results_json"))
        return rows

    def add_feedback(self, fb: Feedback) -> int:
        with self._tx() as db:
            return new_id(db.table("feedback").insert({
                "incident_id": fb.incident_id, "version": fb.version, "created_at": self.clock(),
                "user": fb.user, "signature": fb.signature, "verdict": fb.verdict,
                "correct_signature": fb.correct_signature,
                "correct_text": redact(fb.correct_text) if fb.correct_text else None,
                "note": redact(fb.note) if fb.note else None,
            }))

    def list_feedback(self, incident_id: int) -> list[Feedback]:
        with self._lock:
            rows = list(self.db.table("feedback").rows_where("incident_id = ?", [incident_id], order_by="id"))
        return [Feedback(incident_id=r["incident_id"], version=r["version"], user=r["user"],
                         signature=r["signature"], verdict=r["verdict"], correct_signature=r["correct_signature"],
                         correct_text=r["correct_text"], note=r["note"], created_at=r["created_at"]) for r in rows]
