"""HTTP front of the agent: /healthz (liveness), /v1/probes (catalogue), /v1/probe (run probes).

Every request other than /healthz must be signed (node_agent.auth). Rejections are logged with the
peer, path and reason only (never the body, the signature or the secret) and answered with a JSON
error that carries no host data.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from node_agent import __version__, auth
from node_agent.agent import Agent
from node_agent.probes import PROBE_NAMES
from node_agent.request import RequestError, parse_request

log = logging.getLogger("node_agent.http")


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, addr: tuple[str, int], agent: Agent, secret: bytes) -> None:
        super().__init__(addr, Handler)
        self.agent = agent
        self.secret = secret
        self.replays = auth.ReplayCache()
        self.slots = threading.BoundedSemaphore(agent.config.max_concurrent)


class Handler(BaseHTTPRequestHandler):
    server: AgentHTTPServer
    server_version = f"node-agent/{__version__}"
    sys_version = ""  # do not advertise the Python version
    protocol_version = "HTTP/1.1"
    timeout = 10  # a client that stops sending mid-request must not hold a thread forever

    # --- plumbing -------------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: dict[str, Any], close: bool = False) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _reject(self, status: int, error: str, detail: str, close: bool = False) -> None:
        log.warning("rejected %s %s from %s: %s (%d)", self.command, self.path, self.client_address[0], detail, status)
        self._send(status, {"error": error, "detail": detail}, close=close)

    def _authenticate(self, body: bytes) -> bool:
        try:
            auth.verify(
                self.server.secret,
                self.headers.get(auth.HEADER_TIMESTAMP),
                self.headers.get(auth.HEADER_SIGNATURE),
                body,
                window_s=self.server.agent.config.auth_window_s,
                replay_cache=self.server.replays,
            )
        except auth.AuthError as exc:
            self._reject(HTTPStatus.UNAUTHORIZED, "unauthorized", exc.reason)
            return False
        return True

    def _read_body(self) -> bytes | None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._reject(HTTPStatus.LENGTH_REQUIRED, "length-required", "chunked bodies are not accepted", close=True)
            return None
        raw = self.headers.get("Content-Length", "0")
        if not raw.isdigit():
            self._reject(HTTPStatus.BAD_REQUEST, "bad-request", "Content-Length is not a number", close=True)
            return None
        length = int(raw)
        limit = self.server.agent.config.max_body_bytes
        if length > limit:
            # Not read: closing the connection is cheaper than draining an attacker's body.
            self._reject(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body-too-large",
                         f"body of {length} bytes exceeds the {limit} byte limit", close=True)
            return None
        return self.rfile.read(length) if length else b""

    # --- routes ----------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(HTTPStatus.OK, {"status": "ok"})
            return
        if path == "/v1/probes":
            if self._read_body() is None or not self._authenticate(b""):
                return
            self._send(HTTPStatus.OK, self.server.agent.catalogue())
            return
        if path == "/v1/probe":
            self._reject(HTTPStatus.METHOD_NOT_ALLOWED, "method-not-allowed", "use POST /v1/probe")
            return
        self._reject(HTTPStatus.NOT_FOUND, "not-found", f"no such endpoint {path}")

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path != "/v1/probe":
            status = HTTPStatus.METHOD_NOT_ALLOWED if path in ("/healthz", "/v1/probes") else HTTPStatus.NOT_FOUND
            self._reject(status, "not-found" if status == HTTPStatus.NOT_FOUND else "method-not-allowed",
                         f"POST {path} is not an endpoint", close=True)
            return
        body = self._read_body()
        if body is None or not self._authenticate(body):
            return
        try:
            obj = json.loads(body or b"{}")
        except ValueError as exc:
            self._reject(HTTPStatus.BAD_REQUEST, "bad-json", f"body is not valid JSON: {exc}")
            return
        try:
            req = parse_request(obj, PROBE_NAMES)
        except RequestError as exc:
            self._reject(HTTPStatus.BAD_REQUEST, "bad-request", str(exc))
            return
        if not self.server.slots.acquire(blocking=False):
            self._reject(HTTPStatus.SERVICE_UNAVAILABLE, "busy",
                         f"{self.server.agent.config.max_concurrent} probe requests already running; retry shortly")
            return
        try:
            t0 = time.monotonic()
            answer = self.server.agent.probe(req)
            log.info("probe %s from %s: %d results in %.0f ms", ",".join(req.probes or ["all"]),
                     self.client_address[0], len(answer["results"]), (time.monotonic() - t0) * 1000)
        finally:
            self.server.slots.release()
        self._send(HTTPStatus.OK, answer)

    def do_PUT(self) -> None:  # noqa: N802
        self._reject(HTTPStatus.METHOD_NOT_ALLOWED, "method-not-allowed", "PUT is not supported", close=True)

    do_DELETE = do_PUT
    do_PATCH = do_PUT
