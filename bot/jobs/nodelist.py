"""Slurm host lists: "gpu[01-04,07]", "rack[1-2]-gpu[001-002],login" -> one name per host.

Same results as `scontrol show hostnames` (tests compare against its captured output), in pure
Python so the bot needs no Slurm client to read a webhook's node list. The node list may come
from a webhook payload, so expansion is bounded: a "n[0-999999999]" cannot exhaust memory.
"""

from __future__ import annotations

import itertools
import re

MAX_HOSTS = 65536
_EMPTY = {"", "(null)", "None", "none", "None assigned"}
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?", re.ASCII)


class NodeListError(ValueError):
    pass


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise NodeListError(f"nested brackets in host list {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise NodeListError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise NodeListError(f"unclosed '[' in host list {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str, limit: int) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.fullmatch(item.strip())
        if not m:
            raise NodeListError(f"bad range {item!r}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise NodeListError(f"bad range {item!r} (end before start)")
        if hi - lo + 1 + len(out) > limit:
            raise NodeListError(f"host list expands to more than {limit} hosts")
        # Slurm keeps the zero padding of the lower bound: x[09-11] -> x09 x10 x11.
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def _expand_one(expr: str, limit: int) -> list[str]:
    """One host expression, possibly with several bracket groups: a[1-2]-b[3-4]."""
    pieces: list[list[str]] = []
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", expr):
        pieces.append([expr[pos:m.start()]])
        pieces.append(_expand_ranges(m.group(1), limit))
        pos = m.end()
    pieces.append([expr[pos:]])
    total = 1
    for p in pieces:
        total *= len(p)
        if total > limit:
            raise NodeListError(f"host list expands to more than {limit} hosts")
    return ["".join(combo) for combo in itertools.product(*pieces)]


def expand_nodelist(text: str | None, limit: int = MAX_HOSTS) -> list[str]:
    """Expand a Slurm host list; an empty/"(null)" list gives []. Raises NodeListError when malformed."""
    if text is None or text.strip() in _EMPTY:
        return []
    hosts: list[str] = []
    seen: set[str] = set()
    for expr in _split_top(text.strip()):
        for h in _expand_one(expr, limit - len(hosts)):
            if h not in seen:
                seen.add(h)
                hosts.append(h)
        if len(hosts) > limit:
            raise NodeListError(f"host list expands to more than {limit} hosts")
    return hosts


def first_node(text: str | None) -> str:
    """The first host of a list ("" when empty or malformed): who ran the batch script when Slurm
    does not say (BatchHost is empty for a job whose node died)."""
    try:
        return next(iter(expand_nodelist(text)), "")
    except NodeListError:
        return ""
