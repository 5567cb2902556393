"""A fixed-size sample of the matched lines of each pattern, and the count of all of them.

A log where every line matches (100 MB of `NCCL WARN Cuda failure` lines) must cost the same
memory as one where ten do: per pattern we keep the first lines, the last lines and the first line
of each rank and host, and count the rest.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from .model import Evidence

FIRST = 64  # per pattern: the opening lines (the earliest report, its neighbours)
LAST = 16  # per pattern: the closing lines (what the run ended on)
PER_KEY = 256  # per pattern: the first line of each rank / host / source, up to this many


@dataclass
class _PatternSample:
    first: list[Evidence] = field(default_factory=list)
    first_who: set[tuple[object, ...]] = field(default_factory=set)  # who printed the opening lines
    keyed: dict[tuple[object, ...], Evidence] = field(default_factory=dict)
    last: deque[Evidence] = field(default_factory=lambda: deque(maxlen=LAST))


class EvidenceSampler:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._samples: dict[tuple[str, str], _PatternSample] = {}

    def add(self, ev: Evidence, count: int = 1) -> None:
        key = (ev.signature, ev.pattern)
        self.counts[key] += count
        s = self._samples.get(key)
        if s is None:
            s = self._samples[key] = _PatternSample()
        who = (ev.context.rank, ev.context.host, ev.context.pid, ev.source)
        if len(s.first) < FIRST:
            s.first.append(ev)
            s.first_who.add(who)
            return
        if who not in s.keyed and len(s.keyed) < PER_KEY and who not in s.first_who:
            s.keyed[who] = ev
            return
        s.last.append(ev)

    def opening_full(self, key: tuple[str, str]) -> bool:
        """Whether the pattern's opening lines are all kept: from then on a line's place in the
        order only matters for who printed it first and for the closing lines."""
        s = self._samples.get(key)
        return s is not None and len(s.first) >= FIRST

    def keeps_first(self, key: tuple[str, str], who: tuple[object, ...]) -> bool:
        """Whether a line of `who` would be kept as its printer's first (the opening being full)."""
        s = self._samples[key]
        return who not in s.keyed and len(s.keyed) < PER_KEY and who not in s.first_who

    def add_repeated(self, ev: Evidence, count: int) -> bool:
        """The first of `count` repeats of one line, its pattern's opening full: counted, and kept
        if it is the first line of its printer (True). The repeats that close the run go to
        `add_closing`, in order."""
        key = (ev.signature, ev.pattern)
        self.counts[key] += count
        who = (ev.context.rank, ev.context.host, ev.context.pid, ev.source)
        if self.keeps_first(key, who):
            self._samples[key].keyed[who] = ev
            return True
        return False

    def add_count(self, key: tuple[str, str], count: int) -> None:
        self.counts[key] += count

    def add_closing(self, ev: Evidence) -> None:
        self._samples[(ev.signature, ev.pattern)].last.append(ev)

    def add_counts(self, counts: Counter[tuple[str, str]]) -> None:
        self.counts.update(counts)

    def evidence(self) -> list[Evidence]:
        seen: set[int] = set()
        out: list[Evidence] = []
        for s in self._samples.values():
            for ev in (*s.first, *s.keyed.values(), *s.last):
                if id(ev) not in seen:
                    seen.add(id(ev))
                    out.append(ev)
        out.sort(key=lambda e: e.order)
        return out
