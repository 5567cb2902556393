"""GPU count vs expected, identities, driver/CUDA/NVML versions, persistence, compute and MIG mode."""

from __future__ import annotations

import time

from node_agent.findings import Finding, ProbeResult, Severity, fmt_gpus
from node_agent.probes.base import Probe, ProbeContext, kernel_module_version
from node_agent.probes.common import GpuCalls, devices_or_failure, result

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def _cuda(v: int | None) -> str | None:
    return None if not v else f"{v // 1000}.{(v % 1000) // 10}"


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    table = devices_or_failure(ctx, "inventory", started)
    if isinstance(table, ProbeResult):
        return table
    info = table.info
    calls = GpuCalls(ctx)
    findings: list[Finding] = []
    calls.note_device_errors(table, [d.index for d in table.devices])
    gpus = [g for g in ctx.selected_gpus(table) if g not in calls.broken]
    persistence = calls.per_gpu(gpus, "nvmlDeviceGetPersistenceMode")
    compute = calls.per_gpu(gpus, "nvmlDeviceGetComputeMode")
    mig = calls.per_gpu(gpus, "nvmlDeviceGetMigMode")
    serial = calls.per_gpu(gpus, "nvmlDeviceGetSerial")
    count = int(info.get("count") or 0)
    expected = ctx.config.expected_gpus
    usable = [d.index for d in table.devices if d.error is None]
    if expected is not None and count != expected:
        findings.append(Finding("gpu-count-mismatch", f"NVML sees {count} GPUs, {expected} expected",
                                Severity.CRITICAL, data={"count": count, "expected": expected}))
    if count and not table.devices:
        findings.append(Finding("gpu-count-mismatch", f"NVML counts {count} GPUs but none could be opened",
                                Severity.CRITICAL, data={"count": count, "usable": 0}))
    off = [g for g, v in persistence.items() if v == 0]
    if off:
        findings.append(Finding("persistence-off", f"persistence mode is off on {fmt_gpus(off)}: every first CUDA "
                                "client pays GPU initialization (seconds per GPU)", Severity.INFO,
                                data={"gpus": off}))
    exclusive = [g for g, v in compute.items() if v in (1, 3)]
    if exclusive:
        findings.append(Finding("compute-mode-exclusive", f"{fmt_gpus(exclusive)} in exclusive-process compute mode: "
                                "one stray process blocks every new CUDA context ('busy or unavailable')",
                                Severity.WARNING, data={"gpus": exclusive}))
    prohibited = [g for g, v in compute.items() if v == 2]
    if prohibited:
        findings.append(Finding("compute-mode-exclusive", f"{fmt_gpus(prohibited)} in Prohibited compute mode: "
                                "no CUDA context can be created", Severity.CRITICAL, data={"gpus": prohibited}))
    mig_on = [g for g, v in mig.items() if isinstance(v, list) and v and v[0] == 1]
    if mig_on:
        findings.append(Finding("mig-enabled", f"MIG mode enabled on {fmt_gpus(mig_on)}: jobs see MIG instances, "
                                "not whole GPUs", Severity.INFO, data={"gpus": mig_on}))
    findings = calls.findings + findings
    evidence = {
        "count": count,
        "expected": expected,
        "usable": len(usable),
        "driver_version": info.get("driver_version"),
        "nvml_version": info.get("nvml_version"),
        "cuda_driver_version": _cuda(info.get("cuda_driver_version")),
        "kernel_module_version": kernel_module_version(ctx.env),
        "backend": info.get("backend"),
        "gpus": [
            {
                "index": d.index, "uuid": d.uuid, "name": d.name, "bus_id": d.bus_id,
                "serial": serial.get(d.index),
                "persistence": persistence.get(d.index),
                "compute_mode": COMPUTE_MODES.get(compute.get(d.index, -1)),
                "mig": mig.get(d.index),
                "error": None if d.error is None else str(d.error),
            }
            for d in table.devices if d.index in gpus or d.error is not None
        ],
    }
    quarantined = ctx.nvml.hangs()
    if quarantined:  # GPUs whose calls are being skipped after a hang: say since when and why
        evidence["nvml_quarantine"] = [{"gpu": h.gpu, "call": h.fn, "since": round(h.at, 3)} for h in quarantined]
        evidence["stuck_nvml_workers"] = ctx.nvml.stuck_workers()
    _, unknown = table.resolve(ctx.request.gpus)
    if unknown:
        evidence["unknown_gpus"] = unknown
    names = sorted({d.name for d in table.devices if d.name})
    ok = (f"{count} × {', '.join(names) or 'GPU'}, driver {info.get('driver_version')}, "
          f"CUDA {_cuda(info.get('cuda_driver_version'))}")
    action = None
    if any(f.code == "gpu-count-mismatch" for f in findings):
        action = "Drain the node; check `lspci | grep -i nvidia` and `dmesg | grep NVRM` for the missing GPU, then reboot."
    elif any(f.code == "compute-mode-exclusive" for f in findings):
        action = "Reset to shared mode if the cluster does not rely on exclusivity: `nvidia-smi -c DEFAULT`."
    return result(ctx, "inventory", started, findings, ok, evidence, action=action, calls=calls)


PROBE = Probe(
    "inventory",
    "GPU count vs expected, name, UUID, bus id, serial; driver, CUDA and NVML versions; persistence, "
    "compute and MIG mode",
    "/dev/nvidiactl and /dev/nvidia* (group video or render, or the device cgroup); /proc/driver/nvidia/version",
    run,
)
