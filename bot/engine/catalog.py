"""NVIDIA Xid catalog (signatures/xid-catalog.yaml): what an Xid code means and what to do."""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from .library import default_root


@cache
def _catalog() -> dict[int, dict[str, Any]]:
    path = default_root() / "xid-catalog.yaml"
    if not path.exists():
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        out: dict[int, dict[str, Any]] = {}
        for entry in doc.get("xids", []):
            for code in entry.get("codes") or [entry["code"]]:
                out[int(code)] = entry
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError):
        return {}  # `triage signatures lint` reports a broken catalog; a diagnosis must not fail on it
    return out


def catalog_problems() -> list[str]:
    path = default_root() / "xid-catalog.yaml"
    if not path.exists():
        return []
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        entries = doc["xids"]
        for i, entry in enumerate(entries):
            if not (entry.get("codes") or "code" in entry) or not entry.get("meaning") or not entry.get("action"):
                return [f"entry {i} needs code (or codes), meaning and action"]
            [int(c) for c in entry.get("codes") or [entry["code"]]]
    except (yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as exc:
        return [f"not a valid catalog: {exc}"]
    return []


def lookup(code: int | str) -> dict[str, Any] | None:
    try:
        return _catalog().get(int(code))
    except (TypeError, ValueError):
        return None


def describe(code: int | str) -> dict[str, str]:
    """Placeholders for summaries and actions: xid_name, xid_meaning, xid_action, xid_culprit."""
    entry = lookup(code)
    if not entry:
        return {"xid_name": f"Xid {code}", "xid_meaning": "not in the catalog this library ships",
                "xid_action": "look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
                "xid_culprit": "unknown"}
    return {
        "xid_name": entry.get("mnemonic", f"Xid {code}"),
        "xid_meaning": entry.get("meaning", ""),
        "xid_action": entry.get("action", ""),
        "xid_culprit": entry.get("culprit", ""),
    }
