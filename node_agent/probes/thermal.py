"""Temperature vs slowdown threshold, power vs limit, and clock event (throttle) reasons."""

from __future__ import annotations

import time
from typing import Any

from node_agent.findings import Finding, ProbeResult, Severity, fmt_gpus
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import GpuCalls, devices_or_failure, result

REASONS = {
    0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown", 0x10: "SyncBoost",
    0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown", 0x100: "DisplayClockSetting",
}
THERMAL = 0x20 | 0x40
HW_SLOWDOWN = 0x8 | 0x80
POWER = 0x4
TEMP_GPU, THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN = 0, 0, 1


def _with_fallback(calls: GpuCalls, gpus: list[int], fn: str, old: str, *args: Any) -> dict[int, Any]:
    """Newer NVML name first; drivers without it (FunctionNotFound) get the deprecated one."""
    got = calls.per_gpu(gpus, fn, *args)
    rest = [g for g in gpus if g not in got and g not in calls.broken]
    if rest:
        got.update(calls.per_gpu(rest, old, *args))
    return got


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    table = devices_or_failure(ctx, "thermal", started)
    if isinstance(table, ProbeResult):
        return table
    calls = GpuCalls(ctx)
    gpus = calls.note_device_errors(table, ctx.selected_gpus(table))
    temp = _with_fallback(calls, gpus, "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", TEMP_GPU)
    slowdown = calls.per_gpu(gpus, "nvmlDeviceGetTemperatureThreshold", THRESHOLD_SLOWDOWN)
    power = calls.per_gpu(gpus, "nvmlDeviceGetPowerUsage")
    limit = calls.per_gpu(gpus, "nvmlDeviceGetEnforcedPowerLimit")
    reasons = _with_fallback(calls, gpus, "nvmlDeviceGetCurrentClocksEventReasons",
                             "nvmlDeviceGetCurrentClocksThrottleReasons")
    findings: list[Finding] = []
    per_gpu = []
    for g in gpus:
        mask = int(reasons.get(g) or 0)
        active = [name for bit, name in REASONS.items() if mask & bit]
        per_gpu.append({"gpu": g, "temperature_c": temp.get(g), "slowdown_c": slowdown.get(g),
                        "power_w": None if power.get(g) is None else round(power[g] / 1000),
                        "power_limit_w": None if limit.get(g) is None else round(limit[g] / 1000),
                        "clock_event_reasons": active})
        hot = temp.get(g) is not None and slowdown.get(g) and temp[g] >= slowdown[g]
        if mask & THERMAL or hot:
            findings.append(Finding("thermal-throttle", f"GPU {g} thermally throttled at {temp.get(g)} °C "
                                    f"(slowdown at {slowdown.get(g)} °C; {', '.join(active) or 'temperature'})",
                                    Severity.WARNING, g, {"temperature_c": temp.get(g), "reasons": active}))
        if mask & HW_SLOWDOWN:
            findings.append(Finding("hw-slowdown", f"GPU {g} clocks cut by hardware ({', '.join(active)}): "
                                    "temperature, power brake or power supply", Severity.WARNING, g,
                                    {"reasons": active}))
        if mask & POWER:
            findings.append(Finding("power-throttle", f"GPU {g} at its software power cap "
                                    f"({per_gpu[-1]['power_w']} of {per_gpu[-1]['power_limit_w']} W): normal at full "
                                    "load, matters when the job is slow", Severity.INFO, g, {"reasons": active}))
    findings = calls.findings + findings
    action = None
    if any(f.code in ("thermal-throttle", "hw-slowdown") for f in findings):
        gp = sorted({f.gpu for f in findings if f.code in ("thermal-throttle", "hw-slowdown") and f.gpu is not None})
        action = (f"Check cooling and power for {fmt_gpus(gp)} (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`); "
                  "if it persists, drain the node for inspection.")
    ok = f"no thermal or hardware slowdown on {fmt_gpus(gpus)}" if gpus else "no GPU to check"
    return result(ctx, "thermal", started, findings, ok, {"gpus": per_gpu}, action=action, calls=calls)


PROBE = Probe(
    "thermal",
    "Temperature vs slowdown threshold, power vs enforced limit, current clock event (throttle) reasons",
    "/dev/nvidia*",
    run,
)
