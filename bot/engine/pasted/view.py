"""From the blocks a scan found to a ProbeView the cause conditions read, and the actions those
findings make concrete (the foreign pids named in the command, not a generic query)."""

from __future__ import annotations

from typing import Any

from ..conditions import Env, ProbeView, matching_findings, view_for_hosts
from ..facts import Facts
from ..library import Signature
from ..model import CauseResult, Evidence, Initiating
from . import answers
from .base import SOURCE, Block


def job_of(evidence: list[Evidence], facts: Facts, init: Initiating | None) -> tuple[set[int], dict[str, set[int]]]:
    """The job's pids (any host) and its GPUs per host, as far as the log tells them."""
    pids = set(facts.rank_pids.values())
    gpus: dict[str, set[int]] = {}
    for rank, host in facts.rank_hosts.items():
        if rank in facts.rank_gpus:
            gpus.setdefault(host, set()).add(facts.rank_gpus[rank])
    for ev in evidence:
        if ev.context.pid is not None:
            pids.add(ev.context.pid)
        if ev.context.host and ev.context.gpu is not None:
            gpus.setdefault(ev.context.host, set()).add(ev.context.gpu)
        for key in ("culprit_pid", "pid"):
            v = ev.captures.get(key)
            if v and v.isdigit():
                pids.add(int(v))
    if init is not None:
        if init.pid is not None:
            pids.add(init.pid)
        if init.host and init.gpu is not None:
            gpus.setdefault(init.host, set()).add(init.gpu)
    return pids, gpus


def pasted_answers(blocks: list[Block], evidence: list[Evidence], facts: Facts, init: Initiating | None,
                   hosts: list[str]) -> dict[str, dict[str, Any]]:
    if not blocks:
        return {}
    pids, gpus = job_of(evidence, facts, init)
    default = init.host if init and init.host else (hosts[0] if len(hosts) == 1 else None)
    return answers(blocks, pids, gpus, default, set(hosts))


def pasted_view(answers_by_host: dict[str, dict[str, Any]], facts: Facts) -> ProbeView:
    view = view_for_hosts(answers_by_host, set(answers_by_host), facts)
    for f in view.findings:
        src = f.get("pasted") or {}
        f["detail"] = f"{f.get('detail')} (pasted `{src.get('command')}`, {src.get('source')}:{src.get('line')})"
    return view


def report_entries(answers_by_host: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """What the report lists under `pasted`: each output read, its host, health, reason and findings."""
    out = []
    for host, ans in sorted(answers_by_host.items()):
        for res in ans["results"]:
            p = res["pasted"]
            out.append({"command": p["command"], "from": p["source"], "line": p["line"], "end": p["end"], "host": host,
                        "probe": res["probe"], "health": res["health"], "reason": res["reason"],
                        "findings": res["findings"], "source": SOURCE})
    return sorted(out, key=lambda e: (e["from"], e["line"], e["probe"]))


def name_foreign_processes(causes: list[CauseResult], sig: Signature, env: Env) -> None:
    """A cause confirmed by `foreign-process` findings gets the pids in its action: which processes,
    on which GPU, and a command that names them (agents' and pasted findings alike)."""
    by_id = {c.id: c for c in sig.causes}
    for c in causes:
        spec = by_id.get(c.id)
        if spec is None or c.next_action is None:
            continue
        conds = [x for x in spec.confirmed_by if x.kind == "finding" and x.value == "foreign-process"]
        hits: list[dict[str, Any]] = []
        for cond in conds:
            hits += [f for f in matching_findings(cond, env.probes) if f not in hits]
        if not hits:
            continue
        pids = sorted({int(f["pid"]) for f in hits if str(f.get("pid", "")).isdigit()})
        if not pids:
            continue
        who = []
        for f in sorted(hits, key=lambda f: -(f.get("used_mib") or 0))[:4]:
            held = f", {f['used_mib'] / 1024:.1f} GiB" if f.get("used_mib") else ""
            gpu = f" on GPU {f['gpu']}" if f.get("gpu") is not None else ""
            who.append(f"pid {f['pid']} {f.get('process') or ''}{held}{gpu}".replace("  ", " "))
        more = f" and {len(hits) - 4} more" if len(hits) > 4 else ""
        hosts = sorted({str(f["host"]) for f in hits if f.get("host")})
        c.next_action.text = f"{c.next_action.text} (foreign: {'; '.join(who)}{more})"
        jobs = sorted({str(f["slurm_job"]) for f in hits if f.get("slurm_job")})
        listed = ",".join(map(str, pids))
        if jobs and len(jobs) == len({f.get("slurm_job") for f in hits}):
            c.next_action.command = f"scancel {' '.join(jobs)}  # the Slurm job(s) holding pid {listed}"
        else:
            check = f"ps -o pid,user,etime,args -p {listed}"
            if len(hosts) == 1 and hosts[0] != "(host not named)":
                check = f"ssh {hosts[0]} {check}"
            c.next_action.command = f"{check}  # then, if they are leftovers: sudo kill {' '.join(map(str, pids))}"
