"""`/diagnose` and the "Diagnose this message" shortcut."""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from typing import Any

from slack_bolt import Ack, App, BoltRequest

from bot.service import message_to_dict
from bot.service.commands import HELP
from bot.service.inputs import Where
from bot.service.work import SLASH_WINDOW_S

from ..ids import SLASH_COMMAND, CallbackId
from ..payloads import shortcut_message, slash_in
from .deps import Deps


def register(app: App, deps: Deps) -> None:
    @app.command(SLASH_COMMAND)
    def on_diagnose(ack: Ack, body: dict[str, Any], request: BoltRequest) -> None:
        cmd = slash_in(body)
        if not cmd.text.strip() or cmd.text.strip().lower() in ("help", "-h", "--help"):
            ack(text=HELP)
            return
        ack()
        where = Where(channel=cmd.channel, user=cmd.user, response_url=cmd.response_url)
        # Twice the same signed request (a replay, a double submit) is one command: its trigger id
        # and request timestamp say so; the same text from the same person in the same channel
        # within SLASH_WINDOW_S is one command too.
        fp = hashlib.sha256("\0".join([cmd.team or "", cmd.channel, cmd.user, cmd.text.strip()]).encode()).hexdigest()
        stamp = (request.headers.get("x-slack-request-timestamp") or [""])[0]
        keys = [f"slash:{fp}:{stamp}", f"slash-trigger:{body['trigger_id']}" if body.get("trigger_id") else None]
        deps.enqueue("slash", {"cmd": asdict(cmd)}, keys, where=where, fingerprint=fp, window_s=SLASH_WINDOW_S)

    @app.shortcut(CallbackId.DIAGNOSE_SHORTCUT.value)
    def on_shortcut(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        msg = shortcut_message(body)
        user = (body.get("user") or {}).get("id", "")
        where = Where(channel=msg.channel, thread_ts=msg.root, user=user, response_url=body.get("response_url"))
        keys = [f"shortcut:{body['trigger_id']}" if body.get("trigger_id") else f"shortcut:{user}:{msg.channel}:{msg.ts}"]
        deps.enqueue("shortcut", {"msg": message_to_dict(msg), "user": user, "response_url": body.get("response_url")},
                     keys, where=where)
