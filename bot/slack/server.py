"""The bot's HTTP endpoint: Bolt's /slack/events, the scheduler webhook, /healthz and /metrics.

A threading stdlib server: Slack requests are small and the listeners only ack() and enqueue, so
a thread per connection is plenty, and the bot needs no web framework. In Socket Mode the same
server runs without /slack/events (`triage serve --socket --hooks-port N`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slack_bolt import App, BoltRequest
from slack_sdk.signature import SignatureVerifier

from bot.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from bot.service.alertmanager import MAX_BODY as ALERT_MAX_BODY
from bot.service.hooks import MAX_BODY as HOOK_MAX_BODY
from bot.service.hooks import JobHooks

log = logging.getLogger(__name__)

SLACK_PATH = "/slack/events"
HOOK_PATH = "/hooks/job-failed"
ALERT_PATH = "/hooks/alertmanager"  # bot.service.alertmanager
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
SLACK_MAX_BODY = 4 << 20  # Slack's payloads are far smaller; anything bigger is not from Slack


_ASCII_SECONDS = re.compile(r"[0-9]{1,12}")  # also a Content-Length (at most 12 digits)


def slack_header_problem(headers: dict[str, str]) -> str | None:
    """Why Slack's signature headers cannot even be checked (then 401), or None. Absent headers are
    Bolt's to refuse; a timestamp must be ASCII digits (`str.isdigit()` accepts "¹²" and "١٢٣")."""
    ts = headers.get("x-slack-request-timestamp")
    sig = headers.get("x-slack-signature")
    if ts is not None and not _ASCII_SECONDS.fullmatch(ts):
        return "X-Slack-Request-Timestamp is not unix seconds in ASCII digits"
    if sig is not None and not sig.isascii():
        return "X-Slack-Signature is not ASCII"
    return None


class TriageHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # listen backlog: the stdlib's 5 resets connections when Slack sends a burst

    def __init__(self, address: tuple[str, int], app: App | None, hooks: JobHooks | None,
                 health: Any = None, signing_secret: str | None = None,
                 metrics: Callable[[], bytes] | None = None) -> None:
        self.app = app
        self.metrics = metrics  # the Prometheus exposition (bot.metrics); None: no /metrics
        self.verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self.hooks = hooks
        self.alerts: Any = None  # bot.service.alertmanager.AlertHooks: POST /hooks/alertmanager when set
        self.health = health
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="triage-http", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: TriageHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes | str = b"", headers: dict[str, Any] | None = None,
              content_type: str = "application/json") -> None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(status)
        sent_type = False
        for k, v in (headers or {}).items():
            if k.lower() in ("content-length", "connection", "transfer-encoding"):
                continue
            sent_type |= k.lower() == "content-type"
            for item in v if isinstance(v, (list, tuple)) else [v]:
                self.send_header(k, str(item))
        if not sent_type and data:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, status: int, obj: dict[str, Any]) -> None:
        self._send(status, json.dumps(obj))

    def _read_body(self, limit: int) -> bytes | None:
        """The body, or None after answering 411/413 (the rest is not read: the connection closes)."""
        length = self.headers.get("Content-Length")
        if length is None or not _ASCII_SECONDS.fullmatch(length):  # ASCII digits: int("¹²") raises
            self.close_connection = True
            self._json(411, {"error": "Content-Length required"})
            return None
        if int(length) > limit:
            self.close_connection = True
            self._json(413, {"error": f"body larger than {limit} bytes"})
            return None
        return self.rfile.read(int(length))

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = self.path.partition("?")[0]
        if path == HEALTH_PATH:
            status = self.server.health() if self.server.health else {"ok": True}
            self._json(200 if status.get("ok") else 503, status)
        elif path == METRICS_PATH and self.server.metrics is not None:
            self._send(200, self.server.metrics(), content_type=METRICS_CONTENT_TYPE)
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        path, _, query = self.path.partition("?")
        if path == SLACK_PATH and self.server.app is not None:
            body = self._read_body(SLACK_MAX_BODY)
            if body is None:
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            # Checked here, before Bolt parses the body (a forged `payload=` that is not JSON raises
            # there) or logs it (Bolt logs the whole body of a badly signed request).
            problem = slack_header_problem(headers)
            if problem is None and self.server.verifier is not None and not self.server.verifier.is_valid(
                    body, headers.get("x-slack-request-timestamp"), headers.get("x-slack-signature")):
                problem = "bad or old signature"
            if problem:
                log.info("refused a Slack request (%d bytes, body not logged): %s", len(body), problem)
                self._json(401, {"error": "invalid request"})
                return
            try:
                req = BoltRequest(body=body.decode("utf-8", "replace"), query=query, headers=dict(headers))
            except ValueError:  # signed, yet not a payload Bolt can read
                log.warning("a signed Slack request whose body could not be parsed (%d bytes)", len(body))
                self._json(400, {"error": "unreadable body"})
                return
            resp = self.server.app.dispatch(req)
            self._send(resp.status, resp.body or "", resp.headers)
        elif path == HOOK_PATH and self.server.hooks is not None:
            body = self._read_body(HOOK_MAX_BODY)
            if body is None:
                return
            out = self.server.hooks.handle(dict(self.headers.items()), body)
            self._json(out.status, out.body)
        elif path == ALERT_PATH and self.server.alerts is not None:
            body = self._read_body(ALERT_MAX_BODY)
            if body is None:
                return
            out = self.server.alerts.handle(dict(self.headers.items()), body)
            self._json(out.status, out.body)
        else:
            self._json(404, {"error": "not found"})
