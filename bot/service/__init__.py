"""The incident workflow between Slack, the store, the engine, the probes and the job sources.

Listeners in bot/slack parse payloads into bot.service.inputs dataclasses and hand them to these
flows on the worker pool; the flows never see a Slack payload and never build Block Kit.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.jobs import JobSource
from bot.store import Store

from .chat import ChatFlows
from .commands import SlashFlows
from .feedback import FeedbackFlows
from .hooks import JobHooks
from .jobs import JobFlows
from .pool import BoundedPool
from .probing import Prober
from .routing import Routes
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

    @property
    def store(self) -> Store:
        return self.wf.store


def build_service(*, store: Store, chat: Chat, prober: Prober, job_source: JobSource, limits: Limits,
                  routes: Routes, webhook_secret: bytes | None, pool: BoundedPool) -> TriageService:
    wf = Workflow(store=store, chat=chat, prober=prober, job_source=job_source, limits=limits)
    jobs = JobFlows(wf)
    return TriageService(
        wf=wf, chat=ChatFlows(wf), slash=SlashFlows(wf, jobs), jobs=jobs, feedback=FeedbackFlows(wf),
        hooks=JobHooks(jobs, pool, routes, webhook_secret), pool=pool,
    )


__all__ = ["BoundedPool", "Limits", "Prober", "Routes", "TriageService", "build_service"]
