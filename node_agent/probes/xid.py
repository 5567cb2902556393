"""Xid history in the window: kernel log (/dev/kmsg, journalctl -k, dmesg) plus NVML Xid events seen since
the agent started, each decoded with the catalog meaning and action, grouped into bursts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from node_agent.findings import Finding, ProbeResult, Severity
from node_agent.nvml.errors import NvmlError, NvmlHang, NvmlUnavailable
from node_agent.probes.base import DeviceTable, Probe, ProbeContext
from node_agent.probes.common import clock, result
from node_agent.xid import RECOVERY_ACTIONS, XidEvent, decode_gpu_mapping, decode_line, info

BURST_GAP_S = 180  # NVIDIA Fleet Intelligence: related Xids until 3 minutes of silence
MATCH_SLACK_S = 10  # an NVML event and a kernel line this close are the same Xid
MAX_FINDINGS = 50


@dataclass
class Seen:
    event: XidEvent
    time: float
    source: str
    gpu: int | None
    line: str
    count: int = 1


def _gpu_for(table: DeviceTable | None, pci: str | None, uuid_by_pci: dict[str, str]) -> int | None:
    if table is None or pci is None:
        return None
    dev = table.by_pci(pci)
    if dev is None and pci in uuid_by_pci:
        dev = next((d for d in table.devices if d.uuid == uuid_by_pci[pci]), None)
    if dev is None:
        # A lost GPU answers no identity call. If exactly one GPU has no known address and the line's
        # address matches none of the others, it is that GPU.
        unknown = [d for d in table.devices if d.pci is None]
        if len(unknown) == 1:
            dev = unknown[0]
    return None if dev is None else dev.index


def run(ctx: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    start, end = ctx.window()
    klog = ctx.kernel_log()
    table: DeviceTable | None = None
    nvml_note: str | None = None
    try:
        table = ctx.devices()
    except (NvmlError, NvmlHang, NvmlUnavailable) as exc:
        nvml_note = f"GPU indices and NVML events unavailable: {exc}"
    uuid_by_pci: dict[str, str] = {}
    seen: list[Seen] = []
    for rec in klog.records:
        mapping = decode_gpu_mapping(rec.text)
        if mapping:
            uuid_by_pci[mapping[0]] = mapping[1]
            continue
        ev = decode_line(rec.text)
        if ev is None:
            continue
        seen.append(Seen(ev, rec.time, klog.source, _gpu_for(table, ev.pci, uuid_by_pci), rec.text))
    events_error = None
    nvml_events: list[dict[str, Any]] = []
    if table is not None:
        nvml_events, events_error = ctx.nvml.events(ctx.nvml_deadline())
    for e in nvml_events:
        if e.get("xid") is None or not start <= e["time"] <= end:
            continue
        match = next((s for s in seen if s.event.xid == e["xid"] and s.gpu == e["gpu"]
                      and abs(s.time - e["time"]) <= MATCH_SLACK_S), None)
        if match is not None:
            match.source = f"{match.source}+nvml"
            continue
        dev = table.devices[e["gpu"]] if table is not None and e["gpu"] is not None and e["gpu"] < len(table.devices) else None
        ev = XidEvent(xid=int(e["xid"]), pci=dev.pci if dev else None, message="NVML Xid event (no message text)")
        seen.append(Seen(ev, e["time"], "nvml", e["gpu"], ""))
    seen.sort(key=lambda s: s.time)
    chosen = None if ctx.request.gpus is None or table is None else set(ctx.selected_gpus(table))
    if chosen is not None:
        seen = [s for s in seen if s.gpu is None or s.gpu in chosen]
    # Same Xid on the same GPU repeated: one finding with a count (first time kept: it is the initiating one).
    merged: dict[tuple[int, int | None, str | None, str], Seen] = {}
    for s in seen:
        key = (s.event.xid, s.gpu, s.event.pci, s.source)
        if key in merged:
            merged[key].count += 1
        else:
            merged[key] = s
    bursts = _bursts(seen)
    findings = [_finding(s) for s in list(merged.values())[:MAX_FINDINGS]]
    evidence: dict[str, Any] = {
        "window": {"start": start, "end": end},
        "kernel_log_source": klog.source,
        "kernel_log_records": len(klog.records),
        "nvml_events_since_agent_start": len([e for e in nvml_events if e.get("xid") is not None]),
        "agent_started": ctx.agent_started,
        "bursts": bursts,
    }
    if klog.error:
        evidence["kernel_log_note"] = klog.error
    if nvml_note or events_error:
        evidence["nvml_note"] = nvml_note or events_error
    if len(merged) > MAX_FINDINGS:
        evidence["findings_truncated"] = len(merged) - MAX_FINDINGS
    reason = None
    action = None
    if seen:
        first = _initiating(seen)
        gi = info(first.event.caused_by or first.event.xid)
        where = f"GPU {first.gpu}" if first.gpu is not None else (first.event.pci or "unknown GPU")
        reason = f"Xid {first.event.xid} ({info(first.event.xid).meaning}) on {where} at {clock(first.time)}"
        if first.event.caused_by:
            reason += f", caused by previous Xid {first.event.caused_by}"
        if len(seen) > 1:
            reason += f"; {len(seen)} Xid records in the window"
        action = first.event.action() if first.event.caused_by is None else gi.action
    ok = f"no Xid in the kernel log ({klog.source}) or NVML events in the window"
    if klog.source == "none":
        ok = "no Xid found, but no kernel log source was readable (see evidence)"
    res = result(ctx, "xid", started, findings, ok, evidence, reason=reason, action=action)
    if klog.source == "none" and not findings:
        res.health = res.health.UNKNOWN  # nothing read is not the same as "clean"
    return res


def _initiating(seen: list[Seen]) -> Seen:
    """The first Xid of the first burst that holds a non-informational Xid."""
    for burst_start in range(len(seen)):
        s = seen[burst_start]
        if s.event.severity() is not Severity.INFO:
            return s
    return seen[0]


def _bursts(seen: list[Seen]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    last = None
    for s in seen:
        if last is None or s.time - last > BURST_GAP_S:
            out.append({"start": s.time, "first_xid": s.event.xid, "gpu": s.gpu, "xids": []})
        out[-1]["xids"].append(s.event.xid)
        last = s.time
    return out


def _finding(s: Seen) -> Finding:
    ev = s.event
    cat = info(ev.xid)
    where = f"GPU {s.gpu}" if s.gpu is not None else f"PCI {ev.pci}" if ev.pci else "an unidentified GPU"
    detail = f"Xid {ev.xid} on {where} at {clock(s.time)}: {cat.meaning}"
    if ev.caused_by:
        detail += f" (caused by previous Xid {ev.caused_by}: {info(ev.caused_by).meaning})"
    if ev.recovery_action is not None:
        detail += f": now '{RECOVERY_ACTIONS.get(ev.recovery_action, ev.recovery_action)}'"
    if ev.process:
        detail += f"; process {ev.process} (pid {ev.pid})"
    if ev.inferred:
        detail += " [inferred from the message: the line carries no Xid number]"
    if ev.gsp_gpu is not None and s.gpu is None:
        detail += f" [driver's GPU{ev.gsp_gpu}]"
    if s.count > 1:
        detail += f" ×{s.count}"
    action = ev.action()  # the catalogue's advice; the line's Fatal/Non-fatal word decides where it may
    return Finding("xid", detail, ev.severity(), s.gpu, {
        "xid": ev.xid, "meaning": cat.meaning, "mnemonic": cat.mnemonic, "action": action, "bucket": cat.bucket,
        "time": round(s.time, 3), "pci": ev.pci, "pid": ev.pid, "process": ev.process,
        "caused_by": ev.caused_by, "recovery_action": ev.recovery_action, "source": s.source,
        "count": s.count, "line": s.line[:400],
    })


PROBE = Probe(
    "xid",
    "Xid errors in the time window from the kernel log (/dev/kmsg, else journalctl -k, else dmesg) and NVML Xid "
    "events seen since the agent started, decoded with NVIDIA's catalog meaning and action",
    "read /dev/kmsg (CAP_SYSLOG when kernel.dmesg_restrict=1) or the systemd-journal group for journalctl -k; "
    "/dev/nvidia* for NVML events",
    run,
)
