"""The agent: configuration, host environment, NVML client, and running a probe request."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

from node_agent import __version__
from node_agent.config import AgentConfig
from node_agent.findings import Finding, Health, ProbeResult, Severity
from node_agent.hostenv import HostEnv
from node_agent.metrics import Registry
from node_agent.nvml.client import BackendSpec, NvmlClient
from node_agent.probes import PROBE_NAMES, REGISTRY
from node_agent.probes.base import ProbeContext
from node_agent.request import ProbeRequest
from node_agent.simulate import SimulatedHost

log = logging.getLogger("node_agent")
ANSWER_MARGIN_S = 0.15  # time kept back from the budget to assemble and send the answer


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.started = time.time()
        self.sim: SimulatedHost | None = None
        if config.simulate:
            self.sim = SimulatedHost.create(config.simulate, self.started)
            self.env = self.sim.env
            spec = BackendSpec("fake", str(self.sim.scenario_file), self.started)
            if config.expected_gpus is None and "expected_gpus" in self.sim.scenario.get("host", {}):
                config.expected_gpus = int(self.sim.scenario["host"]["expected_gpus"])
        else:
            self.env = HostEnv(Path(config.proc_root), Path(config.sys_root), Path(config.etc_root),
                               Path(config.kmsg_path))
            spec = BackendSpec("real")
        self.nvml = NvmlClient(spec, config.nvml_call_timeout_s, config.hang_quarantine_s, config.max_stuck_workers)
        self.name = config.name or socket.gethostname()
        self.metrics = self._metrics()

    def _metrics(self) -> Registry:
        reg = Registry()
        reg.collect("node_agent_info", "gauge", "The agent's version, and whether it serves a simulated host.",
                    lambda: [((("version", __version__), ("simulated", str(self.simulated).lower())), 1)])
        reg.histogram("node_agent_probe_duration_seconds", "How long each probe took (a timed-out one: its budget).")
        reg.counter("node_agent_probe_results_total", "Probe results by probe and health.")
        reg.collect("node_agent_nvml_hangs_total", "counter",
                    "NVML calls that did not return within the call timeout (the worker was killed).",
                    lambda: [((("fn", fn),), n) for fn, n in self.nvml.hang_counts.items()])
        reg.collect("node_agent_nvml_quarantines", "gauge",
                    "GPUs (or the whole driver, gpu=\"all\") skipped after a hang, for now.",
                    lambda: [((("gpu", g),), 1) for g in self.nvml.quarantined()])
        reg.collect("node_agent_nvml_stuck_workers", "gauge",
                    "Killed NVML worker processes that have not exited (stuck in the driver).",
                    lambda: [((), self.nvml.stuck_count())])
        return reg

    @property
    def simulated(self) -> bool:
        return self.sim is not None

    @property
    def scenario(self) -> str | None:
        return None if self.sim is None else self.sim.scenario["name"]

    def start(self) -> None:
        """Start the NVML worker in the background: /healthz answers while it initializes."""
        threading.Thread(target=self.nvml.start, name="nvml-start", daemon=True).start()

    def close(self) -> None:
        self.nvml.close()
        if self.sim is not None:
            self.sim.cleanup()

    def catalogue(self) -> dict[str, Any]:
        return {"host": self.name, "agent_version": __version__, "simulated": self.simulated,
                "scenario": self.scenario, "probes": [REGISTRY[n].catalogue_entry() for n in PROBE_NAMES]}

    def probe(self, req: ProbeRequest) -> dict[str, Any]:
        t0 = time.monotonic()
        budget = self.config.request_timeout_s if req.deadline_s is None else min(req.deadline_s, self.config.request_timeout_s)
        deadline = t0 + max(0.1, budget - ANSWER_MARGIN_S)
        ctx = ProbeContext(req, self.config, self.nvml, self.env, self.simulated, deadline, self.started)
        names = req.probes or PROBE_NAMES
        results: dict[str, ProbeResult] = {}
        threads = []
        for name in names:
            t = threading.Thread(target=self._run_one, args=(name, ctx, results), name=f"probe-{name}", daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        out = []
        for name in names:
            res = results.get(name)
            if res is None:  # still running: a blocked file read or command; the thread is abandoned
                res = ProbeResult(name, Health.FAILED, f"probe {name} did not finish within the {budget:g} s budget",
                                  {}, [Finding("probe-timeout", f"probe {name} did not finish within {budget:g} s",
                                               Severity.CRITICAL)],
                                  "Retry; if it keeps timing out, the host is hung on I/O: drain it.",
                                  int((time.monotonic() - t0) * 1000), self.simulated)
            out.append(res.to_dict())
            self.metrics.observe("node_agent_probe_duration_seconds", res.duration_ms / 1000, (("probe", name),))
            self.metrics.inc("node_agent_probe_results_total", (("health", str(res.health)), ("probe", name)))
        return {
            "host": self.name,
            "agent_version": __version__,
            "simulated": self.simulated,
            "scenario": self.scenario,
            "time": round(ctx.now, 3),
            "duration_ms": int((time.monotonic() - t0) * 1000),
            "results": out,
        }

    def _run_one(self, name: str, ctx: ProbeContext, results: dict[str, ProbeResult]) -> None:
        started = time.monotonic()
        try:
            results[name] = REGISTRY[name].run(ctx)
        except Exception as exc:  # a probe bug must cost one result, not the answer
            log.exception("probe %s failed", name)
            results[name] = ProbeResult(name, Health.UNKNOWN, f"probe {name} failed: {type(exc).__name__}: {exc}", {},
                                        [Finding("probe-error", f"{type(exc).__name__}: {exc}", Severity.WARNING)],
                                        "Report this as an agent bug (the log has the traceback).",
                                        int((time.monotonic() - started) * 1000), ctx.simulated)
