"""Events API: messages (pastes, files, thread replies), @mentions, the App Home tab."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import App, BoltContext

from bot.service.inputs import Where

from ..payloads import message_in
from .deps import Deps

log = logging.getLogger(__name__)

# Message subtypes that carry something a person wrote; edits, joins, deletions, bot posts do not.
HANDLED_SUBTYPES = {None, "file_share", "thread_broadcast"}


def register(app: App, deps: Deps) -> None:
    store = deps.service.store

    @app.event("message")
    def on_message(event: dict[str, Any], body: dict[str, Any], context: BoltContext) -> None:
        if event.get("subtype") not in HANDLED_SUBTYPES or event.get("bot_id") or event.get("bot_profile"):
            return
        user = event.get("user")
        if not user or user == context.bot_user_id:
            return
        if context.bot_user_id and f"<@{context.bot_user_id}>" in (event.get("text") or "") \
                and event.get("channel_type") != "im":
            return  # the app_mention event for the same message handles it
        if not (event.get("text") or "").strip() and not event.get("files"):
            return
        msg = message_in(event, body.get("team_id"))
        if not store.claim_event(f"msg:{msg.channel}:{msg.ts}"):
            return
        deps.submit(deps.service.chat.on_message, msg,
                    where=Where(msg.channel, msg.root, msg.user), explicit=msg.channel_type == "im")

    @app.event("app_mention")
    def on_mention(event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("bot_id"):
            return
        msg = message_in(event, body.get("team_id"))
        if not store.claim_event(f"mention:{msg.channel}:{msg.ts}"):
            return
        deps.submit(deps.service.chat.on_mention, msg, where=Where(msg.channel, msg.root, msg.user))

    @app.event("app_home_opened")
    def on_home(event: dict[str, Any]) -> None:
        if event.get("tab") not in (None, "home"):
            return
        user = event["user"]

        def publish() -> None:
            deps.gateway.publish_home(user, deps.service.feedback.home())

        deps.submit(publish, where=Where(user=user), explicit=False)

    @app.event("file_shared")
    def on_file_shared() -> None:
        """Files are diagnosed from their message (subtype file_share), which carries the thread."""
