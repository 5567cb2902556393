"""Fuse node-agent answers into a diagnosis (pure: the HTTP calls live in bot/probing.py).

`plan_probes` says which hosts to ask for which probes, with what the log knows of the job on
each host (its GPUs and pids, so the agent can tell the job's processes from foreign ones);
`fuse` re-ranks every diagnosis's causes with what the agents answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .diagnose import build_report
from .model import Report

# Asked of every implicated host besides what the signatures name: a probe round costs ~0.1-0.3 s
# and a host's other faults (IB ports down, Xids, a full /dev/shm) are worth a line in the answer.
BASELINE_PROBES = ("inventory", "xid", "ecc", "processes", "infiniband", "host")


@dataclass
class HostPlan:
    host: str
    probes: list[str] = field(default_factory=list)
    job_gpus: list[int] = field(default_factory=list)
    job_pids: list[int] = field(default_factory=list)
    why: list[str] = field(default_factory=list)

    def request(self, job_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"probes": sorted(set(self.probes))}
        if self.job_gpus:
            body["job_gpus"] = sorted(set(self.job_gpus))
        if self.job_pids:
            body["job_pids"] = sorted(set(self.job_pids))
        if job_id:
            body["job_id"] = job_id
        return body


def plan_probes(report: Report, extra_hosts: list[str] | None = None, max_diagnoses: int = 3) -> dict[str, HostPlan]:
    """Hosts to probe: those the top diagnoses implicate (plus `extra_hosts`, e.g. a job's nodes)."""
    plans: dict[str, HostPlan] = {}

    def plan(host: str) -> HostPlan:
        return plans.setdefault(host, HostPlan(host))

    for d in report.diagnoses[:max_diagnoses]:
        for p in d.probes:
            for host in p.get("hosts") or []:
                if host:
                    plan(host).probes.append(p["name"])
                    if p.get("why"):
                        plan(host).why.append(p["why"])
    init = report.initiating
    if init and init.host:
        plan(init.host)
    # a peer the reporters name as gone is the first place to look after the initiating host
    for s in init.suspects if init else []:
        if s.get("went_away") and s.get("host"):
            plan(s["host"]).why.append(s.get("reason", ""))
    for host in extra_hosts or []:
        plan(host)
    for hp in plans.values():
        hp.probes = sorted(set(hp.probes) | set(BASELINE_PROBES))
    basis = report.basis
    if basis is not None:
        facts = basis.facts
        for rank, host in facts.rank_hosts.items():
            if host in plans:
                if rank in facts.rank_gpus:
                    plans[host].job_gpus.append(facts.rank_gpus[rank])
                if rank in facts.rank_pids:
                    plans[host].job_pids.append(facts.rank_pids[rank])
        for ev in basis.evidence:
            h = ev.context.host
            if h in plans:
                if ev.context.gpu is not None:
                    plans[h].job_gpus.append(ev.context.gpu)
                if ev.context.pid is not None:
                    plans[h].job_pids.append(ev.context.pid)
    return plans


def fuse(report: Report, probe_results: dict[str, dict[str, Any]]) -> Report:
    """The same diagnosis, its causes re-ranked with the agents' findings on the relevant hosts."""
    b = report.basis
    if b is None:
        raise ValueError("this report cannot be fused: it was not built by the engine")
    fused = build_report(b.library, b.evidence, b.facts, b.sources, b.warnings, probe_results=probe_results,
                         counts=b.counts, pasted=b.pasted)
    fused.stats = dict(report.stats)
    return fused
