"""`free` / `free -g` / `free -h` -> host memory (probe `memory`): `host-memory-low` when less than 5 %
of the total is available, the node agent's threshold."""

from __future__ import annotations

import re
from typing import Any

from .base import Block, JobView, finding, result, size_bytes

KIND = "free"
PROBES = ("memory",)
ANSWERS = re.compile(r"^free\b")

MIN_AVAILABLE_PCT = 5

_HEAD = re.compile(r"^\s*total\s+used\s+free\s+shared\s+(?:buff/cache|buffers\s+cached)\s*(?P<avail>available)?\s*$")
_MEM = re.compile(r"^\s*Mem:\s+(?P<rest>.+?)\s*$")


def _num(text: str) -> float | None:
    if re.fullmatch(r"\d+(?:[.,]\d+)?", text):
        return float(text.replace(",", "."))
    b = size_bytes(text)
    return float(b) if b is not None else None


def find(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    out = []
    for i, line in enumerate(lines[:-1]):
        h = _HEAD.match(line)
        m = _MEM.match(lines[i + 1]) if h else None
        if not m:
            continue
        cells = m.group("rest").split()
        total, free = _num(cells[0]), _num(cells[2]) if len(cells) > 2 else None
        avail = _num(cells[-1]) if h.group("avail") and len(cells) >= 6 else free  # type: ignore[union-attr]
        if total:
            out.append((i, i + 1, {"total": cells[0], "available": cells[-1] if h.group("avail") else cells[2],  # type: ignore[union-attr]
                                   "available_pct": round(100 * (avail or 0) / total, 1)}))
    return out


def results(block: Block, job: JobView) -> list[dict[str, Any]]:
    d = block.data
    findings = []
    if d["available_pct"] < MIN_AVAILABLE_PCT:
        findings.append(finding("host-memory-low", f"only {d['available']} of {d['total']} host memory available "
                                f"({d['available_pct']}%)", "warning", None, available_pct=d["available_pct"]))
    return [result("memory", findings, findings[0]["detail"] if findings
                   else f"{d['available']} of {d['total']} available ({d['available_pct']}%)", dict(d))]
