"""Ask the node agents on the implicated hosts and fuse their answers into the report.

The engine decides whom to ask and what the answers mean (bot.engine.fusion, pure); this module
only makes the signed HTTP calls, all hosts in parallel, each under a deadline.
"""

from __future__ import annotations

from typing import Any

from bot.engine.fusion import fuse, plan_probes
from bot.engine.hosts import why_not_reachable
from bot.engine.model import Report


def probe_and_fuse(
    report: Report,
    directory: Any,  # bot.probes.client.AgentDirectory
    secret: bytes,
    deadline_s: float = 3.0,
    hosts: list[str] | None = None,
    job_id: str | None = None,
) -> Report:
    """Probe the hosts the diagnosis implicates (plus `hosts`, e.g. a job's nodes); re-rank causes.

    With nothing to diagnose and no hosts given, the report is returned unchanged.
    """
    from bot.probes.client import probe_hosts

    plans = plan_probes(report, extra_hosts=hosts)
    if not plans:
        return report
    # a container id or pod name reaches no agent by itself: named in the answer, with what to do
    skipped = {h: why for h in plans if not _mapped(directory, h) and (why := why_not_reachable(h))}
    for h in skipped:
        del plans[h]
    job_id = job_id or report.facts.get("job_id")
    # one fan-out with the union of probes: agents answer in ~100 ms, a second round would double latency
    probes = sorted({p for plan in plans.values() for p in plan.probes})
    answers = probe_hosts(
        directory,
        list(plans),
        secret,
        probes=probes,
        job_id=job_id,
        job_gpus_by_host={h: sorted(set(p.job_gpus)) for h, p in plans.items() if p.job_gpus},
        job_pids_by_host={h: sorted(set(p.job_pids)) for h, p in plans.items() if p.job_pids},
        deadline_s=deadline_s,
    )
    results = {host: answer.to_dict() for host, answer in answers.items()}
    results.update({h: {"host": h, "probed": False, "reachable": False, "error": why, "results": []}
                    for h, why in skipped.items()})
    if not report.diagnoses:
        report.probes = results
        return report
    return fuse(report, results)


def _mapped(directory: Any, host: str) -> bool:
    overrides = getattr(directory, "overrides", {}) or {}
    return host in overrides or host.split(".", 1)[0] in overrides
