"""The answer's buttons and the Wrong-cause modal."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App

from bot.service.inputs import Where

from ..ids import ActionId, BlockId, CallbackId
from ..payloads import action_in, wrong_cause_in
from .deps import Deps


def register(app: App, deps: Deps) -> None:
    flows = deps.service.feedback

    def where_of(body: dict[str, Any]) -> Where:
        a = action_in(body)
        thread = (body.get("message") or {}).get("thread_ts") or a.message_ts
        return Where(channel=a.channel, thread_ts=thread, user=a.user, response_url=a.response_url)

    @app.action(ActionId.RIGHT.value)
    def on_right(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        deps.submit(flows.right, action_in(body), where=where_of(body))

    @app.action(ActionId.SHOW_DETAILS.value)
    @app.action(ActionId.SHOW_EVIDENCE.value)  # answers posted before "Show details" existed
    def on_show_details(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        deps.submit(flows.show_details, action_in(body), where=where_of(body))

    @app.action(ActionId.FULL_REPORT.value)
    def on_full_report(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        deps.submit(flows.full_report, action_in(body), where=where_of(body))

    @app.action(ActionId.RERUN_PROBES.value)
    def on_rerun(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        deps.submit(flows.rerun_probes, action_in(body), where=where_of(body))

    @app.action(ActionId.WRONG.value)
    def on_wrong(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        # views.open must follow the click within 3 s (trigger_id expiry): done here, not on the pool.
        a = action_in(body)
        try:
            judged, choices = flows.wrong_cause_choices(a.incident_id, a.version)
            deps.gateway.open_wrong_cause(body["trigger_id"], incident_id=a.incident_id, version=a.version,
                                          judged=judged, choices=choices, channel=a.channel, message_ts=a.message_ts)
        except Exception as exc:
            deps.errors.report(exc, where_of(body))

    @app.view(CallbackId.WRONG_CAUSE_MODAL.value)
    def on_wrong_submitted(ack: Ack, body: dict[str, Any]) -> None:
        w = wrong_cause_in(body)
        if not w.signature and not (w.text or "").strip():
            ack(response_action="errors",
                errors={BlockId.CAUSE_TEXT.value: "Pick a known failure above or describe the cause here."})
            return
        ack()
        deps.submit(flows.wrong, w, where=Where(channel=w.channel, user=w.user))
