"""The diagnosis engine: pure (no Slack, HTTP or SQLite), used by the CLI, the bot and the hooks.

    from bot.engine import diagnose_paths, diagnose_texts
    report = diagnose_paths(["logs/"])          # files, directories, "-", .gz/.zst
    report = diagnose_texts([("paste", text)])  # pasted messages, uploads, thread replies
    report.to_dict()                            # the `triage diagnose --json` contract
"""

from __future__ import annotations

import time

from .diagnose import build_report
from .library import Library, default_library, load_library
from .matcher import Matcher
from .model import Diagnosis, Evidence, Initiating, Level, NextAction, Report
from .reader import DEFAULT_MAX_BYTES, Source, SourceError, source_for_bytes, sources_from_paths
from .run import Progress, scan_sources

_MATCHERS: dict[tuple[int, str | None], Matcher] = {}


def get_matcher(library: Library | None = None, backend: str | None = None) -> Matcher:
    """The compiled matcher for a library, built once per process."""
    lib = library or default_library()
    key = (id(lib), backend)
    m = _MATCHERS.get(key)
    if m is None:
        m = _MATCHERS[key] = Matcher(lib, backend)
    return m


def diagnose_sources(
    sources: list[Source],
    library: Library | None = None,
    backend: str | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    warnings: list[str] | None = None,
) -> Report:
    t0 = time.monotonic()
    lib = library or default_library()
    matcher = get_matcher(lib, backend)
    t1 = time.monotonic()
    scan = scan_sources(sources, matcher, workers=workers, progress=progress)
    t2 = time.monotonic()
    warn = list(warnings or []) + scan.stats.timeouts[:20]
    report = build_report(lib, scan.evidence, scan.facts, scan.sources, warn, counts=scan.counts, pasted=scan.pasted)
    report.stats = {
        "matcher": matcher.backend_name,
        "workers": scan.workers,
        "signatures": len(lib.signatures),
        "patterns": len(lib.patterns),
        "bytes": sum(s.bytes_read for s in scan.sources),
        "lines": sum(s.lines for s in scan.sources),
        "candidate_lines": scan.stats.candidates,
        "matched_lines": scan.stats.verified,
        "load_s": round(t1 - t0, 3),
        "scan_s": round(t2 - t1, 3),
        "diagnose_s": round(time.monotonic() - t2, 3),
    }
    return report


def diagnose_paths(paths: list[str], max_bytes: int | None = DEFAULT_MAX_BYTES, **kwargs) -> Report:  # noqa: ANN003
    """Files, directories (one source per file), "-" for stdin. Raises SourceError if a path is missing."""
    sources, problems = sources_from_paths(paths, max_bytes=max_bytes)
    return diagnose_sources(sources, warnings=problems, **kwargs)


def diagnose_texts(items: list[tuple[str, str | bytes]], max_bytes: int | None = None, **kwargs) -> Report:  # noqa: ANN003
    """In-memory evidence: [(name, text)], e.g. a pasted log and the replies in its thread.

    `max_bytes` caps what is read of each item after decompression (a small .gz can unpack to GBs).
    """
    sources = [source_for_bytes(name, data.encode("utf-8", "replace") if isinstance(data, str) else data, max_bytes)
               for name, data in items]
    return diagnose_sources(sources, **kwargs)


__all__ = [
    "Diagnosis", "Evidence", "Initiating", "Level", "Library", "Matcher", "NextAction", "Report", "Source",
    "SourceError", "default_library", "diagnose_paths", "diagnose_sources", "diagnose_texts", "get_matcher",
    "load_library",
]
