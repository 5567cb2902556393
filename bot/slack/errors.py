"""One error handler: whatever fails, the person who asked reads what went wrong, in the thread.

Known failures (a file too big, no job source, the bot not in the channel, Slack missing a scope)
get their own sentence; anything else gets a short reference that matches a traceback in the log.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.jobs import JobSourceError
from bot.service.answer import esc
from bot.service.errors import UserFacingError
from bot.service.inputs import Where
from bot.service.pool import PoolBusy

log = logging.getLogger(__name__)

SLACK_ERRORS = {
    "not_in_channel": "I am not a member of this channel. Invite me with `/invite @GPU Triage` and try again.",
    "channel_not_found": "I cannot see this channel. Invite me with `/invite @GPU Triage` and try again.",
    "is_archived": "This channel is archived.",
    "missing_scope": "My Slack app lacks a permission ({needed}). An admin can add it from deploy/slack/manifest.yaml "
                     "and reinstall the app.",
    "ratelimited": "Slack is rate-limiting me right now; try again in a minute.",
    "file_not_found": "Slack says that file no longer exists.",
    "msg_too_long": "The answer was too long for Slack (a bug: please report it).",
    "invalid_blocks": "Slack refused the answer's layout (a bug: please report it).",
}


def message_for(exc: BaseException) -> tuple[str, bool]:
    """(text for the user, whether it is an expected failure that needs no traceback in the log)."""
    if isinstance(exc, (UserFacingError, JobSourceError)):
        return esc(str(exc)), True
    if isinstance(exc, PoolBusy):
        return f"I am busy ({esc(str(exc))}). Try again in a minute.", True
    if isinstance(exc, SlackApiError):
        code = exc.response.get("error", "") if exc.response is not None else ""
        text = SLACK_ERRORS.get(code)
        if text:
            return text.format(needed=exc.response.get("needed", "see the log")), True
        ref = uuid.uuid4().hex[:8]
        return f"Slack refused a call ({esc(code or 'unknown error')}; ref `{ref}`).", False
    ref = uuid.uuid4().hex[:8]
    return f"Something went wrong on my side (ref `{ref}`, details in the bot's log).", False


class ErrorReporter:
    """Tells the user in the thread; falls back to the response_url or an ephemeral message."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway

    def report(self, exc: BaseException, where: Where | None) -> None:
        text, expected = message_for(exc)
        if expected:
            log.info("user-facing error: %s", exc)
        else:
            log.error("unexpected error (%s)", text, exc_info=exc)
        if where is None:
            return
        body = f":warning: I could not finish: {text}"
        if where.channel:
            try:
                self.gateway.post_notice(where.channel, where.thread_ts, body)
                return
            except Exception as post_exc:  # e.g. not_in_channel: try the other ways below
                log.info("could not post the error in the thread: %s", post_exc)
        if where.response_url:
            try:
                self.gateway.respond(where.response_url, body)
                return
            except Exception as post_exc:
                log.info("could not respond via response_url: %s", post_exc)
        if where.channel and where.user:
            try:
                self.gateway.post_ephemeral(where.channel, where.user, body, thread_ts=where.thread_ts)
            except Exception as post_exc:
                log.warning("could not tell the user about an error: %s", post_exc)
