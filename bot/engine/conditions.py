"""Evaluate a signature's cause conditions against the incident: co-occurring signatures, facts,
captures, log text and (when hosts were probed) probe findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .facts import Facts
from .library import Condition
from .model import Evidence


@dataclass
class ProbeView:
    """Probe results restricted to the hosts and time window that matter for one diagnosis."""

    findings: list[dict[str, Any]] = field(default_factory=list)  # each has host + probe + code
    ok: dict[str, list[str]] = field(default_factory=dict)  # probe name -> hosts where it ran clean
    ran: dict[str, list[str]] = field(default_factory=dict)  # probe name -> hosts where it ran at all
    unreachable: list[str] = field(default_factory=list)

    @property
    def probed(self) -> bool:
        return bool(self.ran)


@dataclass
class Env:
    present: dict[str, Evidence]  # signature id -> its first evidence, for every matched signature
    facts: Facts
    evidence: list[Evidence]  # the evidence of the signature under evaluation
    probes: ProbeView = field(default_factory=ProbeView)


def _finding_matches(finding: dict[str, Any], cond: Condition) -> bool:
    if finding.get("code") != cond.value:
        return False
    for key, want in cond.where.items():
        got = finding.get(key)
        if isinstance(want, list):
            if got not in want and str(got) not in [str(w) for w in want]:
                return False
        elif str(got) != str(want):
            return False
    return True


def matching_findings(cond: Condition, view: ProbeView) -> list[dict[str, Any]]:
    return [f for f in view.findings if _finding_matches(f, cond)]


def merge_views(a: ProbeView, b: ProbeView) -> ProbeView:
    """Two views of the same incident (agents' answers and pasted outputs): every finding counts, and
    a probe is clean on a host only when no view that ran it there found something."""
    out = ProbeView(findings=a.findings + b.findings, unreachable=sorted(set(a.unreachable) | set(b.unreachable)))
    for probe in sorted(set(a.ran) | set(b.ran)):
        ran = sorted(set(a.ran.get(probe, [])) | set(b.ran.get(probe, [])))
        dirty = {h for v in (a, b) for h in v.ran.get(probe, []) if h not in v.ok.get(probe, [])}
        out.ran[probe] = ran
        ok = [h for h in ran if h not in dirty]
        if ok:
            out.ok[probe] = ok
    return out


def evaluate(cond: Condition, env: Env) -> str | None:
    """A human-readable reason when the condition holds, else None."""
    kind = cond.kind
    if kind == "signature":
        ev = env.present.get(cond.value)
        if ev is None:
            return None
        return cond.note or f"{cond.value} also in the log ({ev.source}:{ev.line})"
    if kind == "fact":
        value = env.facts.lookup(cond.value)
        if value is None:
            return None
        if cond.matches and not cond.matches.search(value):
            return None
        return cond.note or f"{cond.value} = {value}"
    if kind == "capture":
        for ev in env.evidence:
            value = ev.captures.get(cond.value)
            if value is not None and (cond.matches is None or cond.matches.search(value)):
                return cond.note or f"{cond.value} = {value} ({ev.source}:{ev.line})"
        return None
    if kind == "text":
        assert cond.matches is not None
        for ev in env.evidence:
            for line in [ev.text, *ev.before, *ev.after]:
                if cond.matches.search(line):
                    return cond.note or f"log: {line.strip()[:200]}"
        return None
    if kind == "finding":
        hits = [f for f in env.probes.findings if _finding_matches(f, cond)]
        if not hits:
            return None
        details = "; ".join(f"{f.get('host')}: {f.get('detail') or f.get('code')}" for f in hits[:4])
        more = f" (+{len(hits) - 4} more)" if len(hits) > 4 else ""
        return (cond.note + ": " if cond.note else "") + details + more
    if kind == "probe_ok":
        hosts = env.probes.ok.get(cond.value)
        ran = env.probes.ran.get(cond.value)
        if not hosts or not ran or set(hosts) != set(ran):
            return None
        return cond.note or f"probe {cond.value} clean on {', '.join(sorted(hosts))}"
    return None


def view_for_hosts(results: dict[str, dict[str, Any]], hosts: set[str], facts: Facts) -> ProbeView:
    """What the agents of `hosts` said, with each GPU finding tied to the job's rank on that GPU."""
    view = ProbeView()
    gpu_rank: dict[tuple[str, int], list[int]] = {}
    for rank, host in facts.rank_hosts.items():
        gpu = facts.rank_gpus.get(rank)
        if gpu is not None:
            gpu_rank.setdefault((host, gpu), []).append(rank)
    for host in sorted(hosts):
        answer = results.get(host)
        if answer is None or answer.get("probed") is False:  # a name no agent answers to says nothing of the host
            continue
        if not answer.get("reachable", True):
            view.unreachable.append(host)
            view.findings.append({"host": host, "probe": "agent", "code": "agent-unreachable",
                                  "detail": answer.get("error") or f"{host} did not answer"})
            continue
        for res in answer.get("results", []):
            probe = res.get("probe", "?")
            view.ran.setdefault(probe, []).append(host)
            if res.get("health") == "ok":
                view.ok.setdefault(probe, []).append(host)
            for f in res.get("findings", []):
                item = dict(f, host=host, probe=probe)
                gpu = f.get("gpu")
                ranks = gpu_rank.get((host, gpu), []) if isinstance(gpu, int) else []
                if ranks:
                    item["ranks"] = ranks
                    who = ", ".join(f"rank {r}" for r in ranks)
                    item["detail"] = f"{f.get('detail', f.get('code'))} (GPU {gpu} is {who}'s)"
                view.findings.append(item)
    return view
