"""The Xid / SXid catalogue (node_agent/data/xid-catalog.json), shared by the node agent and the engine.

Standard library only: the node agent reads it when installed on its own, and the triage engine
(bot/engine/catalog.py) reads the same file through this module, so both give the same meaning,
severity and action for a code.

Each entry: `code`, `mnemonic` (Xid) or `name` (SXid), `meaning`, `severity` (fatal / critical /
warning / info), `origin` (hardware / driver / application / mixed), `action` (one of the file's
`actions`: NVIDIA's resolution buckets), `advice` (what on-call does), optionally `culprit`,
`nvidia_bucket`, `signature`, `unused`, `gpud_event` and `line_word`. `line_word` maps the word the
kernel line prints ("Fatal" / "Non-fatal") to the severity and action that word means; where it is
present the line's own word decides and the code's defaults hold only for lines without one.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from node_agent.bundled import data_dir

PATH = data_dir("data") / "xid-catalog.json"

SEVERITIES = ("fatal", "critical", "warning", "info")
ORIGINS = ("hardware", "driver", "application", "mixed")
ACTIONS = ("restart-app", "reset-gpu", "reboot-node", "drain-rma", "check-fabric", "update-software", "none")
LINE_WORDS = ("Fatal", "Non-fatal")
_REQUIRED = {"xids": ("code", "mnemonic", "meaning", "severity", "origin", "action", "advice"),
             "sxids": ("code", "name", "meaning", "severity", "origin", "action", "advice")}
# a fatal code must not be answered with "restart the app" or "nothing to do"
_TOO_MILD = {"fatal": ("restart-app", "none")}

_WORD = re.compile(r"\b(Non-?fatal|NonFatal|Fatal)\b", re.IGNORECASE)


@lru_cache(maxsize=None)
def load(path: Path | None = None) -> dict[str, Any]:
    """The parsed file; an empty catalogue when it is missing or broken (problems() says why)."""
    try:
        doc = json.loads((path or PATH).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"xids": [], "sxids": []}
    return doc if isinstance(doc, dict) else {"xids": [], "sxids": []}


def _table(kind: str, path: Path | None = None) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for entry in load(path).get(kind) or []:
        try:
            out.setdefault(int(entry["code"]), entry)
        except (KeyError, TypeError, ValueError):
            continue
    return out


@lru_cache(maxsize=None)
def xids(path: Path | None = None) -> dict[int, dict[str, Any]]:
    return _table("xids", path)


@lru_cache(maxsize=None)
def sxids(path: Path | None = None) -> dict[int, dict[str, Any]]:
    return _table("sxids", path)


def xid(code: int | str) -> dict[str, Any] | None:
    try:
        return xids().get(int(code))
    except (TypeError, ValueError):
        return None


def sxid(code: int | str) -> dict[str, Any] | None:
    try:
        return sxids().get(int(code))
    except (TypeError, ValueError):
        return None


def line_word(text: str | None) -> str | None:
    """'Fatal' or 'Non-fatal' as the line prints it (Nonfatal, NonFatal, non-fatal), else None."""
    if not text:
        return None
    m = _WORD.search(text)
    if not m:
        return None
    return "Fatal" if m.group(1).lower() == "fatal" else "Non-fatal"


def outcome(entry: dict[str, Any] | None, word: str | None = None) -> dict[str, str]:
    """severity, action and advice for one occurrence: the line's word decides where the entry says so."""
    if not entry:
        return {"severity": "warning", "action": "none", "advice": ""}
    out = {"severity": entry.get("severity", "warning"), "action": entry.get("action", "none"),
           "advice": entry.get("advice", "")}
    by_word = entry.get("line_word") or {}
    if word and word in by_word:
        out.update({k: v for k, v in by_word[word].items() if k in out and v})
    return out


def problems(path: Path | None = None) -> list[str]:
    """Every entry checked: required fields, known severity / origin / action / line word, no duplicates."""
    p = path or PATH
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        return [f"cannot read {p.name}: {exc}"]
    except ValueError as exc:
        return [f"{p.name} is not valid JSON: {exc}"]
    if not isinstance(doc, dict):
        return [f"{p.name}: the top level must be an object"]
    out: list[str] = []
    actions = doc.get("actions")
    if not isinstance(actions, dict) or set(actions) != set(ACTIONS):
        out.append(f"actions must describe exactly {', '.join(ACTIONS)}")
    for key, allowed in (("severities", SEVERITIES), ("origins", ORIGINS)):
        if not isinstance(doc.get(key), dict) or set(doc[key]) != set(allowed):
            out.append(f"{key} must describe exactly {', '.join(allowed)}")
    for kind, required in _REQUIRED.items():
        entries = doc.get(kind)
        if not isinstance(entries, list) or not entries:
            out.append(f"{kind}: needs a list of entries")
            continue
        seen: set[int] = set()
        for i, entry in enumerate(entries):
            where = f"{kind}[{i}]"
            if not isinstance(entry, dict):
                out.append(f"{where}: not an object")
                continue
            code = entry.get("code")
            if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
                out.append(f"{where}: code must be a positive integer (got {code!r})")
            else:
                where = f"{kind[:-1]} {code}"
                if code in seen:
                    out.append(f"{where}: duplicate code")
                seen.add(code)
            for field in required[1:]:
                if not isinstance(entry.get(field), str) or not entry[field].strip():
                    out.append(f"{where}: {field} missing or empty")
            out += _value_problems(where, entry)
            by_word = entry.get("line_word")
            if by_word is not None:
                if not isinstance(by_word, dict) or not by_word or set(by_word) - set(LINE_WORDS):
                    out.append(f"{where}: line_word keys must be among {', '.join(LINE_WORDS)}")
                else:
                    for word, sub in by_word.items():
                        if not isinstance(sub, dict) or not {"severity", "action"} <= set(sub):
                            out.append(f"{where}: line_word {word} needs severity and action")
                        else:
                            out += _value_problems(f"{where} ({word})", sub)
            for field in ("culprit", "nvidia_bucket", "signature"):
                if field in entry and (not isinstance(entry[field], str) or not entry[field].strip()):
                    out.append(f"{where}: {field} must be a non-empty string when present")
    return out


def _value_problems(where: str, entry: dict[str, Any]) -> list[str]:
    out = []
    sev, origin, action = entry.get("severity"), entry.get("origin", "mixed"), entry.get("action")
    if sev not in SEVERITIES:
        out.append(f"{where}: severity {sev!r} is not one of {', '.join(SEVERITIES)}")
    if origin not in ORIGINS:
        out.append(f"{where}: origin {origin!r} is not one of {', '.join(ORIGINS)}")
    if action not in ACTIONS:
        out.append(f"{where}: action {action!r} is not one of {', '.join(ACTIONS)}")
    elif action in _TOO_MILD.get(str(sev), ()):
        out.append(f"{where}: a {sev} code needs more than {action!r}")
    return out
