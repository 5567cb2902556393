"""Wire settings into a running bot: store, Web API client, service, Bolt app, HTTP/Socket Mode.

`triage serve` and the tests both go through `TriageBot`, so the tests exercise the same wiring
that production runs.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from bot import logsafe
from bot.service import Limits, Prober, Routes, TriageService, build_service
from bot.service.engine_gate import warm_up
from bot.service.jobsource import load_job_source
from bot.service.pool import BoundedPool
from bot.store import Store
from bot.store.retention import prune

from .app import build_app
from .client import make_web_client
from .errors import ErrorReporter
from .gateway import SlackGateway
from .listeners import Deps
from .server import TriageHTTPServer
from .settings import Settings, SettingsError

log = logging.getLogger(__name__)

RETENTION_EVERY_S = 6 * 3600
REPAIR_EVERY_S = 30


class TriageBot:
    def __init__(self, settings: Settings, *, warm: bool = True) -> None:
        logsafe.install()  # no request body, no secret and no megabyte line in any log record
        self.settings = settings
        self.store = Store.open(settings.db_path)
        self.client = make_web_client(settings)
        self.gateway = SlackGateway(self.client, settings.download_hosts())
        self.errors = ErrorReporter(self.gateway)
        self.pool = BoundedPool(settings.workers, settings.queue_max, on_error=self.errors.report)
        try:
            self.prober = Prober(settings.agent_url, settings.agent_map, settings.agent_secret_file,
                                 settings.probe_deadline_s)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        if (settings.agent_url or settings.agent_map) and not self.prober.enabled:
            log.warning("node agents configured but probing is off: %s", self.prober.problem)
        secret = None
        if settings.webhook_secret_file:
            from node_agent.auth import SecretFileError, load_secret

            try:
                secret = load_secret(settings.webhook_secret_file)
            except SecretFileError as exc:
                raise SettingsError(f"TRIAGE_WEBHOOK_SECRET_FILE: {exc}") from None
        try:
            routes = Routes.load(settings.routes, settings.channel)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        if secret is not None and routes.default is None:
            log.warning("the webhook is on but TRIAGE_CHANNEL is unset: jobs no TRIAGE_ROUTES rule matches get 503")
        self.service: TriageService = build_service(
            store=self.store, chat=self.gateway, prober=self.prober, job_source=load_job_source(settings.job_source),
            limits=Limits(settings.max_upload_bytes, settings.max_unpacked_bytes), routes=routes,
            webhook_secret=secret, pool=self.pool, queue_max=settings.queue_max)
        self.app = build_app(settings, Deps(self.service, self.gateway, self.errors, settings.bot_sources))
        self.servers: list[TriageHTTPServer] = []
        self._socket: Any = None
        self._stop = threading.Event()
        if warm:
            warm_up()
        threading.Thread(target=self._retention_loop, name="triage-retention", daemon=True).start()
        # Unfinished work of a previous process (killed mid-burst) resumes now; webhook incidents
        # opened but never queued are queued; cards left on an old diagnosis are repaired.
        self.service.work.start()
        resumed = self.service.hooks.resume_orphans()
        if resumed:
            log.info("queued %d webhook incident(s) that were opened but never queued", resumed)
        threading.Thread(target=self._repair_loop, name="triage-repair", daemon=True).start()

    def health(self) -> dict[str, Any]:
        try:
            self.store.query("SELECT 1")
            store_ok = True
        except Exception:
            store_ok = False
        return {"ok": store_ok, "store": store_ok, "inflight": self.pool.inflight,
                "work": self.store.work_counts() if store_ok else {},
                "probes": self.prober.enabled, "socket_mode": self._socket is not None}

    def _retention_loop(self) -> None:
        while not self._stop.is_set():
            try:
                out = prune(self.store, self.settings.retention_days)
                if out.incidents:
                    log.info("retention: removed %d incident(s) older than %d days", out.incidents,
                             self.settings.retention_days)
            except Exception:
                log.exception("retention pass failed")
            self._stop.wait(RETENTION_EVERY_S)

    def _repair_loop(self) -> None:
        while not self._stop.wait(REPAIR_EVERY_S):
            try:
                fixed = self.service.wf.repair_cards()
                if fixed:
                    log.info("repaired %d stale answer card(s) from the store", fixed)
            except Exception:
                log.exception("card repair pass failed")

    def wait_idle(self, timeout: float | None = 60) -> bool:
        """Until no work is queued or running (tests)."""
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while time.monotonic() < deadline:
            if self.service.work.idle() and self.pool.wait_idle(0):
                return True
            time.sleep(0.05)
        return False

    def serve_http(self, port: int, host: str = "0.0.0.0", slack: bool = True) -> TriageHTTPServer:
        """Start the HTTP endpoint on a thread (port 0 picks a free one); returns the server."""
        if slack:
            self.settings.require_http()
        server = TriageHTTPServer((host, port), self.app if slack else None, self.service.hooks, self.health,
                                  signing_secret=self.settings.signing_secret if slack else None)
        server.start()
        self.servers.append(server)
        log.info("listening on %s (%s)", server.url, "Slack events + hooks" if slack else "hooks + healthz")
        return server

    def connect_socket_mode(self) -> None:
        """Connect to Slack over Socket Mode (no public URL needed)."""
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        self.settings.require_socket()
        self._socket = SocketModeHandler(self.app, self.settings.app_token, web_client=self.client)
        self._socket.connect()
        log.info("connected to Slack over Socket Mode")

    def wait(self) -> None:
        while not self._stop.wait(3600):
            pass

    def close(self, drain_s: float = 30) -> None:
        self._stop.set()
        for s in self.servers:
            s.stop()
        if self._socket is not None:
            try:
                self._socket.close()
            except Exception:
                log.exception("closing Socket Mode")
        t0 = time.monotonic()
        self.service.work.stop()  # what is still queued stays in the store for the next start
        self.pool.shutdown(wait=True, timeout=drain_s)
        log.info("stopped (drained the worker pool in %.1f s)", time.monotonic() - t0)
        self.store.close()
