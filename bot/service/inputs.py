"""What the Slack listeners hand to the service: plain dataclasses, parsed from Slack payloads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FileRef:
    id: str
    name: str
    size: int | None = None
    mimetype: str | None = None
    filetype: str | None = None
    url: str | None = None  # url_private_download


@dataclass
class MessageIn:
    channel: str
    ts: str
    user: str | None
    text: str = ""
    thread_ts: str | None = None
    files: list[FileRef] = field(default_factory=list)
    channel_type: str | None = None  # channel | group | im | mpim
    team: str | None = None

    @property
    def root(self) -> str:
        """The thread this message belongs to (itself when top-level)."""
        return self.thread_ts or self.ts

    @property
    def is_reply(self) -> bool:
        return bool(self.thread_ts) and self.thread_ts != self.ts


@dataclass
class SlashIn:
    channel: str
    user: str
    text: str
    response_url: str | None = None
    team: str | None = None


@dataclass
class ActionIn:
    incident_id: int
    version: int
    user: str
    channel: str
    message_ts: str
    response_url: str | None = None


@dataclass
class WrongCauseIn:
    incident_id: int
    version: int
    user: str
    channel: str
    message_ts: str
    signature: str | None
    text: str | None
    note: str | None


@dataclass
class Where:
    """Where to tell the user that something went wrong."""

    channel: str | None = None
    thread_ts: str | None = None
    user: str | None = None
    response_url: str | None = None


@dataclass
class DrainIn:
    """The drain confirmation modal, submitted: who confirmed which incident's drain, with what reason."""

    incident_id: int
    version: int
    user: str
    channel: str
    message_ts: str
    reason: str


@dataclass
class LifecycleIn:
    """A lifecycle control on the card: Acknowledge, Snooze (value: seconds), Owner (value: a user id), Reopen."""

    incident_id: int
    user: str
    channel: str
    message_ts: str
    kind: str  # ack | snooze | owner | reopen | resolve
    value: str | None = None


@dataclass
class ResolveIn:
    """The Resolve modal, submitted: the confirmed cause (a signature, a description, or both)."""

    incident_id: int
    user: str
    channel: str
    message_ts: str
    signature: str | None
    text: str | None
