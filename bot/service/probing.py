"""Ask the node agents on the implicated hosts (when TRIAGE_AGENT_* are set) and fuse their findings.

The probe client (bot/probes/client.py) and the fusion step (bot/probing.py) belong to other parts
of the project; if either is missing the bot still diagnoses, it just does not probe.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from bot import metrics
from bot.engine import Report

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "http://{host}:9477"


class ProbeConfigError(ValueError):
    """TRIAGE_AGENT_* point at something unusable (bad URL, unreadable or world-readable secret)."""


@dataclass
class ProbeOutcome:
    report: Report
    hosts: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    error: str | None = None


class Prober:
    def __init__(self, agent_url: str | None, agent_map: str | None, secret_file: str | None,
                 deadline_s: float = 3.0, tls: Any = None, allow: str | None = None) -> None:
        self.deadline_s = deadline_s
        self.directory: Any = None
        self.secret: bytes | None = None
        self._fuse: Any = None
        self._probe_hosts: Any = None
        self.problem: str | None = None
        if not (agent_url or agent_map) or not secret_file:
            self.problem = "no node agents are configured (TRIAGE_AGENT_URL or TRIAGE_AGENT_MAP, and TRIAGE_AGENT_SECRET_FILE)"
            return
        try:
            from bot.probes.client import AgentDirectory, probe_hosts
            from node_agent.auth import load_secret
        except ImportError as exc:
            self.problem = f"the probe client is not installed ({exc})"
            log.warning("probing disabled: %s", self.problem)
            return
        fuse: Any = None
        try:
            from bot.probing import probe_and_fuse as fuse
        except ImportError:
            log.warning("bot.probing.probe_and_fuse is missing: probe results are shown but not fused into causes")
        from bot.probes.client import DirectoryError
        from node_agent.auth import SecretFileError

        try:
            # Only a map given: hosts not in it fall back to the agent's default port.
            self.directory = AgentDirectory.from_files(agent_url or DEFAULT_TEMPLATE, agent_map, allow=allow, tls=tls)
            self.secret = load_secret(secret_file)
        except (DirectoryError, SecretFileError) as exc:
            raise ProbeConfigError(f"node agents: {exc}") from None
        # The map may be rewritten while the bot runs (Kubernetes: bot.probes.k8s_map keeps pod -> node
        # agent current), so it is re-read when its mtime changes; a broken rewrite keeps the last good one.
        self._map_source = (agent_url or DEFAULT_TEMPLATE, agent_map, tls, allow)
        self._map_mtime = _mtime(agent_map)
        self._fuse = fuse
        self._probe_hosts = probe_hosts

    @property
    def enabled(self) -> bool:
        return self.problem is None

    def fuse(self, report: Report, hosts: list[str] | None = None, job_id: str | None = None) -> ProbeOutcome:
        """Probe what the diagnosis asks for (plus the job's `hosts` when given); re-rank causes."""
        if not self.enabled or not report.diagnoses:
            return ProbeOutcome(report)
        t0 = time.monotonic()
        try:
            if self._fuse is not None:
                kwargs: dict[str, Any] = {"deadline_s": self.deadline_s}
                params = inspect.signature(self._fuse).parameters
                if hosts and "hosts" in params:
                    kwargs["hosts"] = hosts
                if job_id and "job_id" in params:
                    kwargs["job_id"] = job_id
                fused = self._fuse(report, self._current_directory(), self.secret, **kwargs)
                metrics.agent_reports(fused.probes)
            else:
                fused = report
                if hosts:
                    fused.probes = self.probe(hosts)
        except Exception as exc:  # agents are advisory: a probe failure must not lose the diagnosis
            log.exception("probing failed")
            return ProbeOutcome(report, hosts or [], time.monotonic() - t0, f"probing failed: {exc}")
        return ProbeOutcome(fused, sorted((fused.probes or {}).keys()), time.monotonic() - t0)

    def _current_directory(self) -> Any:
        template, agent_map, tls, allow = self._map_source
        mtime = _mtime(agent_map)
        if agent_map and mtime != self._map_mtime:
            from bot.probes.client import AgentDirectory, DirectoryError

            try:
                self.directory = AgentDirectory.from_files(template, agent_map, allow=allow, tls=tls)
                log.info("agent map %s re-read (%d hosts)", agent_map, len(self.directory.overrides))
            except DirectoryError as exc:
                log.warning("agent map changed but is unusable, keeping the last one: %s", exc)
            self._map_mtime = mtime
        return self.directory

    def probe(self, hosts: list[str], probes: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Raw per-host agent reports (for `/diagnose hosts ...`)."""
        if not self.enabled:
            return {}
        res = self._probe_hosts(self._current_directory(), hosts, self.secret, probes=probes,
                                deadline_s=self.deadline_s)
        out = {h: (r.to_dict() if hasattr(r, "to_dict") else r) for h, r in res.items()}
        metrics.agent_reports(out)
        return out


def _mtime(path: str | None) -> int | None:
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None
