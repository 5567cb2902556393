"""The incident workflow between Slack, the store, the engine, the probes and the job sources.

Listeners in bot/slack parse payloads into bot.service.inputs dataclasses and hand them to these
flows on the worker pool; the flows never see a Slack payload and never build Block Kit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bot.jobs import JobSource
from bot.store import Store

from .chat import ChatFlows
from .commands import SlashFlows
from .feedback import FeedbackFlows
from .hooks import JobHooks
from .inputs import FileRef, MessageIn, SlashIn, Where
from .jobs import JobFlows
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
                  queue_max: int = 200) -> TriageService:
    wf = Workflow(store=store, chat=chat, prober=prober, job_source=job_source, limits=limits)
    jobs = JobFlows(wf)
    work = WorkQueue(store, pool, queue_max=queue_max)
    svc = TriageService(
        wf=wf, chat=ChatFlows(wf), slash=SlashFlows(wf, jobs), jobs=jobs, feedback=FeedbackFlows(wf),
        hooks=JobHooks(jobs, work, routes, webhook_secret), pool=pool, work=work,
    )
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
    svc.work.register("hook", svc.jobs.run_work, lambda p: None)


__all__ = ["BoundedPool", "Limits", "Prober", "Routes", "TriageService", "WorkQueue", "build_service",
           "message_from_dict", "message_to_dict"]
