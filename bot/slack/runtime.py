"""Wire settings into a running bot: store, Web API client, service, Bolt app, HTTP/Socket Mode.

`triage serve` and the tests both go through `TriageBot`, so the tests exercise the same wiring
that production runs.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from bot import logsafe, metrics
from bot.probes.client import AgentTLS
from bot.service import Limits, Prober, Routes, TriageService, build_service
from bot.service.engine_gate import warm_up
from bot.service.grouping import GroupingSettings
from bot.service.jobsource import load_job_source
from bot.service.people import People, PeopleError, load_user_map
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
SOCKET_PING_S = 5.0  # Socket Mode ping interval (Bolt's default is 10 s)
SOCKET_STALE_S = 3 * SOCKET_PING_S  # no pong for this long: the link is down, whatever the socket says
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
                                 settings.probe_deadline_s,
                                 AgentTLS(settings.agent_ca_file, settings.agent_client_cert, settings.agent_client_key),
                                 allow=settings.agent_allow)
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
            webhook_secret=secret, pool=self.pool, queue_max=settings.queue_max,
            drain_users=settings.drain_users, drain_groups=settings.drain_groups,
            alert_secret=self._alert_secret(settings), grouping=GroupingSettings(
                settings.group_job_window_s, settings.group_host_window_s, settings.storm_threshold,
                settings.storm_window_s, paste_window_s=settings.group_paste_window_s), people=self._people(settings))
        self.app = build_app(settings, Deps(self.service, self.gateway, self.errors, settings.bot_sources))
        self.servers: list[TriageHTTPServer] = []
        self._socket: Any = None
        self.metrics_registry = metrics.bot_registry(metrics.BotCollector(
            self.store.work_counts, lambda: self.pool.inflight, self.socket_connected))
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

    def _people(self, settings: Settings) -> People:
        """The job's user on Slack: TRIAGE_USER_MAP, then users.lookupByEmail at TRIAGE_USER_EMAIL_DOMAIN."""
        try:
            return People(lookup=self.gateway.user_by_email, domain=settings.user_email_domain,
                          user_map=load_user_map(settings.user_map))
        except PeopleError as exc:
            raise SettingsError(str(exc)) from None

    @staticmethod
    def _alert_secret(settings: Settings) -> bytes | None:
        if not settings.alert_secret_file:
            return None
        from node_agent.auth import SecretFileError, load_secret

        try:
            return load_secret(settings.alert_secret_file)
        except SecretFileError as exc:
            raise SettingsError(f"TRIAGE_ALERTMANAGER_SECRET_FILE: {exc}") from None

    def health(self) -> dict[str, Any]:
        try:
            self.store.query("SELECT 1")
            store_ok = True
        except Exception:
            store_ok = False
        connected = self.socket_connected()
        # In Socket Mode events arrive only over the link: while it is down the bot is not serving.
        return {"ok": store_ok and connected is not False, "store": store_ok, "inflight": self.pool.inflight,
                "work": self.store.work_counts() if store_ok else {},
                "probes": self.prober.enabled, "socket_mode": self._socket is not None,
                "slack_connected": connected}

    def socket_connected(self) -> bool | None:
        """Whether the Socket Mode link is up now; None in HTTP mode."""
        if self._socket is None:
            return None
        client = getattr(self._socket, "client", None)
        is_connected = getattr(client, "is_connected", None)
        if not callable(is_connected):
            return None
        if not is_connected():
            return False
        # A link that died without a close (network gone, peer vanished) still looks open to the client
        # for a minute; its pongs stop at once. (last_ping_pong_time: when the last answered ping left.)
        last = getattr(getattr(client, "current_session", None), "last_ping_pong_time", None)
        return not (isinstance(last, (int, float)) and time.time() - last > SOCKET_STALE_S)

    def metrics_text(self) -> bytes:
        """GET /metrics: the process's series and this bot's (bot.metrics)."""
        return metrics.exposition(self.metrics_registry)

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
                                  signing_secret=self.settings.signing_secret if slack else None,
                                  metrics=self.metrics_text)
        server.alerts = self.service.alerts  # POST /hooks/alertmanager (TRIAGE_ALERTMANAGER_SECRET_FILE)
        server.start()
        self.servers.append(server)
        log.info("listening on %s (%s)", server.url, "Slack events + hooks" if slack else "hooks + healthz")
        return server

    def connect_socket_mode(self) -> None:
        """Connect to Slack over Socket Mode (no public URL needed)."""
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        self.settings.require_socket()
        self._socket = SocketModeHandler(self.app, self.settings.app_token, web_client=self.client,
                                         ping_interval=SOCKET_PING_S)
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
