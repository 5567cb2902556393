"""Xid catalog (NVIDIA's Ampere+ catalog buckets, notes section 3) and kernel-line decoder.

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

from node_agent.findings import Severity


@dataclass(frozen=True)
class XidInfo:
    mnemonic: str
    meaning: str
    bucket: str  # NVIDIA's "immediate / investigatory" resolution buckets
    culprit: str
    action: str
    severity: Severity


_C, _W, _I = Severity.CRITICAL, Severity.WARNING, Severity.INFO

CATALOG: dict[int, XidInfo] = {
    8: XidInfo("FIFO_IDLE_TIMEOUT", "GPU stopped processing (FIFO idle timeout)", "RESTART_APP / CONTACT_SUPPORT",
               "driver or application", "Restart the job; if it recurs on the same GPU, run diagnostics (dcgmi diag -r 3).", _W),
    13: XidInfo("GR_EXCEPTION", "graphics engine exception (usually a fault in the application's kernels)",
                "RESTART_APP / WORKFLOW_XID_13", "application",
                "Restart the job and debug with compute-sanitizer; drain only if it follows this GPU across different jobs.", _W),
    31: XidInfo("MMU_ERR_FLT", "GPU memory page fault (illegal address)", "RESTART_APP / WORKFLOW_XID_31",
                "application (sometimes driver or hardware)",
                "Restart the job and debug with compute-sanitizer; drain only if it follows this GPU across different jobs.", _W),
    32: XidInfo("PBDMA_ERROR", "invalid or corrupted push buffer stream", "RESTART_APP / CHECK_APP/CUDA",
                "driver, PCIe bus, system memory", "Restart; if it repeats, check PCIe replay counters and link width, then drain.", _W),
    38: XidInfo("FECS_WATCHDOG_TIMEOUT", "driver firmware (FECS) watchdog timeout", "IGNORE / CONTACT_SUPPORT",
                "driver or firmware", "No immediate action; if it repeats, reboot and inspect (gpud's conservative call).", _I),
    43: XidInfo("RESETCHANNEL_VERIF_ERROR", "GPU stopped processing the application's channel (application fault)",
                "IGNORE / CONTACT_SUPPORT", "application", "The job's process was killed; the GPU itself is fine.", _W),
    44: XidInfo("GR_FAULT_DURING_CTXSW", "graphics engine fault during context switch", "IGNORE / CONTACT_SUPPORT",
                "driver", "No immediate action; if it repeats, reboot and inspect.", _I),
    45: XidInfo("PREEMPTIVE_REMOVAL", "channel torn down after an earlier error or a kill",
                "WORKFLOW_XID_45 (solo: RESTART_FM; not solo: follow the other Xid)", "a consequence of something else",
                "Follow the earlier Xid; if 45 appears alone on an NVSwitch host, check or restart nvidia-fabricmanager.", _W),
    46: XidInfo("GPU_TIMEOUT", "GPU stopped processing (timeout)", "RESET_GPU / CONTACT_SUPPORT", "driver",
                "Drain the node, then reset the GPU (nvidia-smi -r -i <gpu>).", _C),
    48: XidInfo("GPU_ECC_DBE", "double-bit (uncorrectable) ECC error", "WORKFLOW_XID_48", "hardware (memory)",
                "Drain; if followed by Xid 63/64 reset the GPU, otherwise run field diagnostics; check remapped rows (remap failure means RMA).", _C),
    61: XidInfo("PMU_BREAKPOINT", "micro-controller breakpoint or warning (pre-Ampere)", "CONTACT_SUPPORT",
                "firmware", "Pre-Ampere only: reboot if the GPU misbehaves.", _I),
    62: XidInfo("PMU_HALT_ERROR", "internal micro-controller halt", "RESET_GPU / CONTACT_SUPPORT",
                "hardware, driver or thermal", "Drain and reset the GPU; if it recurs, RMA.", _C),
    63: XidInfo("INFOROM_DRAM_RETIREMENT_EVENT", "row remap or page retirement recorded", "IGNORE / IGNORE",
                "hardware (memory), handled", "No immediate action; reset the GPU when convenient to apply the pending remap.", _I),
    64: XidInfo("INFOROM_DRAM_RETIREMENT_FAILURE", "row remap or page retirement failed", "RESET_GPU / CONTACT_SUPPORT",
                "hardware", "Drain; a row-remap failure is an RMA criterion.", _C),
    68: XidInfo("NVDEC0_EXCEPTION", "video decoder exception", "RESTART_APP / CONTACT_SUPPORT",
                "application, driver or hardware", "Restart the job (usually an application error).", _W),
    69: XidInfo("GR_CLASS_ERROR", "graphics engine class error", "RESTART_APP / CHECK_APP/CUDA",
                "driver or hardware", "Restart; if it recurs, run diagnostics.", _W),
    74: XidInfo("NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR / CONTACT_SUPPORT",
                "hardware or bus (link, cable, baseboard, NVSwitch)",
                "Drain; read NVLink state and error counters; reset the GPU or reboot to clear; if it recurs, inspect or RMA.", _C),
    79: XidInfo("GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM / CONTACT_SUPPORT",
                "hardware, PCIe, power or thermal",
                "Drain and reboot or power-cycle the node; if it recurs, RMA or inspect the slot or riser.", _C),
    92: XidInfo("EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", "IGNORE / CONTACT_SUPPORT",
                "hardware (memory)", "Monitor; consider draining if it persists.", _W),
    94: XidInfo("CONTAINED_ERROR", "contained ECC error", "RESTART_APP / IGNORE",
                "hardware, contained", "Restart only the affected application; reset the GPU at a convenient time.", _W),
    95: XidInfo("UNCONTAINED_ERROR", "uncontained ECC error", "RESET_GPU / IGNORE", "hardware",
                "Drain; reset the GPU (or reboot now if MIG is off).", _C),
    109: XidInfo("CTXSW_TIMEOUT_ERROR", "context switch timeout", "RESET_GPU / CONTACT_SUPPORT", "mixed",
                 "Reset the GPU (sources disagree on severity).", _C),
    110: XidInfo("SEC_FAULT_ERROR", "security fault", "RESET_GPU / INVESTIGATE_SW", "hardware",
                 "Drain and reset the GPU.", _C),
    119: XidInfo("GSP_RPC_TIMEOUT", "GSP firmware RPC timeout", "RESET_GPU / INVESTIGATE_SW",
                 "driver or GSP firmware (sometimes hardware)",
                 "Drain; reset the GPU or power-cycle if it persists; expect NVML and nvidia-smi to hang (often followed by Xid 154).", _C),
    120: XidInfo("GSP_ERROR", "GSP firmware error", "RESET_GPU / INVESTIGATE_SW", "driver or firmware",
                 "Drain; reset the GPU or power-cycle if it persists.", _C),
    121: XidInfo("C2C_ERROR", "Grace-to-GPU NVLink-C2C link error (corrected)", "IGNORE / CONTACT_SUPPORT",
                 "hardware, bus", "Grace Hopper/Blackwell only; reset to retrain the link if it repeats.", _I),
    136: XidInfo("ALI_TRAINING_FAIL", "NVLink link training failed", "RESET_GPU / INVESTIGATE_LINK_SI",
                 "hardware (link signal integrity)", "Drain and reset the GPU; check NVLink.", _C),
    137: XidInfo("NVLINK_PRIV_ERR", "NVLink FLA privilege error", "IGNORE / XID_137_FLOW", "application",
                 "Debug the application.", _W),
    140: XidInfo("UNRECOVERABLE_ECC_ERROR_ESCAPE", "unrecoverable ECC error escaped containment",
                 "RESET_GPU / CONTACT_SUPPORT", "hardware", "Drain and reset the GPU; if it persists, RMA.", _C),
    143: XidInfo("GPU_INIT_ERROR", "GPU initialization error (e.g. FSP boot failure)", "RESET_GPU / CONTACT_SUPPORT",
                 "hardware", "Drain; hardware inspection.", _C),
    154: XidInfo("GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed (informational about another Xid)",
                 "XID_154", "see the Xid it refers to",
                 "Act on the new recovery action: GPU reset, node reboot, drain P2P or drain and reset.", _W),
    155: XidInfo("NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", "RESET_GPU / INVESTIGATE_SW_USER",
                 "software", "Reset the GPU.", _C),
    156: XidInfo("RESOURCE_RETIREMENT_EVENT", "resource retirement event", "RESET_GPU / IGNORE", "hardware",
                 "Reset the GPU when convenient.", _W),
    157: XidInfo("RESOURCE_RETIREMENT_FAILURE", "resource retirement failure", "IGNORE / CONTACT_SUPPORT",
                 "hardware", "Contact NVIDIA support.", _C),
    158: XidInfo("GPU_FATAL_TIMEOUT", "GPU fatal timeout", "RESET_GPU / CONTACT_SUPPORT", "hardware or driver",
                 "Drain and reset the GPU.", _C),
    159: XidInfo("CHI_NON_DATA_ERROR", "CHI non-data error (Grace systems)", "CHECK_UVM / SYMPATHETIC_REPORT_SOLO",
                 "hardware", "Check UVM; report if it occurs alone.", _W),
}

_NVLINK5 = {144: "SAW", 145: "RLW", 146: "TLW", 147: "TREX", 148: "NVLPW_CTRL", 149: "NETIR", 150: "MSE"}
for _xid, _unit in _NVLINK5.items():
    CATALOG[_xid] = XidInfo(
        f"NVLINK5_{_unit}_ERROR", f"NVLink5 {_unit} error", "WORKFLOW_NVLINK5_ERR",
        "hardware or software, depending on the decoded sub-unit",
        "Decode with NVIDIA's Xid 144-150 sheet; fatal errors: drain and reset the GPU; non-fatal: monitor."
        + (" Xid 150 (MSE watchdog) is fatal: reset." if _xid == 150 else ""),
        _C if _xid == 150 else _W,
    )
for _xid, _what in {162: "power smoothing lifetime", 163: "confidential computing", 164: "confidential computing",
                    165: "confidential computing", 166: "confidential computing", 167: "PCIE_FATAL_TIMEOUT",
                    168: "REDUCED_GPU_MEMORY_CAPACITY", 169: "SEC2 halt", 170: "new hardware error",
                    171: "UNCORRECTABLE_DRAM_ERROR (detail for Xid 48)",
                    172: "UNCORRECTABLE_SRAM_ERROR"}.items():
    CATALOG[_xid] = XidInfo(
        _what.split(" ")[0].upper(), _what, "(no bucket in the catalog snapshot)", "hardware",
        "Treat as hardware: drain the node and contact support (judgement, not NVIDIA text).",
        _C if _xid >= 167 else _W,
    )

UNKNOWN_XID = XidInfo("UNKNOWN", "Xid not in the catalog", "", "unknown",
                      "Look the Xid up in NVIDIA's Xid catalog; drain if the GPU misbehaves.", _W)

RECOVERY_ACTIONS = {0: "None", 1: "GPU Reset Required", 2: "Node Reboot Required", 3: "Drain P2P",
                    4: "Drain and Reset", 5: "Recover IMEX domain", 6: "Bus Reset", 7: "System Reboot"}


def info(xid: int) -> XidInfo:
    return CATALOG.get(xid, UNKNOWN_XID)


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
        if self.xid in _NVLINK5 and self.severity_word:
            return _C if self.severity_word.lower() == "fatal" else _W
        if self.xid == 154 and self.recovery_action is not None:
            return _I if self.recovery_action == 0 else _C
        if self.xid == 45 and self.caused_by is not None:
            return info(self.caused_by).severity  # 45 is only the echo of the earlier Xid
        return self.info.severity


_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): (\d+),\s*(.*)")
_PID_RE = re.compile(r"pid=['\"]?(\d+|<unknown>)['\"]?,\s*name=([^,]*),\s*(.*)")
_CAUSED_RE = re.compile(r"caused by previous Xid (\d+)")
_NVLINK5_RE = re.compile(r"\b(Fatal|Non-fatal|NonFatal)\b", re.IGNORECASE)
_ACTION_RE = re.compile(r"recovery action changed from 0x([0-9a-fA-F]+) \([^)]*\) to 0x([0-9a-fA-F]+)")
_OFF_BUS_RE = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\b.*fallen off the bus"
)
_GSP_RE = re.compile(r"Timeout after (\d+)s of waiting for RPC response from GPU(\d+) GSP")
_MAP_RE = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): (GPU-[0-9a-fA-F-]+)")


def normalize_pci(text: str) -> str:
    """'00000000:3B:00.0', 'PCI:0000:3b:00' or '0000:3b:00' -> '0000:3b:00' (the kernel's form)."""
    text = text.removeprefix("PCI:").split(".")[0]
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
        if xid in _NVLINK5:
            sm = _NVLINK5_RE.search(rest)
            ev.severity_word = sm.group(1) if sm else None
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
