"""The bot's Prometheus series (GET /metrics on its HTTP port; `--hooks-port` in Socket Mode).

Counters and histograms live in the process's default registry (prometheus_client.REGISTRY, with the
process and GC collectors); what is read from a running bot at scrape time (the durable work table,
the worker pool, the Socket Mode link) comes from `BotCollector`, one per TriageBot, in a registry of
its own so that several bots in one process (the tests) do not collide. Label values are bounded:
signature ids from the library, Slack method names and error codes, hosts the probe policy allows.

    triage_diagnoses_total{signature,trigger}       diagnoses recorded (the top signature)
    triage_diagnosis_latency_seconds{trigger}       work accepted -> diagnosis recorded
    triage_engine_seconds / triage_probe_seconds    the engine run / one probing round
    triage_work_seconds{kind,outcome}               work accepted -> finished (queue wait included)
    triage_work_items{state}                        rows of the durable work table (queue depth)
    triage_worker_pool_inflight                     tasks on the worker pool
    triage_slack_api_errors_total{method,error}     Web API calls that failed (each attempt)
    triage_agent_requests_total{outcome}            node-agent calls: reachable, unreachable, not_probed
    triage_agent_reachable{host}                    1 when the host's agent answered at its last call
    triage_agent_request_seconds                    answered agent calls
    triage_socket_mode_connected                    1 while the Socket Mode link is up (Socket Mode only)
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from node_agent import __version__

CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

DIAGNOSES = Counter("triage_diagnoses", "Diagnoses recorded, by top signature and trigger.",
                    ["signature", "trigger"])
DIAGNOSIS_LATENCY = Histogram("triage_diagnosis_latency_seconds",
                              "From the work being accepted (the ack) to its diagnosis being recorded.",
                              ["trigger"], buckets=_SECONDS)
ENGINE_SECONDS = Histogram("triage_engine_seconds", "One engine run over an incident's evidence.", buckets=_SECONDS)
PROBE_SECONDS = Histogram("triage_probe_seconds", "One round of node-agent probes for a diagnosis.",
                          buckets=_SECONDS)
WORK_SECONDS = Histogram("triage_work_seconds", "From a work item being accepted to its end (queue wait included).",
                         ["kind", "outcome"], buckets=_SECONDS)
SLACK_API_ERRORS = Counter("triage_slack_api_errors", "Slack Web API calls that failed, each attempt.",
                           ["method", "error"])
AGENT_REQUESTS = Counter("triage_agent_requests", "Node-agent calls by outcome.", ["outcome"])
AGENT_SECONDS = Histogram("triage_agent_request_seconds", "Node-agent calls that were answered.",
                          buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
_agent_up: dict[str, int] = {}  # host -> 1/0 at its last call (triage_agent_reachable)

# When the work item being run was accepted (unix seconds), set by the work queue around each item;
# and when this thread's last engine run began (the latency's start outside a work item).
accepted_at: contextvars.ContextVar[float | None] = contextvars.ContextVar("triage_accepted_at", default=None)
_engine_started: contextvars.ContextVar[float | None] = contextvars.ContextVar("triage_engine_started", default=None)


def slack_api_error(method: str, error: str) -> None:
    SLACK_API_ERRORS.labels(method, error or "unknown").inc()


def engine_run(started: float, seconds: float) -> None:
    """One engine run that began at `started` (unix seconds) and took `seconds`."""
    _engine_started.set(started)
    ENGINE_SECONDS.observe(seconds)


def diagnosis(signature: str, trigger: str) -> float:
    """Count a recorded diagnosis; returns its latency in seconds: from the work's acceptance (else from
    the engine run that produced it)."""
    now = time.time()
    t0 = accepted_at.get()
    if t0 is None:
        t0 = _engine_started.get()
    latency = max(0.0, now - (t0 if t0 is not None else now))
    DIAGNOSES.labels(signature, trigger).inc()
    DIAGNOSIS_LATENCY.labels(trigger).observe(latency)
    return latency


def agent_reports(reports: Mapping[str, Mapping[str, Any]] | None) -> None:
    """Count one probing round's per-host reports (HostProbeReport.to_dict() shapes)."""
    for host, rep in (reports or {}).items():
        if rep.get("probed") is False:
            AGENT_REQUESTS.labels("not_probed").inc()
            continue
        up = bool(rep.get("reachable"))
        AGENT_REQUESTS.labels("reachable" if up else "unreachable").inc()
        _agent_up[host] = int(up)
        if up and isinstance(rep.get("latency_ms"), (int, float)):
            AGENT_SECONDS.observe(rep["latency_ms"] / 1000)


class BotCollector(Collector):
    """Series read from one running bot when scraped."""

    def __init__(self, work_counts: Callable[[], Mapping[str, int]], inflight: Callable[[], int],
                 socket_connected: Callable[[], bool | None]) -> None:
        self.work_counts, self.inflight, self.socket_connected = work_counts, inflight, socket_connected

    def collect(self) -> Iterator[GaugeMetricFamily]:
        info = GaugeMetricFamily("triage_build_info", "The running version.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        work = GaugeMetricFamily("triage_work_items", "Rows of the durable work table by state (queued: the depth).",
                                 labels=["state"])
        try:
            counts = dict(self.work_counts())
        except Exception:  # the store is down: /healthz says so; the scrape still answers
            counts = {}
        for state in ("queued", "running"):
            counts.setdefault(state, 0)
        for state, n in sorted(counts.items()):
            work.add_metric([state], n)
        yield work
        yield GaugeMetricFamily("triage_worker_pool_inflight", "Tasks queued or running on the worker pool.",
                                value=self.inflight())
        up = GaugeMetricFamily("triage_agent_reachable", "1 when the host's agent answered at its last call.",
                               labels=["host"])
        for host, v in sorted(dict(_agent_up).items()):
            up.add_metric([host], v)
        yield up
        connected = self.socket_connected()
        if connected is not None:
            yield GaugeMetricFamily("triage_socket_mode_connected", "1 while the Socket Mode link to Slack is up.",
                                    value=int(connected))


def bot_registry(collector: BotCollector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def exposition(bot: CollectorRegistry | None = None) -> bytes:
    """The /metrics body: the process-wide series, then the bot's own."""
    return generate_latest(REGISTRY) + (generate_latest(bot) if bot is not None else b"")
