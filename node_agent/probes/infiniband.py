"""InfiniBand/RoCE ports from /sys/class/infiniband: state, phys state, rate, link layer, error counters."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from node_agent.findings import Finding, ProbeResult, Severity
from node_agent.hostenv import HostEnv
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import result

ERROR_COUNTERS = (
    "symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors", "link_error_recovery", "link_downed",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_xmit_discards",
)


def _read(env: HostEnv, path: Path) -> str | None:
    text = env.read_text(path)
    return None if text is None else text.strip()


def _natural(path: Path) -> tuple[str, int]:
    """mlx5_2 before mlx5_10."""
    head, _, tail = path.name.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (path.name, -1)


def read_ports(env: HostEnv) -> tuple[list[dict[str, Any]], str | None]:
    root = env.sys_root / "class" / "infiniband"
    try:
        devices = sorted(root.iterdir(), key=_natural)
    except OSError as exc:
        return [], f"{root}: {exc.strerror}"
    ports = []
    for dev in devices:
        try:
            port_dirs = sorted((dev / "ports").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0)
        except OSError:
            continue
        for pdir in port_dirs:
            counters: dict[str, int] = {}
            for name in ERROR_COUNTERS:
                raw = _read(env, pdir / "counters" / name)
                if raw is not None and raw.isdigit():  # "N/A (no PMA)" and EINVAL reads are skipped
                    counters[name] = int(raw)
            ports.append({
                "device": dev.name, "port": pdir.name,
                "state": _read(env, pdir / "state") or "unknown",
                "phys_state": _read(env, pdir / "phys_state") or "unknown",
                "rate": _read(env, pdir / "rate") or "unknown",
                "link_layer": _read(env, pdir / "link_layer") or "InfiniBand",  # ibstatus' default when missing
                "fw_ver": _read(env, dev / "fw_ver"),
                "counters": counters,
            })
    return ports, None


def _name(state: str) -> str:
    """'4: ACTIVE' -> 'ACTIVE'."""
    return state.split(":", 1)[-1].strip()


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    ports, error = read_ports(ctx.env)
    findings: list[Finding] = []
    threshold = ctx.config.ib_error_threshold
    for p in ports:
        label = f"{p['device']} port {p['port']}"
        data = {k: p[k] for k in ("device", "port", "state", "phys_state", "rate", "link_layer")}
        if _name(p["state"]) != "ACTIVE":
            findings.append(Finding("ib-port-down", f"{label} is {_name(p['state'])}/{_name(p['phys_state'])} "
                                    f"({p['link_layer']})", Severity.WARNING, None, data))
        elif p["link_layer"] == "Ethernet":
            findings.append(Finding("ib-port-ethernet", f"{label} is ACTIVE in Ethernet mode (RoCE) at {p['rate']}",
                                    Severity.INFO, None, data))
        bad = {k: v for k, v in p["counters"].items() if v >= threshold}
        if bad:
            findings.append(Finding("ib-port-errors", f"{label} error counters: "
                                    + ", ".join(f"{k}={v}" for k, v in sorted(bad.items())),
                                    Severity.WARNING, None, {**data, "counters": bad}))
    down = [f for f in findings if f.code == "ib-port-down"]
    eth = [f for f in findings if f.code == "ib-port-ethernet"]
    active = [p for p in ports if _name(p["state"]) == "ACTIVE"]
    evidence: dict[str, Any] = {"ports": ports, "active": len(active), "total": len(ports)}
    if error:
        evidence["note"] = error
    reason = None
    if down:
        names = ", ".join(f"{f.data['device']}/{f.data['port']}" for f in down)
        reason = f"{len(down)} of {len(ports)} ports down: {names}"
        if eth:
            reason += f"; {len(eth)} active port(s) in Ethernet mode"
    action = None
    if down:
        keep = ",".join(f"{p['device']}:{p['port']}" for p in active)
        action = ("Check cables, switch ports and the subnet manager for the DOWN ports (`ibstat`, `ibstatus`)"
                  + (f"; meanwhile pin NCCL to the active ports: NCCL_IB_HCA={keep}" if keep else ""))
    elif any(f.code == "ib-port-errors" for f in findings):
        action = "Inspect the cable/transceiver of the ports with errors; `perfquery -x` to watch the counters rise."
    if not ports:
        ok = "no InfiniBand/RoCE devices" + (f" ({error})" if error else "")
    else:
        ok = f"{len(active)} of {len(ports)} ports ACTIVE" + (f", {len(eth)} in Ethernet mode" if eth else "")
    return result(ctx, "infiniband", started, findings, ok, evidence, reason=reason, action=action)


PROBE = Probe(
    "infiniband",
    "InfiniBand/RoCE ports from /sys/class/infiniband: state, phys state, rate, link layer (InfiniBand or "
    "Ethernet), PMA error counters",
    "read-only /sys/class/infiniband (no privilege)",
    run,
    uses_nvml=False,
)
