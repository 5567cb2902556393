"""Global middleware: process each Slack event once, whatever Slack retries."""

from __future__ import annotations

import logging
from collections.abc import Callable

from slack_bolt import BoltRequest, BoltResponse

from bot.store import Store

log = logging.getLogger(__name__)


def dedupe_events(store: Store) -> Callable[..., BoltResponse | None]:
    """Slack re-sends an event (same event_id, X-Slack-Retry-Num: n) when it did not see our 200 in
    3 s or got a 5xx. A delivery whose work is queued already (its event id is stored with the work
    item, bot.service.work) is acked and dropped; one that never got that far (the bot died before
    committing it) runs again, so a retry is never dropped for work that was lost."""

    def middleware(req: BoltRequest, resp: BoltResponse, next: Callable[[], None]) -> BoltResponse | None:
        body = req.body or {}
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if event_id and store.seen_event(f"event:{event_id}"):
            retry = (req.headers.get("x-slack-retry-num") or [""])[0]
            log.info("dropping duplicate delivery of %s (retry %s)", event_id, retry or "-")
            return BoltResponse(status=200, body="")
        next()
        return None

    return middleware
