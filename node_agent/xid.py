"""Xid catalog (node_agent/data/xid-catalog.json, read through node_agent/catalog.py) and kernel-line decoder.

`decode_line` understands the driver's line formats:
  NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
  NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.              (older drivers, no "PCI:")
  NVRM: Xid (PCI:0018:01:00): 45, pid=..., name=python3, Ch 00000001 caused by previous Xid 149
  NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 ...)
  NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)
  NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.                  (multi-line form, no Xid: 79)
  NVRM: The NVIDIA GPU 0000:b3:00.0 ... fallen off the bus and is not responding to commands.
  NVRM: Timeout after 45s of waiting for RPC response from GPU4 GSP!   (GSP RPC timeout: 119)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from node_agent import catalog
from node_agent.compat import removeprefix
from node_agent.findings import Severity


@dataclass(frozen=True)
class XidInfo:
    mnemonic: str
    meaning: str
    bucket: str  # NVIDIA's "immediate / investigatory" resolution buckets
    culprit: str
    action: str  # what on-call does (the catalogue's advice)
    severity: Severity
    origin: str = "mixed"  # hardware / driver / application / mixed
    action_bucket: str = "none"  # the catalogue's action: restart-app, reset-gpu, reboot-node, ...
    line_word: bool = False  # the line's Fatal/Non-fatal word decides severity and action


_C, _W, _I = Severity.CRITICAL, Severity.WARNING, Severity.INFO
SEVERITY = {"fatal": _C, "critical": _C, "warning": _W, "info": _I}


def _info(code: int, entry: dict) -> XidInfo:
    return XidInfo(
        mnemonic=entry.get("mnemonic") or entry.get("name") or f"XID_{code}",
        meaning=entry.get("meaning", ""),
        bucket=entry.get("nvidia_bucket", ""),
        culprit=entry.get("culprit") or entry.get("origin", "mixed"),
        action=entry.get("advice", ""),
        severity=SEVERITY.get(entry.get("severity", ""), _W),
        origin=entry.get("origin", "mixed"),
        action_bucket=entry.get("action", "none"),
        line_word=bool(entry.get("line_word")),
    )


# node_agent/data/xid-catalog.json: the same entries the triage engine reads (node_agent/catalog.py)
CATALOG: dict[int, XidInfo] = {code: _info(code, e) for code, e in catalog.xids().items()}
SXID_CATALOG: dict[int, XidInfo] = {code: _info(code, e) for code, e in catalog.sxids().items()}

UNKNOWN_XID = XidInfo("UNKNOWN", "Xid not in the catalog", "", "unknown",
                      "Look the Xid up in NVIDIA's Xid catalog; drain if the GPU misbehaves.", _W)

RECOVERY_ACTIONS = {0: "None", 1: "GPU Reset Required", 2: "Node Reboot Required", 3: "Drain P2P",
                    4: "Drain and Reset", 5: "Recover IMEX domain", 6: "Bus Reset", 7: "System Reboot"}


def info(xid: int) -> XidInfo:
    return CATALOG.get(xid, UNKNOWN_XID)


def sxid_info(code: int) -> XidInfo:
    """An NVSwitch SXid's entry (the line's Fatal/Non-fatal word decides its severity: `occurrence`)."""
    return SXID_CATALOG.get(code, UNKNOWN_XID)


def occurrence(code: int, word: str | None, *, switch: bool = False) -> tuple[Severity, str, str]:
    """(severity, action bucket, advice) of one Xid (or SXid) line whose Fatal/Non-fatal word is `word`."""
    entry = (catalog.sxid if switch else catalog.xid)(code)
    if entry is None:
        return UNKNOWN_XID.severity, UNKNOWN_XID.action_bucket, UNKNOWN_XID.action
    got = catalog.outcome(entry, word)
    return SEVERITY.get(got["severity"], _W), got["action"], got["advice"]


@dataclass
class XidEvent:
    xid: int
    pci: str | None  # "0000:3b:00" (domain:bus:device), lower case
    message: str
    pid: int | None = None
    process: str | None = None
    caused_by: int | None = None
    severity_word: str | None = None  # "Fatal"/"Non-fatal" on NVLink5 lines
    gsp_gpu: int | None = None  # the driver's GPU number in GSP timeout lines (not the NVML index)
    inferred: bool = False  # no "Xid N" on the line: derived from the message text
    recovery_action: int | None = None  # Xid 154: the new action

    @property
    def info(self) -> XidInfo:
        return info(self.xid)

    def severity(self) -> Severity:
        if self.severity_word and self.info.line_word:
            return occurrence(self.xid, self.severity_word)[0]
        if self.xid == 154 and self.recovery_action is not None:
            return _I if self.recovery_action == 0 else _C
        if self.xid == 45 and self.caused_by is not None:
            return info(self.caused_by).severity  # 45 is only the echo of the earlier Xid
        return self.info.severity

    def action(self) -> str:
        """What on-call does for this line: the catalogue's advice (by the line's word where it decides)."""
        if self.xid == 45 and self.caused_by is not None:
            return info(self.caused_by).action
        if self.severity_word and self.info.line_word:
            return occurrence(self.xid, self.severity_word)[2]
        return self.info.action


_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): (\d+),\s*(.*)")
_PID_RE = re.compile(r"pid=['\"]?(\d+|<unknown>)['\"]?,\s*name=([^,]*),\s*(.*)")
_CAUSED_RE = re.compile(r"caused by previous Xid (\d+)")
_ACTION_RE = re.compile(r"recovery action changed from 0x([0-9a-fA-F]+) \([^)]*\) to 0x([0-9a-fA-F]+)")
_OFF_BUS_RE = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\b.*fallen off the bus"
)
_GSP_RE = re.compile(r"Timeout after (\d+)s of waiting for RPC response from GPU(\d+) GSP")
_MAP_RE = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): (GPU-[0-9a-fA-F-]+)")


def normalize_pci(text: str) -> str:
    """'00000000:3B:00.0', 'PCI:0000:3b:00' or '0000:3b:00' -> '0000:3b:00' (the kernel's form)."""
    text = removeprefix(text, "PCI:").split(".")[0]
    parts = text.split(":")
    if len(parts) < 3:
        return text.lower()
    domain, bus, dev = (int(p, 16) for p in parts[-3:])
    return f"{domain:04x}:{bus:02x}:{dev:02x}"


def decode_line(text: str) -> XidEvent | None:
    m = _XID_RE.search(text)
    if m:
        pci, xid, rest = normalize_pci(m.group(1)), int(m.group(2)), m.group(3).strip()
        ev = XidEvent(xid=xid, pci=pci, message=rest)
        pm = _PID_RE.match(rest)
        if pm:
            ev.pid = int(pm.group(1)) if pm.group(1).isdigit() else None
            name = pm.group(2).strip().strip("'\"")
            ev.process = None if name in ("<unknown>", "") else name
            ev.message = pm.group(3).strip()
        cm = _CAUSED_RE.search(rest)
        if cm:
            ev.caused_by = int(cm.group(1))
        if info(xid).line_word:
            ev.severity_word = catalog.line_word(rest)  # "Fatal" / "Non-fatal" (NVLink5 Xids 144-150)
        am = _ACTION_RE.search(rest)
        if am:
            ev.recovery_action = int(am.group(2), 16)
        gm = _GSP_RE.search(rest)
        if gm:
            ev.gsp_gpu = int(gm.group(2))
        return ev
    m = _OFF_BUS_RE.search(text)
    if m:
        return XidEvent(xid=79, pci=normalize_pci(m.group(1)), message="GPU has fallen off the bus", inferred=True)
    m = _GSP_RE.search(text)
    if m and "NVRM" in text:
        return XidEvent(xid=119, pci=None, message=text.split("NVRM: ", 1)[-1].strip(), gsp_gpu=int(m.group(2)),
                        inferred=True)
    return None


def decode_gpu_mapping(text: str) -> tuple[str, str] | None:
    """'NVRM: GPU at PCI:0000:01:00: GPU-<uuid>' -> ('0000:01:00', 'GPU-<uuid>')."""
    m = _MAP_RE.search(text)
    return (normalize_pci(m.group(1)), m.group(2)) if m else None
