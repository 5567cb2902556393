"""Shared NVML handling for probes: init failures and per-GPU faults become findings."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from node_agent.compat import zip_strict
from node_agent.findings import Finding, Health, ProbeResult, Severity, health_from
from node_agent.nvml import errors as codes
from node_agent.nvml.client import Call, Outcome
from node_agent.nvml.errors import NvmlError, NvmlHang, NvmlUnavailable, fmt_seconds
from node_agent.probes.base import DeviceTable, ProbeContext, kernel_module_version

ACTION_GPU_LOST = "Drain the node and reboot or power-cycle it (`scontrol update nodename=$(hostname -s) state=drain reason=gpu-lost`); if it recurs, inspect the slot/riser or RMA the GPU."
ACTION_RESET = "Drain the node, stop the GPU's processes and reset it: `nvidia-smi -r -i {gpu}` (or reboot)."
ACTION_HANG = "Drain the node; the driver is not answering: collect `nvidia-bug-report.sh` if it completes, then reboot."


def clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%H:%M:%SZ")


def finding_for_error(exc: Exception, gpu: int | None = None) -> Finding | None:
    """A finding for an NVML failure that says something about the GPU/driver; None for 'not supported'."""
    if isinstance(exc, NvmlHang):
        detail = str(exc)
        if not exc.fresh:
            detail = (f"{exc.fn}{'' if exc.gpu is None else f' on GPU {exc.gpu}'} did not return in "
                      f"{fmt_seconds(exc.timeout_s)} s at {clock(exc.at)}: the GPU or driver is hung "
                      "(not retried while it is quarantined)")
        return Finding("nvml-hang", detail, Severity.CRITICAL, exc.gpu,
                       {"call": exc.fn, "timeout_s": round(exc.timeout_s, 2), "at": round(exc.at, 3),
                        "retried": exc.fresh})
    if isinstance(exc, NvmlUnavailable):
        text = str(exc)
        if "stuck in the driver" in text:
            return Finding("nvml-hang", text, Severity.CRITICAL, gpu)
        return Finding("probe-timeout", text, Severity.WARNING, gpu)
    if not isinstance(exc, NvmlError):
        return Finding("probe-error", str(exc), Severity.WARNING, gpu)
    g = exc.gpu if exc.gpu is not None else gpu
    if exc.code == codes.GPU_IS_LOST:
        return Finding("gpu-lost", f"GPU {g} is lost: NVML says it has fallen off the bus or is inaccessible ({exc.fn})",
                       Severity.CRITICAL, g, {"call": exc.fn, "nvml_error": exc.name})
    if exc.code == codes.RESET_REQUIRED:
        return Finding("reset-required", f"GPU {g} requires a reset before it can be used again ({exc.fn})",
                       Severity.CRITICAL, g, {"call": exc.fn, "nvml_error": exc.name})
    if exc.code == codes.NO_PERMISSION:
        return Finding("nvml-no-permission", f"{exc.fn} on GPU {g}: permission denied (the agent cannot open /dev/nvidia*)",
                       Severity.WARNING, g, {"call": exc.fn})
    if exc.not_supported:
        return None
    return Finding("probe-error", str(exc), Severity.WARNING, g, {"call": exc.fn, "nvml_error": exc.name})


def init_failure(ctx: ProbeContext, probe: str, exc: Exception, started: float) -> ProbeResult:
    """The result for an NVML probe when NVML itself cannot be used."""
    evidence: dict[str, Any] = {"nvml_error": str(exc)}
    module = kernel_module_version(ctx.env)
    evidence["kernel_module_version"] = module
    if isinstance(exc, NvmlError) and exc.code == codes.DRIVER_NOT_LOADED:
        f = Finding("driver-not-loaded", "NVIDIA kernel module not loaded: NVML reports Driver Not Loaded"
                    + ("" if module is None else f" (yet /proc/driver/nvidia/version shows {module})"),
                    Severity.CRITICAL)
        action = ("Load the driver: `sudo modprobe nvidia` and read `dmesg | grep -i nvrm` for why it failed; "
                  "if the kernel was upgraded, rebuild the module (DKMS) or reinstall the driver, then reboot.")
    elif isinstance(exc, NvmlError) and exc.code == codes.LIB_RM_VERSION_MISMATCH:
        lib = exc.extra.get("library_version") if hasattr(exc, "extra") else None
        f = Finding("driver-library-mismatch",
                    f"driver/library version mismatch: kernel module {module or 'unknown'}, "
                    f"NVML library {lib or 'unknown'} (driver upgraded without a reboot)",
                    Severity.CRITICAL, data={"kernel_module_version": module, "library_version": lib})
        action = "Drain the node and reboot it (or unload and reload the nvidia kernel modules) so module and library match."
    elif isinstance(exc, NvmlError) and exc.code == codes.LIBRARY_MISMATCH:
        f = Finding("driver-library-mismatch", f"NVML bindings newer than the driver's library: {exc.message}",
                    Severity.WARNING)
        action = "Pin nvidia-ml-py to the driver branch or upgrade the driver."
    elif isinstance(exc, NvmlError) and exc.code == codes.LIBRARY_NOT_FOUND:
        f = Finding("nvml-unavailable",
                    "NVIDIA user-space driver (libnvidia-ml.so.1) not found: not installed, or not mounted into "
                    "this container", Severity.CRITICAL)
        action = ("Install the NVIDIA driver, or run the agent where libnvidia-ml.so.1 is visible "
                  "(containers: the NVIDIA container toolkit mounts it).")
    elif isinstance(exc, NvmlError) and exc.code == codes.NO_PERMISSION:
        f = Finding("nvml-no-permission", "NVML init: permission denied (the agent cannot open /dev/nvidia*)",
                    Severity.CRITICAL)
        action = "Give the agent access to /dev/nvidiactl and /dev/nvidia* (SupplementaryGroups= / device plugin)."
    else:
        f = finding_for_error(exc) or Finding("nvml-unavailable", f"NVML unusable: {exc}", Severity.CRITICAL)
        if isinstance(exc, NvmlError):
            f = Finding("nvml-unavailable", f"NVML init failed: {exc}", Severity.CRITICAL, data={"nvml_error": exc.name})
        action = ACTION_HANG if f.code == "nvml-hang" else "Check the NVIDIA driver on this host (`nvidia-smi`)."
    return ProbeResult(probe, Health.FAILED if f.severity is Severity.CRITICAL else Health.DEGRADED,
                       f.detail, evidence, [f], action, _ms(started), ctx.simulated)


class GpuCalls:
    """Runs NVML calls for a probe and turns GPU-level failures into findings (once per GPU and code)."""

    def __init__(self, ctx: ProbeContext) -> None:
        self.ctx = ctx
        self.findings: list[Finding] = []
        self.unsupported: dict[str, list[int]] = {}
        self._seen: set[tuple[str, int | None]] = set()
        self.broken: set[int] = set()  # GPUs lost/hung/needing reset: their other values are meaningless

    def run(self, calls: list[Call]) -> list[Outcome]:
        outs = self.ctx.nvml.call_many(calls, self.ctx.nvml_deadline())
        for call, out in zip_strict(calls, outs):
            if out.error is not None:
                self.note(out.error, call)
        return outs

    def note(self, exc: Exception, call: Call) -> None:
        if isinstance(exc, NvmlError) and exc.not_supported:
            self.unsupported.setdefault(call.fn, []).append(call.gpu if call.gpu is not None else -1)
            return
        f = finding_for_error(exc, call.gpu)
        if f is None:
            return
        if f.code in ("gpu-lost", "reset-required", "nvml-hang") and call.gpu is not None:
            self.broken.add(call.gpu)
        key = (f.code, f.gpu)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(f)

    def note_device_errors(self, table: DeviceTable, gpus: list[int]) -> list[int]:
        """Record identity failures (lost, hung) of the selected GPUs; return the GPUs still worth calling."""
        for dev in table.devices:
            if dev.index in gpus and dev.error is not None:
                self.note(dev.error, Call(getattr(dev.error, "fn", "nvmlDeviceGetUUID"), dev.index))
        return [g for g in gpus if g not in self.broken]

    def per_gpu(self, gpus: list[int], fn: str, *args: Any) -> dict[int, Any]:
        """One call per GPU; {gpu: value} for those that answered."""
        calls = [Call(fn, g, args) for g in gpus]
        return {c.gpu: o.value for c, o in zip_strict(calls, self.run(calls)) if o.ok}


def gpu_fault_action(findings: list[Finding]) -> str | None:
    codes_ = {f.code for f in findings}
    if "nvml-hang" in codes_:
        return ACTION_HANG
    if "gpu-lost" in codes_:
        return ACTION_GPU_LOST
    if "reset-required" in codes_:
        gpus = sorted({f.gpu for f in findings if f.code == "reset-required" and f.gpu is not None})
        return ACTION_RESET.format(gpu=",".join(map(str, gpus)) or "<gpu>")
    return None


def devices_or_failure(ctx: ProbeContext, probe: str, started: float) -> DeviceTable | ProbeResult:
    try:
        return ctx.devices()
    except (NvmlError, NvmlHang, NvmlUnavailable) as exc:
        return init_failure(ctx, probe, exc, started)


def result(ctx: ProbeContext, probe: str, started: float, findings: list[Finding], ok_reason: str,
           evidence: dict[str, Any], reason: str | None = None, action: str | None = None,
           calls: GpuCalls | None = None) -> ProbeResult:
    health = health_from(findings)
    if calls is not None and calls.unsupported:
        # Which calls this driver/GPU does not support (NOT_SUPPORTED, missing symbol): shapes differ per product.
        evidence["not_supported"] = {fn: sorted(set(gs)) for fn, gs in calls.unsupported.items()}
    if reason is None:
        worst = [f for f in findings if f.severity is not Severity.INFO] or findings
        reason = worst[0].detail if health is not Health.OK and worst else ok_reason
        if health is not Health.OK and len(worst) > 1:
            reason += f" (+{len(worst) - 1} more)"
    return ProbeResult(probe, health, reason, evidence, findings,
                       action or gpu_fault_action(findings) or "",
                       _ms(started), ctx.simulated)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
