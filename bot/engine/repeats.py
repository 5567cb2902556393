"""Verify a dense slice by distinct line: the same answer, at the cost of its distinct lines.

A log where every line matches is mostly one line repeated (each NCCL process prints the same
`NCCL WARN Cuda failure` line thousands of times). Once a pattern has its opening lines, a repeat
only adds to its count, may be the first line of a new printer, or may close the run; so each
distinct line is verified once, with its first occurrence's context, and only the closing
occurrences are built. The scanner offers a slice only when every candidate line's answer is
decided by its text (`Matcher.text_decides`) and its patterns' opening lines are full, so the
report is the one the line-by-line path gives (tests/engine/test_scan_equivalence.py).
"""

from __future__ import annotations

from .facts import Facts
from .matcher import Matcher, VerifyStats
from .model import Evidence, LineContext
from .sample import LAST, EvidenceSampler
from .scanner import DenseSlice

KEYS_MAX = 4096  # distinct lines remembered


class RepeatedLines:
    """The scanner's DenseSink for one scan job."""

    def __init__(self, matcher: Matcher, sampler: EvidenceSampler, source: str, source_ctx: LineContext,
                 order_base: int, facts: Facts, stats: VerifyStats, muted: set[int]) -> None:
        self.matcher = matcher
        self.sampler = sampler
        self.source = source
        self.source_ctx = source_ctx
        self.order_base = order_base
        self.facts = facts
        self.stats = stats
        self.muted = muted
        # a line's text -> the keys it gives and who printed it, for lines whose text decides
        self._keys: dict[str, list[tuple[tuple[str, str], tuple[object, ...]]]] = {}
        # pattern -> the slice that holds its closing lines, not built yet
        self._deferred: dict[tuple[str, str], tuple[DenseSlice, set[bytes], int, set[int]]] = {}

    def decide(self, text: str, literal_ids: tuple[int, ...], line: int) -> bool:
        got = self._keys.get(text)
        if got is None:
            keys = self.matcher.text_decides(text, literal_ids, line, self.source, self.stats)
            if keys is None:
                return False
            if len(self._keys) >= KEYS_MAX:
                self._keys.clear()
            got = self._keys[text] = [
                (key, (c.rank, c.host, c.pid, self.source)) for key, ctx in keys
                for c in (ctx.merged_with(self.source_ctx),)]
        return all(self.sampler.opening_full(key) for key, _ in got)

    def repeated(self, view: DenseSlice) -> None:
        # per pattern whose opening is full: the lines that may close it, from which line on, how
        # many of its lines the slice holds, and which of them were kept as a printer's first
        raws_of: dict[tuple[str, str], set[bytes]] = {}
        since: dict[tuple[str, str], int] = {}
        held: dict[tuple[str, str], int] = {}
        kept_first: dict[tuple[str, str], set[int]] = {}
        sampler, stats = self.sampler, self.stats
        for i, count, raw, ids, decided in view:
            keys = self._keys.get(raw.decode("utf-8", "replace")) if decided else None
            if keys is not None and not any(sampler.keeps_first(key, who) for key, who in keys):
                # the answer is known and nothing of it is kept: count it, build nothing
                stats.candidates += count
                if keys:
                    stats.verified += count
                for key, _ in keys:
                    sampler.add_count(key, count)
                    raws_of.setdefault(key, set()).add(raw)
                    since.setdefault(key, view.line(i))
                    held[key] = held.get(key, 0) + count
                continue
            evs = self.matcher.verify(view.hit(i, ids), self.source, self.source_ctx, self.order_base,
                                      self.facts, stats, self.muted)
            stats.candidates += count - 1
            if evs:
                stats.verified += count - 1
            for ev in evs:
                key = (ev.signature, ev.pattern)
                if not sampler.opening_full(key):
                    sampler.add(ev)  # a line read one by one, still among the opening ones
                    continue
                if sampler.add_repeated(ev, count):
                    kept_first.setdefault(key, set()).add(ev.line)
                raws_of.setdefault(key, set()).add(raw)
                since.setdefault(key, ev.line)
                held[key] = held.get(key, 0) + count
        # The closing lines are built when the run ends or the line path goes on, unless a later
        # slice closes the pattern with as many lines of its own: most slices build none.
        replaced = {k for k in raws_of if held[k] - len(kept_first.get(k, ())) >= LAST}
        for key in [k for k in self._deferred if k not in replaced]:
            self._close(key)
        for key, raws in raws_of.items():
            self._deferred[key] = (view, raws, since[key], kept_first.get(key, set()))

    def flush(self) -> None:
        """Build the closing lines still owed; before any other line reaches the sampler."""
        for key in list(self._deferred):
            self._close(key)

    def _close(self, key: tuple[str, str]) -> None:
        view, raws, since, kept = self._deferred.pop(key)
        closing: list[Evidence] = []
        facts, stats = Facts(), VerifyStats()  # counted already
        for hit in view.closing(raws, since):
            if hit.line in kept:
                continue
            # a line read one by one may answer differently at each place: verify each
            closing += [ev for ev in self.matcher.verify(hit, self.source, self.source_ctx, self.order_base, facts, stats)
                        if (ev.signature, ev.pattern) == key]
            if len(closing) >= LAST:
                break
        for ev in reversed(closing):
            self.sampler.add_closing(ev)

    @property
    def owed(self) -> bool:
        return bool(self._deferred)
