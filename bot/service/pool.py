"""A bounded worker pool: listeners ack() at once and hand the slow part (downloads, diagnosis,
probes, Slack calls) to these threads. The queue is bounded so a flood of events cannot pile up
unbounded memory; the caller learns at once that the bot is busy and can say so."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)


class PoolBusy(Exception):
    """Too much queued work: tell the user to retry instead of queueing without bound."""


class BoundedPool:
    def __init__(self, workers: int, queue_max: int, on_error: Callable[[BaseException, Any], None] | None = None):
        self.workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="triage-worker")
        self._slots = threading.BoundedSemaphore(workers + queue_max)
        self.on_error = on_error
        self._inflight = 0
        self._idle = threading.Condition()

    def submit(self, fn: Callable[..., Any], *args: Any, where: Any = None) -> Future[Any]:
        if not self._slots.acquire(blocking=False):
            raise PoolBusy(f"{self.workers} diagnoses are running and the queue is full")
        with self._idle:
            self._inflight += 1

        def run() -> Any:
            try:
                return fn(*args)
            except BaseException as exc:
                if self.on_error is not None:
                    try:
                        self.on_error(exc, where)
                    except Exception:
                        log.exception("error handler failed")
                else:
                    log.exception("task failed")
                return None
            finally:
                self._slots.release()
                with self._idle:
                    self._inflight -= 1
                    self._idle.notify_all()

        return self._executor.submit(run)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no task is queued or running (tests, graceful shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout)

    @property
    def inflight(self) -> int:
        return self._inflight

    def shutdown(self, wait: bool = True, timeout: float | None = 30) -> None:
        if wait:
            self.wait_idle(timeout)
        self._executor.shutdown(wait=False, cancel_futures=not wait)
