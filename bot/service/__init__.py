"""The incident workflow between Slack, the store, the engine, the probes and the job sources.

Listeners in bot/slack parse payloads into bot.service.inputs dataclasses and hand them to these
flows on the worker pool; the flows never see a Slack payload and never build Block Kit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bot.jobs import JobSource
from bot.store import Store

from .alertmanager import AlertFlows, AlertHooks
from .chat import ChatFlows
from .commands import SlashFlows
from .drain import Approvers, DrainFlows
from .feedback import FeedbackFlows
from .grouping import Grouping, GroupingSettings, PasteGrouping
from .hooks import JobHooks
from .inputs import FileRef, MessageIn, SlashIn, Where
from .jobs import JobFlows
from .lifecycle import Lifecycle
from .oncall import OnCallFlows
from .people import People
from .pool import BoundedPool
from .probing import Prober
from .routing import Routes
from .work import WorkQueue
from .workflow import Chat, Limits, Workflow


@dataclass
class TriageService:
    wf: Workflow
    chat: ChatFlows
    slash: SlashFlows
    jobs: JobFlows
    feedback: FeedbackFlows
    hooks: JobHooks
    pool: BoundedPool
    work: WorkQueue
    lifecycle: Lifecycle
    grouping: Grouping
    oncall: OnCallFlows
    drain: DrainFlows | None = None
    alerts: AlertHooks | None = None

    @property
    def store(self) -> Store:
        return self.wf.store


def message_to_dict(msg: MessageIn) -> dict[str, Any]:
    return asdict(msg)


def message_from_dict(d: dict[str, Any]) -> MessageIn:
    d = dict(d)
    d["files"] = [FileRef(**f) for f in d.get("files") or []]
    return MessageIn(**d)


def build_service(*, store: Store, chat: Chat, prober: Prober, job_source: JobSource, limits: Limits,
                  routes: Routes, webhook_secret: bytes | None, pool: BoundedPool,
                  queue_max: int = 200, grouping: GroupingSettings | None = None,
                  people: People | None = None, drain_users: frozenset[str] = frozenset(),
                  drain_groups: tuple[str, ...] = (), alert_secret: bytes | None = None) -> TriageService:
    wf = Workflow(store=store, chat=chat, prober=prober, job_source=job_source, limits=limits)
    lifecycle = Lifecycle(wf)
    jobs = JobFlows(wf, people=people, lifecycle=lifecycle)
    groups = Grouping(jobs, grouping)
    work = WorkQueue(store, pool, queue_max=queue_max)
    oncall = OnCallFlows(wf, lifecycle)
    svc = TriageService(
        wf=wf, chat=ChatFlows(wf), slash=SlashFlows(wf, jobs, oncall), jobs=jobs, feedback=FeedbackFlows(wf),
        hooks=JobHooks(jobs, work, routes, webhook_secret, groups, lifecycle), pool=pool, work=work,
        lifecycle=lifecycle, grouping=groups, oncall=oncall,
    )
    svc.chat.lifecycle = lifecycle
    svc.chat.pastes = PasteGrouping(wf, grouping)
    svc.drain = DrainFlows(wf, Approvers(drain_users, drain_groups, getattr(chat, "usergroup_members", None)), lifecycle)
    wf.drain = svc.drain
    svc.alerts = AlertHooks(wf, work, routes, alert_secret)
    register_work(svc)
    return svc


def register_work(svc: TriageService) -> None:
    """Each kind of durable work and the flow that runs it (payloads are plain JSON)."""
    c = svc.chat

    def msg_where(p: dict[str, Any]) -> Where:
        m = message_from_dict(p["msg"])
        return Where(m.channel, m.root, m.user if p.get("explicit", True) else None)

    def quiet_where(p: dict[str, Any]) -> Where | None:
        return msg_where(p) if p.get("explicit") else None

    svc.work.register("message", lambda p, _a: c.on_message(message_from_dict(p["msg"])), quiet_where)
    svc.work.register("edit", lambda p, _a: c.on_edit(message_from_dict(p["msg"])), lambda p: None)
    svc.work.register("bot_post", lambda p, _a: c.on_bot_post(message_from_dict(p["msg"])), lambda p: None)
    svc.work.register("mention", lambda p, _a: c.on_mention(message_from_dict(p["msg"])), msg_where)
    svc.work.register("shortcut", lambda p, _a: c.on_shortcut(message_from_dict(p["msg"]), p["user"],
                                                              p.get("response_url")),
                      lambda p: Where(p["msg"]["channel"], p["msg"].get("thread_ts") or p["msg"]["ts"],
                                      p["user"], p.get("response_url")))

    def slash(p: dict[str, Any], _a: int) -> None:
        cmd = SlashIn(**p["cmd"])
        where = Where(channel=cmd.channel, user=cmd.user, response_url=cmd.response_url)
        try:
            svc.slash.on_slash(cmd, where)
        except Exception as exc:
            exc.triage_where = where  # type: ignore[attr-defined]  # the thread, once it exists
            raise

    svc.work.register("slash", slash, lambda p: Where(channel=p["cmd"]["channel"], user=p["cmd"]["user"],
                                                      response_url=p["cmd"].get("response_url")))

    def hook(p: dict[str, Any], attempt: int) -> None:
        # One failure at a time per incident: the failures that join it wait for the first one's post.
        with svc.wf.locks.hold(f"incident:{p['incident']}"):
            svc.jobs.run_work(p, attempt)

    svc.work.register("hook", hook, lambda p: None)
    svc.work.register("hook-join", svc.grouping.run_join, lambda p: None)
    register_host_work(svc)


def register_host_work(svc: TriageService) -> None:
    """The approved drain, "Host repaired" and Alertmanager alerts (bot.service.drain, .alertmanager)."""
    from .inputs import ActionIn, DrainIn

    drain = svc.drain
    assert drain is not None

    def action_where(p: dict[str, Any]) -> Where:
        a = p.get("action") or p.get("drain") or {}
        return Where(channel=a.get("channel"), thread_ts=p.get("thread_ts"), user=a.get("user"))

    svc.work.register("drain", lambda p, _a: drain.drain(DrainIn(**p["drain"])), action_where)
    svc.work.register("repaired", lambda p, _a: drain.repaired(ActionIn(**p["action"])), action_where)
    svc.work.register("alert", AlertFlows(svc.wf).run_work, lambda p: None)


__all__ = ["BoundedPool", "Limits", "Prober", "Routes", "TriageService", "WorkQueue", "build_service",
           "message_from_dict", "message_to_dict"]
