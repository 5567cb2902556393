"""Verify candidate lines: run the real regexes (with a timeout), apply exclusions, read context."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from . import catalog
from .backends import ScanPlan, make_backend
from .context import continues, parse_line
from .facts import CLUE_PATTERNS, FACT_PATTERNS, MAX_CLUES, MAX_FACT_HITS, Facts, apply_clue, apply_fact
from .library import VERIFY_TIMEOUT_S, Library, Pattern
from .model import Evidence, LineContext
from .scanner import RawHit

MEMO_MAX = 20000  # distinct (pattern, line) decisions remembered; cleared when full
MEMO_LINE_MAX = 2048  # longer lines are not remembered (bounds the memo at ~40 MB)
_MISSING = object()
TEXT_CLIP = 1200  # evidence text shown to people; the regex saw the whole line
_KERNEL = re.compile(r"NVRM|kernel:|nvidia-nvswitch|nvidia-fabricmanager|^\s*\[\s*\d+\.\d+\]|\bXid\b")
_SCHED = re.compile(r"slurmstepd|\bsrun: |\bsbatch: |\bslurm|sacct|scontrol|\bkubelet\b|OOMKilled", re.I)


def line_kind(text: str) -> str:
    if _KERNEL.search(text):
        return "kernel"
    if _SCHED.search(text):
        return "scheduler"
    return "app"


def clip_around(text: str, start: int, end: int, limit: int = TEXT_CLIP) -> str:
    """Keep the matched part of a long line readable: the match with some text either side."""
    text = text.rstrip("\r\n")
    if len(text) <= limit:
        return text
    pad = max(0, (limit - (end - start)) // 2)
    lo = max(0, start - pad)
    hi = min(len(text), max(end + pad, lo + limit))
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


@dataclass
class VerifyStats:
    candidates: int = 0
    verified: int = 0
    timeouts: list[str] = field(default_factory=list)


class Matcher:
    """The compiled library: literal plan + scan backend + per-pattern verification."""

    def __init__(self, library: Library, backend: str | None = None) -> None:
        self.library = library
        items: list[tuple[Sequence[str], bool]] = [(p.literals, p.ignorecase) for p in library.patterns]
        items += [(f.literals, f.ignorecase) for f in FACT_PATTERNS]
        items += [(f.literals, f.ignorecase) for f in CLUE_PATTERNS]
        self.plan = ScanPlan.build(items, context_items=len(library.patterns))
        self.n_patterns = len(library.patterns)
        self.n_facts = len(FACT_PATTERNS)
        self.backend = make_backend(self.plan, backend)
        self.excludes = {sid: sig.excludes for sid, sig in library.signatures.items()}
        self._memo: dict[tuple[int, str], object] = {}
        # literals that only facts and clues use, by kind: once every kind that reads a literal has
        # all it keeps, its lines stop being candidates (NCCL's per-rank init lines: 15% of a log)
        kinds = [fp.name for fp in FACT_PATTERNS] + [cp.name for cp in CLUE_PATTERNS]
        self._kinds_of_lit: dict[int, set[str]] = {}
        self._lits_of_kind: dict[str, list[int]] = {}
        for lit, owners in enumerate(self.plan.items_of):
            if any(i < self.n_patterns for i in owners):
                continue
            names = {kinds[i - self.n_patterns] for i in owners}
            self._kinds_of_lit[lit] = names
            for name in names:
                self._lits_of_kind.setdefault(name, []).append(lit)

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @staticmethod
    def _full(facts: Facts, kind: str) -> bool:
        return facts.hits[kind] >= (MAX_CLUES if kind.startswith("clue:") else MAX_FACT_HITS)

    def _mute_full(self, kind: str, facts: Facts, muted: set[int]) -> None:
        for lit in self._lits_of_kind.get(kind, ()):
            if lit not in muted and all(self._full(facts, k) for k in self._kinds_of_lit[lit]):
                muted.add(lit)

    def verify(
        self,
        hit: RawHit,
        source: str,
        source_ctx: LineContext,
        order_base: int,
        facts: Facts,
        stats: VerifyStats,
        muted: set[int] | None = None,
    ) -> list[Evidence]:
        """Evidence on a candidate line; facts and clues go to `facts`. With `muted`, the literals
        of facts and clues that have read all they keep are added to it for the scanner to skip."""
        stats.candidates += 1
        ids = hit.literal_ids
        items = sorted({i for lit in ids for i in self.plan.items_of[lit]}) if len(ids) > 1 else self.plan.items_of[ids[0]]
        out: list[Evidence] = []
        seen_sigs: set[str] = set()
        # progress bars overwrite themselves with \r; each segment is its own message
        segments = [s for s in hit.text.split("\r") if s.strip()] if "\r" in hit.text else [hit.text]
        for item in items:
            if item >= self.n_patterns + self.n_facts:
                cp = CLUE_PATTERNS[item - self.n_patterns - self.n_facts]
                if facts.hits[cp.name] >= MAX_CLUES:
                    continue
                for seg in segments:
                    apply_clue(facts, cp, seg, source, hit.line, order_base + hit.line,
                               parse_line(seg).merged_with(source_ctx))
                if muted is not None and facts.hits[cp.name] >= MAX_CLUES:
                    self._mute_full(cp.name, facts, muted)
                continue
            if item >= self.n_patterns:
                fp = FACT_PATTERNS[item - self.n_patterns]
                for seg in segments:
                    apply_fact(facts, fp, seg)
                if muted is not None and facts.hits[fp.name] >= MAX_FACT_HITS:
                    self._mute_full(fp.name, facts, muted)
                continue
            pat = self.library.patterns[item]
            if pat.signature in seen_sigs:
                continue
            for seg in segments:
                ev = self._verify_pattern(pat, seg, hit, source, source_ctx, order_base, stats)
                if ev is not None:
                    out.append(ev)
                    seen_sigs.add(pat.signature)
                    break
        if out:
            stats.verified += 1
        return out

    def _verify_pattern(
        self,
        pat: Pattern,
        text: str,
        hit: RawHit,
        source: str,
        source_ctx: LineContext,
        order_base: int,
        stats: VerifyStats,
    ) -> Evidence | None:
        seen = self._decided(pat, text, hit.line, source, stats)
        if seen is None:
            return None
        ctx, captures, start, end = seen
        if ctx.rank is None and ctx.host is None and hit.before and continues(hit.before[-1], text, ctx):
            ctx = ctx.merged_with(parse_line(hit.before[-1]))  # a wrapped line: who printed its first half
        elif ctx.rank is None and ctx.host is None and hit.before and _LAST_ERROR.search(hit.before[-1]):
            ctx = ctx.merged_with(_wrapper_printer(hit.before))
        elif ctx.rank is None and ctx.host is None and hit.before and text[:1] not in "[<":
            header = parse_line(hit.before[-1])
            if (header.rank is not None or header.host is not None) and _HEADER_ONLY.match(header.body):
                ctx = ctx.merged_with(header)  # the record's prefix alone on the line above: its message broke off
        if pat.context and pat.context_regex is not None:
            around = "\n".join(hit.before + [text] + hit.after)
            try:
                if not pat.context_regex.search(around, timeout=VERIFY_TIMEOUT_S):
                    return None
            except TimeoutError:
                stats.timeouts.append(f"{pat.signature}/{pat.name} context gave up on {source}:{hit.line}")
                return None
        for excl, scope in self.excludes.get(pat.signature, ()):
            if scope == "line":
                continue  # decided with the line's text above
            hay = "\n".join(hit.before + [text] + hit.after)
            try:
                if excl.search(hay, timeout=VERIFY_TIMEOUT_S):
                    return None
            except TimeoutError:
                stats.timeouts.append(f"{pat.signature} exclusion gave up on {source}:{hit.line}")
                return None
        role, name = self._role_and_name(pat, captures, text)
        return Evidence(
            signature=pat.signature,
            pattern=name,
            source=source,
            line=hit.line,
            text=clip_around(text, start, end),
            context=ctx.merged_with(source_ctx),
            captures=dict(captures),
            before=list(hit.before),
            after=list(hit.after),
            order=order_base + hit.line,
            role=role,
        )

    @staticmethod
    def _role_and_name(pat: Pattern, captures: dict[str, str], text: str) -> tuple[str, str]:
        if pat.rated_code and not catalog.rated(pat.rated_code, captures.get(pat.rated_code), text):
            # a line nothing rates (a code outside NVIDIA's list, printed without a Fatal / Non-fatal
            # word: a test value, a firmware or error-log dump line) is evidence for a diagnosis another
            # line starts, never one of its own; its own pattern name keeps it out of the primary's counts
            return "supporting", f"{pat.name}/unrated"
        return pat.role, pat.name

    def _decided(self, pat: Pattern, text: str, line: int, source: str,
                 stats: VerifyStats) -> tuple[LineContext, dict[str, str], int, int] | None:
        """What the line's text alone decides, remembered per distinct line."""
        key = (id(pat), text)
        seen = self._memo.get(key, _MISSING) if len(text) <= MEMO_LINE_MAX else _MISSING
        if seen is _MISSING:
            seen = self._match_text(pat, text, line, source, stats)
            if len(text) <= MEMO_LINE_MAX:
                if len(self._memo) >= MEMO_MAX:
                    self._memo.clear()
                self._memo[key] = seen
        return cast("tuple[LineContext, dict[str, str], int, int] | None", seen)

    def text_decides(self, text: str, ids: tuple[int, ...], line: int, source: str,
                     stats: VerifyStats) -> list[tuple[tuple[str, str], LineContext]] | None:
        """The (signature, pattern) keys a candidate line gives and who printed it, when its text alone decides them
        for every repeat of the line, wherever it stands; None when its neighbours could change
        the answer (a context regex or exclusion, a wrapped line's first half naming who printed it,
        a fact or clue to read, progress-bar segments). A log that repeats such a line a million
        times can then be verified once per distinct line and counted (scanner's dense path)."""
        if "\r" in text:
            return None
        items = sorted({i for lit in ids for i in self.plan.items_of[lit]})
        keys: list[tuple[tuple[str, str], LineContext]] = []
        seen_sigs: set[str] = set()
        for item in items:
            if item >= self.n_patterns:
                return None
            pat = self.library.patterns[item]
            if pat.signature in seen_sigs:
                continue
            if pat.context or any(scope != "line" for _, scope in self.excludes.get(pat.signature, ())):
                return None
            seen = self._decided(pat, text, line, source, stats)
            if seen is None:
                continue
            ctx, captures = seen[0], seen[1]
            if ctx.rank is None and ctx.host is None:
                return None  # a wrapped line's second half takes its printer from the line before
            keys.append(((pat.signature, self._role_and_name(pat, captures, text)[1]), ctx))
            seen_sigs.add(pat.signature)
        return keys

    def _match_text(self, pat: Pattern, text: str, line: int, source: str,
                    stats: VerifyStats) -> tuple[LineContext, dict[str, str], int, int] | None:
        """What the line's text alone decides (kind, regex, line-scoped exclusions): the same for
        every repeat of the line, so it is remembered (a log where one message repeats a million
        times costs one regex run per distinct line)."""
        if "any" not in pat.sources and line_kind(text) not in pat.sources:
            return None
        # patterns see the message without launcher prefixes ("[rank0]: ", "3: ", "host: "), so `^`
        # means the start of the message; the raw line is tried too in case peeling went too far.
        # Unanchored patterns try the raw line first: most candidates fail, and need no parsing.
        ctx = None
        m = None
        shift = 0
        try:
            if not pat.anchored:
                m = pat.compiled.search(text, timeout=VERIFY_TIMEOUT_S)
                if m is None:
                    return None
                ctx = parse_line(text)
            else:
                ctx = parse_line(text)
                # the peeled body, its indentation dropped too (a quoted or timestamped traceback keeps its
                # indent after the prefix), then the raw line
                bodies = [ctx.body, ctx.body.lstrip()] if ctx.body != text else []
                for hay in dict.fromkeys([*bodies, text]):
                    m = pat.compiled.search(hay, timeout=VERIFY_TIMEOUT_S)
                    if m is not None:
                        shift = len(text) - len(hay) if hay is not text and text.endswith(hay) else 0
                        break
        except TimeoutError:
            stats.timeouts.append(f"{pat.signature}/{pat.name} gave up on {source}:{line} after {VERIFY_TIMEOUT_S}s")
            return None
        if m is None:
            return None
        for excl, scope in self.excludes.get(pat.signature, ()):
            if scope != "line":
                continue
            try:
                if excl.search(text, timeout=VERIFY_TIMEOUT_S):
                    return None
            except TimeoutError:
                stats.timeouts.append(f"{pat.signature} exclusion gave up on {source}:{line}")
                return None
        assert ctx is not None
        captures = {k: v for k, v in m.groupdict().items() if v is not None}
        return ctx, captures, m.start() + shift, m.end() + shift


# NCCL's error text as c10d and JAX raise it spans lines: "[rank391] NCCL error: remote process exited ...",
# "ncclRemoteError: ...", "Last error:", then NCCL's last WARN, which carries no prefix of its own
_LAST_ERROR = re.compile(r"\bLast error:\s*$")
# a line that is a log record's prefix and nothing more ("[rank1]:[E810 15:36:05.94 ProcessGroupNCCL.cpp:1899]
# [PG ID 0 PG GUID 0(default_pg) Rank 1]"): the message went onto the next line when it was pasted
_HEADER_ONLY = re.compile(r"^\s*(?:\[[^\[\]\n]{1,120}\]\s*){0,4}$")


def _wrapper_printer(before: list[str]) -> LineContext:
    """Who printed the error message whose "Last error:" payload this line is: the nearest of the message's
    first lines (up to three above) that names a rank or host."""
    for prev in reversed(before[-4:]):
        ctx = parse_line(prev)
        if ctx.rank is not None or ctx.host is not None:
            return ctx
    return LineContext()


def make_matcher(library: Library, backend: str | None = None) -> Matcher:
    return Matcher(library, backend)
