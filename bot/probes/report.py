"""Human host report for `triage probe`: health per probe, findings, suggested actions."""

from __future__ import annotations

from collections.abc import Mapping

from bot.probes.client import HostProbeReport

MARK = {"critical": "!!", "warning": "! ", "info": "- "}


def render_host(report: HostProbeReport, verbose: bool = False) -> str:
    if not report.reachable:
        return f"{report.host}  UNREACHABLE  {report.error}"
    a = report.answer
    head = f"{report.host}  ({report.url}, {report.latency_ms} ms, agent {a.get('agent_version')})"
    if a.get("simulated"):
        head += f"  SIMULATED: {a.get('scenario')}"
    lines = [head]
    width = max((len(r.get("probe", "")) for r in report.results), default=8)
    shown: dict[tuple[str, str], str] = {}  # an NVML-wide fault repeats in each NVML probe: show it once
    for r in report.results:
        health = str(r.get("health", "unknown"))
        lines.append(f"  {health.upper():<9} {r.get('probe', '?'):<{width}}  {r.get('reason', '')}")
        findings = r.get("findings", [])
        keys = [(str(f.get("code")), str(f.get("detail"))) for f in findings]
        if findings and all(k in shown for k in keys):
            lines.append(f"      (same as {shown[keys[0]]})")
            continue
        for f, key in zip(findings, keys, strict=True):
            shown.setdefault(key, str(r.get("probe")))
            if f.get("severity") == "info" and health != "ok" and not verbose:
                continue
            lines.append(f"      {MARK.get(str(f.get('severity')), '  ')} {f.get('code')}: {f.get('detail')}")
        if r.get("suggested_action") and health != "ok":
            lines.append(f"      -> {r['suggested_action']}")
    return "\n".join(lines)


def render(reports: Mapping[str, HostProbeReport], verbose: bool = False) -> str:
    return "\n\n".join(render_host(r, verbose) for r in reports.values())
