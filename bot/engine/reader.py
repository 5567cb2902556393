"""Open log sources: files, directories (one source per file), stdin, .gz and .zst, pasted text.

Everything is streamed in fixed-size chunks so memory does not grow with the input. Problems
(truncated gzip, unreadable files, binary junk) are recorded on the source and never raised: the
caller still gets a diagnosis of what could be read.
"""

from __future__ import annotations

import io
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

CHUNK = 8 << 20  # 8 MiB: large enough for memory-speed scanning, small enough to bound RSS
MAX_DIR_FILES = 20000
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

    def open(self) -> BinaryIO:
        if self.data is not None:
            raw: BinaryIO = io.BytesIO(self.data)
        elif self.stdin:
            raw = sys.stdin.buffer
        else:
            assert self.path is not None
            raw = open(self.path, "rb")  # noqa: SIM115 - closed by the caller
        if self.compression == "zstd":
            import zstandard

            return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)  # type: ignore[return-value]
        return raw

    @property
    def splittable(self) -> bool:
        return self.path is not None and self.compression is None


def _compression(head: bytes, name: str) -> str | None:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return None


def source_for_file(path: Path, name: str | None = None, label: str | None = None) -> Source:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
        size = path.stat().st_size
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror or exc}") from exc
    return Source(name=name or str(path), label=label or path.name, path=str(path), size=size,
                  compression=_compression(head, str(path)))


def source_for_bytes(name: str, data: bytes, max_bytes: int | None = None) -> Source:
    return Source(name=name, data=data, size=len(data), compression=_compression(data[:4], name),
                  max_bytes=max_bytes)


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fn in sorted(filenames):
            if fn.startswith(".") or fn in SKIP_NAMES or Path(fn).suffix.lower() in SKIP_SUFFIXES:
                continue
            yield Path(dirpath) / fn


def sources_from_paths(paths: list[str]) -> tuple[list[Source], list[str]]:
    """Resolve CLI arguments into sources. Returns (sources, problems that are not fatal)."""
    sources: list[Source] = []
    problems: list[str] = []
    for arg in paths:
        if arg == "-":
            sources.append(Source(name="<stdin>", stdin=True))
            continue
        p = Path(arg)
        if p.is_dir():
            files = []
            for f in _walk(p):
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
        else:
            raise SourceError(f"{arg}: no such file or directory")
    return sources, problems


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


def read_chunks(source: Source, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """Yield the source's bytes in chunks, at most `source.max_bytes` of them."""
    if source.max_bytes is None:
        yield from _read_chunks(source, start, end)
        return
    budget = source.max_bytes
    for chunk in _read_chunks(source, start, end):
        if len(chunk) >= budget:
            yield chunk[:budget]
            source.problems.append(f"read the first {source.max_bytes >> 20} MiB only (size limit)")
            return
        budget -= len(chunk)
        yield chunk


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
