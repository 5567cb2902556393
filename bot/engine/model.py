"""Data that crosses the engine's boundary: what a log line told us, and what we concluded."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# syslog and glog stamps carry no year; the context reader gives them this placeholder year
NO_YEAR = 1900


def comparable_times(a: datetime | None, b: datetime | None) -> bool:
    """Two stamps can be ordered: both known, and both with a year or both without (glog, syslog)."""
    return a is not None and b is not None and (a.year == NO_YEAR) == (b.year == NO_YEAR)


def timestamp_fields(when: datetime | None) -> dict[str, str | None]:
    """`timestamp` is ISO 8601 or null; a stamp without a year is `time_without_year` ("12-09T12:34:44"),
    never a made-up year 1900."""
    if when is None:
        return {"timestamp": None}
    if when.year == NO_YEAR:
        return {"timestamp": None, "time_without_year": when.isoformat()[5:]}
    return {"timestamp": when.isoformat()}


class Level(enum.IntEnum):
    """How a matched signature stands in this incident (lower ranks first)."""

    INITIATING = 0  # a failure that starts incidents
    DOWNSTREAM = 1  # usually reports someone else's failure (watchdog, abort, ChildFailedError)
    SECONDARY = 2  # explained by another signature present in the same incident


@dataclass(slots=True)
class LineContext:
    """What the launchers and libraries told about one line."""

    host: str | None = None
    pid: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    gpu: int | None = None
    timestamp: datetime | None = None
    uptime: float | None = None  # kernel log seconds since boot
    job_id: str | None = None
    body: str = ""  # the line with launcher prefixes removed

    def merged_with(self, base: LineContext) -> LineContext:
        """Fill what this line did not tell from `base` (the source's own context)."""
        return LineContext(
            host=self.host or base.host,
            pid=self.pid if self.pid is not None else base.pid,
            rank=self.rank if self.rank is not None else base.rank,
            local_rank=self.local_rank if self.local_rank is not None else base.local_rank,
            gpu=self.gpu if self.gpu is not None else base.gpu,
            timestamp=self.timestamp or base.timestamp,
            uptime=self.uptime if self.uptime is not None else base.uptime,
            job_id=self.job_id or base.job_id,
            body=self.body,
        )


@dataclass(slots=True)
class Evidence:
    """One matched line."""

    signature: str
    pattern: str
    source: str
    line: int  # 1-based line number within the source
    text: str  # the line as printed (redaction is the adapters' job), clipped to a readable length
    context: LineContext
    captures: dict[str, str] = field(default_factory=dict)
    before: list[str] = field(default_factory=list)  # a few preceding lines, for multi-line messages
    after: list[str] = field(default_factory=list)
    order: int = 0  # global arrival order (source index, line) for stable sorting
    role: str = "primary"

    def to_dict(self) -> dict[str, Any]:
        ctx = self.context
        out: dict[str, Any] = {
            "source": self.source,
            "line": self.line,
            "text": self.text,
            "rank": ctx.rank,
            "host": ctx.host,
            "pid": ctx.pid,
            "local_rank": ctx.local_rank,
            "gpu": ctx.gpu,
            **timestamp_fields(ctx.timestamp),
            "pattern": self.pattern,
        }
        if ctx.uptime is not None:
            out["uptime"] = ctx.uptime
        if self.captures:
            out["captures"] = dict(self.captures)
        return out


@dataclass(slots=True)
class NextAction:
    text: str
    command: str | None = None
    cause: str | None = None

    def render(self) -> str:
        return f"{self.text}: `{self.command}`" if self.command else self.text

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "command": self.command, "cause": self.cause}


@dataclass(slots=True)
class CauseResult:
    id: str
    summary: str
    score: float
    evidence_for: list[str] = field(default_factory=list)
    evidence_against: list[str] = field(default_factory=list)
    next_action: NextAction | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "summary": self.summary,
            "score": round(self.score, 3),
            "evidence_for": list(self.evidence_for),
            "evidence_against": list(self.evidence_against),
            "next_action": self.next_action.to_dict() if self.next_action else None,
        }


@dataclass(slots=True)
class Diagnosis:
    signature: str
    title: str
    family: str
    severity: str
    downstream: bool  # the signature's own nature (taxonomy `downstream`)
    level: Level
    confidence: float
    summary: str
    evidence: list[Evidence]
    evidence_count: int
    causes: list[CauseResult]
    parent: str | None = None
    explained_by: str | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    missing_facts: list[str] = field(default_factory=list)
    extra_hosts: list[str] = field(default_factory=list)  # named by attribution, not by its own lines

    @property
    def ranks(self) -> list[int]:
        return sorted({e.context.rank for e in self.evidence if e.context.rank is not None})

    @property
    def hosts(self) -> list[str]:
        return sorted({e.context.host for e in self.evidence if e.context.host} | set(self.extra_hosts))

    def to_dict(self, max_evidence: int = 20) -> dict[str, Any]:
        return {
            # a finer signature reports its taxonomy parent as the id tools and scorers key on, and its own id
            # as the variant (taxonomy rule: a split must map back to the canonical id)
            "signature": self.parent or self.signature,
            "variant": self.signature if self.parent else None,
            "title": self.title,
            "family": self.family,
            "parent": self.parent,
            "severity": self.severity,
            "confidence": round(self.confidence, 2),
            "downstream": self.level != Level.INITIATING,
            "level": self.level.name.lower(),
            "explained_by": self.explained_by,
            "summary": self.summary,
            "ranks": self.ranks,
            "hosts": self.hosts,
            "evidence": [e.to_dict() for e in self.evidence[:max_evidence]],
            "evidence_count": self.evidence_count,
            "causes": [c.to_dict() for c in self.causes],
            "probes": list(self.probes),
            "references": list(self.references),
        }


@dataclass(slots=True)
class Initiating:
    signature: str
    rank: int | None
    host: str | None
    source: str | None = None
    line: int | None = None
    timestamp: datetime | None = None
    reason: str = ""  # how we decided (earliest timestamp, the only rank that did not report, ...)
    local_rank: int | None = None
    gpu: int | None = None  # CUDA device index on the host
    pid: int | None = None
    # hosts or ranks other processes name as the peer that went away (or the far end of a failing link)
    suspects: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "rank": self.rank,
            "host": self.host,
            "source": self.source,
            "line": self.line,
            **timestamp_fields(self.timestamp),
            "reason": self.reason,
            "local_rank": self.local_rank,
            "gpu": self.gpu,
            "pid": self.pid,
            "suspects": [{k: v for k, v in s.items() if k in ("rank", "local_rank", "host", "reason", "reports", "went_away")}
                         for s in self.suspects],
        }


@dataclass(slots=True)
class SourceInfo:
    name: str
    bytes_read: int = 0
    lines: int = 0
    rank: int | None = None
    host: str | None = None
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bytes": self.bytes_read,
            "lines": self.lines,
            "rank": self.rank,
            "host": self.host,
            "problems": list(self.problems),
        }


@dataclass(slots=True)
class Report:
    diagnoses: list[Diagnosis]
    initiating: Initiating | None
    next_action: NextAction | None
    missing_facts: list[str]
    facts: dict[str, Any]
    sources: list[SourceInfo]
    warnings: list[str] = field(default_factory=list)
    probes: dict[str, Any] = field(default_factory=dict)
    # command outputs pasted in the thread or found in the log, read like probe answers (bot/engine/pasted):
    # [{command, from (the source read), line, end, host, probe, health, reason, findings, source: "pasted"}]
    pasted: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    # what the report was built from, so probe results can be fused in later (never serialised)
    basis: Any = field(default=None, repr=False, compare=False)

    def _initiating_dict(self) -> dict[str, Any] | None:
        if self.initiating is None:
            return None
        out = self.initiating.to_dict()
        canon = {d.signature: d.parent for d in self.diagnoses if d.parent}
        out["signature"] = canon.get(out["signature"], out["signature"])
        return out

    def to_dict(self) -> dict[str, Any]:
        """The `triage diagnose --json` contract. Extend it, never break it."""
        return {
            "diagnoses": [d.to_dict() for d in self.diagnoses],
            "initiating": self._initiating_dict(),
            "next_action": self.next_action.render() if self.next_action else None,
            "next_action_detail": self.next_action.to_dict() if self.next_action else None,
            "missing_facts": list(self.missing_facts),
            "probes": dict(self.probes),
            "pasted": list(self.pasted),
            "facts": self.facts,
            "sources": [s.to_dict() for s in self.sources],
            "warnings": list(self.warnings),
            "stats": dict(self.stats),
        }
