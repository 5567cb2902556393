"""NVIDIA Xid and NVSwitch SXid catalogue: what a code means and what to do.

The entries live in one file, node_agent/data/xid-catalog.json, read through node_agent/catalog.py
(standard library only), so the engine and the node agent give the same meaning, severity and action
for a code. Where a code's kernel line prints its own Fatal/Non-fatal word (NVLink5 Xids 144-150,
SXids) that word decides the severity and the action (`occurrence`).
"""

from __future__ import annotations

import re
from typing import Any

from node_agent import catalog as _shared

CATALOG_FILE = "node_agent/data/xid-catalog.json"

# captures the engine adds to every evidence line that captures `xid` / `sxid` (`annotate`); cause
# conditions may name them like a pattern's own groups
DERIVED_CAPTURES = {"xid_severity": "xid", "xid_bucket": "xid", "xid_word": "xid",
                    "sxid_level": "sxid", "sxid_bucket": "sxid"}

_UNKNOWN = {"xid_meaning": "not in the catalog this library ships",
            "xid_action": "look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
            "xid_culprit": "unknown", "xid_severity": "warning", "xid_bucket": "none"}


def _catalog() -> dict[int, dict[str, Any]]:
    return _shared.xids()


def catalog_problems() -> list[str]:
    return _shared.problems()


def lookup(code: int | str) -> dict[str, Any] | None:
    return _shared.xid(code)


def lookup_sxid(code: int | str) -> dict[str, Any] | None:
    return _shared.sxid(code)


def rated(kind: str, code: str | None, text: str) -> bool:
    """Whether this line's code (`kind`: "xid" or "sxid") has a severity: the catalogue lists the
    code, or the line prints its own Fatal / Non-fatal word after it."""
    if code is None:
        return False
    if (lookup_sxid(code) if kind == "sxid" else lookup(code)) is not None:
        return True
    return line_word(_after_code(text, code)) is not None


def line_word(text: str | None) -> str | None:
    return _shared.line_word(text)


def occurrence(code: int | str, text: str | None = None, *, switch: bool = False) -> dict[str, str] | None:
    """severity, action (bucket) and advice of one line with this code; the line's word decides where it may."""
    entry = lookup_sxid(code) if switch else lookup(code)
    if entry is None:
        return None
    word = line_word(text) if entry.get("line_word") else None
    out = _shared.outcome(entry, word)
    if word:
        out["word"] = word
    return out


def _after_code(text: str, code: str) -> str:
    """The part of the line after the code (a syslog prefix's words say nothing of the code)."""
    m = re.search(rf"(?<!\d){re.escape(code)}(?!\d)", text)
    return text[m.end():] if m else text


def annotate(captures: dict[str, str], text: str) -> None:
    """Add the catalogue's verdict for this one line: xid_severity, xid_bucket (and xid_word when the
    line's Fatal/Non-fatal word decided); sxid_level, sxid_bucket for an SXid line."""
    code = captures.get("xid")
    if code is not None and "xid_severity" not in captures:
        occ = occurrence(code, _after_code(text, code))
        if occ is not None:
            captures["xid_severity"], captures["xid_bucket"] = occ["severity"], occ["action"]
            if "word" in occ:
                captures["xid_word"] = occ["word"]
    code = captures.get("sxid")
    if code is not None and "sxid_level" not in captures:
        occ = occurrence(code, _after_code(text, code), switch=True)
        if occ is not None:
            captures["sxid_level"], captures["sxid_bucket"] = occ["severity"], occ["action"]


def describe(code: int | str, word: str | None = None) -> dict[str, str]:
    """Placeholders for summaries and actions: xid_name, xid_meaning, xid_action, xid_culprit,
    xid_severity, xid_bucket (`word`: the line's Fatal/Non-fatal, where the code lets it decide)."""
    entry = lookup(code)
    if not entry:
        return {"xid_name": f"Xid {code}", **_UNKNOWN}
    got = _shared.outcome(entry, word)
    return {
        "xid_name": entry.get("mnemonic", f"Xid {code}"),
        "xid_meaning": entry.get("meaning", ""),
        "xid_action": got["advice"],
        "xid_culprit": entry.get("culprit") or entry.get("origin", ""),
        "xid_severity": got["severity"],
        "xid_bucket": got["action"],
    }


def describe_sxid(code: int | str, word: str | None = None) -> dict[str, str]:
    """Placeholders for SXid summaries: sxid_name, sxid_meaning, sxid_action, sxid_level, sxid_bucket."""
    entry = lookup_sxid(code)
    if not entry:
        return {"sxid_name": f"SXid {code}", "sxid_meaning": "not in the catalog this library ships",
                "sxid_action": "look it up in the NVSwitch SXid list of NVIDIA's fabric manager guide",
                "sxid_level": "warning", "sxid_bucket": "none"}
    got = _shared.outcome(entry, word)
    return {"sxid_name": entry.get("name", f"SXid {code}"), "sxid_meaning": entry.get("meaning", ""),
            "sxid_action": got["advice"], "sxid_level": got["severity"], "sxid_bucket": got["action"]}
