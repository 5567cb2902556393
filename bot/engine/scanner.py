"""Find candidate lines fast: one multi-literal search (bot/engine/backends.py) over the raw bytes
of each slice, then the lines around each hit; a slice of repeated lines goes by distinct line.
Candidate lines then go to `matcher.verify`, which runs the real regexes with a timeout.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

BEFORE = 8  # lines of context kept before a hit (tracebacks, torchrun failure blocks)
AFTER = 8  # lines kept after a hit ("Last error:" and its next line, the entry under torchrun's "Root Cause",
# a UCX backtrace that other ranks' lines pushed a few lines down)
MAX_LINE = 16 << 20  # a "line" longer than this is split, so binary junk cannot grow memory
WINDOW = 64 << 10  # bytes of a long line around a hit that the regexes see
CONTEXT_CLIP = 2000

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\n]*(?:\x07|\x1b\\)|\x1b[()][AB012]")
# HTML entities a log keeps when it was copied out of a web page ("Cuda failure &#39;out of memory&#39;"); only
# printable ones, so that line numbers stay those of the file
_ENTITY = re.compile(rb"&(?:quot|apos|lt|gt|amp|nbsp|#x2[27]|#(?:3[2-9]|[4-9]\d|1[01]\d|12[0-6]));")
_ENTITY_TEXT = {b"quot": b'"', b"apos": b"'", b"lt": b"<", b"gt": b">", b"amp": b"&", b"nbsp": b" ",
                b"#x22": b'"', b"#x27": b"'"}
# what a web page, mail or chat client puts in place of plain spaces and quotes when a log is copied through it
# (no-break, figure, narrow and ideographic spaces; a zero-width space; typographic quotes)
_LOOKALIKE = re.compile(rb"\xc2\xa0|\xe2\x80[\x87\x8b\xaf\x98\x99\x9c\x9d]|\xe3\x80\x80")
_LOOKALIKE_TEXT = {b"\xc2\xa0": b" ", b"\xe2\x80\x87": b" ", b"\xe2\x80\xaf": b" ", b"\xe3\x80\x80": b" ",
                   b"\xe2\x80\x8b": b"", b"\xe2\x80\x98": b"'", b"\xe2\x80\x99": b"'", b"\xe2\x80\x9c": b'"',
                   b"\xe2\x80\x9d": b'"'}


def _unentity(m: re.Match[bytes]) -> bytes:
    name = m.group()[1:-1]
    return _ENTITY_TEXT.get(name) or bytes([int(name[1:])])


def _plain_text(buf: bytes) -> bytes:
    """The text the program printed, before a terminal, web page or mail client dressed it: colour codes
    (they would split literals), HTML entities and lookalike spaces and quotes. None of them holds a newline."""
    if b"\x1b" in buf:
        buf = _ANSI.sub(b"", buf)
    if b"&" in buf:
        buf = _ENTITY.sub(_unentity, buf)
    if b"\xc2\xa0" in buf or b"\xe2\x80" in buf or b"\xe3\x80\x80" in buf:
        buf = _LOOKALIKE.sub(lambda m: _LOOKALIKE_TEXT[m.group()], buf)
    return buf


# bytes that do not occur in text (UTF-8 multibyte bytes and \t \n \r \f \v \x1b count as text)
_NON_TEXT = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13, 27)) + b"\x7f"


@dataclass(slots=True)
class RawHit:
    line: int  # 1-based, counted from the start of the scanned range
    text: str
    literal_ids: tuple[int, ...]
    before: list[str]
    after: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RangeScan:
    hits: list[RawHit]
    lines: int
    bytes_read: int
    problems: list[str]


def _clip(b: bytes) -> str:
    if len(b) > CONTEXT_CLIP:
        b = b[:CONTEXT_CLIP]
    return b.decode("utf-8", "replace").rstrip("\r")


def _last_lines(buf: bytes, end: int, n: int) -> list[bytes]:
    """Up to n complete lines ending just before offset `end` (which is a line start)."""
    out: list[bytes] = []
    stop = end - 1  # the newline that ends the previous line
    while len(out) < n and stop >= 0:
        start = buf.rfind(b"\n", 0, stop) + 1
        out.append(buf[start:stop])
        stop = start - 1
    out.reverse()
    return out


SCAN_SLICE = 1 << 20  # bytes searched at once: the literal hits of a slice where every line matches stay small
# A slice after one where at least 1 line in DENSE_SHARE held a candidate (and DENSE_MIN_HITS lines)
# tries the dense path: its lines are counted by distinct text, and taken when at most 1 in
# DENSE_REPEAT is new. NCCL prints the same WARN line from each process thousands of times.
DENSE_MIN_HITS = 512
SCAN_FIRST = 64 << 10  # the first slice: see _rechunk
DENSE_SHARE = 4
DENSE_REPEAT = 4


DENSE_SINGLES = 1024  # occurrences of lines that must be read one by one a dense slice may hold


class DenseSink(Protocol):
    """What the dense path needs from the consumer of candidate lines."""

    def decide(self, text: str, literal_ids: tuple[int, ...], line: int) -> bool:
        """Whether every repeat of this line gives the same answer, and only their count, the
        first line of each printer and the closing repeats still matter."""
        ...

    def repeated(self, view: DenseSlice) -> None:
        ...


class DenseSlice:
    """A slice of a dense log as its candidate lines, in order: a line whose text decides its
    answer once, at its first occurrence, with the number of its repeats; any other line at
    each of its occurrences. The closing occurrences are built on request."""

    def __init__(self, entries: list[tuple[int, int, bool]], lines: list[bytes], end: int,
                 make: Callable[[int, tuple[int, ...]], RawHit], ids_of: dict[bytes, tuple[int, ...]],
                 line_base: int, muted: set[int] | None) -> None:
        self._entries = entries  # (line index, repeats, whether the text decides)
        self._lines = lines
        self._end = end  # lines[:end] are this slice's
        self._make = make
        self._ids_of = ids_of
        self._base = line_base
        self._muted = muted

    def __iter__(self) -> Iterator[tuple[int, int, bytes, tuple[int, ...], bool]]:
        """(index, repeats, raw line, literal ids, whether the text decides); a literal muted by an
        earlier entry is left out, as the line path leaves it out. `hit` builds an entry's line."""
        muted = self._muted
        for i, count, decided in self._entries:
            raw = self._lines[i]
            ids = self._ids_of[raw]
            if muted and not muted.isdisjoint(ids):
                ids = tuple(k for k in ids if k not in muted)
                if not ids:
                    continue
            yield i, count, raw, ids, decided

    def line(self, i: int) -> int:
        return self._base + i + 1

    def hit(self, i: int, ids: tuple[int, ...]) -> RawHit:
        return self._make(i, ids)

    def closing(self, raws: set[bytes], since: int) -> Iterator[RawHit]:
        """The occurrences of any of `raws` at line `since` or later, the last first."""
        lines = self._lines
        for i in range(self._end - 1, max(0, since - self._base - 1) - 1, -1):
            if lines[i] in raws:
                yield self._make(i, self._ids_of[lines[i]])


def _dense_slice(buf: bytes, backend, line_base: int, tail: list[bytes], muted: set[int] | None,  # noqa: ANN001
                 needs_context: list[bool] | None, dense: DenseSink) -> tuple[int, list[bytes], list[bytes]] | None:
    """Hand a repetitive slice to `dense` by distinct line; None when it is not repetitive enough
    (the caller then scans it line by line). Returns how many lines were taken, the last BEFORE
    of them, and the lines left for the next slice: the last AFTER + 1, whose `after` context is
    not in this slice."""
    lines = buf.split(b"\n")  # buf ends with a newline: the last item is empty
    end = len(lines) - 1 - (AFTER + 1)
    if end < DENSE_MIN_HITS:
        return None
    counts = Counter(lines[:end])
    if len(counts) * DENSE_REPEAT > end:
        return None
    uniq = list(counts)
    joined = b"\n".join(uniq)
    starts = [0]
    for line in uniq:
        starts.append(starts[-1] + len(line) + 1)
    lits_of: dict[int, set[int]] = {}
    for hit_end, lit in backend.find(joined):
        if muted and lit in muted:
            continue
        lits_of.setdefault(bisect_right(starts, hit_end - 1) - 1, set()).add(lit)

    def make(i: int, ids: tuple[int, ...]) -> RawHit:
        text = lines[i].decode("utf-8", "replace")
        if needs_context is not None and not any(needs_context[k] for k in ids):
            return RawHit(line_base + i + 1, text, ids, [], [])  # as the line path: facts need no context
        before = [_clip(b) for b in lines[max(0, i - BEFORE):i]]
        if len(before) < BEFORE:
            before = ([_clip(b) for b in tail] + before)[-BEFORE:]
        return RawHit(line_base + i + 1, text, ids, before, [_clip(b) for b in lines[i + 1:i + 1 + AFTER]])

    ids_of: dict[bytes, tuple[int, ...]] = {}
    entries: list[tuple[int, int, bool]] = []
    singles = 0
    for u, lits in lits_of.items():
        raw = uniq[u]
        if len(raw) > WINDOW * 2:
            return None  # the regexes see a window of long lines: the line path knows how
        i = lines.index(raw)
        ids = ids_of[raw] = tuple(sorted(lits))
        if dense.decide(raw.decode("utf-8", "replace"), ids, line_base + i + 1):
            entries.append((i, counts[raw], True))
            continue
        singles += counts[raw]
        if singles > DENSE_SINGLES:
            return None
        entries.append((i, 1, False))
        for _ in range(counts[raw] - 1):
            i = lines.index(raw, i + 1)
            entries.append((i, 1, False))
    entries.sort()
    dense.repeated(DenseSlice(entries, lines, end, make, ids_of, line_base, muted))
    return end, lines[max(0, end - BEFORE):end], lines[end:-1]


HIT_PIECE = 1 << 20  # bytes searched at once within a buffer: a long line's hits never pile up


def _line_hits(buf: bytes, backend, muted: set[int] | None,  # noqa: ANN001
               ) -> tuple[list[int], dict[int, set[int]], dict[tuple[int, int], list[int]]]:
    """The lines of `buf` with literal hits: their starts in order, each one's literal ids, and per
    (line, literal) the end of its first and last hit (where the regexes look on a long line).
    The buffer is searched a piece at a time (overlapping by the longest literal), so a 16 MB line
    with millions of hits holds one piece's hits at once, not all of them."""
    starts: list[int] = []
    by_line: dict[int, set[int]] = {}
    spans: dict[tuple[int, int], list[int]] = {}
    pad = max(0, backend.longest - 1)
    ls, searched = 0, 0
    for a in range(0, len(buf), HIT_PIECE):
        lo = max(0, a - pad)
        found = backend.find(buf[lo:a + HIT_PIECE] if lo or a + HIT_PIECE < len(buf) else buf)
        if not found:
            continue
        found.sort()
        stop = min(len(buf), a + HIT_PIECE)
        if stop - a > WINDOW and buf.find(b"\n", max(searched, lo), stop) < 0:
            # inside one long line: every hit is on the same line, no line to look for per hit
            nl = buf.rfind(b"\n", searched, max(searched, lo))
            if nl >= 0:
                ls = nl + 1
            searched = stop
            mine = found[bisect_right(found, (a - lo, 1 << 62)):]  # the previous piece had the rest
            last = {lit: end for end, lit in mine}
            first = {lit: end for end, lit in reversed(mine)}
            for lit in muted.intersection(first) if muted else ():
                del first[lit]
            if not first:
                continue
            if ls not in by_line:
                by_line[ls] = set()
                starts.append(ls)
            by_line[ls].update(first)
            for lit, end in first.items():
                span = spans.setdefault((ls, lit), [end + lo, 0])
                span[1] = last[lit] + lo
            continue
        for end, lit in found:
            end += lo
            if end <= a or (muted and lit in muted):
                continue  # the previous piece found it; a fact that read all it keeps
            # ends are sorted: look back only over what the previous hit did not cover, so a
            # 16 MB line with a million literal hits costs one pass, not a million
            if end > searched:
                nl = buf.rfind(b"\n", searched, end)
                if nl >= 0:
                    ls = nl + 1
                searched = end
            got = by_line.get(ls)
            if got is None:
                by_line[ls] = {lit}
                starts.append(ls)
            else:
                got.add(lit)
            got_span = spans.get((ls, lit))
            if got_span is None:
                spans[ls, lit] = [end, end]
            else:
                got_span[1] = end
    return starts, by_line, spans


def _hand_over(hits: list[RawHit], pending: list[RawHit], sink: Callable[[RawHit], None]) -> list[RawHit]:
    """Give the sink every hit whose context is complete, in order; return those still waiting."""
    waiting = {id(h) for h in pending}
    for h in hits:
        if id(h) not in waiting:
            sink(h)
    return [h for h in hits if id(h) in waiting]


def _rechunk(chunks: Iterable[bytes], size: int, first: int) -> Iterator[bytes]:
    """Slices of `size` bytes, the first of `first`: a dense log fills its patterns' opening
    lines there, line by line, and the dense path can take over from the next slice."""
    for c in chunks:
        i = 0
        if first:
            if len(c) > first:
                yield c[:first]
                i = first
            first = 0
        if i == 0 and len(c) <= size:
            yield c
            continue
        for j in range(i, len(c), size):
            yield c[j:j + size]


def scan_chunks(chunks: Iterator[bytes], backend, first_line: int = 1, leading: list[bytes] | None = None,  # noqa: ANN001
                needs_context: list[bool] | None = None, sink: Callable[[RawHit], None] | None = None,
                muted: set[int] | None = None, dense: DenseSink | None = None) -> RangeScan:
    """Scan a stream of byte chunks line by line; return candidate lines with a little context.

    With `sink`, each candidate goes to it as soon as its context is complete and none is kept:
    memory then stays flat however many lines match. `muted` holds literal ids to ignore from the
    next buffer on; the sink may add to it (a fact that has read all it keeps). With `dense` (and
    `sink`), a slice of repeated lines goes to it by distinct line instead (see `_dense_slice`)."""
    hits: list[RawHit] = []
    problems: list[str] = []
    carry = b""
    line_base = first_line - 1  # lines completed before the current buffer
    tail: list[bytes] = list(leading or [])[-BEFORE:]
    pending: list[RawHit] = []  # hits still collecting their `after` lines
    nbytes = 0
    checked_binary = False
    split_long = 0
    stream = _rechunk(chunks, SCAN_SLICE, SCAN_FIRST)
    done = False
    dense_next = False  # the last slice was dense: try the dense path on this one
    while not done:
        data = next(stream, None)
        forced = False
        if data is None:
            done = True
            buf, carry = carry, b""
            if not buf:
                break
        else:
            nbytes += len(data)
            if not checked_binary:
                checked_binary = True
                sample = data[:65536]
                junk = len(sample) - len(sample.translate(None, _NON_TEXT))
                if sample and junk / len(sample) > 0.10:
                    problems.append(f"looks like binary data ({100 * junk // len(sample)}% control bytes); scanned it as text anyway")
            buf = carry + data if carry else data
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                if len(buf) < MAX_LINE:
                    carry = buf
                    continue
                cut = len(buf)
                split_long += 1
                forced = True
            carry = buf[cut:]
            buf = buf[:cut]
        buf = _plain_text(buf)
        if pending:
            # complete the `after` context of hits near the end of the previous buffer
            pos = 0
            for _ in range(AFTER):
                if pos >= len(buf):
                    break
                nl = buf.find(b"\n", pos)
                nl = len(buf) if nl < 0 else nl
                line = _clip(buf[pos:nl])
                for h in pending:
                    if len(h.after) < AFTER:
                        h.after.append(line)
                pos = nl + 1
            pending = [h for h in pending if len(h.after) < AFTER]
            if sink is not None:  # now, before this buffer's own: the sampler sees lines in order
                hits = _hand_over(hits, pending, sink)
        if dense is not None and sink is not None and dense_next and not done and not forced and not pending:
            took = _dense_slice(buf, backend, line_base, tail, muted, needs_context, dense)
            if took is not None:
                n, last, rest = took
                line_base += n
                tail = (tail + last)[-BEFORE:]
                carry = b"".join(ln + b"\n" for ln in rest) + carry
                continue
        dense_next = False
        newlines = buf.count(b"\n")
        starts, by_line, spans = _line_hits(buf, backend, muted)
        clipped: dict[int, str] = {}  # line start -> its context text: dense hits share their neighbours

        def clip_at(start: int, stop: int, buf: bytes = buf, clipped: dict[int, str] = clipped) -> str:
            got = clipped.get(start)
            if got is None:
                got = clipped[start] = _clip(buf[start:stop])
            return got
        if starts:
            prev, count = 0, 0
            dense_next = len(starts) >= DENSE_MIN_HITS and len(starts) * DENSE_SHARE >= newlines
            for ls in starts:
                count += buf.count(b"\n", prev, ls)
                prev = ls
                le = buf.find(b"\n", ls)
                le = len(buf) if le < 0 else le
                lits = by_line[ls]
                if muted and not lits.isdisjoint(muted):  # muted by a line earlier in this buffer
                    lits = lits - muted
                    if not lits:
                        continue
                if le - ls > WINDOW * 2:  # a very long line: the regexes see a window around the hits
                    lo = max(ls, min(spans[ls, lit][0] for lit in lits) - WINDOW)
                    hi = min(le, max(spans[ls, lit][1] for lit in lits) + WINDOW, lo + WINDOW * 4)
                    text = buf[lo:hi].decode("utf-8", "replace")
                else:
                    text = buf[ls:le].decode("utf-8", "replace")
                if needs_context is not None and not any(needs_context[i] for i in lits):
                    # fact-only lines (NCCL init chatter can be 10% of a log): no context to build
                    bare = RawHit(line_base + count + 1, text, tuple(lits), [], [])
                    if sink is not None and not pending:
                        sink(bare)
                    else:
                        hits.append(bare)
                    continue
                before: list[str] = []
                stop = ls - 1  # the newline that ends the previous line
                while len(before) < BEFORE and stop >= 0:
                    start = buf.rfind(b"\n", 0, stop) + 1
                    before.append(clip_at(start, stop))
                    stop = start - 1
                before.reverse()
                if len(before) < BEFORE and count < BEFORE:
                    before = ([_clip(b) for b in tail] + before)[-BEFORE:]
                hit = RawHit(line_base + count + 1, text, tuple(sorted(lits)), before)
                pos = le + 1
                while len(hit.after) < AFTER and pos < len(buf):
                    nl = buf.find(b"\n", pos)
                    nl = len(buf) if nl < 0 else nl
                    hit.after.append(clip_at(pos, nl))
                    pos = nl + 1
                if len(hit.after) < AFTER:
                    pending.append(hit)
                elif sink is not None and not pending:  # complete, none before it waits: verified now
                    sink(hit)
                    continue
                hits.append(hit)
        if sink is not None:
            hits = _hand_over(hits, pending, sink)
        line_base += newlines
        if not buf.endswith(b"\n") and not forced:
            line_base += 1  # the unterminated last line (a forced split goes on in the next buffer)
        tail = (tail + _last_lines(buf, len(buf) if buf.endswith(b"\n") else len(buf) + 1, BEFORE))[-BEFORE:]
    if split_long:
        problems.append(f"lines longer than {MAX_LINE >> 20} MiB were cut ({split_long} cut(s)) to keep memory bounded")
    if sink is not None:
        for h in hits:
            sink(h)
        hits = []
    return RangeScan(hits=hits, lines=line_base - (first_line - 1), bytes_read=nbytes, problems=problems)
