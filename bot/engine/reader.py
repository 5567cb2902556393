"""Open log sources: files, directories (one source per file), stdin, .gz and .zst, pasted text.

Everything is streamed in fixed-size chunks so memory does not grow with the input. Problems
(truncated gzip, unreadable files, binary junk) are recorded on the source and never raised: the
caller still gets a diagnosis of what could be read.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

CHUNK = 8 << 20  # 8 MiB: large enough for memory-speed scanning, small enough to bound RSS
MAX_DIR_FILES = 20000
MAX_DIR_DEPTH = 32  # an incident's logs nest a few levels; 1,000 levels is an attack or a loop
# What one diagnosis reads at most, after decompression: a 64-rank job's logs with room to spare
# (`triage diagnose --max-bytes`). Beyond it, files are left out and the report says which.
DEFAULT_MAX_BYTES = 8 << 30
MAX_DEVICE_BYTES = 1 << 30  # a character device named on the command line (/dev/zero) never ends
SKIP_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".pdf", ".pt", ".pth", ".safetensors", ".bin", ".npy",
                 ".npz", ".so", ".whl", ".zip", ".tar", ".pyc"}
SKIP_NAMES = {"meta.yaml", ".DS_Store"}


class SourceError(Exception):
    """The input cannot be read at all (missing path, permission denied)."""


@dataclass
class Source:
    """One stream of log lines: a rank's file, a host's kernel log, a pasted message."""

    name: str
    label: str | None = None  # what rank/host hints are read from (path inside the given directory)
    path: str | None = None  # a real file (allows parallel range scans when uncompressed)
    data: bytes | None = None  # in-memory text (pastes, uploads)
    stdin: bool = False
    size: int | None = None
    compression: str | None = None  # gzip | zstd | None
    problems: list[str] = field(default_factory=list)
    max_bytes: int | None = None  # stop after this many (decompressed) bytes: gzip bombs, huge uploads
    encoding: str | None = None  # utf-16-le / utf-16-be / utf-32-le / utf-32-be: re-encoded to UTF-8 as read

    def open(self) -> BinaryIO:
        if self.data is not None:
            raw: BinaryIO = io.BytesIO(self.data)
        elif self.stdin:
            raw = sys.stdin.buffer
        else:
            assert self.path is not None
            raw = open(self.path, "rb")  # noqa: SIM115 - closed by the caller
        return raw  # gzip and zstd are decompressed by the readers below, which report truncation

    @property
    def splittable(self) -> bool:
        return self.path is not None and self.compression is None and self.encoding is None


def _compression(head: bytes, name: str) -> str | None:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return None


_BOMS = [(b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")]


def text_encoding(head: bytes) -> str | None:
    """UTF-16/32 (PowerShell's `>` writes UTF-16 LE with a BOM; some tools omit it), else None."""
    for bom, enc in _BOMS:
        if head.startswith(bom):
            return enc
    sample = head[:4096]
    if len(sample) >= 64:
        even, odd = sample[0::2], sample[1::2]
        if sample[1::4].count(0) + sample[2::4].count(0) + sample[3::4].count(0) > 0.9 * 3 * len(sample[::4]):
            return "utf-32-le"
        if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
            return "utf-16-le"
        if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
            return "utf-16-be"
    return None


def source_for_file(path: Path, name: str | None = None, label: str | None = None) -> Source:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            # /dev/zero, a FIFO, /dev/stdin: read as a stream, under the byte cap (a device never ends)
            cap = MAX_DEVICE_BYTES if stat.S_ISCHR(st.st_mode) else DEFAULT_MAX_BYTES
            return Source(name=name or str(path), label=label or path.name, path=str(path), size=None,
                          max_bytes=cap, problems=["not a regular file: read as a stream"])
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror or exc}") from exc
    comp = _compression(head[:4], str(path))
    return Source(name=name or str(path), label=label or path.name, path=str(path), size=st.st_size,
                  compression=comp, encoding=None if comp else text_encoding(head))


def source_for_bytes(name: str, data: bytes, max_bytes: int | None = None) -> Source:
    comp = _compression(data[:4], name)
    return Source(name=name, data=data, size=len(data), compression=comp, max_bytes=max_bytes,
                  encoding=None if comp else text_encoding(data[:4096]))


def _walk(root: Path, problems: list[str], label: str) -> Iterator[Path]:
    """Regular files under `root`, sorted, breadth by depth: iterative (no recursion limit), at most
    MAX_DIR_DEPTH deep, each real directory once (symlink loops), and every skip said."""
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            st = d.stat()
        except OSError as exc:
            problems.append(f"{label}: cannot read {d}: {exc.strerror or exc}")
            continue
        if (st.st_dev, st.st_ino) in seen:
            problems.append(f"{label}: {d} loops back to a directory already read (symlink loop); skipped")
            continue
        seen.add((st.st_dev, st.st_ino))
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            problems.append(f"{label}: cannot read directory {d}: {exc.strerror or exc}")
            continue
        subdirs = []
        for e in entries:
            if e.name.startswith(".") or e.name in SKIP_NAMES:
                continue
            try:
                if e.is_dir():
                    if depth + 1 > MAX_DIR_DEPTH:
                        problems.append(f"{label}: {e.path} is more than {MAX_DIR_DEPTH} levels deep; not read")
                    else:
                        subdirs.append(Path(e.path))
                    continue
                if not e.is_file():
                    what = "a FIFO" if stat.S_ISFIFO(e.stat().st_mode) else "not a regular file"
                    problems.append(f"{label}: skipped {e.path}: {what}")
                    continue
            except OSError as exc:
                problems.append(f"{label}: cannot read {e.path}: {exc.strerror or exc}")
                continue
            if Path(e.name).suffix.lower() in SKIP_SUFFIXES:
                continue
            yield Path(e.path)
        stack.extend((sd, depth + 1) for sd in reversed(subdirs))


def sources_from_paths(paths: list[str], max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[list[Source], list[str]]:
    """Resolve CLI arguments into sources. Returns (sources, problems that are not fatal).

    `max_bytes` caps what the whole diagnosis reads: regular files past it are left out (and named),
    streams and compressed files get what is left of it."""
    sources: list[Source] = []
    problems: list[str] = []
    for arg in paths:
        if arg == "-":
            sources.append(Source(name="<stdin>", stdin=True))
            continue
        p = Path(arg)
        if p.is_dir():
            files: list[Path] = []
            for f in _walk(p, problems, arg):
                if len(files) >= MAX_DIR_FILES:
                    problems.append(f"{arg}: more than {MAX_DIR_FILES} files; read the first {MAX_DIR_FILES}")
                    break
                files.append(f)
            if not files:
                problems.append(f"{arg}: directory holds no log files")
            for f in files:
                rel = f.relative_to(p)
                try:
                    sources.append(source_for_file(f, name=str(Path(p.name) / rel) if p.name else str(rel),
                                                   label=str(rel)))
                except SourceError as exc:
                    problems.append(str(exc))
        elif p.exists():
            sources.append(source_for_file(p, name=arg))
        elif p.is_symlink():
            raise SourceError(f"{arg}: a symbolic link whose target is missing (or loops)")
        else:
            raise SourceError(f"{arg}: no such file or directory")
    if max_bytes is not None:
        sources = _budget(sources, max_bytes, problems)
    return sources, problems


def _budget(sources: list[Source], max_bytes: int, problems: list[str]) -> list[Source]:
    left = max_bytes
    kept: list[Source] = []
    dropped: list[str] = []
    for src in sources:
        if left <= 0:
            dropped.append(src.name)
            continue
        if src.size is not None and src.compression is None and src.encoding is None:
            if src.size > left:
                src.max_bytes = left
            left -= min(src.size, left)
        else:
            src.max_bytes = min(src.max_bytes or left, left)  # streams: counted as read, capped here
        kept.append(src)
    if dropped:
        shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        problems.append(f"left out {len(dropped)} file(s) past the {max_bytes >> 20} MiB limit (--max-bytes): {shown}")
    return kept


def _gunzip(source: Source, fh: BinaryIO) -> Iterator[bytes]:
    """Stream-decompress gzip (all members) with zlib, so a truncated file still yields every byte
    that was there (GzipFile.read raises and drops the partial block)."""
    dec = zlib.decompressobj(wbits=31)
    while True:
        raw = fh.read(1 << 20)
        if not raw:
            break
        try:
            while raw:
                out = dec.decompress(raw, CHUNK)
                if out:
                    yield out
                raw = dec.unconsumed_tail
                if dec.eof:
                    rest = dec.unused_data + raw
                    raw = b""
                    if rest.strip(b"\0"):  # another member follows (trailing NUL padding is not one)
                        dec = zlib.decompressobj(wbits=31)
                        raw = rest
        except zlib.error as exc:
            source.problems.append(f"gzip stream is corrupt ({exc}); diagnosed what could be read")
            return
    tail = dec.flush()
    if tail:
        yield tail
    if not dec.eof:
        source.problems.append("gzip stream is truncated (no end-of-stream marker); diagnosed what could be read")


def _recode(source: Source, chunks: Iterator[bytes]) -> Iterator[bytes]:
    """UTF-16/32 to UTF-8, incrementally (a code unit may straddle two chunks)."""
    assert source.encoding is not None
    dec = codecs.getincrementaldecoder(source.encoding)("replace")
    first = True
    for c in chunks:
        text = dec.decode(c)
        if first:
            text = text.removeprefix("\ufeff")
            first = False
        if text:
            yield text.encode("utf-8")
    tail = dec.decode(b"", final=True)
    if tail:
        yield tail.encode("utf-8")


def read_chunks(source: Source, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """Yield the source's bytes in chunks (UTF-8), at most `source.max_bytes` of them."""
    raw = _read_chunks(source, start, end)
    if source.stdin and source.encoding is None:
        first = next(raw, b"")
        source.encoding = None if source.compression else text_encoding(first[:4096])
        raw = _chain(first, raw)
    elif source.compression and source.encoding is None:
        first = next(raw, b"")  # decompressed text: UTF-16 inside a .gz is still UTF-16
        source.encoding = text_encoding(first[:4096])
        raw = _chain(first, raw)
    if source.encoding is not None:
        if "decoded as" not in " ".join(source.problems):
            source.problems.append(f"text is {source.encoding.upper()}; decoded as such")
        raw = _recode(source, raw)
    if source.max_bytes is None:
        yield from raw
        return
    budget = source.max_bytes
    for chunk in raw:
        if len(chunk) >= budget:
            yield chunk[:budget]
            source.problems.append(f"read the first {source.max_bytes >> 20} MiB only (size limit)")
            return
        budget -= len(chunk)
        yield chunk


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _unzstd(source: Source, fh: BinaryIO) -> Iterator[bytes]:
    """Stream-decompress every zstd frame, saying so when the last one is cut short."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dec = dctx.decompressobj()
    fed = False
    while True:
        raw = fh.read(1 << 20)
        if not raw:
            break
        try:
            while raw:
                fed = True
                out = dec.decompress(raw)
                if out:
                    yield out
                raw = b""
                if dec.eof:
                    rest = dec.unused_data
                    dec = dctx.decompressobj()
                    fed = False
                    raw = rest
        except zstandard.ZstdError as exc:
            source.problems.append(f"zstd stream is corrupt ({exc}); diagnosed what could be read")
            return
    if fed and not dec.eof:
        source.problems.append("zstd stream is truncated (its last frame is incomplete); diagnosed what could be read")


def _read_chunks(source: Source, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """Yield the source's bytes in chunks; record (not raise) open and decompression problems."""
    if source.stdin and source.compression is None:
        peek = getattr(sys.stdin.buffer, "peek", None)
        if peek is not None:
            source.compression = _compression(peek(4)[:4], source.name)
    try:
        fh = source.open()
    except OSError as exc:
        source.problems.append(f"cannot open: {exc.strerror or exc}")
        return
    try:
        if source.compression == "gzip":
            yield from _gunzip(source, fh)
        elif source.compression == "zstd":
            yield from _unzstd(source, fh)
        else:
            yield from _plain(source, fh, start, end)
    finally:
        if not source.stdin:
            fh.close()


def _plain(source: Source, fh: BinaryIO, start: int, end: int | None) -> Iterator[bytes]:
    if start:
        fh.seek(start)
    remaining = None if end is None else end - start
    while remaining is None or remaining > 0:
        want = CHUNK if remaining is None else min(CHUNK, remaining)
        try:
            data = fh.read(want)
        except Exception as exc:  # zstandard raises its own ZstdError
            if type(exc).__name__ == "ZstdError":
                source.problems.append(f"zstd stream is corrupt ({exc}); diagnosed what could be read")
                return
            raise
        if not data:
            return
        if remaining is not None:
            remaining -= len(data)
        yield data
