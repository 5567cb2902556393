"""Plain-text rendering of an agent answer, for `node-agent probe` on a terminal."""

from __future__ import annotations

from typing import Any

from node_agent.compat import zip_strict

MARK = {"critical": "!!", "warning": "! ", "info": "- "}


def render(answer: dict[str, Any], verbose: bool = False) -> str:
    head = f"{answer.get('host')}  node-agent {answer.get('agent_version')}  {answer.get('duration_ms')} ms"
    if answer.get("simulated"):
        head += f"  SIMULATED ({answer.get('scenario')})"
    lines = [head]
    width = max((len(r["probe"]) for r in answer.get("results", [])), default=8)
    shown: dict[tuple[str, str], str] = {}  # an NVML-wide fault repeats in every NVML probe: print it once
    for r in answer.get("results", []):
        lines.append(f"  {r['health'].upper():<9} {r['probe']:<{width}}  {r['reason']}")
        findings = r.get("findings", [])
        keys = [(f["code"], f["detail"]) for f in findings]
        if findings and all(k in shown for k in keys):
            lines.append(f"      (same as {shown[keys[0]]})")
            continue
        for f, key in zip_strict(findings, keys):
            shown.setdefault(key, r["probe"])
            if f.get("severity") == "info" and not verbose and r["health"] != "ok":
                continue
            lines.append(f"      {MARK.get(f.get('severity', ''), '  ')} {f['code']}: {f['detail']}")
        if r.get("suggested_action") and r["health"] != "ok":
            lines.append(f"      -> {r['suggested_action']}")
    return "\n".join(lines)
