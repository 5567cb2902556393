"""The answer's buttons, the Wrong-cause modal, and Drain host / Host repaired."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from slack_bolt import Ack, App

from bot.service.drain import NotAllowed
from bot.service.inputs import Where

from ..ids import ActionId, BlockId, CallbackId
from ..payloads import action_in, drain_in, wrong_cause_in
from .deps import Deps


def register(app: App, deps: Deps) -> None:
    flows = deps.service.feedback
    drain = deps.service.drain
    assert drain is not None

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

    # -- the human-approved drain (bot.service.drain) ---------------------------------------------

    def refuse(body: dict[str, Any], exc: Exception) -> None:
        """Someone who may not drain is told so privately; anything else goes to the error handler."""
        w = where_of(body)
        if isinstance(exc, NotAllowed) and w.channel and w.user:
            deps.submit(deps.gateway.post_ephemeral, w.channel, w.user, f":no_entry_sign: {exc}", w.thread_ts,
                        where=w)
        else:
            deps.errors.report(exc, w)

    @app.action(ActionId.DRAIN_HOST.value)
    def on_drain(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        # Who may confirm is checked before the modal opens (and again on submit and when it runs);
        # views.open must follow the click within 3 s, so it is done here, not on the pool.
        try:
            deps.gateway.open_drain_modal(body["trigger_id"], drain.form(action_in(body)))
        except Exception as exc:
            refuse(body, exc)

    @app.view(CallbackId.DRAIN_MODAL.value)
    def on_drain_submitted(ack: Ack, body: dict[str, Any]) -> None:
        d = drain_in(body)
        problem = drain.submission_problem(d)
        if problem:
            ack(response_action="errors", errors={BlockId.DRAIN_REASON.value: problem[:150]})
            return
        ack()
        incident = deps.service.store.get_incident(d.incident_id)
        thread = incident.thread_ts if incident else None
        deps.enqueue("drain", {"drain": asdict(d), "thread_ts": thread},
                     [f"drain:{(body.get('view') or {}).get('id') or body.get('trigger_id')}"],
                     where=Where(channel=d.channel, thread_ts=thread, user=d.user))

    @app.action(ActionId.HOST_REPAIRED.value)
    def on_repaired(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        a = action_in(body)
        try:
            drain.check_repair(a)
        except Exception as exc:
            refuse(body, exc)
            return
        w = where_of(body)
        deps.enqueue("repaired", {"action": asdict(a), "thread_ts": w.thread_ts},
                     [f"repaired:{body.get('trigger_id') or a.message_ts}"], where=w)
