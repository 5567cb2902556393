"""Evidence items: what goes to the engine, and what the store keeps of it.

Small items (pastes, thread replies, logs up to KEEP_WHOLE_BYTES unpacked) are redacted first and
the engine reads the redacted text, so what is stored, re-diagnosed and echoed is the same text.
Large uploads go to the engine as they are (redacting gigabytes would cost more than the scan) and
the store keeps only a redacted excerpt of their matched lines plus where to fetch them again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from bot.engine import Report
from bot.redact import MASK, redact, redact_bytes, redact_text
from bot.store import EvidenceRecord, NewEvidence

from .unpack import unpack_small

KEEP_WHOLE_BYTES = 2 << 20
EXCERPT_MAX_CHARS = 64_000
BINARY_SAMPLE = 8192


@dataclass
class Piece:
    kind: str  # message | reply | file | slash | shortcut | job-log | verdict
    name: str  # the engine's source name ("message", "rank3.log"): shown as source:line
    data: bytes  # what the engine reads (redacted text when kept, else the original bytes)
    size: int  # original size in bytes
    sha256: str
    kept: bool  # the redacted text is stored whole
    redactions: int = 0
    author: str | None = None
    ref: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _looks_binary(data: bytes) -> bool:
    sample = data[:BINARY_SAMPLE]
    if not sample:
        return False
    if b"\0" in sample:
        return True
    text_bytes = sum(1 for b in sample if b >= 32 or b in (9, 10, 13, 27))
    return text_bytes / len(sample) < 0.85


def prepare(kind: str, name: str, raw: bytes, *, author: str | None = None,
            ref: dict[str, Any] | None = None) -> Piece:
    """Unpack small archives and redact what will be kept whole; big items stay as they are."""
    sha = hashlib.sha256(raw).hexdigest()
    un = unpack_small(raw, KEEP_WHOLE_BYTES)
    piece = Piece(kind=kind, name=name, data=raw, size=len(raw), sha256=sha, kept=False, author=author,
                  ref=dict(ref or {}), problems=list(un.problems))
    if un.data is not None:
        if _looks_binary(un.data):
            piece.problems.append(f"{name} looks like binary data, not a text log; read what text it holds")
            return piece
        red = redact_bytes(un.data)
        piece.data = red.text.encode("utf-8")
        piece.kept = True
        # Text that reached here through the work table was redacted when it was queued (the store
        # never holds a secret): its masks count too, so the answer can still say how many went.
        piece.redactions = red.count + un.data.count(MASK.encode())
    return piece


def excerpt_for(piece_name: str, report: Report) -> str:
    """The matched lines of one source with their context (redacted), for items too big to keep whole."""
    return redact(_matched_lines(piece_name, report))[:EXCERPT_MAX_CHARS]


def _matched_lines(piece_name: str, report: Report) -> str:
    out: list[str] = []
    seen: set[int] = set()
    for d in report.diagnoses:
        for ev in d.evidence:
            if ev.source != piece_name or ev.line in seen:
                continue
            seen.add(ev.line)
            out.extend(ev.before)
            out.append(ev.text)
            out.extend(ev.after)
            out.append("")
    return "\n".join(out)


def to_record(piece: Piece, report: Report) -> NewEvidence:
    redactions, excerpt = piece.redactions, None
    if not piece.kept:  # the big item was not redacted whole: count what its excerpt lost
        red = redact_text(_matched_lines(piece.name, report))
        redactions, excerpt = red.count, red.text[:EXCERPT_MAX_CHARS]
    return NewEvidence(
        kind=piece.kind,
        name=piece.name,
        size=piece.size,
        sha256=piece.sha256,
        redactions=redactions,
        text=piece.data.decode("utf-8", "replace") if piece.kept else None,
        excerpt=excerpt,
        author=piece.author,
        ref=piece.ref,
    )


def from_record(rec: EvidenceRecord, data: bytes | None = None) -> Piece:
    """Rebuild a piece for re-diagnosis: the kept text, re-fetched bytes, or the stored excerpt."""
    problems: list[str] = []
    if rec.text is not None:
        body, kept = rec.text.encode("utf-8"), True
    elif data is not None:
        body, kept = data, False
    else:
        body, kept = (rec.excerpt or "").encode("utf-8"), True
        problems = [f"{rec.name}: the original could not be fetched again; re-read its stored excerpt"]
    return Piece(kind=rec.kind, name=rec.name, data=body, size=rec.size, sha256=rec.sha256, kept=kept,
                 redactions=rec.redactions, author=rec.author, ref=rec.ref, problems=problems)


def unique_name(name: str, taken: set[str]) -> str:
    """Two uploads called rank0.log in one thread must stay two sources."""
    if name not in taken:
        taken.add(name)
        return name
    i = 2
    while f"{name} ({i})" in taken:
        i += 1
    taken.add(f"{name} ({i})")
    return f"{name} ({i})"
