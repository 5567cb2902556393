"""What every probe gets (ProbeContext) and what it is (Probe)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from node_agent.config import AgentConfig
from node_agent.findings import ProbeResult
from node_agent.hostenv import HostEnv
from node_agent.kernel_log import KernelLog, read_kernel_log
from node_agent.nvml.client import Call, NvmlClient
from node_agent.nvml.errors import NvmlError, NvmlHang
from node_agent.request import ProbeRequest
from node_agent.xid import normalize_pci

DEFAULT_WINDOW_S = 24 * 3600


@dataclass
class Device:
    index: int
    uuid: str | None = None
    name: str | None = None
    bus_id: str | None = None  # NVML form, "00000000:3B:00.0"
    pci: str | None = None  # kernel-log form, "0000:3b:00"
    error: Exception | None = None  # why identity calls failed (GPU lost, hang, ...)


@dataclass
class DeviceTable:
    info: dict[str, Any]
    devices: list[Device]

    def by_pci(self, pci: str | None) -> Device | None:
        if pci is None:
            return None
        return next((d for d in self.devices if d.pci == pci), None)

    def resolve(self, items: list[int | str] | None) -> tuple[list[int] | None, list[int | str]]:
        """GPU indices for a request's list of indices/UUIDs, plus the items that match no GPU."""
        if items is None:
            return None, []
        out: list[int] = []
        unknown: list[int | str] = []  # as asked for: an index out of range stays a number
        for item in items:
            if isinstance(item, int):
                (out if 0 <= item < len(self.devices) else unknown).append(item)
                continue
            dev = next((d for d in self.devices if d.uuid == item), None)
            if dev is None:
                unknown.append(str(item))
            else:
                out.append(dev.index)
        return sorted(set(out)), [str(u) for u in unknown]


@dataclass
class Probe:
    name: str
    description: str
    privileges: str  # what the agent needs for this probe to see everything
    run: Callable[[ProbeContext], ProbeResult]
    uses_nvml: bool = True

    def catalogue_entry(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "privileges": self.privileges,
                "uses_nvml": self.uses_nvml}


@dataclass
class ProbeContext:
    request: ProbeRequest
    config: AgentConfig
    nvml: NvmlClient
    env: HostEnv
    simulated: bool
    deadline: float  # time.monotonic() by which the whole answer must be ready
    agent_started: float = field(default_factory=time.time)
    now: float = field(default_factory=time.time)
    # Separate locks: a device table stuck behind a hung NVML call must not hold up the kernel log.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _klog_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _devices: DeviceTable | Exception | None = field(default=None, repr=False)
    _klog: KernelLog | None = field(default=None, repr=False)

    def nvml_deadline(self) -> float:
        return self.deadline - 0.05  # leave time to serialize the answer

    def window(self) -> tuple[float, float]:
        if self.request.window is not None:
            return self.request.window
        return self.now - DEFAULT_WINDOW_S, self.now + 60

    def devices(self) -> DeviceTable:
        """NVML init facts and GPU identities, fetched once per request; raises the init failure."""
        with self._lock:
            if self._devices is None:
                try:
                    self._devices = self._load_devices()
                except Exception as exc:
                    self._devices = exc
            if isinstance(self._devices, Exception):
                raise self._devices
            return self._devices

    def _load_devices(self) -> DeviceTable:
        info = self.nvml.init_info(self.nvml_deadline())
        count = int(info.get("count") or 0)
        calls = []
        for i in range(count):
            calls += [Call("nvmlDeviceGetUUID", i), Call("nvmlDeviceGetName", i), Call("nvmlDeviceGetPciInfo", i)]
        outs = self.nvml.call_many(calls, self.nvml_deadline())
        devices = []
        for i in range(count):
            uuid, name, pci = outs[3 * i : 3 * i + 3]
            dev = Device(i, uuid.value, name.value)
            if pci.ok and isinstance(pci.value, dict):
                dev.bus_id = pci.value.get("busId")
                dev.pci = normalize_pci(dev.bus_id) if dev.bus_id else None
            dev.error = next((o.error for o in (uuid, name, pci) if o.error is not None and _fatal(o.error)), None)
            devices.append(dev)
        return DeviceTable(info, devices)

    def selected_gpus(self, table: DeviceTable) -> list[int]:
        chosen, _ = table.resolve(self.request.gpus)
        return list(range(len(table.devices))) if chosen is None else chosen

    def kernel_log(self) -> KernelLog:
        with self._klog_lock:
            if self._klog is None:
                start, end = self.window()
                self._klog = read_kernel_log(self.env, start, end)
            return self._klog


def _fatal(exc: Exception) -> bool:
    return isinstance(exc, NvmlHang) or (isinstance(exc, NvmlError) and not exc.not_supported)


_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\w+)?\s+([0-9][0-9.]+)")


def kernel_module_version(env: HostEnv) -> str | None:
    """Version of the loaded nvidia.ko from /proc/driver/nvidia/version (None: module not loaded)."""
    text = env.read_text(env.proc_root / "driver" / "nvidia" / "version")
    if text is None:
        return None
    m = _VERSION_RE.search(text)
    return m.group(1) if m else "unknown"
