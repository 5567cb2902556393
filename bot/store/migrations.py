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


@migrations()
def m002_work_and_outbox(db: Database) -> None:
    # Durable work: every accepted event, command and webhook is a row here before Slack (or the
    # scheduler) hears "accepted". Workers claim a row with a lease; a row whose lease ran out (its
    # worker died) is claimed again; rows left queued or running at a crash resume at the next start.
    db["work"].create(
        {
            "id": int,
            "key": str,  # unique: Slack's event_id / the command's trigger / the webhook's event_id
            "kind": str,  # message | edit | bot_post | mention | shortcut | slash | hook
            "payload": str,  # JSON arguments of the flow
            "fingerprint": str,  # slash commands: team+channel+user+text, for the duplicate window
            "state": str,  # queued | running | done | failed
            "attempts": int,
            "lease_until": float,
            "created_at": float,
            "updated_at": float,
            "error": str,
        },
        pk="id",
    )
    db["work"].create_index(["key"], unique=True)
    db["work"].create_index(["state", "lease_until"])
    db["work"].create_index(["fingerprint", "created_at"])
    # The card on Slack: which diagnosis version the summary message shows. A chat.update that
    # failed for good leaves it behind incidents.version; the repair sweep and the next touch of the
    # incident bring it up to date from the store.
    db["incidents"].add_column("card_version", int)
