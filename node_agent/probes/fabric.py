"""GPU fabric state on NVSwitch systems (NVML fabric info) and the nvidia-fabricmanager service."""

from __future__ import annotations

import time
from typing import Any

from node_agent.findings import Finding, ProbeResult, Severity, fmt_gpus
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import GpuCalls, devices_or_failure, result

STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}
SUMMARY = {0: "NOT_SUPPORTED", 1: "HEALTHY", 2: "UNHEALTHY", 3: "LIMITED_CAPACITY"}
# healthMask: two-bit fields, value 1 = TRUE (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*)
MASK_BITS = {0: "degraded bandwidth", 2: "route recovery", 4: "route unhealthy", 6: "access timeout recovery"}


def _mask_problems(mask: int) -> list[str]:
    return [name for shift, name in MASK_BITS.items() if (mask >> shift) & 0x3 == 1]


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    unit = ctx.config.fabric_manager_unit
    fm_state, fm_how = ctx.env.service_state(unit)
    table = devices_or_failure(ctx, "fabric", started)
    if isinstance(table, ProbeResult):
        table.evidence["fabric_manager"] = {"unit": unit, "state": fm_state, "how": fm_how}
        return table
    calls = GpuCalls(ctx)
    gpus = calls.note_device_errors(table, ctx.selected_gpus(table))
    info = calls.per_gpu(gpus, "nvmlDeviceGetGpuFabricInfoV")
    rest = [g for g in gpus if g not in info and g not in calls.broken]
    if rest:  # drivers before R550 only have the v1 call
        info.update(calls.per_gpu(rest, "nvmlDeviceGetGpuFabricInfo"))
    findings: list[Finding] = []
    per_gpu: list[dict[str, Any]] = []
    nvswitch = [g for g, v in info.items() if int(v.get("state", 0)) != 0]
    not_ready = []
    for g, v in sorted(info.items()):
        state = int(v.get("state", 0))
        status = int(v.get("status", 0))
        summary = v.get("healthSummary")
        problems = _mask_problems(int(v.get("healthMask") or 0)) if state == 3 else []
        per_gpu.append({"gpu": g, "state": STATES.get(state, state), "status": status,
                        "health_summary": SUMMARY.get(summary, summary), "health_problems": problems,
                        "clique_id": v.get("cliqueId")})
        if state in (1, 2) or (state == 3 and status != 0):
            not_ready.append(g)
        elif state == 3 and (summary in (2, 3) or problems):
            findings.append(Finding("fabric-not-ready", f"GPU {g} fabric registered but "
                                    f"{SUMMARY.get(summary, 'unhealthy') if summary in (2, 3) else ', '.join(problems)}",
                                    Severity.WARNING, g, {"health_summary": SUMMARY.get(summary), "problems": problems}))
    if not_ready:
        states = sorted({STATES.get(int(info[g].get("state", 0)), "?") for g in not_ready})
        findings.append(Finding("fabric-not-ready", f"{fmt_gpus(not_ready)} not registered with the NVLink fabric "
                                f"(state {'/'.join(states)}): CUDA init fails with cudaErrorSystemNotReady (802)",
                                Severity.CRITICAL, None, {"gpus": not_ready, "states": states}))
    if nvswitch and fm_state is not None and fm_state != "active":
        findings.append(Finding("fabric-manager-down", f"{unit} is {fm_state} on an NVSwitch system",
                                Severity.CRITICAL if not_ready else Severity.WARNING, None,
                                {"unit": unit, "state": fm_state}))
    findings = calls.findings + findings
    evidence = {"nvswitch_system": bool(nvswitch), "gpus": per_gpu,
                "fabric_manager": {"unit": unit, "state": fm_state, "how": fm_how}}
    action = None
    if any(f.code == "fabric-manager-down" for f in findings):
        action = (f"Restart the fabric manager: `sudo systemctl restart {unit}`; check "
                  "`journalctl -u nvidia-fabricmanager` and /var/log/fabricmanager.log (its version must match the "
                  "driver); drain the node until the fabric state is COMPLETED.")
    elif not_ready:
        action = "Drain the node; check nvidia-fabricmanager and /var/log/fabricmanager.log, then reset the GPUs or reboot."
    if nvswitch:
        ok = f"NVLink fabric COMPLETED on {fmt_gpus(nvswitch)}; {unit} {fm_state or 'state unknown'}"
    else:
        ok = f"not an NVSwitch system (fabric info not supported); {unit} {fm_state or 'state unknown'}"
    return result(ctx, "fabric", started, findings, ok, evidence, action=action, calls=calls)


PROBE = Probe(
    "fabric",
    "NVLink fabric registration state and health on NVSwitch systems (NVML fabric info) and the "
    "nvidia-fabricmanager service state (systemctl is-active)",
    "/dev/nvidia*; systemctl (D-Bus access to systemd) for the service state",
    run,
)
