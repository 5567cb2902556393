"""PCIe link generation and width, current vs max, and the replay counter."""

from __future__ import annotations

import time

from node_agent.findings import Finding, ProbeResult, Severity, fmt_gpus
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import GpuCalls, devices_or_failure, result


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    table = devices_or_failure(ctx, "pcie", started)
    if isinstance(table, ProbeResult):
        return table
    calls = GpuCalls(ctx)
    gpus = calls.note_device_errors(table, ctx.selected_gpus(table))
    gen = calls.per_gpu(gpus, "nvmlDeviceGetCurrPcieLinkGeneration")
    width = calls.per_gpu(gpus, "nvmlDeviceGetCurrPcieLinkWidth")
    max_gen = calls.per_gpu(gpus, "nvmlDeviceGetMaxPcieLinkGeneration")
    max_width = calls.per_gpu(gpus, "nvmlDeviceGetMaxPcieLinkWidth")
    replays = calls.per_gpu(gpus, "nvmlDeviceGetPcieReplayCounter")
    threshold = ctx.config.pcie_replay_threshold
    findings: list[Finding] = []
    per_gpu = []
    for g in gpus:
        per_gpu.append({"gpu": g, "bus_id": table.devices[g].bus_id, "gen": gen.get(g), "max_gen": max_gen.get(g),
                        "width": width.get(g), "max_width": max_width.get(g), "replays": replays.get(g)})
        # Width below max is the reliable signal; a lower generation at idle is power saving.
        if width.get(g) and max_width.get(g) and width[g] < max_width[g]:
            findings.append(Finding("pcie-link-degraded", f"GPU {g} PCIe link at x{width[g]} of x{max_width[g]} "
                                    f"(gen {gen.get(g)} of {max_gen.get(g)})", Severity.WARNING, g,
                                    {"width": width[g], "max_width": max_width[g], "gen": gen.get(g),
                                     "max_gen": max_gen.get(g)}))
        if (replays.get(g) or 0) >= threshold:
            findings.append(Finding("pcie-replays", f"GPU {g}: {replays[g]} PCIe replays since boot (threshold "
                                    f"{threshold}): link-level retries", Severity.WARNING, g, {"replays": replays[g]}))
    findings = calls.findings + findings
    action = None
    if any(f.code in ("pcie-link-degraded", "pcie-replays") for f in findings):
        gp = sorted({f.gpu for f in findings if f.gpu is not None})
        action = (f"Reseat or inspect the riser/slot of {fmt_gpus(gp)} at the next maintenance; check "
                  "`lspci -vv` LnkSta; drain if the job is bandwidth-bound.")
    ok = f"PCIe links at full width on {fmt_gpus(gpus)}, replays below {threshold}" if gpus else "no GPU to check"
    return result(ctx, "pcie", started, findings, ok, {"gpus": per_gpu}, action=action, calls=calls)


PROBE = Probe(
    "pcie",
    "PCIe link generation and width, current vs max, and the replay counter per GPU",
    "/dev/nvidia*",
    run,
)
