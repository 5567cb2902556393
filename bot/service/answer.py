"""What the bot says about an incident, as data (no Slack here): built from the engine's Report,
redacted, ready for bot.slack.blocks to render and for the store to keep (answer_json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bot.engine import Report
from bot.engine.attribution import started_by
from bot.engine.model import Level
from bot.redact import redact

DECISIVE_LINES = 5
MAX_FINDINGS_PER_HOST = 3


@dataclass
class EvidenceLine:
    where: str  # "rank3.log:812"
    who: str  # "rank 3, gpu-node-17" or ""
    text: str


@dataclass
class CauseLine:
    summary: str
    evidence_for: list[str] = field(default_factory=list)
    evidence_against: list[str] = field(default_factory=list)


@dataclass
class HostProbe:
    host: str
    ok: bool
    lines: list[str]  # "processes (failed): 2 foreign processes on GPU 3", or why it did not answer


@dataclass
class Answer:
    incident_id: int
    version: int
    signature: str
    title: str
    confidence: float
    level: str  # initiating | downstream | secondary
    summary: str
    initiating: str | None = None  # "rank 0 on gpu-node-17 (the only rank that reported it)"
    evidence: list[EvidenceLine] = field(default_factory=list)
    evidence_total: int = 0
    causes: list[CauseLine] = field(default_factory=list)
    next_text: str | None = None
    next_command: str | None = None
    question: str | None = None
    probes: list[HostProbe] = field(default_factory=list)
    recurrence: list[str] = field(default_factory=list)
    also_seen: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    job: str | None = None
    probes_enabled: bool = False
    feedback: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Answer:
        d = dict(d)
        d["evidence"] = [EvidenceLine(**e) for e in d.get("evidence", [])]
        d["causes"] = [CauseLine(**c) for c in d.get("causes", [])]
        d["probes"] = [HostProbe(**p) for p in d.get("probes", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def headline(self) -> str:
        return f"{self.signature}: {self.title} ({self.confidence:.0%})"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _who(rank: int | None, host: str | None) -> str:
    return ", ".join(x for x in (f"rank {rank}" if rank is not None else None, host) if x)


def esc(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters (`<!channel>` in a log
    line must not ping anyone)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def probe_lines(report: Report) -> list[HostProbe]:
    return probe_host_lines(report.probes or {})


def probe_host_lines(probes: dict[str, Any]) -> list[HostProbe]:
    """Per host: what the agent found (non-ok results and their findings), or why it did not answer."""
    out: list[HostProbe] = []
    for host, res in sorted(probes.items()):
        if not isinstance(res, dict):
            continue
        if res.get("probed") is False:
            out.append(HostProbe(host, False, [redact(res.get("error") or "not probed")]))
            continue
        if res.get("reachable") is False or res.get("error") and not res.get("results"):
            out.append(HostProbe(host, False, [redact(f"did not answer: {res.get('error') or 'no reply'}")]))
            continue
        lines: list[str] = []
        for r in res.get("results", []):
            if r.get("health") in ("ok", None):
                continue
            lines.append(redact(f"{r.get('probe')} ({r.get('health')}): {r.get('reason') or ''}".rstrip(": ")))
            findings = [f for f in r.get("findings", []) if f.get("severity") != "info"]
            for f in findings[:MAX_FINDINGS_PER_HOST]:
                lines.append(redact(f"  {f.get('code')}: {f.get('detail') or ''}"))
        if not lines:
            lines = [f"all {len(res.get('results', []))} probes ok"]
            out.append(HostProbe(host, True, lines))
        else:
            out.append(HostProbe(host, False, lines))
    return out


def build_answer(report: Report, *, incident_id: int, version: int, job: str | None = None,
                 recurrence: list[str] | None = None, probes_enabled: bool = False,
                 extra_warnings: list[str] | None = None, changes: list[str] | None = None) -> Answer:
    """The answer for the top diagnosis. `report` must have at least one diagnosis."""
    top = report.diagnoses[0]
    initiating = started_by(report)
    evidence = [
        EvidenceLine(where=f"{e.source}:{e.line}", who=_who(e.context.rank, e.context.host), text=redact(e.text.strip()))
        for e in top.evidence[:DECISIVE_LINES]
    ]
    causes = [CauseLine(redact(c.summary), [redact(x) for x in c.evidence_for[:3]],
                        [redact(x) for x in c.evidence_against[:3]]) for c in top.causes[:3]]
    also = []
    for d in report.diagnoses[1:6]:
        tag = {Level.DOWNSTREAM: "downstream", Level.SECONDARY: f"explained by {d.explained_by}"}.get(d.level, "")
        also.append(f"{d.signature} ×{d.evidence_count}" + (f" ({tag})" if tag else ""))
    warnings = [redact(w) for w in (extra_warnings or []) + list(report.warnings)][:8]
    if top.level != Level.INITIATING:
        warnings.insert(0, "Only downstream reports were found: the cause may be in a log that is not here "
                           "(the failing rank's own log, or the host's kernel log).")
    nxt = report.next_action
    return Answer(
        incident_id=incident_id,
        version=version,
        signature=top.signature,
        title=redact(top.title),
        confidence=float(top.confidence),
        level=top.level.name.lower(),
        summary=redact(top.summary),
        initiating=redact(initiating) if initiating else None,
        evidence=evidence,
        evidence_total=top.evidence_count,
        causes=causes,
        next_text=redact(nxt.text) if nxt else None,
        next_command=redact(nxt.command) if nxt and nxt.command else None,
        question=redact(report.missing_facts[0]) if report.missing_facts else None,
        probes=probe_lines(report),
        recurrence=list(recurrence or []),
        also_seen=also,
        warnings=warnings,
        job=redact(job) if job else None,
        probes_enabled=probes_enabled,
        changes=list(changes or []),
    )


def what_changed(old: Answer | None, new: Answer) -> list[str]:
    """Plain sentences for the thread: what the new evidence changed in the diagnosis."""
    if old is None:
        return []
    out: list[str] = []
    if old.signature != new.signature:
        out.append(f"The cause is now *{new.signature}* ({new.confidence:.0%}); it was {old.signature} "
                   f"({old.confidence:.0%}).")
    elif abs(old.confidence - new.confidence) >= 0.05:
        out.append(f"Confidence in {new.signature} went from {old.confidence:.0%} to {new.confidence:.0%}.")
    if (old.initiating or "") != (new.initiating or "") and new.initiating:
        out.append(f"Started by: {new.initiating}" + (f" (was: {old.initiating})" if old.initiating else "") + ".")
    old_top = old.causes[0].summary if old.causes else None
    new_top = new.causes[0].summary if new.causes else None
    if old.signature == new.signature and new_top and old_top != new_top:
        out.append(f"Most likely cause now: {new_top}.")
    if (old.next_command or old.next_text) != (new.next_command or new.next_text) and new.next_text:
        out.append(f"New next step: {new.next_text}.")
    new_probe_hosts = {p.host for p in new.probes if not p.ok} - {p.host for p in old.probes if not p.ok}
    if new_probe_hosts:
        out.append("Probes found problems on " + ", ".join(sorted(new_probe_hosts)) + ".")
    if old.question and not new.question:
        out.append("The open question is answered.")
    return out


@dataclass
class Headline:
    """The channel message of a /diagnose or scheduler incident; its thread holds the answer."""

    subject: str  # "Job 1234 (train-llama) FAILED, exit 1:0, on gpu01, gpu02" or "Log pasted by <@U1>"
    status: str  # "Diagnosing…", or the top signature line once known
    detail: str | None = None  # "Started by rank 0 on gpu01"
    state: str = "diagnosing"  # diagnosing | diagnosed | unknown (nothing recognised) | ok (healthy hosts)
    requester: str | None = None  # Slack user id, shown as a mention


@dataclass
class HomeIncident:
    id: int
    link: str | None
    signature: str | None
    when: str  # "2h ago"
    job_id: str | None
    hosts: list[str]


@dataclass
class HomeData:
    recent: list[HomeIncident]
    top_signatures: list[tuple[str, int]]
    top_hosts: list[tuple[str, int]]
    precision: list[tuple[str, int, int]]  # signature, right, wrong
