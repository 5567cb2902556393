"""What listeners need, passed in when they are registered (no globals)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.service import TriageService
from bot.service.inputs import Where
from bot.service.pool import PoolBusy

from ..errors import ErrorReporter
from ..gateway import SlackGateway

log = logging.getLogger(__name__)


@dataclass
class Deps:
    service: TriageService
    gateway: SlackGateway
    errors: ErrorReporter
    bot_sources: frozenset[str] = frozenset()  # TRIAGE_BOT_SOURCES: channels and bot ids whose bot posts are diagnosed

    def watches(self, channel: str | None, bot_id: str | None) -> bool:
        return bool(channel and channel in self.bot_sources or bot_id and bot_id in self.bot_sources)

    def enqueue(self, kind: str, payload: dict[str, Any], keys: Sequence[str | None], *, where: Where, explicit: bool = True,
                fingerprint: str | None = None, window_s: float = 0) -> bool:
        """Commit durable work before the ack leaves (the listener returns before Bolt answers Slack).
        False for a duplicate (Slack's retry, a replayed request); a full queue is told to the user."""
        try:
            return self.service.work.submit(kind, payload, [k for k in keys if k], fingerprint=fingerprint,
                                            window_s=window_s) is not None
        except PoolBusy as exc:
            if explicit:
                self.errors.report(exc, where)
            else:
                log.warning("dropped a passive message: %s", exc)
            return False

    def submit(self, fn: Callable[..., Any], *args: Any, where: Where, explicit: bool = True) -> None:
        """Run `fn` on the worker pool; if the pool is full, tell the user (when they asked us)."""
        try:
            self.service.pool.submit(fn, *args, where=where)
        except PoolBusy as exc:
            if explicit:
                self.errors.report(exc, where)
            else:
                log.warning("dropped a passive message: %s", exc)
