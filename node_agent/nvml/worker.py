"""The NVML worker process: owns one NVML session, answers calls over a pipe.

Runs as `python -m node_agent.nvml.worker --backend real|fake [--scenario FILE]`. The agent reads
answers with a deadline; when a call hangs (a faulted GPU can block in the driver forever) the agent
kills this process and starts another, so a hang costs a worker, never the daemon.

Protocol: one JSON object per line. Requests: {"op": "init"}, {"op": "events"}, {"op": "ping"},
{"op": "calls", "calls": [{"fn", "gpu", "args"}]}. A "calls" request is answered with one line per
call, written as each call returns, so the agent knows exactly which call did not come back.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import sys
import threading
import time
from typing import Any

import pynvml

from node_agent.compat import removeprefix
from node_agent.nvml.convert import plain

# Read-only calls the agent may ask for. Anything else is refused: this process has driver access.
ALLOWED = frozenset(
    {
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetNVMLVersion",
        "nvmlSystemGetCudaDriverVersion",
        "nvmlSystemGetCudaDriverVersion_v2",
        "nvmlSystemGetProcessName",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetVbiosVersion",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetTemperatureThreshold",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkErrorCounter",
        "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetGpuFabricInfo",
    }
)

# Event types worth recording (mask bits from nvml.h; older bindings lack the newer constants).
EVENT_MASK = 0x8 | 0x2 | 0x800 | 0x2000 | 0x4000 | 0x8000


def error_payload(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, pynvml.NVMLError):
        name = removeprefix(type(exc).__name__, "NVMLError_")
        out = {"code": int(exc.value), "name": name, "message": str(exc)}
    elif isinstance(exc, pynvml.NVMLLibraryMismatchError):
        out = {"code": -1, "name": "LibraryMismatch", "message": str(exc)}
    else:
        out = {"code": -2, "name": type(exc).__name__, "message": str(exc)[:500]}
    if getattr(exc, "nvml_fn", None):
        out["fn"] = exc.nvml_fn  # type: ignore[attr-defined]
    if getattr(exc, "library_version", None):
        out["library_version"] = exc.library_version  # type: ignore[attr-defined]
    return out


def _handle_key(handle: Any) -> int:
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)  # the fake's handles are plain objects


class Worker:
    def __init__(self, nv: Any, backend: str) -> None:
        self.nv = nv
        self.backend = backend
        self.handles: dict[int, Any] = {}
        self.index_by_key: dict[int, int] = {}
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=1000)
        self.event_seq = 0
        self.event_error: str | None = None
        self.initialized = False
        self.lock = threading.Lock()

    # --- ops -------------------------------------------------------------------------------------
    def op_init(self) -> dict[str, Any]:
        if not self.initialized:
            try:
                self.nv.nvmlInit()
            except BaseException as exc:
                exc.library_version = self.library_version()  # type: ignore[attr-defined]  # for mismatch reports
                raise
            self.initialized = True
            threading.Thread(target=self._watch_events, name="nvml-events", daemon=True).start()
        info: dict[str, Any] = {"backend": self.backend, "nvlink_max_links": pynvml.NVML_NVLINK_MAX_LINKS}
        for key, fn in (
            ("driver_version", "nvmlSystemGetDriverVersion"),
            ("nvml_version", "nvmlSystemGetNVMLVersion"),
            ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"),
            ("count", "nvmlDeviceGetCount"),
        ):
            try:
                info[key] = plain(getattr(self.nv, fn)())
            except Exception as exc:  # one missing fact must not hide the others
                info[key] = None
                info[key + "_error"] = error_payload(exc)
        return info

    def library_version(self) -> str | None:
        """Version of the libnvidia-ml that was loaded (even when nvmlInit failed)."""
        if self.backend == "fake":
            return self.nv.library_version()
        try:
            with open("/proc/self/maps", encoding="utf-8") as fh:
                for line in fh:
                    if "libnvidia-ml.so" in line:
                        real = os.path.realpath(line.split()[-1])
                        return real.rsplit(".so.", 1)[-1]
        except OSError:
            pass
        return None

    def handle(self, gpu: int) -> Any:
        h = self.handles.get(gpu)
        if h is None:
            h = self.nv.nvmlDeviceGetHandleByIndex(gpu)
            self.handles[gpu] = h
            self.index_by_key[_handle_key(h)] = gpu
        return h

    def call(self, fn: str, gpu: int | None, args: list[Any]) -> Any:
        if fn not in ALLOWED:
            raise PermissionError(f"{fn} is not an allowed read-only NVML call")
        f = getattr(self.nv, fn)
        if gpu is None:
            return plain(f(*args))
        try:
            h = self.handle(gpu)
        except BaseException as exc:
            exc.nvml_fn = "nvmlDeviceGetHandleByIndex"  # type: ignore[attr-defined]  # name the call that failed
            raise
        if fn == "nvmlDeviceGetHandleByIndex":
            return gpu
        if fn == "nvmlDeviceGetMemoryInfo" and args == ["v2"]:
            return plain(f(h, version=pynvml.nvmlMemory_v2))
        if fn == "nvmlDeviceGetGpuFabricInfoV":
            info = pynvml.c_nvmlGpuFabricInfo_v3_t()
            f(h, ctypes.byref(info))
            return plain(info)
        if fn == "nvmlDeviceGetGpuFabricInfo":
            info_v1 = pynvml.c_nvmlGpuFabricInfo_t()
            f(h, ctypes.byref(info_v1))
            return plain(info_v1)
        return plain(f(h, *args))

    def op_events(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    # --- NVML events: only those after registration exist, so register at start ---------------------
    def _watch_events(self) -> None:
        nv = self.nv
        try:
            es = nv.nvmlEventSetCreate()
            for gpu in range(nv.nvmlDeviceGetCount()):
                try:
                    h = self.handle(gpu)
                    mask = EVENT_MASK & nv.nvmlDeviceGetSupportedEventTypes(h)
                    if mask:
                        nv.nvmlDeviceRegisterEvents(h, mask, es)
                except Exception:  # a GPU without event support (or lost) still lets the others report
                    continue
        except Exception as exc:
            self.event_error = str(exc)
            return
        while True:
            try:
                data = nv.nvmlEventSetWait(es, 5000)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                self.event_error = str(exc)
                time.sleep(5)  # e.g. GPU_IS_LOST: back off instead of spinning
                continue
            except Exception as exc:
                self.event_error = str(exc)
                return
            ev_gpu = self.index_by_key.get(_handle_key(data.device))  # None: a device we did not register
            event_type = int(data.eventType)
            with self.lock:
                self.event_seq += 1
                self.events.append(
                    {
                        "seq": self.event_seq,
                        "time": time.time(),
                        "gpu": ev_gpu,
                        "event_type": event_type,
                        "xid": int(data.eventData) if event_type == 0x8 else None,
                    }
                )


def serve(worker: Worker, inp: Any, out: Any) -> None:
    def send(obj: dict[str, Any]) -> None:
        out.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())
        out.flush()

    send({"ok": True, "value": "ready"})
    for raw in inp:
        try:
            req = json.loads(raw)
        except ValueError:
            send({"ok": False, "error": {"code": -2, "name": "BadRequest", "message": "not JSON"}})
            continue
        op = req.get("op")
        if op == "calls":
            for i, c in enumerate(req.get("calls", [])):
                try:
                    send({"i": i, "ok": True, "value": worker.call(c["fn"], c.get("gpu"), c.get("args", []))})
                except BaseException as exc:  # noqa: B036 - every failure becomes an answer, not a dead worker
                    send({"i": i, "ok": False, "error": error_payload(exc)})
            continue
        try:
            if op == "init":
                value: Any = worker.op_init()
            elif op == "events":
                value = {"events": worker.op_events(), "error": worker.event_error}
            elif op == "ping":
                value = "pong"
            else:
                raise ValueError(f"unknown op {op!r}")
            send({"ok": True, "value": value})
        except BaseException as exc:  # noqa: B036
            send({"ok": False, "error": error_payload(exc)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="node-agent-nvml-worker")
    parser.add_argument("--backend", choices=("real", "fake"), default="real")
    parser.add_argument("--scenario", help="scenario JSON file (fake backend)")
    parser.add_argument("--start-time", type=float, default=None, help="agent start, unix s (fake backend)")
    args = parser.parse_args(argv)
    # The protocol owns the original stdout; anything printed by accident goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    if args.backend == "fake":
        from node_agent.nvml import fake
        from node_agent.simulate import load_scenario

        fake.configure(load_scenario(args.scenario)["nvml"], start_time=args.start_time)
        nv: Any = fake
    else:
        nv = pynvml
    serve(Worker(nv, args.backend), sys.stdin.buffer, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
