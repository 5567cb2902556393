"""Durable work: what Slack or the scheduler was told "accepted" is a row in the store first.

Listeners and the webhook call `WorkQueue.submit(kind, payload, keys)`: the row (and its
de-duplication keys) is committed before the ack leaves. A dispatcher thread claims rows with a
lease and runs them on the bounded worker pool; a row whose worker died is claimed again when its
lease runs out, and at start whatever a killed process left queued or running is resumed. The
flows are written so that running an item again answers once (see chat.py / jobs.py: an incident
already answered is not answered twice).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot import metrics
from bot.store import Store

from .inputs import Where
from .pool import BoundedPool, PoolBusy

log = logging.getLogger(__name__)

LEASE_S = 15 * 60  # longer than any diagnosis (downloads, probes, Slack retries up to their deadline)
MAX_ATTEMPTS = 4  # an item that took the process down this often is given up (a poison item)
POLL_S = 1.0
SLASH_WINDOW_S = 30.0  # the same /diagnose text from the same person in the same channel: once


@dataclass
class Handler:
    run: Callable[[dict[str, Any], int], object]  # (payload, attempt); what it returns is not used
    where: Callable[[dict[str, Any]], Where | None]


class WorkQueue:
    def __init__(self, store: Store, pool: BoundedPool, *, queue_max: int = 200, lease_s: float = LEASE_S) -> None:
        self.store = store
        self.pool = pool
        self.queue_max = queue_max
        self.lease_s = lease_s
        self.handlers: dict[str, Handler] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running: set[int] = set()
        self._guard = threading.Lock()

    def register(self, kind: str, run: Callable[[dict[str, Any], int], object],
                 where: Callable[[dict[str, Any]], Where | None] = lambda p: None) -> None:
        self.handlers[kind] = Handler(run, where)

    # -- producers ---------------------------------------------------------------------------------

    def submit(self, kind: str, payload: dict[str, Any], keys: list[str], *, fingerprint: str | None = None,
               window_s: float = 0) -> int | None:
        """Commit the item; None when it is a duplicate. Raises PoolBusy when too much is queued."""
        counts = self.store.work_counts()
        if counts.get("queued", 0) >= self.queue_max:
            raise PoolBusy(f"{counts.get('queued', 0)} items are queued")
        work_id = self.store.enqueue_work(kind, payload, keys, fingerprint=fingerprint, window_s=window_s)
        if work_id is not None:
            self._wake.set()
        return work_id

    # -- the dispatcher --------------------------------------------------------------------------------

    def start(self) -> None:
        released = self.store.release_running_work()
        counts = self.store.work_counts()
        if released or counts.get("queued"):
            log.info("resuming %d unfinished work item(s) (%d were running when the bot stopped)",
                     counts.get("queued", 0), released)
        self._thread = threading.Thread(target=self._loop, name="triage-work", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)

    def idle(self) -> bool:
        counts = self.store.work_counts()
        with self._guard:
            return not self._running and not counts.get("queued") and not counts.get("running")

    def _free(self) -> int:
        with self._guard:
            return max(0, self.pool.workers * 2 - len(self._running))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(POLL_S)
            self._wake.clear()
            try:
                self.dispatch()
            except Exception:
                log.exception("work dispatcher pass failed")

    def dispatch(self) -> int:
        n = 0
        while not self._stop.is_set():
            free = self._free()
            if not free:
                return n
            items = self.store.claim_work(free, self.lease_s)
            if not items:
                return n
            for item in items:
                with self._guard:
                    self._running.add(item["id"])
                try:
                    self.pool.submit(self._run, item)
                except PoolBusy:
                    with self._guard:
                        self._running.discard(item["id"])
                    self.store.finish_work(item["id"], retry=True)
                    return n
                n += 1
        return n

    def _run(self, item: dict[str, Any]) -> None:
        wid, kind, payload, attempt = item["id"], item["kind"], item["payload"], item["attempts"]
        # When it was accepted, on the real clock (the store's may be a test's): latencies count from the ack.
        accepted = time.time() - max(0.0, self.store.clock() - float(item.get("created_at") or self.store.clock()))
        token = metrics.accepted_at.set(accepted)
        outcome = "failed"
        try:
            handler = self.handlers.get(kind)
            if handler is None:
                self.store.finish_work(wid, error=f"no handler for {kind}")
                return
            if attempt > MAX_ATTEMPTS:
                log.error("giving up work item %s (%s) after %d attempts", wid, kind, attempt - 1)
                self.store.finish_work(wid, error="too many attempts")
                return
            try:
                handler.run(payload, attempt)
            except Exception as exc:
                self.store.finish_work(wid, error=f"{type(exc).__name__}: {exc}")
                on_error = self.pool.on_error
                if on_error is not None:
                    on_error(exc, getattr(exc, "triage_where", None) or handler.where(payload))
                else:
                    log.exception("work item %s (%s) failed", wid, kind)
                return
            self.store.finish_work(wid)
            outcome = "done"
        finally:
            metrics.accepted_at.reset(token)
            metrics.WORK_SECONDS.labels(kind, outcome).observe(max(0.0, time.time() - accepted))
            with self._guard:
                self._running.discard(wid)
            self._wake.set()
