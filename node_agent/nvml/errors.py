"""NVML error codes and the exceptions the agent side sees.

The agent process never imports pynvml: the worker turns pynvml's exceptions into
(code, class name) and the client rebuilds them as NvmlError. Match on `code`, never on text
(pynvml's messages come from its own table, not from the driver).
"""

from __future__ import annotations

UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
CORRUPTED_INFOROM = 14
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
UNKNOWN = 999
# Not an NVML code: pynvml's NVMLLibraryMismatchError (bindings newer than the driver's library),
# which is not an NVMLError subclass.
LIBRARY_MISMATCH = -1
# Not an NVML code: the call raised something that is not an NVML error (a bug, a bad argument).
INTERNAL = -2

# Codes that mean "this GPU, not this call": once seen, the GPU's other calls are pointless.
GPU_FATAL = frozenset({GPU_IS_LOST, RESET_REQUIRED})


class NvmlError(Exception):
    def __init__(
        self, code: int, name: str, fn: str = "", gpu: int | None = None, message: str = "",
        extra: dict[str, object] | None = None,
    ) -> None:
        self.code = code
        self.extra = extra or {}  # e.g. library_version on an init failure
        self.name = name  # pynvml class suffix, e.g. "GpuIsLost"
        self.fn = fn
        self.gpu = gpu
        self.message = message or name
        where = f" on GPU {gpu}" if gpu is not None else ""
        super().__init__(f"{fn}{where}: {self.message} (NVML error {code})")

    @property
    def not_supported(self) -> bool:
        return self.code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND, LIBRARY_MISMATCH)


class NvmlHang(Exception):
    """An NVML call did not return before its deadline (now, or earlier: the GPU is quarantined)."""

    def __init__(self, fn: str, gpu: int | None, timeout_s: float, at: float, fresh: bool) -> None:
        self.fn = fn
        self.gpu = gpu
        self.timeout_s = timeout_s
        self.at = at  # unix time the call was abandoned
        self.fresh = fresh  # False when this call was skipped because of an earlier hang
        where = f" on GPU {gpu}" if gpu is not None else ""
        super().__init__(f"{fn}{where} did not return in {fmt_seconds(timeout_s)} s: the GPU or driver is hung")


def fmt_seconds(s: float) -> str:
    """5.0 -> '5', 1.3289 -> '1.3'."""
    return f"{round(s, 1):g}"


class NvmlUnavailable(Exception):
    """NVML could not be used at all (no worker, too many stuck workers, request budget spent)."""
