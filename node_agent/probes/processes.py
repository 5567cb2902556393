"""GPU memory per GPU and every compute process with pid, name, user and owner (Slurm job/container).

A process is *foreign* when the request names a job (job_id / job_pids) and the process does not
belong to it (its cgroup names another job, and neither it nor an ancestor is one of job_pids). With no
job named, processes on `job_gpus` that are not in `job_pids` are flagged; otherwise they are listed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from node_agent.cgroups import Owner, owner_from_cgroup
from node_agent.compat import zip_strict
from node_agent.findings import Finding, ProbeResult, Severity, fmt_gpus, gib
from node_agent.nvml import errors as codes
from node_agent.nvml.client import Call
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import GpuCalls, devices_or_failure, gpu_fault_action, result

MIB = 1024 * 1024
PRESSURE_MIN_MIB = 1024
PRESSURE_MIN_FRACTION = 0.05


@dataclass
class ProcInfo:
    pid: int
    name: str | None
    user: str | None
    ppid: int | None
    owner: Owner
    visible: bool  # False: not in this PID namespace (agent without hostPID) or already gone


def read_proc(ctx: ProbeContext, pid: int) -> ProcInfo:
    base = ctx.env.proc_root / str(pid)
    status = ctx.env.read_text(base / "status")
    if status is None:
        return ProcInfo(pid, None, None, None, Owner("unknown"), False)
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    comm = (ctx.env.read_text(base / "comm") or fields.get("Name", "")).strip() or None
    uid = fields.get("Uid", "").split()
    ppid = fields.get("PPid", "").strip()
    return ProcInfo(
        pid,
        comm,
        ctx.env.user_name(int(uid[0])) if uid and uid[0].isdigit() else None,
        int(ppid) if ppid.isdigit() else None,
        owner_from_cgroup(ctx.env.read_text(base / "cgroup")),
        True,
    )


def _belongs(ctx: ProbeContext, info: ProcInfo, cache: dict[int, ProcInfo]) -> bool:
    req = ctx.request
    if req.job_id is not None and info.owner.slurm_job == req.job_id:
        return True
    pids = set(req.job_pids)
    cur: ProcInfo | None = info
    for _ in range(16):  # a launcher's children (torchrun, srun tasks) belong to the job too
        if cur is None or cur.pid <= 1:
            return False
        if cur.pid in pids:
            return True
        if cur.ppid is None:
            return False
        cur = cache.setdefault(cur.ppid, read_proc(ctx, cur.ppid))
    return False


def _list_processes(calls: GpuCalls, gpus: list[int]) -> dict[int, list[dict[str, Any]]]:
    outs = calls.run([Call("nvmlDeviceGetComputeRunningProcesses", g) for g in gpus])
    found = {g: o.value for g, o in zip_strict(gpus, outs) if o.ok}
    # Bindings newer than an old driver (<R510): the unversioned call raises NVMLLibraryMismatchError.
    retry = [g for g, o in zip_strict(gpus, outs) if o.error is not None
             and getattr(o.error, "code", None) in (codes.LIBRARY_MISMATCH, codes.FUNCTION_NOT_FOUND)]
    if retry:
        for g, o in zip_strict(retry, calls.run([Call("nvmlDeviceGetComputeRunningProcesses_v2", g)
                                                    for g in retry])):
            if o.ok:
                found[g] = o.value
    return found


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    table = devices_or_failure(ctx, "processes", started)
    if isinstance(table, ProbeResult):
        return table
    req = ctx.request
    calls = GpuCalls(ctx)
    gpus = ctx.selected_gpus(table)
    job_gpus, unknown_job_gpus = table.resolve(req.job_gpus)
    if req.names_job:
        scope = set(job_gpus if job_gpus is not None else gpus)
    elif job_gpus is not None:
        scope = set(job_gpus)
    else:
        scope = set()
    calls.note_device_errors(table, gpus)
    memory = calls.per_gpu([g for g in gpus if g not in calls.broken], "nvmlDeviceGetMemoryInfo")
    live = [g for g in gpus if g not in calls.broken]
    listed = _list_processes(calls, live)
    missing_lists = [g for g in live if g not in listed]
    cache: dict[int, ProcInfo] = {}
    findings: list[Finding] = []
    per_gpu: list[dict[str, Any]] = []
    foreign_gpus: set[int] = set()
    owners_to_stop: dict[str, list[str]] = {}
    for g in gpus:
        mem = memory.get(g)
        used_mib = round(mem["used"] / MIB) if isinstance(mem, dict) else None
        total_mib = round(mem["total"] / MIB) if isinstance(mem, dict) else None
        entry: dict[str, Any] = {"gpu": g, "uuid": table.devices[g].uuid if g < len(table.devices) else None,
                                 "used_mib": used_mib, "total_mib": total_mib, "processes": []}
        job_mib = 0
        for p in listed.get(g, []):
            pid = int(p["pid"])
            info = cache.setdefault(pid, read_proc(ctx, pid))
            pmib = None if p.get("usedGpuMemory") is None else round(p["usedGpuMemory"] / MIB)
            mine = _belongs(ctx, info, cache)
            foreign = g in scope and not mine
            if mine and pmib:
                job_mib += pmib
            entry["processes"].append({
                "pid": pid, "process": info.name, "user": info.user, "used_mib": pmib,
                "owner": info.owner.label(), "cgroup": info.owner.cgroup, "job": mine, "foreign": foreign,
            })
            if foreign:
                foreign_gpus.add(g)
                held = f"holds {gib(pmib)}" if pmib is not None else "holds an unknown amount of memory"
                who = f"{info.name or 'unknown process'} (pid {pid}, user {info.user or '?'})"
                note = "" if info.visible else " [not visible in the agent's PID namespace: run it with the host PID namespace]"
                findings.append(Finding(
                    "foreign-process", f"{who} {held} on GPU {g}{note}", Severity.WARNING, g,
                    {"pid": pid, "process": info.name, "user": info.user, "used_mib": pmib,
                     "owner": info.owner.label(), "slurm_job": info.owner.slurm_job,
                     "container_id": info.owner.container_id, "cgroup": info.owner.cgroup},
                ))
                pids_for = owners_to_stop.setdefault(_stop_hint(info), [])
                if str(pid) not in pids_for:
                    pids_for.append(str(pid))
        per_gpu.append(entry)
        if g in scope and used_mib is not None and total_mib:
            other = used_mib - job_mib
            if other >= max(PRESSURE_MIN_MIB, PRESSURE_MIN_FRACTION * total_mib):
                findings.append(Finding(
                    "gpu-memory-pressure",
                    f"GPU {g}: {gib(other)} of {gib(total_mib)} ({100 * other / total_mib:.0f}%) held by "
                    "processes that are not the job's",
                    Severity.WARNING, g, {"used_mib": used_mib, "total_mib": total_mib, "other_mib": other},
                ))
    findings = calls.findings + findings
    evidence: dict[str, Any] = {"memory_api": "nvmlDeviceGetMemoryInfo (v1: used excludes driver-reserved memory)",
                                "gpus": per_gpu, "job": {"job_id": req.job_id, "job_pids": req.job_pids,
                                                          "job_gpus": job_gpus, "scope_gpus": sorted(scope)}}
    if unknown_job_gpus:
        evidence["unknown_job_gpus"] = unknown_job_gpus
    if missing_lists:
        evidence["process_list_unavailable"] = missing_lists
        if calls.unsupported.get("nvmlDeviceGetComputeRunningProcesses_v2"):
            findings.append(Finding("driver-library-mismatch", "process lists unavailable: nvidia-ml-py is newer "
                                    "than the driver's NVML (no _v3 or _v2 process call)", Severity.WARNING))
    total = sum(len(e["processes"]) for e in per_gpu)
    ok = f"{total} compute process(es) on {fmt_gpus(gpus) if gpus else 'no GPUs'}"
    if scope:
        ok += f"; none foreign on the job's {fmt_gpus(sorted(scope))}"
    reason = None
    action = gpu_fault_action(findings)
    if foreign_gpus:
        reason = f"{fmt_gpus(sorted(foreign_gpus))} hold processes that are not the job's"
        stops = "; ".join(f"{hint} (pid {', '.join(pids)})" for hint, pids in owners_to_stop.items())
        action = action or (f"Free {fmt_gpus(sorted(foreign_gpus))} before resubmitting: {stops}; "
                            "or resubmit excluding this node (sbatch --exclude=<host>).")
    elif any(f.code == "gpu-memory-pressure" for f in findings):
        gp = sorted({f.gpu for f in findings if f.code == "gpu-memory-pressure" and f.gpu is not None})
        reason = f"{fmt_gpus(gp)}: memory held by processes the agent cannot attribute to the job"
        action = action or "Check `nvidia-smi` on the host for the processes holding the memory; run the agent with host PID access."
    return result(ctx, "processes", started, findings, ok, evidence, reason=reason, action=action, calls=calls)


def _stop_hint(info: ProcInfo) -> str:
    if info.owner.kind == "slurm" and info.owner.slurm_job:
        return f"`scancel {info.owner.slurm_job}`"
    if info.owner.kind == "container" and info.owner.container_id:
        cid = info.owner.container_id[:12]
        if info.owner.pod_uid:
            return f"stop the pod with uid {info.owner.pod_uid} (container {cid})"
        return f"`docker stop {cid}`"
    if info.visible:
        return f"`kill {info.pid}` ({info.name}, after checking with its owner {info.user})"
    return f"find pid {info.pid} on the host (`nvidia-smi`)"


PROBE = Probe(
    "processes",
    "GPU memory used/total per GPU and every compute process with pid, name, user and owner "
    "(Slurm job or container from /proc/<pid>/cgroup); flags processes foreign to the job",
    "/dev/nvidia*; the host PID namespace to see owners (/proc/<pid>/status and cgroup are world-readable)",
    run,
)
