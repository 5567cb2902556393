"""Turn whatever pynvml (or the fake) returns into JSON values the worker can send back."""

from __future__ import annotations

import ctypes
from typing import Any

# c_nvmlValue_t is a union; nvmlValueType_t says which member is meaningful.
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if isinstance(value, ctypes.Structure):
        out = {}
        for name, *_ in value._fields_:
            out[name] = plain(getattr(value, name))
        if "valueType" in out and isinstance(out.get("value"), dict):
            out["value"] = out["value"].get(_VALUE_MEMBER.get(out["valueType"], "ullVal"))
        return out
    if isinstance(value, ctypes.Union):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes._SimpleCData):
        return plain(value.value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "__dict__"):  # pynvml's nvmlFriendlyObject (process lists)
        return {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)
