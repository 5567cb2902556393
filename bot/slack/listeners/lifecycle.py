"""The card's lifecycle controls (Acknowledge, Resolve, Snooze, Owner, Reopen) and the Resolve modal."""

from __future__ import annotations

import re
from typing import Any

from slack_bolt import Ack, App

from bot.service.inputs import Where

from ..ids import ActionId, BlockId, CallbackId
from ..payloads import lifecycle_in, resolve_in
from ..visibility import ConversationAccess
from .deps import Deps

LIFECYCLE_BLOCK = re.compile(f"^{BlockId.LIFECYCLE.value}:")


def register(app: App, deps: Deps) -> None:
    oncall = deps.service.oncall
    # `/diagnose list | search | status N` show incidents only from conversations the person may see.
    oncall.visible = ConversationAccess(deps.gateway.client).visible_channels

    def where_of(body: dict[str, Any], kind: str) -> Where:
        a = lifecycle_in(body, kind)
        thread = (body.get("message") or {}).get("thread_ts") or a.message_ts
        return Where(channel=a.channel, thread_ts=thread, user=a.user, response_url=body.get("response_url"))

    handlers = {ActionId.ACK: ("ack", oncall.acknowledge), ActionId.REOPEN: ("reopen", oncall.reopen),
                ActionId.SNOOZE: ("snooze", oncall.snooze_action), ActionId.OWNER: ("owner", oncall.set_owner)}

    def listener(kind: str, flow: Any) -> Any:
        def on_action(ack: Ack, body: dict[str, Any]) -> None:  # Bolt passes arguments by name: no defaults
            ack()
            deps.submit(flow, lifecycle_in(body, kind), where=where_of(body, kind))

        return on_action

    for action_id, (kind, flow) in handlers.items():
        # block_id "triage_lifecycle:<incident>": the user picker's incident travels there
        app.action({"action_id": action_id.value, "block_id": LIFECYCLE_BLOCK})(listener(kind, flow))

    @app.action({"action_id": ActionId.RESOLVE.value, "block_id": LIFECYCLE_BLOCK})
    def on_resolve(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        # views.open must follow the click within 3 s (trigger_id expiry): done here, not on the pool.
        a = lifecycle_in(body, "resolve")
        try:
            judged, choices = oncall.resolve_choices(a.incident_id)
            deps.gateway.open_resolve(body["trigger_id"], incident_id=a.incident_id, judged=judged, choices=choices,
                                      channel=a.channel, message_ts=a.message_ts)
        except Exception as exc:
            deps.errors.report(exc, where_of(body, "resolve"))

    @app.view(CallbackId.RESOLVE_MODAL.value)
    def on_resolve_submitted(ack: Ack, body: dict[str, Any]) -> None:
        r = resolve_in(body)
        ack()
        deps.submit(oncall.resolve, r, where=Where(channel=r.channel, user=r.user))
