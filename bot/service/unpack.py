"""Unpack small compressed uploads before the engine sees them.

An archive that unpacks to at most `keep_max` bytes is unpacked here, so its text can be redacted
and kept whole in the store; a bigger one goes to the engine as it is (the engine streams it under
its own size budget). Unpacking stops as soon as `keep_max` is passed: a 50 GB gzip bomb costs
one chunk here.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field


@dataclass
class Unpacked:
    compression: str | None
    data: bytes | None  # the unpacked bytes when they fit in keep_max, else None
    problems: list[str] = field(default_factory=list)


def compression_of(data: bytes) -> str | None:
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return None


def _gzip_chunks(data: bytes, problems: list[str]):  # noqa: ANN202 - generator of bytes
    dec = zlib.decompressobj(wbits=31)
    buf = data
    while buf:
        try:
            out = dec.decompress(buf, 1 << 20)
        except zlib.error as exc:
            problems.append(f"gzip stream is corrupt ({exc}); diagnosed what could be read")
            return
        if out:
            yield out
        buf = dec.unconsumed_tail
        if dec.eof:
            rest = dec.unused_data + buf
            if rest.strip(b"\0"):  # another gzip member follows
                dec = zlib.decompressobj(wbits=31)
                buf = rest
            else:
                return
    tail = dec.flush()
    if tail:
        yield tail
    if not dec.eof:
        problems.append("gzip stream is truncated (no end-of-stream marker); diagnosed what could be read")


def _zstd_chunks(data: bytes, problems: list[str]):  # noqa: ANN202
    import io

    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    while True:
        try:
            out = reader.read(1 << 20)
        except zstandard.ZstdError as exc:
            problems.append(f"zstd stream is corrupt ({exc}); diagnosed what could be read")
            return
        if not out:
            return
        yield out


def unpack_small(data: bytes, keep_max: int) -> Unpacked:
    """The unpacked bytes of `data` if they fit in `keep_max`, else None (not unpacked further)."""
    comp = compression_of(data)
    if comp is None:
        return Unpacked(None, data if len(data) <= keep_max else None)
    problems: list[str] = []
    chunks = _gzip_chunks(data, problems) if comp == "gzip" else _zstd_chunks(data, problems)
    kept: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > keep_max:
            return Unpacked(comp, None)  # the engine reports its own problems when it reads the whole
        kept.append(chunk)
    return Unpacked(comp, b"".join(kept), problems)
