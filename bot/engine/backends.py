"""The literal search under the scan: three backends that find the same literal set, so the
same candidate lines.

- hyperscan (x86-64 wheels): a compiled literal database, cached on disk, at memory speed;
- ahocorasick (ahocorasick-rs: wheels for Linux x86-64/aarch64, macOS and Windows): one DFA
  pass, chosen automatically where hyperscan is missing;
- pure Python: bytes.find per literal, the last resort.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True)
class ScanPlan:
    """The literals to look for, each mapped to the items (patterns, facts) that require it."""

    literals: list[str]
    ignorecase: list[bool]
    items_of: list[tuple[int, ...]]  # literal index -> item indices
    # literal index -> whether a hit needs the lines around it (facts need only their own line)
    needs_context: list[bool] = field(default_factory=list)

    @classmethod
    def build(cls, items: Iterable[tuple[Iterable[str], bool]], context_items: int | None = None) -> ScanPlan:
        """`items` are (literals, ignorecase); the first `context_items` of them need context lines."""
        index: dict[tuple[str, bool], int] = {}
        literals: list[str] = []
        flags: list[bool] = []
        owners: list[list[int]] = []
        for item, (lits, ci) in enumerate(items):
            for lit in lits:
                key = (lit.lower() if ci else lit, ci)
                if key not in index:
                    index[key] = len(literals)
                    literals.append(key[0])
                    flags.append(ci)
                    owners.append([])
                owners[index[key]].append(item)
        limit = len(owners) if context_items is None else context_items
        needs = [any(i < limit for i in o) for o in owners] if context_items is not None else [True] * len(owners)
        return cls(literals, flags, [tuple(o) for o in owners], needs)

    @property
    def longest(self) -> int:
        """Bytes of the longest literal: a search cut into pieces overlaps them by this much."""
        return max((len(lit.encode()) for lit in self.literals), default=0)

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for lit, ci in zip(self.literals, self.ignorecase, strict=True):
            h.update(f"{int(ci)}{lit}\0".encode())
        return h.hexdigest()[:20]


class PythonBackend:
    """Literal search with bytes.find: slower, dependency-free, same candidates."""

    name = "python"

    def __init__(self, plan: ScanPlan) -> None:
        self.longest = plan.longest
        self.cs = [(i, lit.encode()) for i, (lit, ci) in enumerate(zip(plan.literals, plan.ignorecase, strict=True)) if not ci]
        self.ci = [(i, lit.encode()) for i, (lit, ci) in enumerate(zip(plan.literals, plan.ignorecase, strict=True)) if ci]

    def find(self, buf: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        for groups, hay in ((self.cs, buf), (self.ci, buf.lower() if self.ci else b"")):
            for idx, lit in groups:
                find = hay.find
                pos = find(lit)
                n = len(lit)
                while pos >= 0:
                    hits.append((pos + n, idx))
                    pos = find(lit, pos + n)
        return hits


_LOWER = bytes(range(256)).lower()  # ASCII folding, like bytes.lower() and hyperscan's CASELESS


class AhoCorasickBackend:
    """The literal set as one Aho-Corasick DFA (ahocorasick-rs, Rust's aho-corasick crate) over the
    ASCII-folded bytes; a hit of a case-sensitive literal is checked against the original bytes."""

    name = "ahocorasick"

    def __init__(self, plan: ScanPlan) -> None:
        import ahocorasick_rs

        self.longest = plan.longest
        self._exact = [None if ci else lit.encode() for lit, ci in zip(plan.literals, plan.ignorecase, strict=True)]
        # an empty literal list is refused; the DFA scans ~2x faster than the default NFA on logs
        self._auto = ahocorasick_rs.BytesAhoCorasick(
            [lit.encode().translate(_LOWER) for lit in plan.literals],
            implementation=ahocorasick_rs.Implementation.DFA) if plan.literals else None

    def find(self, buf: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        if not buf or self._auto is None:
            return hits
        exact = self._exact
        # overlapping: a literal inside another literal's hit makes its line a candidate too
        for idx, start, end in self._auto.find_matches_as_indexes(buf.translate(_LOWER), overlapping=True):
            lit = exact[idx]
            if lit is None or buf.startswith(lit, start):
                hits.append((end, idx))
        return hits


class HyperscanBackend:
    """The same literal set compiled into one hyperscan database (cached: compiling costs ~0.2 s)."""

    name = "hyperscan"

    def __init__(self, plan: ScanPlan) -> None:
        import hyperscan

        self._hs = hyperscan
        self.longest = plan.longest
        self.db = self._load_or_compile(plan) if plan.literals else None  # hyperscan refuses 0 expressions
        self._proto = hyperscan.Scratch(self.db) if self.db is not None else None
        self._local = threading.local()  # a scratch may serve one scan at a time: one per thread

    def _load_or_compile(self, plan: ScanPlan):  # noqa: ANN202 - hyperscan.Database
        hs = self._hs
        cache = cache_dir() / f"hs-{plan.fingerprint()}-{getattr(hs, '__version__', 'x')}.db"
        try:
            return hs.loadb(cache.read_bytes(), mode=hs.HS_MODE_BLOCK)
        except Exception:  # missing, stale or from another hyperscan build: compile afresh
            pass
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        exprs = [re.escape(lit).encode() for lit in plan.literals]
        flags = [hs.HS_FLAG_CASELESS if ci else 0 for ci in plan.ignorecase]
        db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=flags)
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".hs-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(hs.dumpb(db))
            os.replace(tmp, cache)
        except OSError:
            pass  # a read-only home only costs the compile next time
        return db

    def find(self, buf: bytes) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        if self.db is None or self._proto is None:
            return hits
        append = hits.append

        def on_match(idx: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append((to, idx))

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._proto.clone()
        self.db.scan(buf, match_event_handler=on_match, scratch=scratch)
        return hits


def cache_dir() -> Path:
    base = os.environ.get("TRIAGE_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-triage"


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except Exception:
        return False
    return True


def ahocorasick_available() -> bool:
    try:
        import ahocorasick_rs  # noqa: F401
    except Exception:
        return False
    return True


BACKENDS = ("hyperscan", "ahocorasick", "python")  # fastest first


def available_backends() -> list[str]:
    return [n for n, ok in zip(BACKENDS, (hyperscan_available(), ahocorasick_available(), True), strict=True) if ok]


def make_backend(plan: ScanPlan, name: str | None = None):  # noqa: ANN201 - one of the three backends
    """`name` None picks the fastest backend that imports (TRIAGE_MATCHER overrides)."""
    name = name or os.environ.get("TRIAGE_MATCHER") or available_backends()[0]
    if name == "hyperscan":
        return HyperscanBackend(plan)
    if name == "ahocorasick":
        return AhoCorasickBackend(plan)
    if name == "python":
        return PythonBackend(plan)
    raise ValueError(f"unknown matcher {name!r} (one of {', '.join(BACKENDS)})")
