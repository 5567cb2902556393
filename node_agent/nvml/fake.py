"""A fake NVML with pynvml's function names, driven by a scenario's "nvml" section.

It raises pynvml's real exception classes (NVMLError_GpuIsLost, NVMLLibraryMismatchError, ...) and
returns pynvml's real ctypes structures, so the worker's conversion code runs the same way it does
against a driver. A call listed under a GPU's "hang" blocks forever, like a call stuck in the driver.
Only the worker process loads this module.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass
from typing import Any

import pynvml

_MIB = 1024 * 1024
_state: dict[str, Any] = {"config": None, "initialized": False, "start": 0.0, "events": []}
_event_lock = threading.Lock()


@dataclass(eq=False)
class FakeHandle:
    index: int


@dataclass
class FakeEventData:
    device: Any
    eventType: int  # pynvml field names, kept so the worker reads both the same way
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


_handles: dict[int, FakeHandle] = {}


def configure(nvml: dict[str, Any], start_time: float | None = None) -> None:
    """Load a scenario's "nvml" section; GPUs get gpu_defaults merged under their own keys."""
    defaults = nvml.get("gpu_defaults", {})
    gpus = [{**defaults, **g} for g in nvml.get("gpus", [])]
    _state["config"] = {**nvml, "gpus": gpus}
    _state["initialized"] = False
    _state["start"] = time.time() if start_time is None else start_time
    _state["events"] = sorted(nvml.get("events", []), key=lambda e: e.get("after_s", 0))
    _handles.clear()


def library_version() -> str | None:
    cfg = _state["config"] or {}
    return cfg.get("library_version", cfg.get("driver_version"))


def _error(name: str) -> Exception:
    if name == "LibraryMismatch":
        return pynvml.NVMLLibraryMismatchError(
            "Unversioned function called and the pyNVML version does not match the NVML lib version."
        )
    cls = getattr(pynvml, "NVMLError_" + name, None)
    if cls is None:
        raise ValueError(f"scenario names unknown NVML error {name!r}")
    return cls()


def _cfg() -> dict[str, Any]:
    if _state["config"] is None:
        raise pynvml.NVMLError_LibraryNotFound()
    return _state["config"]


def _system(fn: str) -> dict[str, Any]:
    cfg = _cfg()
    if not _state["initialized"]:
        raise pynvml.NVMLError_Uninitialized()
    if fn in cfg.get("missing_functions", []):
        raise pynvml.NVMLError_FunctionNotFound()
    return cfg


def _gpu(handle: Any, fn: str) -> dict[str, Any]:
    """The GPU's scenario entry, after applying the scenario's faults for this call."""
    cfg = _system(fn)
    if not isinstance(handle, FakeHandle):
        raise pynvml.NVMLError_InvalidArgument()
    gpu = cfg["gpus"][handle.index]
    if fn in gpu.get("hang", []):
        threading.Event().wait()  # never returns: the worker is stuck exactly like a D-state call
    errors = gpu.get("errors", {})
    name = errors.get(fn) or errors.get("*")
    if name:
        raise _error(name)
    return gpu


# --- init and system ---------------------------------------------------------------------------------
def nvmlInitWithFlags(flags: int) -> None:
    cfg = _cfg()
    if cfg.get("init_error"):
        raise _error(cfg["init_error"])
    if cfg.get("init_hang"):
        threading.Event().wait()
    _state["initialized"] = True


def nvmlInit() -> None:
    nvmlInitWithFlags(0)


def nvmlShutdown() -> None:
    _system("nvmlShutdown")
    _state["initialized"] = False


def nvmlSystemGetDriverVersion() -> str:
    return _system("nvmlSystemGetDriverVersion")["driver_version"]


def nvmlSystemGetNVMLVersion() -> str:
    return _system("nvmlSystemGetNVMLVersion")["nvml_version"]


def nvmlSystemGetCudaDriverVersion() -> int:
    return int(_system("nvmlSystemGetCudaDriverVersion")["cuda_driver_version"])


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    return int(_system("nvmlSystemGetCudaDriverVersion_v2")["cuda_driver_version"])


def nvmlSystemGetProcessName(pid: int) -> bytes:
    cfg = _system("nvmlSystemGetProcessName")
    for gpu in cfg["gpus"]:
        for proc in gpu.get("processes", []):
            if proc["pid"] == pid and proc.get("name"):
                return proc["name"].encode()
    raise pynvml.NVMLError_NotFound()


def nvmlDeviceGetCount() -> int:
    cfg = _system("nvmlDeviceGetCount")
    return int(cfg.get("count", len(cfg["gpus"])))


def nvmlDeviceGetHandleByIndex(index: int) -> FakeHandle:
    cfg = _system("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(cfg["gpus"]):
        raise pynvml.NVMLError_InvalidArgument()
    name = cfg["gpus"][index].get("errors", {}).get("nvmlDeviceGetHandleByIndex")
    if name:
        raise _error(name)
    return _handles.setdefault(index, FakeHandle(index))


# --- identity ------------------------------------------------------------------------------------------
def nvmlDeviceGetName(handle: Any) -> str:
    return _gpu(handle, "nvmlDeviceGetName")["name"]


def nvmlDeviceGetUUID(handle: Any) -> str:
    return _gpu(handle, "nvmlDeviceGetUUID")["uuid"]


def nvmlDeviceGetSerial(handle: Any) -> str:
    return _gpu(handle, "nvmlDeviceGetSerial").get("serial", "")


def nvmlDeviceGetMinorNumber(handle: Any) -> int:
    return int(_gpu(handle, "nvmlDeviceGetMinorNumber").get("minor", handle.index))


def nvmlDeviceGetVbiosVersion(handle: Any) -> str:
    return _gpu(handle, "nvmlDeviceGetVbiosVersion").get("vbios", "96.00.00.00.00")


def nvmlDeviceGetPciInfo(handle: Any) -> pynvml.nvmlPciInfo_t:
    gpu = _gpu(handle, "nvmlDeviceGetPciInfo")
    bus_id = gpu["bus_id"]
    domain, bus, dev = bus_id.split(":")[0], bus_id.split(":")[1], bus_id.split(":")[2].split(".")[0]
    info = pynvml.nvmlPciInfo_t()
    info.busId = bus_id.encode()
    info.busIdLegacy = bus_id[4:].encode()
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(dev, 16)
    info.pciDeviceId = int(gpu.get("pci_device_id", 0x233510DE))
    return info


# --- modes -------------------------------------------------------------------------------------------------
def nvmlDeviceGetPersistenceMode(handle: Any) -> int:
    return int(_gpu(handle, "nvmlDeviceGetPersistenceMode").get("persistence", 1))


def nvmlDeviceGetComputeMode(handle: Any) -> int:
    return int(_gpu(handle, "nvmlDeviceGetComputeMode").get("compute_mode", 0))


def nvmlDeviceGetMigMode(handle: Any) -> list[int]:
    gpu = _gpu(handle, "nvmlDeviceGetMigMode")
    return list(gpu.get("mig", [0, 0]))


# --- memory and processes ----------------------------------------------------------------------------------
def nvmlDeviceGetMemoryInfo(handle: Any, version: int | None = None) -> Any:
    gpu = _gpu(handle, "nvmlDeviceGetMemoryInfo")
    total = int(gpu["memory_total_mib"]) * _MIB
    used = int(gpu.get("memory_used_mib", 4)) * _MIB
    if version:
        mem2 = pynvml.c_nvmlMemory_v2_t()
        mem2.version, mem2.total, mem2.used = version, total, used
        mem2.reserved = int(gpu.get("memory_reserved_mib", 0)) * _MIB
        mem2.free = total - used
        return mem2
    mem = pynvml.c_nvmlMemory_t()
    mem.total, mem.used, mem.free = total, used, total - used
    return mem


def _processes(handle: Any, fn: str) -> list[Any]:
    gpu = _gpu(handle, fn)
    out = []
    for proc in gpu.get("processes", []):
        used = proc.get("used_mib")
        out.append(
            pynvml.nvmlFriendlyObject(
                {
                    "pid": int(proc["pid"]),
                    "usedGpuMemory": None if used is None else int(used) * _MIB,
                    "gpuInstanceId": 0xFFFFFFFF,
                    "computeInstanceId": 0xFFFFFFFF,
                }
            )
        )
    return out


def nvmlDeviceGetComputeRunningProcesses_v3(handle: Any) -> list[Any]:
    return _processes(handle, "nvmlDeviceGetComputeRunningProcesses_v3")


def nvmlDeviceGetComputeRunningProcesses_v2(handle: Any) -> list[Any]:
    return _processes(handle, "nvmlDeviceGetComputeRunningProcesses_v2")


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[Any]:
    # pynvml's @throwOnVersionMismatch: a driver without the _v3 symbol gives NVMLLibraryMismatchError.
    try:
        return nvmlDeviceGetComputeRunningProcesses_v3(handle)
    except pynvml.NVMLError_FunctionNotFound:
        raise _error("LibraryMismatch") from None


def nvmlDeviceGetUtilizationRates(handle: Any) -> Any:
    util = _gpu(handle, "nvmlDeviceGetUtilizationRates").get("utilization", {})
    out = pynvml.c_nvmlUtilization_t()
    out.gpu, out.memory = int(util.get("gpu", 0)), int(util.get("memory", 0))
    return out


# --- ECC, retired pages, row remapping, recovery action ------------------------------------------------------
def nvmlDeviceGetEccMode(handle: Any) -> list[int]:
    return list(_gpu(handle, "nvmlDeviceGetEccMode").get("ecc", {}).get("mode", [1, 1]))


def nvmlDeviceGetTotalEccErrors(handle: Any, errorType: int, counterType: int) -> int:
    ecc = _gpu(handle, "nvmlDeviceGetTotalEccErrors").get("ecc", {})
    counters = ecc.get("aggregate" if counterType == 1 else "volatile", {})
    return int(counters.get("uncorrected" if errorType == 1 else "corrected", 0))


def nvmlDeviceGetRetiredPages(device: Any, sourceFilter: int) -> list[int]:
    pages = _gpu(device, "nvmlDeviceGetRetiredPages").get("retired_pages", {})
    return [int(a) for a in pages.get("dbe" if sourceFilter == 1 else "sbe", [])]


def nvmlDeviceGetRetiredPagesPendingStatus(device: Any) -> int:
    return int(_gpu(device, "nvmlDeviceGetRetiredPagesPendingStatus").get("retired_pages", {}).get("pending", 0))


def nvmlDeviceGetRemappedRows(device: Any) -> tuple[int, int, int, int]:
    corr, unc, pending, failed = _gpu(device, "nvmlDeviceGetRemappedRows").get("remapped_rows", [0, 0, 0, 0])
    return int(corr), int(unc), int(pending), int(failed)


def nvmlDeviceGetFieldValues(handle: Any, fieldIds: list[Any]) -> Any:
    gpu = _gpu(handle, "nvmlDeviceGetFieldValues")
    fields = {int(k): v for k, v in gpu.get("fields", {}).items()}
    if "recovery_action" in gpu:
        fields.setdefault(pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, gpu["recovery_action"])
    nvlink = gpu.get("nvlink", {})
    if nvlink.get("links"):  # all-links totals, derived from the per-link counters
        fields.setdefault(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, int(nvlink["links"]))
        for fid, name in ((38, "crc_flit"), (45, "crc_data"), (52, "replay"), (59, "recovery"), (160, "ecc_data")):
            fields.setdefault(fid, sum(int(c.get(name, 0)) for c in nvlink.get("errors", {}).values()))
    values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
    for i, requested in enumerate(fieldIds):  # an id, or (id, scope) as nvmlDeviceGetFieldValues takes
        fid = requested[0] if isinstance(requested, (tuple, list)) else requested
        values[i].fieldId = fid
        values[i].timestamp = int(time.time() * 1e6)
        if fid in fields and fields[fid] is not None:
            values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            values[i].value.uiVal = int(fields[fid])
            values[i].nvmlReturn = pynvml.NVML_SUCCESS
        else:
            values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    return values


# --- thermal, power, clocks ---------------------------------------------------------------------------------
def nvmlDeviceGetTemperatureV(handle: Any, sensor: int, version: int = 0) -> int:
    return int(_gpu(handle, "nvmlDeviceGetTemperatureV").get("temperature_c", 35))


def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
    return int(_gpu(handle, "nvmlDeviceGetTemperature").get("temperature_c", 35))


def nvmlDeviceGetTemperatureThreshold(handle: Any, threshold: int) -> int:
    gpu = _gpu(handle, "nvmlDeviceGetTemperatureThreshold")
    return int(gpu.get("shutdown_c", 92) if threshold == 0 else gpu.get("slowdown_c", 87))


def nvmlDeviceGetPowerUsage(handle: Any) -> int:
    return int(_gpu(handle, "nvmlDeviceGetPowerUsage").get("power_mw", 70_000))


def nvmlDeviceGetEnforcedPowerLimit(handle: Any) -> int:
    return int(_gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").get("power_limit_mw", 700_000))


def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:
    return int(_gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").get("clocks_event_reasons", 0x1))


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
    return int(_gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").get("clocks_event_reasons", 0x1))


# --- PCIe and NVLink ------------------------------------------------------------------------------------------
def _pcie(handle: Any, fn: str, key: str, default: int) -> int:
    return int(_gpu(handle, fn).get("pcie", {}).get(key, default))


def nvmlDeviceGetCurrPcieLinkGeneration(handle: Any) -> int:
    return _pcie(handle, "nvmlDeviceGetCurrPcieLinkGeneration", "gen", 5)


def nvmlDeviceGetCurrPcieLinkWidth(handle: Any) -> int:
    return _pcie(handle, "nvmlDeviceGetCurrPcieLinkWidth", "width", 16)


def nvmlDeviceGetMaxPcieLinkGeneration(handle: Any) -> int:
    return _pcie(handle, "nvmlDeviceGetMaxPcieLinkGeneration", "max_gen", 5)


def nvmlDeviceGetMaxPcieLinkWidth(handle: Any) -> int:
    return _pcie(handle, "nvmlDeviceGetMaxPcieLinkWidth", "max_width", 16)


def nvmlDeviceGetPcieReplayCounter(handle: Any) -> int:
    return _pcie(handle, "nvmlDeviceGetPcieReplayCounter", "replays", 0)


def _link(device: Any, fn: str, link: int) -> dict[str, Any]:
    nvlink = _gpu(device, fn).get("nvlink", {})
    links = int(nvlink.get("links", 0))
    if link >= links:  # NOT_SUPPORTED past the last link: how NVML says "this GPU has fewer links"
        raise pynvml.NVMLError_NotSupported()
    return nvlink


def nvmlDeviceGetNvLinkState(device: Any, link: int) -> int:
    nvlink = _link(device, "nvmlDeviceGetNvLinkState", link)
    return 0 if link in nvlink.get("down", []) else 1


_NVLINK_COUNTERS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data", 4: "ecc_data"}


def nvmlDeviceGetNvLinkErrorCounter(device: Any, link: int, counter: int) -> int:
    nvlink = _link(device, "nvmlDeviceGetNvLinkErrorCounter", link)
    return int(nvlink.get("errors", {}).get(str(link), {}).get(_NVLINK_COUNTERS.get(counter, ""), 0))


# --- fabric (NVSwitch systems) ------------------------------------------------------------------------------------
def _fill_fabric(device: Any, fn: str, ref: Any) -> int:
    fabric = _gpu(device, fn).get("fabric")
    if fabric is None:
        raise pynvml.NVMLError_NotSupported()
    info = getattr(ref, "_obj", ref)  # pynvml passes ctypes.byref(struct) straight through
    info.state = int(fabric.get("state", 3))
    info.status = int(fabric.get("status", 0))
    info.cliqueId = int(fabric.get("clique_id", 0))
    uuid = bytes.fromhex(fabric.get("cluster_uuid", "00" * 16).replace("-", ""))
    ctypes.memmove(ctypes.addressof(info.clusterUuid), uuid, min(len(uuid), 16))
    if hasattr(info, "healthMask"):
        info.healthMask = int(fabric.get("health_mask", 0))
    if hasattr(info, "healthSummary"):
        info.healthSummary = int(fabric.get("health_summary", 1))
    return pynvml.NVML_SUCCESS


def nvmlDeviceGetGpuFabricInfoV(device: Any, gpuFabricInfo: Any) -> int:
    return _fill_fabric(device, "nvmlDeviceGetGpuFabricInfoV", gpuFabricInfo)


def nvmlDeviceGetGpuFabricInfo(device: Any, gpuFabricInfo: Any) -> int:
    return _fill_fabric(device, "nvmlDeviceGetGpuFabricInfo", gpuFabricInfo)


# --- events --------------------------------------------------------------------------------------------------
def nvmlEventSetCreate() -> object:
    _system("nvmlEventSetCreate")
    return object()


def nvmlDeviceGetSupportedEventTypes(handle: Any) -> int:
    _gpu(handle, "nvmlDeviceGetSupportedEventTypes")
    return 0x8 | 0x2 | 0x1 | 0x400 | 0x800 | 0x8000


def nvmlDeviceRegisterEvents(handle: Any, eventTypes: int, eventSet: object) -> None:
    _gpu(handle, "nvmlDeviceRegisterEvents")


def nvmlEventSetWait(eventSet: object, timeoutms: int) -> FakeEventData:
    _system("nvmlEventSetWait")
    deadline = time.time() + timeoutms / 1000
    while True:
        with _event_lock:
            pending = _state["events"]
            due = _state["start"] + pending[0].get("after_s", 0) if pending else None
            if due is not None and due <= time.time():
                ev = pending.pop(0)
                handle = _handles.setdefault(int(ev["gpu"]), FakeHandle(int(ev["gpu"])))
                return FakeEventData(handle, int(ev.get("event_type", 0x8)), int(ev.get("xid", 0)))
        wait = deadline - time.time()
        if wait <= 0:
            raise pynvml.NVMLError_Timeout()
        time.sleep(min(wait, max(0.0, due - time.time())) if due is not None else wait)


def nvmlEventSetFree(eventSet: object) -> None:
    return None
