"""What every pasted-output parser shares: the block it found, the job it is judged against, and
results in the node agent's answer shape (`probe`, `health`, `reason`, `evidence`, `findings`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SOURCE = "pasted"  # what marks a finding read from a pasted command output (agents say nothing, or "simulated")

# a shell prompt on the line that ran the command: "user@gpu-h200-07:~$ nvidia-smi", "[root@gpu-h200-07 ~]# ibstat"
PROMPT = re.compile(r"^\s*\[?[\w.-]+@(?P<host>[A-Za-z0-9][\w.-]*)[:\s\]][^$#%>]{0,80}?[$#%]\s*(?P<cmd>\S.*)?$")


@dataclass
class Block:
    """One command output found in a source."""

    kind: str  # the parser's KIND: nvidia-smi, nvidia-smi -q, dmesg, ibstat, df, ulimit, free
    source: str
    line: int  # 1-based first line
    end: int  # 1-based last line
    data: dict[str, Any]
    host: str | None = None  # named by a prompt or by the lines themselves (journalctl)
    before: list[str] = field(default_factory=list, repr=False)  # the lines just above (may name the host)

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.kind, "source": self.source, "line": self.line, "end": self.end, "host": self.host}


@dataclass
class JobView:
    """What the log tells of the job on the block's host: its pids and its GPUs there."""

    host: str | None
    pids: set[int] = field(default_factory=set)
    gpus: set[int] = field(default_factory=set)  # empty: unknown, every GPU counts


def result(probe: str, findings: list[dict[str, Any]], reason: str, evidence: dict[str, Any] | None = None,
           health: str | None = None) -> dict[str, Any]:
    """One probe result, as the node agent writes it (health from the worst finding)."""
    if health is None:
        sev = {f.get("severity") for f in findings}
        health = "failed" if "critical" in sev else "degraded" if "warning" in sev else "ok"
    return {"probe": probe, "health": health, "reason": reason, "evidence": evidence or {}, "findings": findings,
            "suggested_action": None, "duration_ms": 0, "simulated": False, "source": SOURCE}


def finding(code: str, detail: str, severity: str = "warning", gpu: int | None = None, **data: Any) -> dict[str, Any]:
    return {"code": code, "severity": severity, "gpu": gpu, **data, "detail": detail}


def gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


_SIZE = re.compile(r"^(?P<n>\d+(?:[.,]\d+)?)\s*(?P<u>[KMGTPE]?)(?:i?B)?$", re.IGNORECASE)
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}


def size_bytes(text: str) -> int | None:
    """`df -h` / `free -h` sizes: 64M, 1.0G, 2.0Ti, 512 (bytes)."""
    m = _SIZE.match(text.strip())
    if not m:
        return None
    return int(float(m.group("n").replace(",", ".")) * _UNIT[m.group("u").upper()])


def pci_key(bus: str) -> str:
    """00000000:18:00.0, 0000:18:00.0, PCI:0000:18:00 -> 18:00 (bus:device, what every tool prints)."""
    bus = bus.strip().removeprefix("PCI:").lower()
    parts = bus.split(":")
    if len(parts) >= 2:
        return f"{parts[-2][-2:]}:{parts[-1].split('.')[0]}"
    return bus
