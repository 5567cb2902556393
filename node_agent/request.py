"""The body of POST /v1/probe, validated: a clear 400 for anything malformed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from node_agent.digits import is_ascii_uint

_JOB_ID_RE = re.compile(r"^[\w.:+-]{1,64}$")
_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{8,64}$")
MAX_LIST = 4096


class RequestError(ValueError):
    pass


@dataclass
class ProbeRequest:
    probes: list[str] | None = None
    gpus: list[int | str] | None = None
    window: tuple[float, float] | None = None
    job_id: str | None = None
    job_pids: list[int] = field(default_factory=list)
    job_gpus: list[int | str] | None = None
    deadline_s: float | None = None

    @property
    def names_job(self) -> bool:
        return self.job_id is not None or bool(self.job_pids)


def _gpu_list(name: str, value: Any) -> list[int | str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > 64:
        raise RequestError(f"{name} must be a list of GPU indices or UUIDs (at most 64)")
    out: list[int | str] = []
    for item in value:
        if isinstance(item, bool):
            raise RequestError(f"{name}: {item!r} is not a GPU index or UUID")
        if isinstance(item, int) and 0 <= item < 1024:
            out.append(item)
        elif isinstance(item, str) and is_ascii_uint(item, 4):
            out.append(int(item))
        elif isinstance(item, str) and _UUID_RE.match(item):
            out.append(item)
        else:
            raise RequestError(f"{name}: {item!r} is not a GPU index or UUID")
    return out


def parse_request(obj: Any, known_probes: list[str]) -> ProbeRequest:
    if not isinstance(obj, dict):
        raise RequestError("body must be a JSON object")
    # "nonce": any short string; lets a caller send the same request twice in one second without
    # the second being refused as a replay (the signature covers the body).
    allowed = {"probes", "gpus", "window", "job_id", "job_pids", "job_gpus", "deadline_s", "nonce"}
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise RequestError(f"unknown fields: {', '.join(unknown)}")
    req = ProbeRequest()
    nonce = obj.get("nonce")
    if nonce is not None and (not isinstance(nonce, str) or len(nonce) > 64):
        raise RequestError("nonce must be a string of at most 64 characters")
    probes = obj.get("probes")
    if probes is not None:
        if not isinstance(probes, list) or not all(isinstance(p, str) for p in probes):
            raise RequestError("probes must be a list of probe names")
        bad = [p for p in probes if p not in known_probes]
        if bad:
            raise RequestError(f"unknown probes: {', '.join(bad)} (known: {', '.join(known_probes)})")
        req.probes = list(dict.fromkeys(probes))
    req.gpus = _gpu_list("gpus", obj.get("gpus"))
    req.job_gpus = _gpu_list("job_gpus", obj.get("job_gpus"))
    window = obj.get("window")
    if window is not None:
        if not isinstance(window, dict) or set(window) - {"start", "end"}:
            raise RequestError('window must be {"start": <unix s>, "end": <unix s>}')
        start, end = window.get("start"), window.get("end", None)
        if not isinstance(start, (int, float)) or isinstance(start, bool):
            raise RequestError("window.start must be unix seconds")
        if end is None:
            end = float("inf")
        if not isinstance(end, (int, float)) or isinstance(end, bool) or end < start:
            raise RequestError("window.end must be unix seconds, not before window.start")
        req.window = (float(start), float(end))
    job_id = obj.get("job_id")
    if job_id is not None:
        if isinstance(job_id, bool) or not isinstance(job_id, (str, int)) or not _JOB_ID_RE.match(str(job_id)):
            raise RequestError("job_id must be a short job identifier such as \"1234\"")
        req.job_id = str(job_id)
    pids = obj.get("job_pids", [])
    if pids is None:
        pids = []
    if not isinstance(pids, list) or len(pids) > MAX_LIST or not all(
        isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids
    ):
        raise RequestError("job_pids must be a list of positive process ids")
    req.job_pids = pids
    deadline = obj.get("deadline_s")
    if deadline is not None:
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not 0.2 <= deadline <= 120:
            raise RequestError("deadline_s must be a number of seconds between 0.2 and 120")
        req.deadline_s = float(deadline)
    return req
