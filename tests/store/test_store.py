"""The incident store on real SQLite files: WAL, migrations, versions, events, retention, redaction."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from bot.store import Feedback, NewEvidence, Store, StoreError
from bot.store import stats as st
from bot.store.retention import prune


class Clock:
    def __init__(self, t: float = 1_750_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def open_store(tmp_path: Path, clock: Clock | None = None) -> Store:
    return Store.open(str(tmp_path / "triage.db"), clock or Clock())


def test_opens_in_wal_mode_and_migrates_once(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    mode = s.query("PRAGMA journal_mode")[0]["journal_mode"]
    assert mode == "wal"
    tables = {r["name"] for r in s.query("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"incidents", "evidence", "diagnoses", "probe_runs", "feedback", "processed_events",
            "incident_hosts", "_sqlite_migrations"} <= tables
    s.close()
    # Re-opening applies nothing twice and keeps the data.
    s = open_store(tmp_path)
    applied = s.query("SELECT name FROM _sqlite_migrations")
    assert [r["name"] for r in applied][:3] == ["m001_initial", "m002_work_and_outbox",
                                                "m003_lifecycle_grouping_mutes"]
    assert len({r["name"] for r in applied}) == len(applied)  # each applied once


def test_refuses_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "triage.db"
    bad.write_bytes(b"this is not a database, just junk " * 200)
    with pytest.raises(StoreError, match="TRIAGE_DB"):
        Store.open(str(bad))


def test_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(str(tmp_path / "nope" / "triage.db"))


def test_one_incident_per_thread_even_when_two_workers_race(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    results = []

    def create() -> None:
        results.append(s.create_incident(origin="message", channel="C1", thread_ts="1700.1"))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(1 for _, created in results if created) == 1
    assert len({inc.id for inc, _ in results}) == 1


def test_webhook_event_ids_are_unique(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    a, created_a = s.create_incident(origin="webhook", channel="C1", thread_ts=None, hook_event_id="slurm-1234-end")
    b, created_b = s.create_incident(origin="webhook", channel="C1", thread_ts=None, hook_event_id="slurm-1234-end")
    assert created_a and not created_b and a.id == b.id
    assert s.find_hook_incident("slurm-1234-end").id == a.id


def test_events_are_claimed_once(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    assert s.claim_event("event:Ev1")
    assert not s.claim_event("event:Ev1")
    s.close()
    s = open_store(tmp_path)  # survives a restart: Slack's retries can straddle one
    assert not s.claim_event("event:Ev1")


def test_diagnoses_are_versioned_and_the_incident_follows_the_latest(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    inc, _ = s.create_incident(origin="message", channel="C1", thread_ts="1.1")
    v1 = s.add_diagnosis(inc.id, trigger="initial", signature="nccl-watchdog-timeout", confidence=0.5,
                         report={"diagnoses": []}, answer={"a": 1}, changes=[], hosts=["gpu-node-03"])
    v2 = s.add_diagnosis(inc.id, trigger="follow-up", signature="nccl-cuda-999", confidence=0.8,
                         report={"diagnoses": []}, answer={"a": 2}, changes=["The cause is now nccl-cuda-999"],
                         hosts=["gpu-node-17"])
    assert (v1, v2) == (1, 2)
    now = s.get_incident(inc.id)
    assert now.signature == "nccl-cuda-999" and now.version == 2 and now.hosts == ["gpu-node-17"]
    assert s.get_diagnosis(inc.id, 1).signature == "nccl-watchdog-timeout"
    assert s.get_diagnosis(inc.id).changes == ["The cause is now nccl-cuda-999"]
    with pytest.raises(sqlite3.IntegrityError):
        s.add_diagnosis(inc.id, trigger="x", signature="y", confidence=0.1, report={}, answer={}, changes=[], version=2)


def test_secrets_never_reach_the_file(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    inc, _ = s.create_incident(origin="message", channel="C1", thread_ts="1.1")
    token = "hf_QmZtLpXvRsNwKyJhGfDcBaEoIuYtRe0123"
    # Even if a caller forgets to redact, the store does it.
    s.add_evidence(inc.id, NewEvidence(kind="message", name="message", size=10, sha256="x",
                                       text=f"HF_TOKEN={token}\nCuda failure 999", excerpt=None))
    s.add_diagnosis(inc.id, trigger="initial", signature="s", confidence=0.5,
                    report={"evidence": [{"text": f"export HF_TOKEN={token}"}]}, answer={"t": token}, changes=[])
    s.add_feedback(Feedback(incident_id=inc.id, version=1, user="U1", signature="s", verdict="wrong",
                            correct_text=f"token {token} leaked", note=None))
    s.add_probe_run(inc.id, ["h"], 0.1, {"h": {"error": f"auth {token}"}})
    text = s.list_evidence(inc.id)[0].text
    assert token not in text and "HF_TOKEN=[REDACTED]" in text
    s.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("triage.db"))
    assert token.encode() not in raw


def test_large_items_keep_only_an_excerpt(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    inc, _ = s.create_incident(origin="file", channel="C1", thread_ts="1.1")
    s.add_evidence(inc.id, NewEvidence(kind="file", name="rank3.log.gz", size=50 << 20, sha256="abc",
                                       text=None, excerpt="[rank3]: Cuda failure 999 'unknown error'",
                                       ref={"file_id": "F1"}))
    rec = s.list_evidence(inc.id)[0]
    assert rec.text is None and rec.ref == {"file_id": "F1"} and "Cuda failure 999" in rec.excerpt


def test_host_recurrence_counts_recent_incidents_only(tmp_path: Path) -> None:
    clock = Clock()
    s = open_store(tmp_path, clock)
    day = 86400

    n = iter(range(100))

    def incident(sig: str, host: str) -> int:
        inc, _ = s.create_incident(origin="message", channel="C1", thread_ts=f"{next(n)}.1")
        s.add_diagnosis(inc.id, trigger="initial", signature=sig, confidence=0.8, report={}, answer={}, changes=[],
                        hosts=[host])
        return inc.id

    incident("xid-79-fallen-off-bus", "gpu-node-17")  # 10 days ago: outside the 7-day window
    clock.t += 5 * day
    incident("xid-79-fallen-off-bus", "gpu-node-17")
    clock.t += 1 * day
    incident("nccl-cuda-999", "gpu-node-17")
    incident("nccl-cuda-999", "gpu-node-02")
    clock.t += 4 * day
    current = incident("nccl-watchdog-timeout", "gpu-node-17")
    hist = st.host_recurrence(s, ["gpu-node-17"], days=7, exclude_incident=current)
    assert hist[0].incidents == 2
    assert hist[0].signatures == ["nccl-cuda-999", "xid-79-fallen-off-bus"]


def test_feedback_precision_counts_each_users_latest_verdict(tmp_path: Path) -> None:
    s = open_store(tmp_path)
    ids = []
    for i in range(3):
        inc, _ = s.create_incident(origin="message", channel="C1", thread_ts=f"{i}.1")
        ids.append(inc.id)
    fb = [(ids[0], "U1", "right"), (ids[1], "U1", "right"), (ids[2], "U1", "right"),
          (ids[2], "U1", "wrong")]  # U1 changed their mind on the third incident
    for inc, user, verdict in fb:
        s.add_feedback(Feedback(incident_id=inc, version=1, user=user, signature="nccl-cuda-999", verdict=verdict))
    p = st.feedback_precision(s)[0]
    assert (p.signature, p.right, p.wrong) == ("nccl-cuda-999", 2, 1)


def test_retention_forgets_old_incidents_and_events(tmp_path: Path) -> None:
    clock = Clock()
    s = open_store(tmp_path, clock)
    old, _ = s.create_incident(origin="message", channel="C1", thread_ts="1.1")
    s.add_evidence(old.id, NewEvidence(kind="message", name="message", size=1, sha256="x", text="x"))
    s.add_diagnosis(old.id, trigger="initial", signature="s", confidence=0.5, report={}, answer={}, changes=[],
                    hosts=["h1"])
    s.claim_event("event:old")
    clock.t += 91 * 86400
    new, _ = s.create_incident(origin="message", channel="C1", thread_ts="2.1")
    s.claim_event("event:new")
    out = prune(s, retention_days=90)
    assert out.incidents == 1 and out.events == 1
    assert s.get_incident(old.id) is None and s.get_incident(new.id) is not None
    assert s.list_evidence(old.id) == []
    assert s.query("SELECT COUNT(*) AS n FROM incident_hosts")[0]["n"] == 0
    assert not s.claim_event("event:new") and s.claim_event("event:old")
