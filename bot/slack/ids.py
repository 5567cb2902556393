"""Every action_id, callback_id and block_id that crosses Slack and back: one place, no stray literals."""

from __future__ import annotations

import enum


class ActionId(enum.StrEnum):
    RERUN_PROBES = "triage_rerun_probes"
    RIGHT = "triage_feedback_right"
    WRONG = "triage_feedback_wrong"
    SHOW_DETAILS = "triage_show_details"
    SHOW_EVIDENCE = "triage_show_evidence"  # the button of answers posted before "Show details"
    FULL_REPORT = "triage_full_report"
    ACK = "triage_ack"
    RESOLVE = "triage_resolve"
    REOPEN = "triage_reopen"
    SNOOZE = "triage_snooze"
    OWNER = "triage_owner"
    DRAIN_HOST = "triage_drain_host"
    HOST_REPAIRED = "triage_host_repaired"


class CallbackId(enum.StrEnum):
    WRONG_CAUSE_MODAL = "triage_wrong_cause"
    DIAGNOSE_SHORTCUT = "triage_diagnose_message"  # the message shortcut in deploy/slack/manifest.yaml
    RESOLVE_MODAL = "triage_resolve_modal"
    DRAIN_MODAL = "triage_drain_confirm"


class BlockId(enum.StrEnum):
    ACTIONS = "triage_actions"
    DETAILS_ACTIONS = "triage_details_actions"
    CAUSE_SELECT = "triage_cause_select"
    CAUSE_TEXT = "triage_cause_text"
    NOTE = "triage_note"
    LIFECYCLE = "triage_lifecycle"  # + ":<incident id>": a users_select carries no value of its own
    RESOLVE_SELECT = "triage_resolve_select"
    RESOLVE_TEXT = "triage_resolve_text"
    DRAIN_REASON = "triage_drain_reason"
    HOST_ACTIONS = "triage_host_actions"


class InputId(enum.StrEnum):
    CAUSE_SELECT = "cause_select"
    CAUSE_TEXT = "cause_text"
    NOTE = "note"
    RESOLVE_SELECT = "resolve_select"
    RESOLVE_TEXT = "resolve_text"
    DRAIN_REASON = "drain_reason"


SLASH_COMMAND = "/diagnose"
