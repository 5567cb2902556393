"""build_app(settings, deps): the Bolt app with every listener and the one error handler."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from slack_bolt import App, BoltResponse

from bot.service.inputs import Where

from .listeners import Deps, register_listeners
from .settings import Settings

log = logging.getLogger(__name__)

# Listener bodies only parse, ack() and hand work to the service's pool, so a few threads answer
# Slack within milliseconds even while every worker is busy diagnosing.
LISTENER_THREADS = 8


def where_from_body(body: dict[str, Any]) -> Where:
    """Best guess of where the person who triggered `body` is looking."""
    event = body.get("event") or {}
    channel = event.get("channel") or (body.get("channel") or {}).get("id") or body.get("channel_id")
    thread = event.get("thread_ts") or event.get("ts") or (body.get("message") or {}).get("thread_ts") \
        or (body.get("message") or {}).get("ts")
    user = event.get("user") or (body.get("user") or {}).get("id") or body.get("user_id")
    return Where(channel=channel, thread_ts=thread, user=user, response_url=body.get("response_url"))


def build_app(settings: Settings, deps: Deps) -> App:
    app = App(
        client=deps.gateway.client,  # carries the bot token, the base URL and the retry handlers
        signing_secret=settings.signing_secret,
        # Socket Mode requests arrive over the app-token websocket and carry no signature.
        request_verification_enabled=settings.signing_secret is not None,
        # The listener runs before Bolt answers: it commits the work item (bot.service.work) and
        # only then does the ack leave, so nothing Slack was told "received" is lost in a crash.
        process_before_response=True,
        listener_executor=ThreadPoolExecutor(max_workers=LISTENER_THREADS, thread_name_prefix="bolt-listener"),
        logger=logging.getLogger("bot.slack.bolt"),
    )
    register_listeners(app, deps)

    @app.error
    def on_error(error: Exception, body: dict[str, Any]) -> BoltResponse | None:
        deps.errors.report(error, where_from_body(body or {}))
        return None

    return app
