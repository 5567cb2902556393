"""Result model shared by every probe: health, findings with stable codes, suggested action.

The engine's fusion step keys on `Finding.code`, so codes are a public contract: add new ones,
never rename or reuse one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class _StrEnum(str, enum.Enum):
    """`enum.StrEnum` (3.11+) for Python >= 3.8: members are str, and str()/format() give the value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Health(_StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"
    UNKNOWN = "unknown"


class Severity(_StrEnum):
    """How much one finding weighs; a result's health is derived from its worst finding."""

    INFO = "info"  # a fact worth showing, not a fault (e.g. a RoCE port in Ethernet mode)
    WARNING = "warning"  # degraded: may explain a failure
    CRITICAL = "critical"  # failed: the GPU/host cannot run the job as it is


# Every code a finding may carry. Order groups them by probe; docs/node-agent.md lists the same set.
FINDING_CODES: tuple[str, ...] = (
    # processes
    "foreign-process",
    "gpu-memory-pressure",
    # inventory
    "gpu-count-mismatch",
    "persistence-off",
    "compute-mode-exclusive",
    "mig-enabled",
    # xid
    "xid",
    # ecc
    "ecc-dbe",
    "ecc-sbe-high",
    "retired-pages-pending",
    "row-remap-pending",
    "row-remap-failed",
    "recovery-action",
    # any NVML probe
    "gpu-lost",
    "reset-required",
    "nvml-hang",
    "driver-not-loaded",
    "driver-library-mismatch",
    "nvml-unavailable",
    "nvml-no-permission",
    # fabric
    "fabric-manager-down",
    "fabric-not-ready",
    # infiniband
    "ib-port-down",
    "ib-port-ethernet",
    "ib-port-errors",
    # pcie
    "pcie-link-degraded",
    "pcie-replays",
    # nvlink
    "nvlink-down",
    "nvlink-errors",
    # thermal
    "thermal-throttle",
    "power-throttle",
    "hw-slowdown",
    # host
    "shm-small",
    "shm-full",
    "disk-full",
    "host-memory-low",
    "host-oom-kill",
    # a probe that could not finish in its time budget (not an NVML call: those are nvml-hang)
    "probe-timeout",
    "probe-error",
)

_CODE_SET = frozenset(FINDING_CODES)


@dataclass
class Finding:
    code: str
    detail: str
    severity: Severity = Severity.WARNING
    gpu: int | None = None
    # Free-form, code-specific values (pid, used_mib, xid, port, ...), flattened into the JSON.
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code not in _CODE_SET:  # a typo here would silently break the engine's fusion
            raise ValueError(f"unknown finding code {self.code!r}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "severity": str(self.severity), "gpu": self.gpu}
        out.update(self.data)
        out["detail"] = self.detail
        return out


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


def health_from(findings: list[Finding]) -> Health:
    worst = max((_RANK[f.severity] for f in findings), default=0)
    return (Health.OK, Health.DEGRADED, Health.FAILED)[worst]


@dataclass
class ProbeResult:
    probe: str
    health: Health
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    suggested_action: str = ""
    duration_ms: int = 0
    simulated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "health": str(self.health),
            "reason": self.reason,
            "evidence": self.evidence,
            "findings": [f.to_dict() for f in self.findings],
            "suggested_action": self.suggested_action,
            "duration_ms": self.duration_ms,
            "simulated": self.simulated,
        }


def fmt_gpus(gpus: list[int] | set[int]) -> str:
    """'GPU 3' or 'GPUs 0, 2, 3': the form every reason line uses."""
    items = sorted(set(gpus))
    if len(items) == 1:
        return f"GPU {items[0]}"
    return "GPUs " + ", ".join(str(g) for g in items)


def gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"
