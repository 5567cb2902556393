"""Unpack small compressed uploads before the engine sees them.

An archive that unpacks to at most `keep_max` bytes is unpacked here, so its text can be redacted
and kept whole in the store; a bigger one goes to the engine as it is (the engine streams it under
its own size budget). Unpacking stops as soon as `keep_max` is passed: a 50 GB gzip bomb costs
one chunk here.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Literal


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


# -- archives: .zip, .tar, .tar.gz / .tgz (and .tar.zst) -----------------------------------------------
#
# Each member is one source for the engine (rank0.log, rank1.log, dmesg.txt: the incident's files
# as they were zipped). Bounded: at most MAX_MEMBERS members are read and at most `max_total`
# bytes once unpacked, whatever the headers claim; members that are not text (images,
# checkpoints, core files) are left out without a word.

MAX_MEMBERS = 64
SKIP_MEMBER_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".pdf", ".pt", ".pth", ".bin", ".safetensors", ".ckpt",
                        ".so", ".o", ".pyc", ".whl", ".npy", ".npz", ".pkl", ".pickle", ".h5", ".zip", ".tar",
                        ".core", ".svg", ".ico")


@dataclass
class Member:
    name: str
    data: bytes


@dataclass
class Archive:
    kind: str  # zip | tar
    members: list[Member] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def archive_kind(data: bytes, name: str = "") -> str | None:
    """'zip' or 'tar' (plain or inside gzip/zstd) by content; the name only breaks ties."""
    if data[:4] == b"PK\x03\x04":
        return "zip"
    if len(data) > 262 and data[257:262] == b"ustar":
        return "tar"
    if compression_of(data) is not None:
        lower = name.lower()
        if lower.endswith((".tar.gz", ".tgz", ".tar.zst", ".tzst")):
            return "tar"
        head = unpack_small(data[: 1 << 16], 1 << 20).data or b""  # the first chunk tells
        if len(head) > 262 and head[257:262] == b"ustar":
            return "tar"
    return None


def _skipped(member: str) -> bool:
    base = member.rsplit("/", 1)[-1]
    return not base or base.startswith(".") or "__MACOSX/" in member or base.lower().endswith(SKIP_MEMBER_SUFFIXES)


def _read_zip(data: bytes, out: Archive, max_total: int, max_members: int) -> None:
    import io
    import zipfile

    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as exc:
        out.problems.append(f"the zip archive cannot be read ({exc})")
        return
    total = 0
    files = [i for i in zf.infolist() if not i.is_dir() and not _skipped(i.filename)]
    if len(files) > max_members:
        out.problems.append(f"the archive holds {len(files)} files; read the first {max_members}")
    for info in files[:max_members]:
        left = max_total - total
        if left <= 0:
            out.problems.append(f"stopped unpacking at {max_total >> 20} MB (TRIAGE_MAX_UNPACKED_MB)")
            return
        try:
            with zf.open(info) as fh:
                body = fh.read(left + 1)
        except (zipfile.BadZipFile, RuntimeError, OSError, NotImplementedError, EOFError) as exc:
            out.problems.append(f"{info.filename} in the archive cannot be read ({exc})")
            continue
        if len(body) > left:
            body = body[:left]
            out.problems.append(f"{info.filename}: stopped unpacking at {max_total >> 20} MB (TRIAGE_MAX_UNPACKED_MB)")
        total += len(body)
        out.members.append(Member(info.filename, body))


def _read_tar(data: bytes, out: Archive, max_total: int, max_members: int) -> None:
    import io
    import tarfile

    comp = compression_of(data)
    stream: Any  # a BytesIO, or zstandard's reader (a file-like object, not an io class)
    mode: Literal["r|", "r|gz"]
    if comp == "zstd":
        import zstandard

        stream = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        mode = "r|"
    else:
        stream = io.BytesIO(data)
        mode = "r|gz" if comp == "gzip" else "r|"
    total = seen = 0
    try:
        with tarfile.open(fileobj=stream, mode=mode) as tf:  # streaming: no seeking, no member table
            for info in tf:
                if not info.isfile() or _skipped(info.name):
                    continue
                seen += 1
                if seen > max_members:
                    out.problems.append(f"the archive holds more than {max_members} files; read the first {max_members}")
                    return
                left = max_total - total
                if left <= 0:
                    out.problems.append(f"stopped unpacking at {max_total >> 20} MB (TRIAGE_MAX_UNPACKED_MB)")
                    return
                fh = tf.extractfile(info)
                body = fh.read(min(info.size, left)) if fh else b""
                if info.size > left:
                    out.problems.append(f"{info.name}: stopped unpacking at {max_total >> 20} MB (TRIAGE_MAX_UNPACKED_MB)")
                total += len(body)
                out.members.append(Member(info.name, body))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        out.problems.append(f"the tar archive is damaged ({exc}); read what came before")
    except Exception as exc:  # zstandard.ZstdError and the like: a damaged upload loses only itself
        out.problems.append(f"the tar archive is damaged ({exc}); read what came before")


def read_archive(data: bytes, name: str, max_total: int, max_members: int = MAX_MEMBERS) -> Archive | None:
    """The text-like members of a zip or tar upload, bounded; None when `data` is no archive."""
    kind = archive_kind(data, name)
    if kind is None:
        return None
    out = Archive(kind)
    (_read_zip if kind == "zip" else _read_tar)(data, out, max_total, max_members)
    return out
