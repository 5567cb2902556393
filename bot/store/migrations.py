"""Schema history of the incident store. Append new migrations; never edit an applied one."""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("triage")


@migrations()
def m001_initial(db: Database) -> None:
    db.table("incidents").create(
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
    db.table("incidents").create_index(["channel", "thread_ts"], unique=True)
    db.table("incidents").create_index(["hook_event_id"], unique=True)
    db.table("incidents").create_index(["created_at"])

    db.table("evidence").create(
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
    db.table("evidence").create_index(["incident_id"])

    db.table("diagnoses").create(
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
    db.table("diagnoses").create_index(["incident_id", "version"], unique=True)

    db.table("probe_runs").create(
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
    db.table("probe_runs").create_index(["incident_id"])

    db.table("feedback").create(
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
    db.table("feedback").create_index(["incident_id"])
    db.table("feedback").create_index(["signature"])

    db.table("incident_hosts").create(
        {"incident_id": int, "host": str, "signature": str, "created_at": float},
        pk=("incident_id", "host"),
        foreign_keys=[("incident_id", "incidents", "id")],
    )
    db.table("incident_hosts").create_index(["host", "created_at"])

    # Slack retries an event (same event_id, X-Slack-Retry-Num) when it did not see a 200 in 3 s;
    # one row per key makes "process once" an atomic INSERT OR IGNORE.
    db.table("processed_events").create({"key": str, "created_at": float}, pk="key")
    db.table("processed_events").create_index(["created_at"])


@migrations()
def m002_work_and_outbox(db: Database) -> None:
    # Durable work: every accepted event, command and webhook is a row here before Slack (or the
    # scheduler) hears "accepted". Workers claim a row with a lease; a row whose lease ran out (its
    # worker died) is claimed again; rows left queued or running at a crash resume at the next start.
    db.table("work").create(
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
    db.table("work").create_index(["key"], unique=True)
    db.table("work").create_index(["state", "lease_until"])
    db.table("work").create_index(["fingerprint", "created_at"])
    # The card on Slack: which diagnosis version the summary message shows. A chat.update that
    # failed for good leaves it behind incidents.version; the repair sweep and the next touch of the
    # incident bring it up to date from the store.
    db.table("incidents").add_column("card_version", int)


@migrations()
def m003_lifecycle_grouping_mutes(db: Database) -> None:
    # Incident lifecycle (issue 16): who acknowledged it, who owns it, who resolved it with which
    # confirmed cause, until when it is snoozed; and the group it collects (one job's array tasks
    # or het components, one host's failures in a window, or a partition's storm).
    for name, kind in (("group_key", str), ("acked_by", str), ("acked_at", float), ("owner", str),
                       ("resolved_by", str), ("resolved_at", float), ("resolution", str),
                       ("snoozed_until", float), ("partition", str), ("cluster", str)):
        db.table("incidents").add_column(name, kind)
    db.table("incidents").create_index(["group_key", "created_at"])
    db.table("incidents").create_index(["partition", "created_at"])
    # One row per scheduler event an incident collects (the first one included): a retried event
    # is known by its event_id; a storm's table and `/diagnose search` read the jobs and hosts here.
    db.table("incident_members").create(
        {
            "id": int,
            "incident_id": int,
            "event_id": str,
            "job_id": str,
            "job_json": str,  # the webhook fields (JobEvent.to_dict)
            "hosts": str,  # JSON list
            "state": str,  # the job's state (FAILED, NODE_FAIL, ...)
            "signature": str,  # storms: the member's own diagnosis, once known
            "created_at": float,
        },
        pk="id",
        foreign_keys=[("incident_id", "incidents", "id")],
    )
    db.table("incident_members").create_index(["event_id"], unique=True)
    db.table("incident_members").create_index(["incident_id"])
    # Mutes: no posts for a signature, host or job pattern until expires_at.
    db.table("mutes").create(
        {
            "id": int,
            "kind": str,  # signature | host | job
            "spec": str,  # what the person typed ("gpu[01-04]", "nccl-*", "1234")
            "patterns": str,  # JSON list of shell-style globs the spec expands to
            "created_by": str,
            "channel": str,
            "reason": str,
            "created_at": float,
            "expires_at": float,
            "ended_at": float,  # unmuted before it expired
            "suppressed": int,  # posts it held back
        },
        pk="id",
    )
    db.table("mutes").create_index(["expires_at"])


@migrations()
def m004_host_actions(db: Database) -> None:
    # The audit of what the bot did to a host on someone's say-so (issue 16): a drain approved in
    # Slack, "Host repaired" (resume). The latest successful repair is where a host's recurrence
    # count starts again (bot.store.stats.host_recurrence).
    db.table("host_actions").create(
        {
            "id": int,
            "created_at": float,
            "host": str,
            "action": str,  # drain | repaired
            "user": str,  # the Slack user who approved it
            "reason": str,  # the drain reason as Slurm stored it
            "incident_id": int,  # the incident whose button it was
            "channel": str,
            "thread_ts": str,
            "ok": int,  # 1: done; 0: the scheduler refused (error says why)
            "command": str,  # JSON argv that ran, if any
            "node_state": str,  # the node's state read back afterwards
            "closed": str,  # JSON list of incident ids a repair closed
            "error": str,
        },
        pk="id",
    )
    db.table("host_actions").create_index(["host", "action", "created_at"])
    db.table("host_actions").create_index(["incident_id"])
