"""Rows as the rest of the bot sees them (dataclasses at the store's boundary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Incident:
    id: int
    created_at: float
    updated_at: float
    origin: str
    channel: str | None
    thread_ts: str | None
    summary_ts: str | None = None
    headline_ts: str | None = None
    team: str | None = None
    requester: str | None = None
    subject: str | None = None
    job_id: str | None = None
    job: dict[str, Any] | None = None
    hosts: list[str] = field(default_factory=list)
    state: str = "diagnosing"
    signature: str | None = None
    confidence: float | None = None
    version: int = 0
    hook_event_id: str | None = None
    card_version: int | None = None
    # lifecycle and grouping (m003)
    group_key: str | None = None
    acked_by: str | None = None
    acked_at: float | None = None
    owner: str | None = None
    resolved_by: str | None = None
    resolved_at: float | None = None
    resolution: str | None = None
    snoozed_until: float | None = None
    partition: str | None = None
    cluster: str | None = None


@dataclass
class NewEvidence:
    """One evidence item to keep: the text is redacted already (the store never sees a secret)."""

    kind: str
    name: str
    size: int
    sha256: str
    redactions: int = 0
    text: str | None = None  # whole redacted text when small enough to keep
    excerpt: str | None = None  # redacted matched lines when the item is too big to keep whole
    author: str | None = None
    ref: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvidenceRecord:
    id: int
    incident_id: int
    created_at: float
    kind: str
    name: str
    size: int
    sha256: str
    redactions: int
    text: str | None
    excerpt: str | None
    author: str | None
    ref: dict[str, Any]


@dataclass
class DiagnosisRecord:
    incident_id: int
    version: int
    created_at: float
    trigger: str
    signature: str | None
    confidence: float | None
    report: dict[str, Any]
    answer: dict[str, Any]
    changes: list[str]


@dataclass
class Feedback:
    incident_id: int
    version: int
    user: str
    signature: str | None
    verdict: str  # right | wrong
    correct_signature: str | None = None
    correct_text: str | None = None
    note: str | None = None
    created_at: float = 0.0


# Pasted logs are members too (bot.service.grouping.PasteGrouping): one row per top-level message, so
# the message's thread leads to the incident it joined. The shortcut and edits are never grouped.
PASTE_ORIGINS = ("message", "file", "mention", "bot")
PASTE_PREFIX = "slack-paste:"


def paste_member_id(channel: str, ts: str) -> str:
    return f"{PASTE_PREFIX}{channel}:{ts}"
