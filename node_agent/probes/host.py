"""Host resources: /dev/shm size and use, disk space on configured paths, MemAvailable, OOM kills in the window."""

from __future__ import annotations

import re
import time
from typing import Any

from node_agent.findings import Finding, ProbeResult, Severity, gib
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import clock, result

_OOM_RES = (
    re.compile(r"Out of memory: Killed process (\d+) \(([^)]*)\)"),
    re.compile(r"Memory cgroup out of memory: Killed process (\d+) \(([^)]*)\)"),
    re.compile(r"oom-kill:.*?task=([^,]+),pid=(\d+)"),
)
MIB = 1024 * 1024


def _meminfo(ctx: ProbeContext) -> dict[str, int]:
    out = {}
    for line in (ctx.env.read_text(ctx.env.proc_root / "meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024
    return out


def _oom_kills(ctx: ProbeContext) -> list[dict[str, Any]]:
    kills: dict[int, dict[str, Any]] = {}
    for rec in ctx.kernel_log().records:
        for i, rx in enumerate(_OOM_RES):
            m = rx.search(rec.text)
            if not m:
                continue
            pid, name = (int(m.group(2)), m.group(1)) if i == 2 else (int(m.group(1)), m.group(2))
            kills.setdefault(pid, {"pid": pid, "process": name, "time": rec.time, "cgroup_oom": "cgroup" in rec.text})
            break
    return sorted(kills.values(), key=lambda k: k["time"])


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    cfg = ctx.config
    findings: list[Finding] = []
    evidence: dict[str, Any] = {}
    shm = ctx.env.fs_usage(cfg.shm_path)
    if shm is None:
        evidence["shm"] = {"path": cfg.shm_path, "error": "not mounted or not readable"}
    else:
        evidence["shm"] = {"path": cfg.shm_path, "size_mib": shm.total_bytes // MIB, "used_mib": shm.used_bytes // MIB,
                           "used_pct": round(shm.used_pct, 1)}
        if shm.total_bytes < cfg.shm_min_bytes:
            findings.append(Finding("shm-small", f"{cfg.shm_path} is only {shm.total_bytes // MIB} MiB (below "
                                    f"{cfg.shm_min_bytes // MIB} MiB): NCCL and DataLoader workers need more",
                                    Severity.WARNING, data={"size_mib": shm.total_bytes // MIB}))
        if shm.used_pct >= 90:
            findings.append(Finding("shm-full", f"{cfg.shm_path} {shm.used_pct:.0f}% full "
                                    f"({gib(shm.used_bytes / MIB)} of {gib(shm.total_bytes / MIB)})",
                                    Severity.CRITICAL if shm.used_pct >= 99 else Severity.WARNING,
                                    data={"used_pct": round(shm.used_pct, 1)}))
    disks: list[dict[str, Any]] = []
    for path in cfg.disk_paths:
        use = ctx.env.fs_usage(path)
        if use is None:
            disks.append({"path": path, "error": "not mounted or not readable"})
            continue
        free_pct = 100.0 * use.avail_bytes / use.total_bytes if use.total_bytes else 100.0
        disks.append({"path": path, "size_gib": round(use.total_bytes / 1024**3, 1),
                      "avail_gib": round(use.avail_bytes / 1024**3, 1), "free_pct": round(free_pct, 1)})
        if use.total_bytes and free_pct < cfg.disk_min_free_pct:
            findings.append(Finding("disk-full", f"{path} has {gib(use.avail_bytes / MIB)} free ({free_pct:.1f}%)",
                                    Severity.CRITICAL if use.avail_bytes < 256 * MIB else Severity.WARNING,
                                    data={"path": path, "free_pct": round(free_pct, 1)}))
    evidence["disks"] = disks
    mem = _meminfo(ctx)
    if "MemTotal" in mem and "MemAvailable" in mem:
        pct = 100.0 * mem["MemAvailable"] / mem["MemTotal"]
        evidence["memory"] = {"total_gib": round(mem["MemTotal"] / 1024**3, 1),
                              "available_gib": round(mem["MemAvailable"] / 1024**3, 1), "available_pct": round(pct, 1)}
        if pct < cfg.memory_min_available_pct:
            findings.append(Finding("host-memory-low", f"only {gib(mem['MemAvailable'] / MIB)} of host memory available "
                                    f"({pct:.1f}%)", Severity.WARNING, data={"available_pct": round(pct, 1)}))
    kills = _oom_kills(ctx)
    job_pids = set(ctx.request.job_pids)
    for k in kills:
        mine = k["pid"] in job_pids
        findings.append(Finding("host-oom-kill", f"kernel OOM killer killed {k['process']} (pid {k['pid']}) at "
                                f"{clock(k['time'])}" + (" — a process of the job" if mine else ""),
                                Severity.CRITICAL if mine else Severity.WARNING, None,
                                {**k, "job_process": mine}))
    evidence["oom_kills"] = len(kills)
    evidence["kernel_log_source"] = ctx.kernel_log().source
    codes = {f.code for f in findings}
    action = None
    if "host-oom-kill" in codes or "host-memory-low" in codes:
        action = "Lower host memory use (DataLoader workers, pinned memory) or request more memory (--mem)."
    elif "shm-small" in codes or "shm-full" in codes:
        action = "Give the job a larger /dev/shm (docker --shm-size=16g; k8s emptyDir medium: Memory) or clean stale files in /dev/shm."
    elif "disk-full" in codes:
        action = "Free space on the full filesystem (old checkpoints, core dumps, container images)."
    ok = "shm, disks and memory within limits; no OOM kill in the window"
    return result(ctx, "host", started, findings, ok, evidence, action=action)


PROBE = Probe(
    "host",
    "/dev/shm size and use, free space on configured paths, MemAvailable, kernel OOM kills in the window",
    "none for shm/disk/memory (statvfs, /proc/meminfo); kernel log access as for xid for OOM kills",
    run,
    uses_nvml=False,
)
