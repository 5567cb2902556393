"""Agent side of the NVML worker: every call bounded by a deadline, hangs become findings.

A call that does not answer in time is abandoned: the worker is killed (SIGKILL; a process in D
state only dies when the driver lets go, so it is never waited for), the GPU it was talking to is
quarantined so later requests answer at once instead of hanging again, and the next call starts a
fresh worker. Stuck workers are counted so they cannot pile up.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node_agent.nvml.errors import NvmlError, NvmlHang, NvmlUnavailable

log = logging.getLogger("node_agent.nvml")

_PKG_PARENT = str(Path(__file__).resolve().parents[2])
MIN_CALL_TIMEOUT_S = 0.25
SPAWN_ALLOWANCE_S = 10.0  # interpreter start + pynvml import, only for the first worker at agent start


@dataclass(frozen=True)
class Call:
    fn: str
    gpu: int | None = None
    args: tuple[Any, ...] = ()


@dataclass
class Outcome:
    value: Any = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class BackendSpec:
    kind: str  # "real" (pynvml) or "fake" (scenario-driven)
    scenario_path: str | None = None
    start_time: float = 0.0


@dataclass
class HangRecord:
    fn: str
    gpu: int | None
    timeout_s: float
    at: float
    worker: subprocess.Popen[bytes] | None = field(repr=False, default=None)


class NvmlClient:
    def __init__(
        self,
        spec: BackendSpec,
        call_timeout_s: float = 5.0,
        quarantine_s: float = 60.0,
        max_stuck_workers: int = 3,
        init_retry_s: float = 5.0,
    ) -> None:
        self.spec = spec
        self.call_timeout_s = call_timeout_s
        self.quarantine_s = quarantine_s
        self.max_stuck_workers = max_stuck_workers
        self.init_retry_s = init_retry_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._ready = False
        self._generation = 0
        self._init_info: dict[str, Any] | None = None
        self._init_error: NvmlError | None = None
        self._init_at = 0.0
        self._hangs: dict[int | None, HangRecord] = {}
        self._stuck: list[subprocess.Popen[bytes]] = []
        self._events: dict[tuple[int, int], dict[str, Any]] = {}
        self._event_error: str | None = None
        self.workers_started = 0
        self.hang_counts: dict[str, int] = {}  # NVML function -> calls that hung (for /metrics)

    # --- public ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker and initialize NVML now, so NVML events are recorded from agent start."""
        try:
            self.init_info(time.monotonic() + self.call_timeout_s + SPAWN_ALLOWANCE_S)
        except (NvmlError, NvmlHang, NvmlUnavailable) as exc:
            log.warning("NVML not usable at start: %s", exc)

    def init_info(self, deadline: float) -> dict[str, Any]:
        """System facts from nvmlInit; raises the init failure (driver not loaded, mismatch, ...)."""
        with self._acquire(deadline):
            return self._ensure_ready(deadline)

    def call(self, fn: str, gpu: int | None, *args: Any, deadline: float) -> Any:
        out = self.call_many([Call(fn, gpu, tuple(args))], deadline)[0]
        if out.error is not None:
            raise out.error
        return out.value

    def call_many(self, calls: list[Call], deadline: float) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(calls)
        pending = []
        for i, c in enumerate(calls):
            hang = self._quarantined(c.gpu)
            if hang is not None:
                outcomes[i] = Outcome(error=_skipped(hang))
            else:
                pending.append(i)
        if pending:
            try:
                with self._acquire(deadline):
                    self._run(calls, pending, outcomes, deadline)
            except (NvmlError, NvmlHang, NvmlUnavailable) as exc:
                for i in pending:
                    if outcomes[i] is None:
                        outcomes[i] = Outcome(error=exc)
        return [o if o is not None else Outcome(error=NvmlUnavailable("no answer")) for o in outcomes]

    def events(self, deadline: float) -> tuple[list[dict[str, Any]], str | None]:
        """NVML events (Xids, ECC) seen since the agent started, across worker restarts."""
        try:
            with self._acquire(deadline):
                self._ensure_ready(deadline)
                reply = self._request({"op": "events"}, self._call_timeout(deadline), "nvmlEventSetWait", None)
                for ev in reply.get("events", []):
                    self._events[(self._generation, ev["seq"])] = ev
                self._event_error = reply.get("error")
        except (NvmlError, NvmlHang, NvmlUnavailable) as exc:
            return sorted(self._events.values(), key=lambda e: e["time"]), str(exc)
        return sorted(self._events.values(), key=lambda e: e["time"]), self._event_error

    def hangs(self) -> list[HangRecord]:
        """Quarantines still in force (for evidence)."""
        return [h for key in list(self._hangs) if (h := self._quarantined_key(key)) is not None]

    def quarantined(self) -> list[str]:
        """GPUs ("all": the driver) in quarantine now; reads only, safe from the /metrics thread."""
        now = time.time()
        return sorted("all" if key is None else str(key) for key, h in list(self._hangs.items())
                      if (h.worker is not None and h.worker.poll() is None) or now - h.at < self.quarantine_s)

    def stuck_count(self) -> int:
        """Like stuck_workers() without pruning the list (for /metrics, outside the request lock)."""
        return sum(1 for p in list(self._stuck) if p.poll() is None)

    def stuck_workers(self) -> int:
        self._stuck = [p for p in self._stuck if p.poll() is None]
        return len(self._stuck)

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._proc.kill()
                self._proc = None

    # --- internals ------------------------------------------------------------------------------------
    def _acquire(self, deadline: float) -> _Held:
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise NvmlUnavailable("NVML worker busy with another request until this request's deadline")
        return _Held(self._lock)

    def _call_timeout(self, deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining < MIN_CALL_TIMEOUT_S:
            raise NvmlUnavailable("the request's time budget was spent before this NVML call")
        if remaining >= self.call_timeout_s + 1.0:
            return self.call_timeout_s
        # Tight budget: at most half of what is left, so one hang leaves time for the other probes' calls.
        return min(self.call_timeout_s, max(MIN_CALL_TIMEOUT_S, remaining / 2))

    def _ensure_ready(self, deadline: float) -> dict[str, Any]:
        global_hang = self._quarantined(None, system_only=True)
        if global_hang is not None:
            raise _skipped(global_hang)
        if self._proc is None or self._proc.poll() is not None:
            self._spawn()
        if not self._ready:
            # Interpreter start-up is not NVML: a slow start is "busy", never a hang finding.
            if self._readline(max(0.0, deadline - time.monotonic())) is None:
                raise NvmlUnavailable("the NVML worker process did not start within the request's time budget")
            self._ready = True
        if self._init_info is not None:
            return self._init_info
        if self._init_error is not None and time.monotonic() - self._init_at < self.init_retry_s:
            raise self._init_error
        timeout = self._call_timeout(deadline)
        self._init_at = time.monotonic()
        try:
            info = self._request({"op": "init"}, timeout, "nvmlInit", None)
        except NvmlError as exc:
            self._init_error = exc
            raise
        self._init_error = None
        self._init_info = info
        return info

    def _run(self, calls: list[Call], pending: list[int], outcomes: list[Outcome | None], deadline: float) -> None:
        while pending:
            self._ensure_ready(deadline)
            batch = [calls[i] for i in pending]
            self._send({"op": "calls", "calls": [{"fn": c.fn, "gpu": c.gpu, "args": list(c.args)} for c in batch]})
            for pos, idx in enumerate(pending):
                call = calls[idx]
                timeout = self._call_timeout(deadline)
                line = self._readline(timeout)
                if line is None:
                    hang = self._record_hang(call.fn, call.gpu, timeout)
                    outcomes[idx] = Outcome(error=NvmlHang(call.fn, call.gpu, timeout, hang.at, fresh=True))
                    rest = pending[pos + 1 :]
                    for j in rest:  # calls on the hung GPU (or everything, for a system call) are skipped
                        if (h := self._quarantined(calls[j].gpu)) is not None:
                            outcomes[j] = Outcome(error=_skipped(h))
                    pending = [j for j in rest if outcomes[j] is None]
                    break
                reply = json.loads(line)
                if reply.get("ok"):
                    outcomes[idx] = Outcome(value=reply.get("value"))
                else:
                    outcomes[idx] = Outcome(error=_nvml_error(reply.get("error", {}), call.fn, call.gpu))
            else:
                pending = []

    def _request(self, msg: dict[str, Any], timeout: float, fn: str, gpu: int | None) -> Any:
        self._send(msg)
        line = self._readline(timeout)
        if line is None:
            hang = self._record_hang(fn, gpu, timeout)
            raise NvmlHang(fn, gpu, timeout, hang.at, fresh=True)
        reply = json.loads(line)
        if not reply.get("ok"):
            raise _nvml_error(reply.get("error", {}), fn, gpu)
        return reply.get("value")

    def _spawn(self) -> None:
        if self.stuck_workers() >= self.max_stuck_workers:
            raise NvmlUnavailable(
                f"{len(self._stuck)} NVML worker processes are stuck in the driver; not starting another "
                "(the GPU or driver is hung: drain the node and reboot)"
            )
        cmd = [sys.executable, "-m", "node_agent.nvml.worker", "--backend", self.spec.kind]
        if self.spec.scenario_path:
            cmd += ["--scenario", self.spec.scenario_path, "--start-time", repr(self.spec.start_time)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_PARENT, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        self._buf = b""
        self._ready = False
        self._generation += 1
        self._init_info = None
        self.workers_started += 1

    def _send(self, msg: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(msg) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self._proc = None
            raise NvmlUnavailable(f"NVML worker exited unexpectedly: {exc}") from exc

    def _readline(self, timeout: float) -> bytes | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        end = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # the worker died (crashed or killed): not a hang, say so
                code = self._proc.wait(timeout=1)
                self._proc = None
                raise NvmlUnavailable(f"NVML worker exited with status {code}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _record_hang(self, fn: str, gpu: int | None, timeout: float) -> HangRecord:
        proc = self._proc
        self._proc = None
        if proc is not None:
            proc.kill()  # no wait(): a D-state process would block us with it
            for pipe in (proc.stdin, proc.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
            self._stuck.append(proc)
        # Calls that take no GPU handle (init, events, versions) hanging means the whole driver is stuck.
        hang = HangRecord(fn, gpu, timeout, time.time(), proc)
        self.hang_counts[fn] = self.hang_counts.get(fn, 0) + 1
        self._hangs[gpu] = hang
        log.error("%s%s did not return in %.1f s; worker killed", fn, "" if gpu is None else f" on GPU {gpu}", timeout)
        if gpu is not None:
            try:  # start the replacement now so its start-up overlaps the rest of this request
                self._spawn()
            except NvmlUnavailable:
                pass
        return hang

    def _quarantined_key(self, key: int | None) -> HangRecord | None:
        hang = self._hangs.get(key)
        if hang is None:
            return None
        still_stuck = hang.worker is not None and hang.worker.poll() is None
        if still_stuck or time.time() - hang.at < self.quarantine_s:
            return hang
        del self._hangs[key]
        return None

    def _quarantined(self, gpu: int | None, system_only: bool = False) -> HangRecord | None:
        hang = self._quarantined_key(None)
        if hang is not None or system_only:
            return hang
        return self._quarantined_key(gpu) if gpu is not None else None


class _Held:
    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __enter__(self) -> _Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _skipped(hang: HangRecord) -> NvmlHang:
    return NvmlHang(hang.fn, hang.gpu, hang.timeout_s, hang.at, fresh=False)


def _nvml_error(err: dict[str, Any], fn: str, gpu: int | None) -> NvmlError:
    extra = {k: v for k, v in err.items() if k not in ("code", "name", "fn", "message")}
    return NvmlError(
        int(err.get("code", -2)), str(err.get("name", "Unknown")), err.get("fn") or fn, gpu,
        str(err.get("message", "")), extra,
    )
