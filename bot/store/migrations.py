"""Schema history of the incident store. Append new migrations; never edit an applied one."""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("triage")


@migrations()
def m001_initial(db: Database) -> None:
    db["incidents"].create(
        {
            "id": int,
            "created_at": float,  # unix seconds (UTC); easy range queries for retention and stats
            "updated_at": float,
            "origin": str,  # message | file | mention | slash | shortcut | webhook
            "team": str,
            "channel": str,
            "thread_ts": str,  # the thread the incident lives in
            "summary_ts": str,  # the bot's diagnosis message in that thread (chat.update target)
            "headline_ts": str,  # channel message for /diagnose and webhook incidents
            "requester": str,
            "subject": str,  # the headline's subject ("Job 1234 (train) FAILED ...", "Log pasted by <@U1>")
            "job_id": str,
            "job_json": str,
            "hosts": str,  # JSON list
            "state": str,  # diagnosing | open | no-failure | error
            "signature": str,
            "confidence": float,
            "version": int,
            "hook_event_id": str,
        },
        pk="id",
    )
    db["incidents"].create_index(["channel", "thread_ts"], unique=True)
    db["incidents"].create_index(["hook_event_id"], unique=True)
    db["incidents"].create_index(["created_at"])

    db["evidence"].create(
        {
            "id": int,
            "incident_id": int,
            "created_at": float,
            "kind": str,  # message | reply | file | slash | shortcut | job-log | verdict
            "name": str,  # the source name the engine and the answer show ("message", "rank3.log")
            "author": str,
            "ref": str,  # JSON: where to fetch it again (Slack file id, message ts, job log path)
            "size": int,
            "sha256": str,
            "redactions": int,
            "content": bytes,  # zlib(redacted UTF-8 text) for items up to the store cap, else NULL
            "excerpt": str,  # redacted matched lines with context, for items too big to keep whole
        },
        pk="id",
        foreign_keys=[("incident_id", "incidents", "id")],
    )
    db["evidence"].create_index(["incident_id"])

    db["diagnoses"].create(
        {
            "id": int,
            "incident_id": int,
            "version": int,
            "created_at": float,
            "trigger": str,  # initial | follow-up | mention | probes
            "signature": str,
            "confidence": float,
            "report_json": str,  # redacted Report.to_dict()
            "answer_json": str,  # the rendered answer's data, to re-render on feedback without the engine
            "changes": str,  # JSON list of "what changed" lines versus the previous version
        },
        pk="id",
        foreign_keys=[("incident_id", "incidents", "id")],
    )
    db["diagnoses"].create_index(["incident_id", "version"], unique=True)

    db["probe_runs"].create(
        {
            "id": int,
            "incident_id": int,
            "created_at": float,
            "hosts": str,
            "duration_s": float,
            "results_json": str,
            "error": str,
        },
        pk="id",
        foreign_keys=[("incident_id", "incidents", "id")],
    )
    db["probe_runs"].create_index(["incident_id"])

    db["feedback"].create(
        {
            "id": int,
            "incident_id": int,
            "version": int,
            "created_at": float,
            "user": str,
            "signature": str,  # the diagnosis that was judged
            "verdict": str,  # right | wrong
            "correct_signature": str,
            "correct_text": str,
            "note": str,
        },
        pk="id",
        foreign_keys=[("incident_id", "incidents", "id")],
    )
    db["feedback"].create_index(["incident_id"])
    db["feedback"].create_index(["signature"])

    db["incident_hosts"].create(
        {"incident_id": int, "host": str, "signature": str, "created_at": float},
        pk=("incident_id", "host"),
        foreign_keys=[("incident_id", "incidents", "id")],
    )
    db["incident_hosts"].create_index(["host", "created_at"])

    # Slack retries an event (same event_id, X-Slack-Retry-Num) when it did not see a 200 in 3 s;
    # one row per key makes "process once" an atomic INSERT OR IGNORE.
    db["processed_events"].create({"key": str, "created_at": float}, pk="key")
    db["processed_events"].create_index(["created_at"])
