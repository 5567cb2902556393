"""ECC mode and counters, retired pages (pre-Ampere), row remapping (Ampere+), NVML recovery action."""

from __future__ import annotations

import time
from typing import Any

from node_agent.findings import Finding, ProbeResult, Severity, fmt_gpus
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import GpuCalls, devices_or_failure, gpu_fault_action, result
from node_agent.xid import RECOVERY_ACTIONS

FIELD_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R570+)
UNCORRECTED, CORRECTED = 1, 0
VOLATILE, AGGREGATE = 0, 1


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    table = devices_or_failure(ctx, "ecc", started)
    if isinstance(table, ProbeResult):
        return table
    calls = GpuCalls(ctx)
    gpus = ctx.selected_gpus(table)
    live = calls.note_device_errors(table, gpus)
    mode = calls.per_gpu(live, "nvmlDeviceGetEccMode")
    dbe_vol = calls.per_gpu(live, "nvmlDeviceGetTotalEccErrors", UNCORRECTED, VOLATILE)
    sbe_vol = calls.per_gpu(live, "nvmlDeviceGetTotalEccErrors", CORRECTED, VOLATILE)
    dbe_agg = calls.per_gpu(live, "nvmlDeviceGetTotalEccErrors", UNCORRECTED, AGGREGATE)
    sbe_agg = calls.per_gpu(live, "nvmlDeviceGetTotalEccErrors", CORRECTED, AGGREGATE)
    remap = calls.per_gpu(live, "nvmlDeviceGetRemappedRows")
    pages_pending = calls.per_gpu(live, "nvmlDeviceGetRetiredPagesPendingStatus")
    dbe_pages = calls.per_gpu(live, "nvmlDeviceGetRetiredPages", 1)
    fields = calls.per_gpu(live, "nvmlDeviceGetFieldValues", [FIELD_RECOVERY_ACTION])
    findings: list[Finding] = []
    evidence_gpus: list[dict[str, Any]] = []
    threshold = ctx.config.sbe_volatile_threshold
    for g in live:
        action_value = None
        fv = fields.get(g)
        if isinstance(fv, list) and fv and fv[0].get("nvmlReturn") == 0:
            action_value = int(fv[0].get("value") or 0)
        rr = remap.get(g)
        ev = {
            "gpu": g,
            "ecc_mode": mode.get(g),
            "volatile": {"corrected": sbe_vol.get(g), "uncorrected": dbe_vol.get(g)},
            "aggregate": {"corrected": sbe_agg.get(g), "uncorrected": dbe_agg.get(g)},
            "remapped_rows": None if rr is None else dict(zip(("correctable", "uncorrectable", "pending", "failure"), rr)),
            "retired_pages_pending": pages_pending.get(g),
            "retired_pages_dbe": None if dbe_pages.get(g) is None else len(dbe_pages[g]),
            "recovery_action": None if action_value is None else RECOVERY_ACTIONS.get(action_value, str(action_value)),
        }
        evidence_gpus.append(ev)
        if (dbe_vol.get(g) or 0) > 0:
            findings.append(Finding("ecc-dbe", f"GPU {g}: {dbe_vol[g]} uncorrectable (double-bit) ECC error(s) since the "
                                    "driver loaded", Severity.CRITICAL, g,
                                    {"volatile_uncorrected": dbe_vol[g], "aggregate_uncorrected": dbe_agg.get(g)}))
        if (sbe_vol.get(g) or 0) >= threshold:
            findings.append(Finding("ecc-sbe-high", f"GPU {g}: {sbe_vol[g]} corrected ECC errors since the driver loaded "
                                    f"(threshold {threshold})", Severity.WARNING, g, {"volatile_corrected": sbe_vol[g]}))
        if rr is not None:
            corr, unc, pending, failure = (int(x) for x in rr)
            if failure:
                findings.append(Finding("row-remap-failed", f"GPU {g}: a row remap failed (uncorrectable rows {unc}): an "
                                        "RMA criterion", Severity.CRITICAL, g,
                                        {"correctable_rows": corr, "uncorrectable_rows": unc}))
            if pending:
                findings.append(Finding("row-remap-pending", f"GPU {g}: row remap pending ({unc} uncorrectable, {corr} "
                                        "correctable rows): takes effect after a GPU reset", Severity.WARNING, g,
                                        {"correctable_rows": corr, "uncorrectable_rows": unc}))
        if pages_pending.get(g):
            findings.append(Finding("retired-pages-pending", f"GPU {g}: retired pages pending (needs a reset or reboot "
                                    "to take effect)", Severity.WARNING, g))
        if action_value:
            name = RECOVERY_ACTIONS.get(action_value, str(action_value))
            findings.append(Finding("recovery-action", f"GPU {g}: driver recovery action is '{name}'",
                                    Severity.CRITICAL, g, {"recovery_action": action_value, "action_name": name}))
    findings = calls.findings + findings
    evidence: dict[str, Any] = {"gpus": evidence_gpus}
    action = gpu_fault_action(findings) or _action(findings)
    ok = f"ECC, row remapping and recovery action checked on {fmt_gpus(live)}: clean" if live else "no GPU to check"
    return result(ctx, "ecc", started, findings, ok, evidence, action=action, calls=calls)


def _action(findings: list[Finding]) -> str | None:
    codes = {f.code for f in findings}
    gpus = ",".join(str(g) for g in sorted({f.gpu for f in findings if f.gpu is not None}))
    if "row-remap-failed" in codes:
        return "Drain the node and open an RMA for the GPU (row remap failure); run `dcgmi diag -r 3` to confirm."
    if "recovery-action" in codes:
        names = {f.data.get("action_name") for f in findings if f.code == "recovery-action"}
        if "Node Reboot Required" in names or "System Reboot" in names:
            return "Drain the node and reboot it (NVML recovery action)."
        return f"Drain the node, stop GPU processes and reset: `nvidia-smi -r -i {gpus}` (NVML recovery action)."
    if "ecc-dbe" in codes or "row-remap-pending" in codes or "retired-pages-pending" in codes:
        return f"Drain the node and reset GPU(s) {gpus} (`nvidia-smi -r -i {gpus}`) so the pending remap takes effect; then run `dcgmi diag -r 3`."
    if "ecc-sbe-high" in codes:
        return "Watch the corrected-error rate; drain if it keeps rising."
    return None


PROBE = Probe(
    "ecc",
    "ECC mode, volatile and aggregate corrected/uncorrected counts, retired pages (pre-Ampere), row remapping "
    "pending/failed, NVML recovery action (field 230)",
    "/dev/nvidia*",
    run,
)
