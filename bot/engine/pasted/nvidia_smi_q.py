"""`nvidia-smi -q` (whole, or `-d ECC,ROW_REMAPPER,PAGE_RETIREMENT,MEMORY,PIDS`) -> the `ecc`, `fabric`
and `processes` probes' findings: volatile ECC counts, retired pages, the row remapper, fabric
state, and the process list with memory."""

from __future__ import annotations

import re
from typing import Any

from .base import Block, JobView, finding, result
from .nvidia_smi import processes_result

KIND = "nvidia-smi -q"
PROBES = ("ecc", "fabric", "processes")
ANSWERS = re.compile(r"^(?:sudo\s+)?nvidia-smi\s+(?:-q|--query)(?:\s|$)")

SBE_HIGH = 1000  # the agent's sbe_volatile_threshold default

_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_KV = re.compile(r"^(?P<ind>\s*)(?P<key>[A-Za-z][\w ./()+-]*?)\s*:\s*(?P<val>.*?)\s*$")
_SECTION = re.compile(r"^(?P<ind>\s*)(?P<key>[A-Za-z][\w ./()+-]*?)\s*$")


def _gpu_fields(lines: list[str]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Flatten one GPU's section: "ECC Errors/Volatile/DRAM Uncorrectable" -> "0"; processes apart."""
    flat: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    procs: list[dict[str, Any]] = []
    for raw in lines:
        if not raw.strip():
            continue
        line = raw.replace("\t", "    ")
        m = _KV.match(line)
        s = None if m else _SECTION.match(line)
        hit = m or s
        ind = len(hit.group("ind")) if hit else 0
        while stack and stack[-1][0] >= ind:
            stack.pop()
        path = "/".join(k for _, k in stack)
        if m:
            key, val = m.group("key").strip(), m.group("val")
            full = f"{path}/{key}" if path else key
            if key == "Process ID" and val.isdigit():
                procs.append({"pid": int(val), "process": None, "used_mib": None})
                stack.append((ind, key))
            elif stack and stack[-1][1] == "Process ID" and procs:
                if key == "Name":
                    procs[-1]["process"] = val
                elif key == "Used GPU Memory":
                    mm = re.match(r"(\d+)\s*MiB", val)
                    procs[-1]["used_mib"] = int(mm.group(1)) if mm else None
                elif key == "Type":
                    procs[-1]["type"] = val
            else:
                flat[full] = val
        elif s:
            stack.append((ind, s.group("key").strip()))
    return flat, procs


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and v.strip().isdigit() else None


def _ecc_counts(flat: dict[str, str], scope: str) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) under ECC Errors/<scope>: Hopper/Ampere SRAM/DRAM keys, or the
    older Single Bit / Double Bit blocks (their Total)."""
    corr = unc = None
    pre = f"ECC Errors/{scope}/"
    for key, val in flat.items():
        if not key.startswith(pre):
            continue
        n = _int(val)
        if n is None:
            continue
        rest = key[len(pre):]
        if rest.startswith("Single Bit/"):
            if rest == "Single Bit/Total" or f"{pre}Single Bit/Total" not in flat:
                corr = (corr or 0) + n
        elif rest.startswith("Double Bit/"):
            if rest == "Double Bit/Total" or f"{pre}Double Bit/Total" not in flat:
                unc = (unc or 0) + n
        elif "Uncorrectable" in rest:
            unc = (unc or 0) + n
        elif "Correctable" in rest:
            corr = (corr or 0) + n
    return corr, unc


def find(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    starts = [i for i, line in enumerate(lines) if _GPU.match(line.strip()) and not line.startswith((" ", "\t"))]
    if not starts:
        return []
    head = next((i for i in range(starts[0], -1, -1) if "NVSMI LOG" in lines[i]), None)
    attached = None
    for i in range(head if head is not None else starts[0], starts[0]):
        m = re.match(r"^Attached GPUs\s*:\s*(\d+)", lines[i])
        if m:
            attached = int(m.group(1))
    gpus = []
    end = starts[0]
    for n, s in enumerate(starts):
        stop = starts[n + 1] if n + 1 < len(starts) else len(lines)
        body = []
        for j in range(s + 1, stop):
            line = lines[j]
            if line.strip() and not line.startswith((" ", "\t")):
                break  # back to unindented text: the output ended
            body.append(line)
            end = j
        flat, procs = _gpu_fields(body)
        gpus.append({"bus_id": _GPU.match(lines[s].strip()).group("bus"), "flat": flat, "processes": procs})  # type: ignore[union-attr]
    # the index nvidia-smi prints is the order of the full listing (PCI order); one GPU of `-i N` has none
    indexed = attached == len(gpus) or (attached is None and len(gpus) > 1)
    for n, g in enumerate(gpus):
        g["gpu"] = n if indexed else None
    keys = {str(k).split("/")[0] for g in gpus for k in g["flat"]}
    if not keys & {"ECC Errors", "ECC Mode", "Retired Pages", "Remapped Rows", "Fabric", "FB Memory Usage",
                   "Processes", "Product Name"}:
        return []
    return [(head if head is not None else starts[0], end, {"gpus": gpus})]


def results(block: Block, job: JobView) -> list[dict[str, Any]]:
    gpus = block.data["gpus"]
    out = []
    ecc_seen = fabric_seen = procs_seen = False
    ecc: list[dict[str, Any]] = []
    fab: list[dict[str, Any]] = []
    for g in gpus:
        flat, idx = g["flat"], g["gpu"]
        where = f"GPU {idx}" if idx is not None else f"GPU {g['bus_id']}"
        data = {"bus_id": g["bus_id"]}
        if any(k.startswith(("ECC Errors/", "Retired Pages/", "Remapped Rows/")) for k in flat):
            ecc_seen = True
        corr, unc = _ecc_counts(flat, "Volatile")
        if unc:
            _, agg = _ecc_counts(flat, "Aggregate")
            ecc.append(finding("ecc-dbe", f"{where}: {unc} uncorrectable ECC error(s) since the driver loaded", "critical", idx,
                               volatile_uncorrected=unc, aggregate_uncorrected=agg, **data))
        if corr and corr >= SBE_HIGH:
            ecc.append(finding("ecc-sbe-high", f"{where}: {corr} corrected ECC errors since the driver loaded "
                               f"(threshold {SBE_HIGH})", "warning", idx, volatile_corrected=corr, **data))
        rows_unc = _int(flat.get("Remapped Rows/Uncorrectable Error"))
        rows_corr = _int(flat.get("Remapped Rows/Correctable Error"))
        if flat.get("Remapped Rows/Remapping Failure Occurred", "").lower() == "yes":
            ecc.append(finding("row-remap-failed", f"{where}: a row remap failed (uncorrectable rows {rows_unc}): an RMA "
                               "criterion", "critical", idx, correctable_rows=rows_corr, uncorrectable_rows=rows_unc, **data))
        if flat.get("Remapped Rows/Pending", "").lower() == "yes":
            ecc.append(finding("row-remap-pending", f"{where}: row remap pending ({rows_unc} uncorrectable, {rows_corr} "
                               "correctable rows): takes effect after a GPU reset", "warning", idx,
                               correctable_rows=rows_corr, uncorrectable_rows=rows_unc, **data))
        pending = flat.get("Retired Pages/Pending Page Blacklist") or flat.get("Retired Pages/Pending Page Retirement")
        if (pending or "").lower() == "yes":
            ecc.append(finding("retired-pages-pending", f"{where}: retired pages pending (needs a reset or reboot to "
                               "take effect)", "warning", idx, **data))
        state, status = flat.get("Fabric/State"), flat.get("Fabric/Status")
        if state and state != "N/A":
            fabric_seen = True
            if state.lower() != "completed" or (status and status not in ("N/A", "Success")):
                fab.append(finding("fabric-not-ready", f"{where}: fabric state {state}, status {status or '?'}",
                                   "critical", idx, state=state, status=status, **data))
        if "Processes" in flat or g["processes"]:
            procs_seen = True
    if ecc_seen:
        clean = f"ECC, retired pages and row remapper clean on {len(gpus)} GPU(s)"
        out.append(result("ecc", ecc, "; ".join(f["detail"] for f in ecc[:3]) if ecc else clean))
    if fabric_seen:
        out.append(result("fabric", fab, "; ".join(f["detail"] for f in fab[:3]) if fab else "fabric registration complete"))
    if procs_seen:
        listed = []
        for g in gpus:
            flat = g["flat"]
            used = re.match(r"(\d+)", flat.get("FB Memory Usage/Used", ""))
            total = re.match(r"(\d+)", flat.get("FB Memory Usage/Total", ""))
            listed.append({"gpu": g["gpu"], "bus_id": g["bus_id"], "processes": g["processes"],
                           "used_mib": int(used.group(1)) if used else None,
                           "total_mib": int(total.group(1)) if total else None})
        out.append(processes_result(listed, job, "nvidia-smi -q"))
    return out
