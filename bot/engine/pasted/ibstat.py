"""`ibstat` / `ibstatus` -> the `infiniband` probe's findings: ports not Active (`ib-port-down`, with
the physical state and rate) and ports in Ethernet mode (`ib-port-ethernet`, RoCE: information)."""

from __future__ import annotations

import re
from typing import Any

from .base import Block, JobView, finding, result

KIND = "ibstat"
PROBES = ("infiniband",)
ANSWERS = re.compile(r"^(?:sudo\s+)?(?:ibstat|ibstatus)\b")

_CA = re.compile(r"^CA '(?P<dev>[^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (?P<port>\d+):\s*$")
_KV = re.compile(r"^\s+(?P<key>State|Physical state|Rate|Link layer):\s*(?P<val>.+?)\s*$")
# ibstatus: "Infiniband device 'mlx5_0' port 1 status:" then "state: 4: ACTIVE", "phys state: 5: LinkUp"
_DEV = re.compile(r"^Infiniband device '(?P<dev>[^']+)' port (?P<port>\d+) status:\s*$")
_SKV = re.compile(r"^\s+(?P<key>state|phys state|rate|link_layer):\s*(?:\d+:\s*)?(?P<val>.+?)\s*$")
_KEYS = {"State": "state", "Physical state": "phys_state", "Rate": "rate", "Link layer": "link_layer",
         "state": "state", "phys state": "phys_state", "rate": "rate", "link_layer": "link_layer"}


def find(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    ports: list[dict[str, Any]] = []
    first = last = None
    dev = None
    cur: dict[str, Any] | None = None
    for i, line in enumerate(lines):
        m = _CA.match(line)
        if m:
            dev, cur = m.group("dev"), None
            first = i if first is None else first
            last = i
            continue
        m = _DEV.match(line)
        if m:
            cur = {"device": m.group("dev"), "port": int(m.group("port"))}
            ports.append(cur)
            first = i if first is None else first
            last = i
            continue
        m = _PORT.match(line)
        if m and dev:
            cur = {"device": dev, "port": int(m.group("port"))}
            ports.append(cur)
            last = i
            continue
        m = (_KV.match(line) or _SKV.match(line)) if cur is not None else None
        if m:
            cur[_KEYS[m.group("key")]] = m.group("val")  # type: ignore[index]
            last = i
    ports = [p for p in ports if "state" in p]
    if not ports or first is None or last is None:
        return []
    return [(first, last, {"ports": ports})]


def _active(state: str) -> bool:
    return state.strip().upper().startswith("ACTIVE")


def results(block: Block, job: JobView) -> list[dict[str, Any]]:
    findings = []
    for p in block.data["ports"]:
        label = f"{p['device']} port {p['port']}"
        data = {"device": p["device"], "port": p["port"], "state": p.get("state"), "phys_state": p.get("phys_state"),
                "rate": p.get("rate"), "link_layer": p.get("link_layer")}
        if not _active(p["state"]):
            findings.append(finding("ib-port-down", f"{label} is {p['state']}/{p.get('phys_state', '?')} "
                                    f"({p.get('link_layer', '?')})", "warning", None, **data))
        elif (p.get("link_layer") or "").lower() == "ethernet":
            findings.append(finding("ib-port-ethernet", f"{label} is Active in Ethernet mode (RoCE) at {p.get('rate', '?')}",
                                    "info", None, **data))
    down = [f for f in findings if f["code"] == "ib-port-down"]
    n = len(block.data["ports"])
    reason = (f"{len(down)} of {n} port(s) not Active: " + ", ".join(f"{f['device']}/{f['port']}" for f in down[:6])
              if down else f"{n} port(s) Active")
    return [result("infiniband", findings, reason, {"ports": block.data["ports"]})]
