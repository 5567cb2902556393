"""Expand Slurm-style host lists ("gpu[01-03,07],login1") into names: webhook payloads carry them."""

from __future__ import annotations

import re

MAX_HOSTS = 4096  # a typo like gpu[1-999999] must not allocate a million names

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostListError(ValueError):
    pass


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostListError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostListError(f"unbalanced '[' in {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    out: list[str] = []
    for rng in m.group(1).split(","):
        r = _RANGE.match(rng.strip())
        if not r:
            raise HostListError(f"bad range {rng!r} in {item!r}")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        width = len(lo) if lo.startswith("0") else 0
        if int(hi) - int(lo) > MAX_HOSTS:
            raise HostListError(f"range {rng!r} is longer than {MAX_HOSTS} hosts")
        for n in range(int(lo), int(hi) + 1):
            for rest in _expand_one(tail):
                out.append(f"{head}{n:0{width}d}{rest}")
    return out


def expand_hostlist(text: str | list[str] | None) -> list[str]:
    if not text:
        return []
    items = text if isinstance(text, list) else _split_top(str(text))
    hosts: list[str] = []
    for item in items:
        for host in _expand_one(str(item).strip()):
            if host not in hosts:
                hosts.append(host)
            if len(hosts) > MAX_HOSTS:
                raise HostListError(f"more than {MAX_HOSTS} hosts")
    return hosts
