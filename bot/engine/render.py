"""The human form of a report: what an engineer pastes into a ticket (pure text, no Slack)."""

from __future__ import annotations

from .attribution import same_host, started_by
from .model import Diagnosis, Evidence, Level, Report

DECISIVE_LINES = 5


def _where(ev: Evidence) -> str:
    who = []
    if ev.context.rank is not None:
        who.append(f"rank {ev.context.rank}")
    if ev.context.host:
        who.append(ev.context.host)
    return f"{ev.source}:{ev.line}" + (f" ({', '.join(who)})" if who else "")


def decisive_evidence(d: Diagnosis, limit: int = DECISIVE_LINES) -> list[Evidence]:
    return d.evidence[:limit]


def render_text(report: Report, verbose: bool = False) -> str:
    out: list[str] = []
    if not report.diagnoses:
        out.append("No known failure signature found.")
        if report.warnings:
            out.append("")
            out.extend(f"note: {w}" for w in report.warnings)
        return "\n".join(out) + "\n"
    top = report.diagnoses[0]
    out.append(f"{top.signature}: {top.title} (confidence {top.confidence:.0%})")
    if top.level != Level.INITIATING:
        out.append("  (only downstream reports were found: the cause may be in a log that is not here)")
    line = started_by(report)
    if line:
        out.append(f"Started by: {line}")
    if report.initiating and report.initiating.suspects:
        init = report.initiating
        gone = [s for s in init.suspects
                if not (same_host(s.get("host"), init.host) or ("rank" in s and s["rank"] == init.rank))]
        for s in gone[:3]:
            who = (f"rank {s['rank']}" if "rank" in s else f"local rank {s['local_rank']} on {s['host']}"
                   if "local_rank" in s else s["host"])
            out.append(f"  suspect: {who} — {s['reason']}")
    out.append("")
    out.append(top.summary)
    out.append("")
    out.append("Evidence:")
    for ev in decisive_evidence(top):
        out.append(f"  {_where(ev)}: {ev.text.strip()}")
    if top.evidence_count > DECISIVE_LINES:
        out.append(f"  ... {top.evidence_count - DECISIVE_LINES} more line(s)")
    if top.causes:
        out.append("")
        out.append("Likely causes:")
        shown = [c for c in top.causes if not (c.evidence_against and not c.evidence_for)][:3]
        for c in shown:
            out.append(f"  - {c.summary}")
            for why in c.evidence_for[:3]:
                out.append(f"      + {why}")
            for why in c.evidence_against[:3]:
                out.append(f"      - {why}")
        ruled_out = [c for c in top.causes if c.evidence_against and not c.evidence_for]
        if ruled_out:
            out.append("Checked and ruled out:")
            for c in ruled_out:
                out.append(f"  - {c.summary}: {'; '.join(c.evidence_against[:3])}")
    if report.next_action:
        out.append("")
        out.append(f"Next action: {report.next_action.text}")
        if report.next_action.command:
            out.append(f"  $ {report.next_action.command}")
    if report.missing_facts:
        out.append("")
        out.append("To tell the causes apart:")
        out.extend(f"  ? {q}" for q in report.missing_facts)
    if report.probes:
        out.append("")
        out.append("Host probes:")
        for host, res in sorted(report.probes.items()):
            if not res.get("reachable", True):
                out.append(f"  {host}: {res.get('error') or 'did not answer'}")
                continue
            for r in res.get("results", []):
                if r.get("health") != "ok" or verbose:
                    out.append(f"  {host} {r.get('probe')}: {r.get('health')} — {r.get('reason')}")
    others = report.diagnoses[1:6]
    if others:
        out.append("")
        out.append("Also seen:")
        for d in others:
            tag = {Level.DOWNSTREAM: "downstream", Level.SECONDARY: f"explained by {d.explained_by}"}.get(d.level, "")
            out.append(f"  {d.signature} ×{d.evidence_count}" + (f" ({tag})" if tag else ""))
    if report.warnings:
        out.append("")
        out.extend(f"note: {w}" for w in report.warnings[:10])
    return "\n".join(out) + "\n"
