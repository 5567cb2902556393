"""`/diagnose` and the "Diagnose this message" shortcut."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App

from bot.service.commands import HELP
from bot.service.inputs import Where

from ..ids import SLASH_COMMAND, CallbackId
from ..payloads import shortcut_message, slash_in
from .deps import Deps


def register(app: App, deps: Deps) -> None:
    @app.command(SLASH_COMMAND)
    def on_diagnose(ack: Ack, body: dict[str, Any]) -> None:
        cmd = slash_in(body)
        if not cmd.text.strip() or cmd.text.strip().lower() in ("help", "-h", "--help"):
            ack(text=HELP)
            return
        ack()
        where = Where(channel=cmd.channel, user=cmd.user, response_url=cmd.response_url)
        deps.submit(deps.service.slash.on_slash, cmd, where, where=where)

    @app.shortcut(CallbackId.DIAGNOSE_SHORTCUT.value)
    def on_shortcut(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        msg = shortcut_message(body)
        user = (body.get("user") or {}).get("id", "")
        where = Where(channel=msg.channel, thread_ts=msg.root, user=user, response_url=body.get("response_url"))
        deps.submit(deps.service.chat.on_shortcut, msg, user, body.get("response_url"), where=where)
