"""From matched lines to a ranked diagnosis: which failure, which rank and host started it, what
to do next, and what to ask when the log cannot tell."""

from __future__ import annotations

import re
import string
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import cmp_to_key
from typing import Any

from . import catalog
from .attribution import attribute
from .conditions import Env, ProbeView, evaluate, merge_views, view_for_hosts
from .context import parse_line
from .facts import Facts
from .library import Library, Signature
from .model import (
    CauseResult,
    Diagnosis,
    Evidence,
    Initiating,
    Level,
    NextAction,
    Report,
    SourceInfo,
    comparable_times,
)
from .pasted import Block, commands_answered
from .pasted.view import name_foreign_processes, pasted_answers, pasted_view, report_entries

MAX_KEPT_EVIDENCE = 400  # per signature; the count keeps growing, the list does not
SIGNIFICANT_GAP_S = 120  # a failure this much earlier than another is taken to have started it
UNRELATED_GAP_S = 6 * 3600  # ... unless it is this much earlier: then they are separate incidents

# torchrun's failure summary: the rank and host of the first failed worker sit in the block
_BLOCK_RANK = re.compile(r"^\s*(?:\[\d+\]:?\s*)?rank\s*:\s*(?P<rank>\d+)(?:\s*\(local_rank:\s*(?P<local>\d+)\))?")
_BLOCK_HOST = re.compile(r"^\s*host\s*:\s*(?P<host>[\w.\-]+)\s*$")
_BLOCK_TIME = re.compile(r"^\s*time\s*:\s*(?P<date>\d{4}-\d\d-\d\d)_(?P<time>\d\d:\d\d:\d\d)")
_BLOCK_EXIT = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+)(?:\s*\(pid:\s*(?P<pid>\d+)\))?")
_LOCAL_RANK = re.compile(r"local_rank:?\s*(?P<local>\d+)")


class _SafeDict(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def fill(template: str, values: dict[str, Any]) -> str:
    """Fill {placeholders} that we know; leave the others visible rather than failing."""
    clean = {k: v for k, v in values.items() if v is not None}
    try:
        return string.Formatter().vformat(template, (), _SafeDict(clean))
    except (ValueError, IndexError):
        return template


def _time_key(ev: Evidence) -> datetime | None:
    return ev.context.timestamp


_BLOCK_ENTRY = re.compile(r"^\s*\[\d+\]:\s*$")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\)")


def _enrich_from_block(ev: Evidence) -> None:
    """Read rank/host from torchrun's failure summary around an `exitcode :` line.

    torchrun lists the other failures first and the first observed one last, under "Root Cause";
    each entry starts with `[N]:`, so the lines are read backwards up to the entry's header and the
    entry is marked when that header sits under "Root Cause"."""
    if _ROOT_CAUSE.search(ev.text):
        _read_root_cause_forward(ev)
        return
    if not re.search(r"^\s*(?:exitcode|traceback|error_file)\s*:|failed \(exitcode", ev.text):
        return
    lines = [*ev.before, ev.text]
    header = None
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if _BLOCK_ENTRY.match(line):
            header = i
            break
        m = _BLOCK_RANK.match(line)
        if m:
            ev.captures.setdefault("culprit_rank", m.group("rank"))
            if m.group("local"):
                ev.captures.setdefault("culprit_local_rank", m.group("local"))
        m = _BLOCK_HOST.match(line)
        if m:
            ev.captures.setdefault("culprit_host", m.group("host"))
        m = _BLOCK_TIME.match(line)
        if m:
            ev.captures.setdefault("culprit_time", f"{m.group('date')}T{m.group('time')}")
        m = _BLOCK_EXIT.match(line)
        if m:
            ev.captures.setdefault("culprit_exitcode", m.group("code"))
            if m.group("pid"):
                ev.captures.setdefault("culprit_pid", m.group("pid"))
    if header is not None and header > 0 and _ROOT_CAUSE.search(lines[header - 1]):
        ev.captures["culprit_root_cause"] = "1"
    m = _BLOCK_EXIT.search(ev.text)
    if m and header is not None:
        ev.captures.setdefault("culprit_exitcode", m.group("code"))
        if m.group("pid"):
            ev.captures.setdefault("culprit_pid", m.group("pid"))
    m = _LOCAL_RANK.search(ev.text)
    if m and ev.context.local_rank is None:
        ev.context.local_rank = int(m.group("local"))


def _read_root_cause_forward(ev: Evidence) -> None:
    """The "Root Cause (first observed failure):" line itself: its entry follows (a paste may end
    before the entry's `exitcode :` line, which is where the block is read backwards from)."""
    found = False
    for line in ev.after[:8]:
        if re.match(r"^\s*(?:-{8,}|={8,})\s*$", line) or (found and _BLOCK_ENTRY.match(line)):
            break
        for rx, key in ((_BLOCK_RANK, "culprit_rank"), (_BLOCK_HOST, "culprit_host"), (_BLOCK_TIME, "culprit_time"),
                        (_BLOCK_EXIT, "culprit_exitcode")):
            m = rx.match(line)
            if not m:
                continue
            found = True
            if key == "culprit_rank":
                ev.captures.setdefault(key, m.group("rank"))
                if m.group("local"):
                    ev.captures.setdefault("culprit_local_rank", m.group("local"))
            elif key == "culprit_host":
                ev.captures.setdefault(key, m.group("host"))
            elif key == "culprit_time":
                ev.captures.setdefault(key, f"{m.group('date')}T{m.group('time')}")
            else:
                ev.captures.setdefault(key, m.group("code"))
                if m.group("pid"):
                    ev.captures.setdefault("culprit_pid", m.group("pid"))
    if "culprit_rank" in ev.captures or "culprit_host" in ev.captures:
        ev.captures["culprit_root_cause"] = "1"


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def _read_frame(ev: Evidence) -> None:
    """The frame that raised a Python exception: the last `File "...", line N, in f` before it."""
    if "frame" in ev.captures:
        return
    for line in reversed(ev.before):
        m = _FRAME.search(line)
        if m:
            path = m.group("file").replace("\\", "/")
            short = "/".join(path.split("/")[-2:]) if "site-packages" not in path else path.split("site-packages/")[-1]
            ev.captures["frame"] = f"{short}:{m.group('line')} in {m.group('func')}"
            return


_LAST_ERROR = re.compile(r"Last error:\s*(?P<rest>.*)$")
_PREFIX_ONLY = re.compile(r"^\s*(?:\[(?:rank|default)\d+\]:|\d+:)?\s*")


def _read_last_error(ev: Evidence) -> None:
    """NCCL wrappers name the real reason after "Last error:" (same line or the next one)."""
    if "last_error" in ev.captures:
        return
    lines = [ev.text, *ev.after]
    for i, line in enumerate(lines):
        m = _LAST_ERROR.search(line)
        if not m:
            continue
        rest = m.group("rest").strip()
        if not rest and i + 1 < len(lines):
            rest = _PREFIX_ONLY.sub("", lines[i + 1], count=1).strip()
        if rest:
            ev.captures["last_error"] = rest[:300]
        return


def _infer_time(ev: Evidence) -> None:
    """A line without a timestamp happened at (or just after) the last stamped line before it."""
    if ev.context.timestamp is not None:
        return
    for line in reversed(ev.before):
        ts = parse_line(line).timestamp
        if ts is not None:
            ev.context.timestamp = ts
            ev.captures.setdefault("time_inferred", "from an earlier line")
            return


def _first_time(evs: list[Evidence]) -> datetime | None:
    times = [t for t in (_time_key(e) for e in evs) if t is not None]
    return min(times) if times else None


class _Group:
    def __init__(self, sig: Signature) -> None:
        self.sig = sig
        self.evidence: list[Evidence] = []
        self.count = 0
        self.per_pattern: Counter[str] = Counter()
        self.level = Level.INITIATING
        self.explained_by: str | None = None

    def add(self, ev: Evidence) -> None:
        self.count += 1
        self.per_pattern[ev.pattern] += 1
        if len(self.evidence) < MAX_KEPT_EVIDENCE:
            self.evidence.append(ev)

    def valid(self) -> bool:
        for pat in self.sig.patterns:
            if pat.role == "primary" and self.per_pattern[pat.name] >= pat.min_count:
                return True
        return False

    @property
    def first_time(self) -> datetime | None:
        return _first_time(self.evidence)

    @property
    def warnings_only(self) -> bool:
        """Every line is an SXid, or an Xid that printed its own Non-fatal word, that the catalogue rates
        a warning or info (a corrected link error): worth showing, not what failed the job when
        something graver is here. An application fault (Xid 13/31, also "warning") is not one of them:
        it did fail the job."""
        rated = [e.captures.get("sxid_level") or (e.captures.get("xid_severity") if e.captures.get("xid_word") else None)
                 for e in self.evidence]
        return bool(rated) and all(r in ("warning", "info") for r in rated)

    @property
    def first_order(self) -> int:
        return min(e.order for e in self.evidence)


def _compare(a: _Group, b: _Group) -> int:
    if a.level != b.level:
        return -1 if a.level < b.level else 1
    wa, wb = a.warnings_only, b.warnings_only
    if wa != wb:
        return 1 if wa else -1
    ta, tb = a.first_time, b.first_time
    if comparable_times(ta, tb):
        assert ta is not None and tb is not None
        gap = (ta - tb).total_seconds()
        if abs(gap) >= UNRELATED_GAP_S:
            # hours apart (a dmesg or a long job's log holds several incidents): not one cascade, so
            # "earlier started it" does not hold; the graver one leads, then the one nearer the end
            if a.sig.priority != b.sig.priority:
                return -1 if a.sig.priority > b.sig.priority else 1
            return -1 if gap > 0 else 1
        if abs(gap) >= SIGNIFICANT_GAP_S:
            return -1 if gap < 0 else 1
    if a.sig.priority != b.sig.priority:
        return -1 if a.sig.priority > b.sig.priority else 1
    if comparable_times(ta, tb) and ta != tb:
        return -1 if ta < tb else 1  # type: ignore[operator]
    return -1 if a.first_order < b.first_order else (1 if a.first_order > b.first_order else 0)


def _drop_teardown_entries(groups: dict[str, _Group]) -> None:
    """torchrun's summary lists every worker; when its root cause is another rank, an entry killed
    by a signal (-9, -15) is the agent's teardown of a survivor, not a failure of its own."""
    roots = {e.captures.get("culprit_rank") for g in groups.values() for e in g.evidence
             if "culprit_root_cause" in e.captures}
    roots.discard(None)
    if not roots:
        return
    for g in groups.values():
        kept = [e for e in g.evidence if not ("culprit_root_cause" not in e.captures and "culprit_rank" in e.captures
                                               and e.captures["culprit_rank"] not in roots
                                               and e.captures.get("culprit_exitcode") in ("-9", "-15"))]
        if len(kept) != len(g.evidence):
            g.evidence = kept
            g.count = len(kept)
            g.per_pattern = Counter(e.pattern for e in kept)


def _adopt_named_causes(groups: dict[str, _Group], present: dict[str, _Group]) -> None:
    """A wrapper error that names no cause (NCCL 2.14's bare "internal error") takes it from lines
    that are harmless alone (`role: cause`: "Call to connect returned Connection refused, retrying"),
    but only when every specific diagnosis present is such a wrapper of that signature: a log with
    a cause of its own keeps it, whatever start-up retries it also holds."""
    specific = [g for g in present.values() if "*" not in g.sig.secondary_to]
    if not specific:
        return
    for sid, g in groups.items():
        if sid in present or not any(e.role == "cause" for e in g.evidence):
            continue
        if all(sid in w.sig.secondary_to for w in specific):
            present[sid] = g


def _release_claimed_lines(groups: dict[str, _Group]) -> None:
    """A catch-all (`secondary_to: ["*"]`) keeps only the lines no other signature explains: the
    exception that wraps an NCCL or CUDA error belongs to that error's signature."""
    claimed = {(e.source, e.line) for g in groups.values() if "*" not in g.sig.secondary_to for e in g.evidence}
    for g in groups.values():
        if "*" in g.sig.secondary_to and claimed:
            kept = [e for e in g.evidence if (e.source, e.line) not in claimed]
            if len(kept) != len(g.evidence):
                g.evidence = kept
                g.count = len(kept)
                g.per_pattern = Counter(e.pattern for e in kept)


def _line_after(e: Evidence, ref: _Group) -> bool:
    """Whether line `e` follows the first line of `ref`: by clock when both have one and they
    differ, else by line order in the same source (order across files without a clock means nothing)."""
    te, tr = _time_key(e), ref.first_time
    if comparable_times(te, tr) and te != tr:
        return te > tr  # type: ignore[operator]
    first = _first_order_per_source(ref.evidence).get(e.source)
    return first is not None and e.order > first


def _echo_of(g: _Group, present: dict[str, _Group]) -> str | None:
    """The failure this signature only echoes: every one of its lines follows the first line of a
    signature its `echo_after` names, the signature's own list or its pattern's (socket closures
    after a collective timeout; an Xid 45 channel teardown after the job was killed). One line that
    does not keeps it a failure of its own."""
    by_name = {p.name: p for p in g.sig.patterns}
    first_ref = None
    for e in sorted(g.evidence, key=lambda e: e.order):
        pat = by_name.get(e.pattern)
        refs = [r for r in (*g.sig.echo_after, *(pat.echo_after if pat else ())) if r in present and r != g.sig.id]
        hit = next((r for r in refs if _line_after(e, present[r])), None)
        if hit is None:
            return None
        first_ref = first_ref or hit
    return first_ref


def _first_order_per_source(evs: list[Evidence]) -> dict[str, int]:
    firsts: dict[str, int] = {}
    for e in evs:
        firsts[e.source] = min(firsts.get(e.source, e.order), e.order)
    return firsts


def _is_secondary(sig: Signature, present: dict[str, _Group], library: Library) -> str | None:
    me = present.get(sig.id)
    if me is not None:
        by = _echo_of(me, present)
        if by:
            return by
    for ref in sig.secondary_to:
        if ref == "*":
            # explained by any other initiating failure; a downstream report (a watchdog timeout, a
            # ChildFailedError) explains nothing, so the job's own exception outranks it
            # ... nor does a failure that is itself explained (a SIGABRT the timeout's abort caused)
            others = [g for sid, g in present.items()
                      if sid != sig.id and "*" not in g.sig.secondary_to and not g.sig.downstream
                      and g.level != Level.SECONDARY]
            if others:
                return min(others, key=lambda g: g.first_order).sig.id
        elif ref.startswith("family:"):
            fam = ref.split(":", 1)[1]
            for sid, g in present.items():
                if sid != sig.id and g.sig.family == fam and sig.id not in g.sig.secondary_to:
                    return sid
        elif ref in present and ref != sig.id and _echo_of(present[ref], present) != sig.id:
            # ... unless that signature's lines only echo this one (internal-error defers to invalid
            # usage, whose "Attempt to use communicator" after an internal error is that error's echo)
            return ref
    return None


def _representative(evs: list[Evidence], limit: int) -> list[Evidence]:
    """Earliest first, one line per (rank, pattern) before repeating any."""
    ordered = sorted(evs, key=lambda e: (e.role != "primary", _time_key(e) or datetime.max, e.order))
    seen: set[tuple[Any, str]] = set()
    first: list[Evidence] = []
    rest: list[Evidence] = []
    for e in ordered:
        key = (e.context.rank if e.context.rank is not None else e.source, e.pattern)
        (rest if key in seen else first).append(e)
        seen.add(key)
    return (first + rest)[:limit]


def _values(evs: list[Evidence], init: Initiating | None, facts: Facts) -> dict[str, Any]:
    """Placeholder values: each capture from the first evidence line that has it."""
    vals: dict[str, Any] = {"job_id": facts.lookup("job_id")}
    if evs:
        first = evs[0]
        vals.update({"source": first.source, "line": first.line, "gpu": first.context.gpu})
        for ev in evs:
            for k, v in ev.captures.items():
                vals.setdefault(k, v)
            if vals.get("gpu") is None and ev.context.gpu is not None:
                vals["gpu"] = ev.context.gpu
        if "xid" in vals:
            # the first line with the code also gives the Fatal/Non-fatal word that may decide its action
            word = next((ev.captures.get("xid_word") for ev in evs if "xid" in ev.captures), None)
            for k, v in catalog.describe(vals["xid"], word).items():
                vals.setdefault(k, v)
        if "sxid" in vals:
            word = next((catalog.line_word(ev.captures.get("sxid_severity")) for ev in evs if "sxid" in ev.captures), None)
            for k, v in catalog.describe_sxid(vals["sxid"], word).items():
                vals.setdefault(k, v)
        if vals.get("gpu") is None and vals.get("pci"):
            vals["gpu"] = _bus_id(str(vals["pci"]))  # nvidia-smi -i takes a PCI bus id
    if init is not None:
        vals.update({"host": init.host, "rank": init.rank})
    vals = {k: v for k, v in vals.items() if v is not None}
    vals.setdefault("host", "<host>")
    vals.setdefault("job_id", "<job id>")
    return vals


def _bus_id(pci: str) -> str:
    pci = pci.strip().removeprefix("PCI:")
    return pci if re.search(r"\.\d$", pci) else pci + ".0"


def rank_causes(sig: Signature, env: Env) -> list[CauseResult]:
    out = []
    for cause in sig.causes:
        score = cause.prior
        pro, con = [], []
        for cond in cause.confirmed_by:
            why = evaluate(cond, env)
            if why:
                score += 0.35 * cond.weight
                pro.append(why)
        for cond in cause.ruled_out_by:
            why = evaluate(cond, env)
            if why:
                score -= 0.5 * cond.weight
                con.append(why)
        out.append(CauseResult(cause.id, cause.summary, score, pro, con,
                               NextAction(cause.action_text, cause.action_command, cause.id)))
    out.sort(key=lambda c: -c.score)  # stable: the library's order breaks ties
    return out


def _confidence(g: _Group, groups: list[_Group]) -> float:
    c = g.sig.confidence
    if g.level == Level.DOWNSTREAM:
        c *= 0.75
    elif g.level == Level.SECONDARY:
        c *= 0.5
    rivals = [o for o in groups if o is not g and o.level == Level.INITIATING and abs(o.sig.priority - g.sig.priority) <= 5]
    if g.level == Level.INITIATING and rivals:
        c *= 0.85
    ranks = {e.context.rank for e in g.evidence if e.context.rank is not None}
    if len(ranks) > 1 or g.count >= 3:
        c += 0.04
    return max(0.05, min(0.99, c))


def _named_hosts(init: Initiating | None) -> list[str]:
    """The initiating host and the peers the reporters name as gone (for the initiating signature)."""
    if init is None:
        return []
    out = [init.host] if init.host else []
    return out + [s["host"] for s in init.suspects if s.get("went_away") and s.get("host") and s["host"] not in out]


def _probe_targets(sig: Signature, g: _Group, init: Initiating | None, all_hosts: list[str]) -> list[dict[str, Any]]:
    out = []
    implicated = sorted({e.context.host for e in g.evidence if e.context.host} | set(_named_hosts(init)))
    for p in sig.probes:
        scope = p.get("hosts", "implicated")
        if scope == "initiating":
            hosts = [init.host] if init and init.host else implicated
        elif scope == "all":
            hosts = sorted(set(all_hosts) | set(implicated))
        else:
            hosts = implicated
        out.append({"name": p["name"], "hosts": hosts, "why": p.get("why", "")})
    return out


def build_report(
    library: Library,
    evidence: list[Evidence],
    facts: Facts,
    sources: list[SourceInfo],
    warnings: list[str] | None = None,
    probe_view: ProbeView | None = None,
    probe_results: dict[str, Any] | None = None,
    counts: Counter[tuple[str, str]] | None = None,
    pasted: list[Block] | None = None,
) -> Report:
    """`counts` (signature, pattern) -> every matched line, when `evidence` is only a sample of them;
    `pasted`: command outputs found in the sources (bot/engine/pasted), read like probe answers."""
    groups_by_id: dict[str, _Group] = {}
    rank_hosts, proc_ranks = facts.rank_hosts, facts.proc_ranks
    for ev in evidence:
        sig = library.signatures.get(ev.signature)
        if sig is None:
            continue
        g = groups_by_id.get(sig.id)
        if g is None:
            g = groups_by_id[sig.id] = _Group(sig)
        _enrich_from_block(ev)
        _read_last_error(ev)
        _read_frame(ev)
        catalog.annotate(ev.captures, ev.text)
        _infer_time(ev)
        if ev.context.host is None and ev.context.rank is not None:
            ev.context.host = rank_hosts.get(ev.context.rank)
        elif ev.context.rank is None and ev.context.host and ev.context.pid is not None:
            ev.context.rank = proc_ranks.get((ev.context.host, ev.context.pid))
        g.add(ev)
    if counts:
        for sid, g in groups_by_id.items():
            per = Counter({pat: n for (s_, pat), n in counts.items() if s_ == sid})
            if sum(per.values()) > g.count:
                g.per_pattern, g.count = per, sum(per.values())
    _drop_teardown_entries(groups_by_id)
    _release_claimed_lines(groups_by_id)
    present = {sid: g for sid, g in groups_by_id.items() if g.valid()}
    _adopt_named_causes(groups_by_id, present)
    # catch-alls last: whether they are explained depends on the others' levels
    for g in sorted(present.values(), key=lambda g: "*" in g.sig.secondary_to):
        by = _is_secondary(g.sig, present, library)
        if by:
            g.level, g.explained_by = Level.SECONDARY, by
        elif g.sig.downstream:
            g.level = Level.DOWNSTREAM
    groups = sorted(present.values(), key=cmp_to_key(_compare))
    source_map = {s.name: s for s in sources}
    init, asks = attribute(groups, facts, source_map)

    hosts = sorted({e.context.host for g in groups for e in g.evidence if e.context.host}
                   | set(facts.rank_hosts.values()) | {s.host for s in sources if s.host} | set(_named_hosts(init)))
    ranks = sorted({e.context.rank for g in groups for e in g.evidence if e.context.rank is not None}
                   | set(facts.rank_hosts) | {s.rank for s in sources if s.rank is not None})
    first_evidence = {sid: min(g.evidence, key=lambda e: e.order) for sid, g in present.items()}
    pasted_by_host = pasted_answers(pasted or [], evidence, facts, init, hosts)
    from_paste = pasted_view(pasted_by_host, facts) if pasted_by_host else None
    pasted_kinds = {b.kind for b in pasted or []}

    diagnoses: list[Diagnosis] = []
    for g in groups:
        if probe_view is not None:
            view = probe_view
        elif probe_results:
            wanted = {e.context.host for e in g.evidence if e.context.host}
            if init and init.signature == g.sig.id and init.host:
                wanted.add(init.host)
            view = view_for_hosts(probe_results, wanted or set(probe_results), facts)
        else:
            view = ProbeView()
        if from_paste is not None:
            view = merge_views(view, from_paste)
        env = Env(present=first_evidence, facts=facts, evidence=g.evidence, probes=view)
        causes = rank_causes(g.sig, env)
        rep = _representative(g.evidence, MAX_KEPT_EVIDENCE)
        vals = _values(rep, init if init and init.signature == g.sig.id else None, facts)
        for c in causes:
            if c.next_action:
                c.next_action.text = fill(c.next_action.text, vals)
                if c.next_action.command:
                    c.next_action.command = fill(c.next_action.command, vals)
        name_foreign_processes(causes, g.sig, env)
        missing = []
        for mf in g.sig.missing_facts:
            if any(evaluate(c, env) for c in mf.unless):
                continue
            if pasted_kinds and commands_answered(mf.question, pasted_kinds):
                continue  # answered by a pasted output: its findings are in the causes now
            missing.append(fill(mf.question, vals))
        diagnoses.append(
            Diagnosis(
                signature=g.sig.id,
                title=g.sig.title,
                family=g.sig.family,
                severity=g.sig.severity,
                downstream=g.sig.downstream,
                level=g.level,
                confidence=_confidence(g, groups),
                summary=fill(g.sig.summary, vals),
                evidence=rep,
                evidence_count=g.count,
                causes=causes,
                parent=g.sig.parent,
                explained_by=g.explained_by,
                probes=_probe_targets(g.sig, g, init if init and init.signature == g.sig.id else None, hosts),
                extra_hosts=_named_hosts(init) if init and init.signature == g.sig.id else [],
                references=g.sig.references,
                missing_facts=missing,
            )
        )

    next_action = None
    missing_facts: list[str] = []
    if diagnoses:
        top = diagnoses[0]
        if top.causes and top.causes[0].next_action:
            next_action = top.causes[0].next_action
        missing_facts = asks + top.missing_facts
    all_warnings = list(warnings or [])
    for s in sources:
        all_warnings.extend(f"{s.name}: {p}" for p in s.problems)
    return Report(
        diagnoses=diagnoses,
        initiating=init,
        next_action=next_action,
        missing_facts=missing_facts,
        facts=facts.to_dict(hosts, ranks),
        sources=sources,
        warnings=all_warnings,
        probes=dict(probe_results or {}),
        pasted=report_entries(pasted_by_host),
        basis=ReportBasis(library, evidence, facts, sources, list(warnings or []), counts, list(pasted or [])),
    )


@dataclass
class ReportBasis:
    library: Library
    evidence: list[Evidence]
    facts: Facts
    sources: list[SourceInfo]
    warnings: list[str]
    counts: Counter[tuple[str, str]] | None = None
    pasted: list[Block] = field(default_factory=list)


def evidence_by_signature(evidence: list[Evidence]) -> dict[str, list[Evidence]]:
    out: dict[str, list[Evidence]] = defaultdict(list)
    for e in evidence:
        out[e.signature].append(e)
    return out
