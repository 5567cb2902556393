"""Events API: messages (pastes, files, thread replies), @mentions, the App Home tab."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import App, BoltContext

from bot.service import message_to_dict
from bot.service.inputs import Where

from ..payloads import bot_id_of, message_in
from ..visibility import ConversationAccess
from .deps import Deps

log = logging.getLogger(__name__)

# Message subtypes that carry something a person wrote; edits, joins, deletions do not. Bot posts
# are read only from the channels and bots TRIAGE_BOT_SOURCES names.
HANDLED_SUBTYPES = {None, "file_share", "thread_broadcast"}
BOT_SUBTYPES = {None, "bot_message", "file_share", "thread_broadcast"}


def event_key(body: dict[str, Any]) -> str | None:
    """Slack's id of one event delivery (the same on each of its retries)."""
    return f"event:{body['event_id']}" if body.get("event_id") else None


def register(app: App, deps: Deps) -> None:
    access = ConversationAccess(deps.gateway.client)  # App Home: who may see which conversation's incidents

    @app.event("message")
    def on_message(event: dict[str, Any], body: dict[str, Any], context: BoltContext) -> None:
        if event.get("subtype") == "message_changed":
            on_edit(event, body, context)
            return
        bot_id = bot_id_of(event)
        if bot_id or event.get("subtype") == "bot_message":
            on_bot_post(event, body, context, bot_id)
            return
        if event.get("subtype") not in HANDLED_SUBTYPES:
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
        explicit = msg.channel_type == "im"
        deps.enqueue("message", {"msg": message_to_dict(msg), "explicit": explicit},
                     [f"msg:{msg.channel}:{msg.ts}", event_key(body)], where=Where(msg.channel, msg.root, msg.user),
                     explicit=explicit)

    def on_edit(event: dict[str, Any], body: dict[str, Any], context: BoltContext) -> None:
        """`message_changed`: the edited message is read again (its new text is the evidence now)."""
        inner = dict(event.get("message") or {})
        user = inner.get("user")
        if not user or user == context.bot_user_id or bot_id_of(inner) or inner.get("subtype") == "bot_message":
            return
        if (inner.get("text") or "") == ((event.get("previous_message") or {}).get("text") or ""):
            return  # an unfurl or a file change: the text is the same
        inner.setdefault("channel", event.get("channel"))
        inner.setdefault("channel_type", event.get("channel_type"))
        inner.pop("files", None)  # files were read with the message itself
        msg = message_in(inner, body.get("team_id"))
        edited = (inner.get("edited") or {}).get("ts") or event.get("event_ts") or event.get("ts")
        if not msg.ts:
            return
        deps.enqueue("edit", {"msg": message_to_dict(msg)}, [f"edit:{msg.channel}:{msg.ts}:{edited}", event_key(body)],
                     where=Where(msg.channel, msg.root, msg.user), explicit=False)

    def on_bot_post(event: dict[str, Any], body: dict[str, Any], context: BoltContext, bot_id: str | None) -> None:
        if event.get("subtype") not in BOT_SUBTYPES or not deps.watches(event.get("channel"), bot_id):
            return
        if bot_id and bot_id == (context.bot_id or deps.gateway.identity().get("bot_id")):
            return  # the bot's own answers
        if event.get("user") and event.get("user") == context.bot_user_id:
            return
        msg = message_in(event, body.get("team_id"), bot=True)
        if not msg.text.strip() and not msg.files:
            return
        deps.enqueue("bot_post", {"msg": message_to_dict(msg)}, [f"msg:{msg.channel}:{msg.ts}", event_key(body)],
                     where=Where(msg.channel, msg.root, None), explicit=False)

    @app.event("app_mention")
    def on_mention(event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("bot_id"):
            return
        msg = message_in(event, body.get("team_id"))
        deps.enqueue("mention", {"msg": message_to_dict(msg), "explicit": True},
                     [f"mention:{msg.channel}:{msg.ts}", event_key(body)], where=Where(msg.channel, msg.root, msg.user))

    @app.event("app_home_opened")
    def on_home(event: dict[str, Any]) -> None:
        if event.get("tab") not in (None, "home"):
            return
        user = event["user"]

        def publish() -> None:
            deps.gateway.publish_home(user, deps.service.feedback.home(user, access.visible_channels))

        deps.submit(publish, where=Where(user=user), explicit=False)

    @app.event("file_shared")
    def on_file_shared() -> None:
        """Files are diagnosed from their message (subtype file_share), which carries the thread."""
