"""Run the scan over every source: inline for small inputs, on worker processes for large ones.

Large uncompressed files are split into byte ranges at line boundaries so both CPUs scan one
file; compressed streams are decompressed on a thread while the main thread scans.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .context import parse_source_name
from .facts import Facts
from .matcher import Matcher, VerifyStats
from .model import Evidence, LineContext, SourceInfo
from .pasted import Block, find_outputs
from .reader import CHUNK, Source, read_chunks
from .repeats import RepeatedLines
from .sample import EvidenceSampler
from .scanner import BEFORE, RawHit, scan_chunks

PARALLEL_MIN_BYTES = 48 << 20  # below this, starting workers costs more than it saves
ORDER_STRIDE = 1 << 40  # evidence order = source index * stride + line

Progress = Callable[[int, int], None]


@dataclass
class ScanResult:
    evidence: list[Evidence]
    facts: Facts
    sources: list[SourceInfo]
    stats: VerifyStats = field(default_factory=VerifyStats)
    workers: int = 1
    pasted: list[Block] = field(default_factory=list)  # command outputs found in small sources
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # every matched line, sampled or not


@dataclass
class _Job:
    index: int  # source index
    start: int = 0
    end: int | None = None
    part: int = 0


@dataclass
class _JobResult:
    index: int
    part: int
    evidence: list[Evidence]
    facts: Facts
    lines: int
    bytes_read: int
    problems: list[str]
    stats: VerifyStats
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (signature, pattern) -> matched lines
    pasted: list[Block] = field(default_factory=list)


def _prefetch(chunks: Iterator[bytes], depth: int = 2) -> Iterator[bytes]:
    """Decompress on a thread (zlib releases the GIL) while the caller scans."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = object()

    def pump() -> None:
        try:
            for c in chunks:
                q.put(c)
        except BaseException as exc:  # surfaced in the consumer
            q.put(exc)
        q.put(stop)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        item = q.get()
        if item is stop:
            return
        if isinstance(item, BaseException):
            raise item
        yield item  # type: ignore[misc]


def _leading_lines(src: Source, start: int) -> list[bytes]:
    if start <= 0 or src.path is None:
        return []
    with open(src.path, "rb") as fh:
        lo = max(0, start - 16384)
        fh.seek(lo)
        data = fh.read(start - lo)
    return data.split(b"\n")[-BEFORE - 1 : -1]


def _counting(chunks: Iterator[bytes], counter: object | None) -> Iterator[bytes]:
    for c in chunks:
        if counter is not None:
            with counter.get_lock():  # type: ignore[attr-defined]
                counter.value += len(c)  # type: ignore[attr-defined]
        yield c


UNWRAP_MAX_BYTES = 4 << 20  # pastes and excerpts: where terminal hard-wraps come from
WRAP_MIN_WIDTH = 60


class _Keep:
    """Pass chunks through, keeping a copy while the stream stays small."""

    def __init__(self, chunks: Iterator[bytes], limit: int) -> None:
        self.chunks, self.limit = chunks, limit
        self.kept: list[bytes] | None = []
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for c in self.chunks:
            self.size += len(c)
            if self.kept is not None:
                if self.size > self.limit:
                    self.kept = None
                else:
                    self.kept.append(c)
            yield c


def _columns(line: bytes) -> int:
    """The columns a terminal gives the line: its characters, not its bytes (a wrapped line holding a
    box-drawing character or an ellipsis is as wide on screen as its ASCII neighbours)."""
    return len(line) if line.isascii() else len(line.decode("utf-8", "replace"))


def wrap_width(lines: list[bytes]) -> int | None:
    """The column at which a terminal may have hard-wrapped these lines: the longest length, when no
    line of it ends the text (a wrapped line always has a continuation), or when an excerpt cut at a
    full line still has two more lines of exactly that length before it that are not table rows."""
    lengths = [_columns(x.rstrip(b"\r")) for x in lines]
    while lengths and lengths[-1] == 0:
        lengths.pop()
    longest = max(lengths, default=0)
    if longest < WRAP_MIN_WIDTH:
        return None
    if lengths[-1] == longest:
        # box tables (nvidia-smi, dcgmi) fill the width on every row and are not wrapped text
        full = [x.rstrip(b"\r") for x, n in zip(lines, lengths, strict=False) if n == longest]
        if sum(1 for x in full[:-1] if not x.endswith((b"|", b"+"))) < 2 or full[-1].endswith((b"|", b"+")):
            return None
    return longest


# (behind whatever prefix the log's lines carry: a quote, a timestamp, a container's stream tag)
_TWO_CELL_ROW = re.compile(rb"^(?P<pre>[^|]{0,80})\|(?P<key>[^|]*)\|(?P<cell>[^|]*)\|[ \t\r]*$")


def _rejoin_table_cells(lines: list[bytes], first_line: list[int]) -> tuple[list[bytes], list[int]]:
    """Rejoin the cells of a two-column box table that wraps its text inside the cell, as `dcgmi diag`
    does ("| Warning | ... Unable to cre  |" then "|         | ate CUDA context: ...  |"): a row with an
    empty first cell carries on the cell above it, cut at the column width, often mid-word."""
    out: list[bytes] = []
    starts: list[int] = []
    row: re.Match[bytes] | None = None  # the two-cell row being extended
    for line, start in zip(lines, first_line, strict=True):
        m = _TWO_CELL_ROW.match(line)
        if m and row is not None and not m.group("key").strip() and m.group("cell").strip() \
                and m.group("pre").strip() == row.group("pre").strip():
            cell = m.group("cell")
            text = out[-1].rstrip(b" \t\r|").rstrip() + (cell[1:] if cell.startswith(b" ") else cell).rstrip()
            out[-1] = text + b" |"
            continue
        row = m if m and m.group("key").strip() else None
        out.append(line)
        starts.append(start)
    return out, starts


def _unwrapped_evidence(matcher: Matcher, src: Source, data: bytes, job: _Job, base_ctx: LineContext,
                        found: set[tuple[str, str]]) -> list[Evidence]:
    """Rejoin hard-wrapped lines and look again, for signatures the wrapped text hid.

    Terminals and issue threads wrap long messages at a fixed width, even mid-word ("an i" /
    "llegal memory access"); a line of exactly the wrap width continues on the next one. Box tables
    wrap inside their cells (_rejoin_table_cells)."""
    lines = data.split(b"\n")
    width = wrap_width(lines)
    joined: list[bytes] = []
    first_line: list[int] = []  # 1-based physical line each joined line starts at
    continues = False  # the previous line filled the width: this one carries it on
    for i, raw in enumerate(lines, 1):
        line = raw.rstrip(b"\r")
        if continues:
            joined[-1] += line
        else:
            joined.append(line)
            first_line.append(i)
        continues = width is not None and _columns(line) == width
    how = f"joined lines hard-wrapped at {width} columns"
    if b"|" in data:
        before = len(joined)
        joined, first_line = _rejoin_table_cells(joined, first_line)
        if len(joined) < before:
            how = "joined table cells wrapped across rows" if len(lines) == before else how + " and table cells"
    if len(joined) == len(lines):
        return []
    rng = scan_chunks(iter([b"\n".join(joined)]), matcher.backend, needs_context=matcher.plan.needs_context)
    stats, facts = VerifyStats(), Facts()
    out = []
    for hit in rng.hits:
        for ev in matcher.verify(hit, src.name, base_ctx, job.index * ORDER_STRIDE, facts, stats):
            if (ev.signature, ev.pattern) in found:
                continue  # seen already; another pattern of the same signature may only show once joined
            ev.line = first_line[min(ev.line, len(first_line)) - 1]
            ev.order = job.index * ORDER_STRIDE + ev.line
            ev.captures.setdefault("unwrapped", how)
            out.append(ev)
    return out


def _run_job(matcher: Matcher, src: Source, job: _Job, counter: object | None = None) -> _JobResult:
    chunks: Iterator[bytes] = read_chunks(src, job.start, job.end)
    if src.compression:
        chunks = _prefetch(chunks)
    keep = _Keep(_counting(chunks, counter), UNWRAP_MAX_BYTES if job.start == 0 and job.end is None else -1)
    base_ctx = parse_source_name(src.label or src.name)
    facts = Facts()
    stats = VerifyStats()
    sampler = EvidenceSampler()
    order_base = job.index * ORDER_STRIDE

    muted: set[int] = set()  # literals of facts that have read all they keep

    repeats = RepeatedLines(matcher, sampler, src.name, base_ctx, order_base, facts, stats, muted)

    def verify(hit: RawHit) -> None:  # as the scan goes: no candidate is kept once verified
        evs = matcher.verify(hit, src.name, base_ctx, order_base, facts, stats, muted)
        if evs and repeats.owed:
            repeats.flush()  # a dense slice's closing lines come before this one
        for ev in evs:
            sampler.add(ev)

    rng = scan_chunks(iter(keep), matcher.backend, leading=_leading_lines(src, job.start),
                      needs_context=matcher.plan.needs_context, sink=verify, muted=muted, dense=repeats)
    repeats.flush()
    pasted: list[Block] = []
    if keep.kept:
        whole = b"".join(keep.kept)
        for ev in _unwrapped_evidence(matcher, src, whole, job, base_ctx, set(sampler.counts)):
            sampler.add(ev)
        # a pasted `nvidia-smi`, `dmesg`, `ibstat`... is evidence like a probe's answer (bot/engine/pasted)
        pasted = find_outputs(src.name, whole.decode("utf-8", "replace").replace("\r\n", "\n"))
    return _JobResult(job.index, job.part, sampler.evidence(), facts, rng.lines, rng.bytes_read,
                      rng.problems + src.problems, stats, sampler.counts, pasted)


# Worker processes inherit the compiled matcher through fork; nothing is pickled but the results.
_WORKER: dict[str, object] = {}


def _worker_job(args: tuple[int, int, int | None, int]) -> _JobResult:
    index, start, end, part = args
    matcher: Matcher = _WORKER["matcher"]  # type: ignore[assignment]
    sources: list[Source] = _WORKER["sources"]  # type: ignore[assignment]
    return _run_job(matcher, sources[index], _Job(index, start, end, part), _WORKER.get("counter"))


def _split_points(src: Source, parts: int) -> list[int]:
    assert src.path is not None and src.size is not None
    points = [0]
    with open(src.path, "rb") as fh:
        for k in range(1, parts):
            fh.seek(src.size * k // parts)
            probe = fh.read(1 << 20)
            nl = probe.find(b"\n")
            if nl < 0:
                continue
            cut = src.size * k // parts + nl + 1
            if cut > points[-1]:
                points.append(cut)
    points.append(src.size)
    return points


def _plan_jobs(sources: list[Source], workers: int) -> list[_Job]:
    jobs: list[_Job] = []
    for i, src in enumerate(sources):
        if workers > 1 and src.splittable and (src.size or 0) >= PARALLEL_MIN_BYTES:
            pts = _split_points(src, workers)
            for part, (a, b) in enumerate(zip(pts, pts[1:], strict=False)):
                jobs.append(_Job(i, a, b, part))
        else:
            jobs.append(_Job(i))
    return jobs


def default_workers() -> int:
    env = os.environ.get("TRIAGE_WORKERS")
    if env:
        return max(1, int(env))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def scan_sources(
    sources: list[Source],
    matcher: Matcher,
    workers: int | None = None,
    progress: Progress | None = None,
) -> ScanResult:
    workers = workers or default_workers()
    total = sum(s.size or 0 for s in sources)
    parallel = workers > 1 and total >= PARALLEL_MIN_BYTES and "fork" in mp.get_all_start_methods()
    jobs = _plan_jobs(sources, workers if parallel else 1)
    if parallel and len(jobs) < 2:
        parallel = False
    results: list[_JobResult] = []
    if parallel:
        ctx = mp.get_context("fork")
        counter = ctx.Value("q", 0)
        _WORKER.update(matcher=matcher, sources=sources, counter=counter)
        try:
            with ctx.Pool(processes=min(workers, len(jobs))) as pool:
                pending = pool.map_async(_worker_job, [(j.index, j.start, j.end, j.part) for j in jobs], chunksize=1)
                while not pending.ready():
                    pending.wait(0.5)
                    if progress:
                        progress(counter.value, total)
                results = pending.get()
        finally:
            _WORKER.clear()
    else:
        done = 0
        for job in jobs:
            results.append(_run_job(matcher, sources[job.index], job))
            done += results[-1].bytes_read
            if progress:
                progress(done, total)
    return _merge(sources, results, workers if parallel else 1)


def _merge(sources: list[Source], results: list[_JobResult], workers: int) -> ScanResult:
    results.sort(key=lambda r: (r.index, r.part))
    infos = [SourceInfo(name=s.name) for s in sources]
    facts = Facts()
    stats = VerifyStats()
    sampler = EvidenceSampler()
    pasted: list[Block] = []
    line_offset: dict[int, int] = {}
    for r in results:
        off = line_offset.get(r.index, 0)
        if off:
            for ev in r.evidence:
                ev.line += off
                ev.order += off
        line_offset[r.index] = off + r.lines
        info = infos[r.index]
        info.lines += r.lines
        info.bytes_read += r.bytes_read
        for p in r.problems:
            if p not in info.problems:
                info.problems.append(p)
        for ev in r.evidence:
            sampler.add(ev, count=0)
        sampler.add_counts(r.counts)
        pasted.extend(r.pasted)
        facts.merge(r.facts)
        stats.candidates += r.stats.candidates
        stats.verified += r.stats.verified
        stats.timeouts.extend(r.stats.timeouts)
    for info, src in zip(infos, sources, strict=True):
        ctx: LineContext = parse_source_name(src.label or src.name)
        info.rank, info.host = ctx.rank, ctx.host
        if info.bytes_read == 0 and not info.problems:
            info.problems.append("empty: nothing to read")
    return ScanResult(evidence=sampler.evidence(), facts=facts, sources=infos, stats=stats, workers=workers,
                      counts=sampler.counts, pasted=pasted)


class ProgressPrinter:
    """A progress line on stderr for big inputs (over ~100 MB), at most twice a second."""

    def __init__(self, stream, threshold: int = 100 << 20) -> None:  # noqa: ANN001
        self.stream = stream
        self.threshold = threshold
        self.last = 0.0
        self.t0 = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if total < self.threshold:
            return
        now = time.monotonic()
        if now - self.last < 0.5 and done < total:
            return
        self.last = now
        rate = done / max(now - self.t0, 1e-6) / 1e6
        self.stream.write(f"\rscanning {done >> 20} / {total >> 20} MiB ({rate:.0f} MB/s)")
        self.stream.flush()
        self.shown = True

    def finish(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


__all__ = ["CHUNK", "ScanResult", "scan_sources", "ProgressPrinter", "default_workers"]
