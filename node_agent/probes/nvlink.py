"""NVLink state per link and the DL error counters (replay, recovery, CRC, ECC)."""

from __future__ import annotations

import time
from typing import Any

from node_agent.compat import zip_strict
from node_agent.findings import Finding, ProbeResult, Severity, fmt_gpus
from node_agent.nvml.client import Call
from node_agent.probes.base import Probe, ProbeContext
from node_agent.probes.common import GpuCalls, devices_or_failure, result

COUNTERS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data", 4: "ecc_data"}
FIELD_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT
# NVML_FI_DEV_NVLINK_*_TOTAL: all-links totals of the DL counters
TOTAL_FIELDS = {FIELD_LINK_COUNT: "links", 38: "crc_flit", 45: "crc_data", 52: "replay", 59: "recovery",
                160: "ecc_data"}
CRC_THRESHOLD = 100


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    table = devices_or_failure(ctx, "nvlink", started)
    if isinstance(table, ProbeResult):
        return table
    calls = GpuCalls(ctx)
    gpus = calls.note_device_errors(table, ctx.selected_gpus(table))
    # One field-values call per GPU gives the link count and all-links error totals; per-link counters
    # are read only where a total is non-zero (or totals are unsupported, as on Blackwell).
    totals_raw = calls.per_gpu(gpus, "nvmlDeviceGetFieldValues", list(TOTAL_FIELDS))
    totals: dict[int, dict[str, int]] = {}
    link_count: dict[int, int] = {}
    for g, values in totals_raw.items():
        got = {v["fieldId"]: int(v["value"]) for v in values if v.get("nvmlReturn") == 0}
        if FIELD_LINK_COUNT in got:
            link_count[g] = got[FIELD_LINK_COUNT]
        if all(f in got for f in TOTAL_FIELDS if f != FIELD_LINK_COUNT):
            totals[g] = {name: got[f] for f, name in TOTAL_FIELDS.items() if f != FIELD_LINK_COUNT}
    # Without the count field: ask every link up to the bindings' maximum (18 before 13.610, 36 after) and
    # read NOT_SUPPORTED as "no such link".
    max_links = int(table.info.get("nvlink_max_links") or 18)
    state_calls = [Call("nvmlDeviceGetNvLinkState", g, (link,)) for g in gpus
                   for link in range(link_count.get(g, max_links))]
    states: dict[int, dict[int, int]] = {g: {} for g in gpus}
    for c, o in zip_strict(state_calls, calls.run(state_calls)):
        if o.ok:
            states[c.gpu][c.args[0]] = int(o.value)
    links = {g: sorted(s) for g, s in states.items()}
    suspect = [g for g in gpus if g not in totals or any(totals[g].values())]
    err_calls = [Call("nvmlDeviceGetNvLinkErrorCounter", g, (link, k)) for g in suspect for link in links[g]
                 for k in COUNTERS]
    errors: dict[int, dict[int, dict[str, int]]] = {g: {} for g in gpus}
    for c, o in zip_strict(err_calls, calls.run(err_calls)):
        if o.ok and o.value:
            errors[c.gpu].setdefault(c.args[0], {})[COUNTERS[c.args[1]]] = int(o.value)
    findings: list[Finding] = []
    per_gpu: list[dict[str, Any]] = []
    for g in gpus:
        down = [link for link, up in states[g].items() if not up]
        per_gpu.append({"gpu": g, "links": len(links[g]), "down": down, "totals": totals.get(g),
                        "errors": {str(k): v for k, v in errors[g].items()}})
        if not links[g]:
            continue  # a PCIe part without NVLink
        if down:
            everything = len(down) == len(links[g])
            findings.append(Finding("nvlink-down", f"GPU {g}: {'all ' if everything else ''}{len(down)} of "
                                    f"{len(links[g])} NVLinks inactive (links {', '.join(map(str, down))})",
                                    Severity.CRITICAL if everything else Severity.WARNING, g,
                                    {"down": down, "links": len(links[g])}))
        bad = {link: c for link, c in errors[g].items()
               if c.get("recovery", 0) > 0 or c.get("crc_flit", 0) + c.get("crc_data", 0) >= CRC_THRESHOLD}
        if bad:
            total = {k: sum(c.get(k, 0) for c in bad.values()) for k in COUNTERS.values()}
            findings.append(Finding("nvlink-errors", f"GPU {g}: NVLink errors on links {', '.join(map(str, bad))} "
                                    f"(recovery {total['recovery']}, CRC {total['crc_flit'] + total['crc_data']}, "
                                    f"replay {total['replay']})", Severity.WARNING, g,
                                    {"links": sorted(bad), "totals": total}))
    findings = calls.findings + findings
    action = None
    if any(f.code in ("nvlink-down", "nvlink-errors") for f in findings):
        gp = sorted({f.gpu for f in findings if f.code.startswith("nvlink") and f.gpu is not None})
        action = (f"Drain the node; check `nvidia-smi nvlink -s` and `-e` for {fmt_gpus(gp)}; reset the GPUs or reboot "
                  "to retrain the links; if it recurs, inspect the baseboard/NVSwitch.")
    with_links = [g for g in gpus if links[g]]
    ok = (f"all NVLinks up on {fmt_gpus(with_links)}, error counters quiet" if with_links
          else "no NVLink on these GPUs (PCIe parts)")
    return result(ctx, "nvlink", started, findings, ok, {"gpus": per_gpu}, action=action, calls=calls)


PROBE = Probe(
    "nvlink",
    "NVLink state of every link and the DL error counters (replay, recovery, CRC flit/data, ECC)",
    "/dev/nvidia*",
    run,
)
