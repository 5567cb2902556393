"""HTTP front of the agent: /healthz (liveness), /metrics (Prometheus), /v1/probes (catalogue),
/v1/probe (run probes), over plain HTTP or TLS (node_agent.tls).

Every request other than /healthz and /metrics must be signed (node_agent.auth, scheme v2: method, path, the host
meant, timestamp and a nonce remembered for the window). Rejections are logged with the peer, path
and reason only (never the body, the signature or the secret) and answered with a JSON error that
carries no host data.

Slow clients cost no thread: one selector thread accepts connections and reads each request (line,
headers and body) under one deadline for the whole request (`read_timeout_s`), a per-client and a
total connection cap (at the total cap the oldest unfinished connection is dropped for the new one).
With TLS the handshake runs in the selector thread too, under the same deadline. Only complete
requests reach the small pool of worker threads that answer them; one request per
connection (`Connection: close`).
"""

from __future__ import annotations

import collections
import io
import ipaddress
import json
import logging
import queue
import resource
import selectors
import socket
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from node_agent import __version__, auth
from node_agent.agent import Agent
from node_agent.digits import is_ascii_uint
from node_agent.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from node_agent.probes import PROBE_NAMES
from node_agent.request import RequestError, parse_request

log = logging.getLogger("node_agent.http")
MAX_HEAD_BYTES = 16 * 1024
WRITE_TIMEOUT_S = 5.0
_CANNED = {
    503: b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 75\r\n"
         b"Connection: close\r\n\r\n" + b'{"error":"busy","detail":"too many connections from this address; retry"}'.ljust(75),
    408: b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: 68\r\n"
         b"Connection: close\r\n\r\n" + b'{"error":"timeout","detail":"request not received within the limit"}'.ljust(68),
    431: b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json\r\n"
         b"Content-Length: 58\r\nConnection: close\r\n\r\n" + b'{"error":"headers-too-large","detail":"headers too large"}'.ljust(58),
}


def _raise_fd_limit(want: int) -> int:
    """Raise the soft open-files limit towards `want` (up to the hard limit); return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else want


class _Conn:
    __slots__ = ("sock", "peer", "buf", "deadline", "need", "ready")

    def __init__(self, sock: socket.socket, peer: str, deadline: float, ready: bool = True) -> None:
        self.sock, self.peer, self.buf, self.deadline = sock, peer, bytearray(), deadline
        self.need: int | None = None  # total bytes of head + body once the head is parsed
        self.ready = ready  # False until the TLS handshake is done (plain HTTP: at once)


def _body_length(head: bytes) -> int:
    """Bytes of body to read after the head; 0 when the handler will refuse without reading it."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return 0  # chunked: refused with 411 by the handler
        if name == b"content-length":
            value = value.strip()
            if not (value.isascii() and value.isdigit()) or len(value) > 12:
                return 0  # 400 by the handler
            length = int(value)
    return length


class AgentHTTPServer:
    """Selector-driven front end plus a bounded worker pool (see the module docstring)."""

    def __init__(self, addr: tuple[str, int], agent: Agent, secret: bytes, tls: ssl.SSLContext | None = None) -> None:
        cfg = agent.config
        self.agent = agent
        self.secret = secret
        self.tls = tls
        self.replays = auth.ReplayCache()
        self.slots = threading.BoundedSemaphore(cfg.max_concurrent)
        self.read_timeout_s = cfg.read_timeout_s
        self.per_client = cfg.max_connections_per_client
        fd_soft = _raise_fd_limit(cfg.max_connections + 256)
        self.max_connections = max(8, min(cfg.max_connections, fd_soft - 128))
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(addr)
            self.socket.listen(1024)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()[:2]
        self._names = self._own_names()
        self._sel = selectors.DefaultSelector()
        self._conns: collections.OrderedDict[int, _Conn] = collections.OrderedDict()  # oldest first
        self._per_peer: collections.Counter[str] = collections.Counter()
        self._work: queue.Queue[tuple[socket.socket, str, bytes] | None] = queue.Queue(maxsize=64)
        self._stop = threading.Event()
        self._done = threading.Event()
        self._workers = [threading.Thread(target=self._worker, name=f"http-worker-{i}", daemon=True)
                         for i in range(cfg.max_concurrent + 2)]
        self.stats: collections.Counter[str] = collections.Counter()
        self.metrics = agent.metrics
        self.metrics.counter("node_agent_requests_total", "HTTP answers by endpoint and status.")
        self.metrics.collect("node_agent_connections_dropped_total", "counter",
                             "Connections answered or closed before a request was read, by reason.",
                             lambda: [((("reason", k),), n) for k, n in self.stats.items()])

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    # --- who we are (X-Triage-Host) -------------------------------------------------------------------
    def _own_names(self) -> set[str]:
        names = {self.agent.name, socket.gethostname(), *self.agent.config.host_names}
        try:
            names.add(socket.getfqdn())
        except OSError:
            pass
        bound = self.server_address[0]
        if bound not in ("0.0.0.0", "::"):
            names.add(bound)
        out = {n.lower().rstrip(".") for n in names if n}
        return out | {n.split(".", 1)[0] for n in out if not _is_ip(n)}

    def accepts_host(self, host: str, local_addr: str) -> bool:
        h = host.lower().rstrip(".").strip("[]")
        if h in self._names or h == local_addr.lower():
            return True
        return not _is_ip(h) and h.split(".", 1)[0] in self._names

    # --- life cycle (the subset of socketserver's interface that cli.py uses) ---------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        for t in self._workers:
            t.start()
        self._sel.register(self.socket, selectors.EVENT_READ, None)
        try:
            while not self._stop.is_set():
                timeout = poll_interval
                if self._conns:
                    first = next(iter(self._conns.values()))
                    timeout = max(0.0, min(poll_interval, first.deadline - time.monotonic()))
                for key, _ in self._sel.select(timeout):
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                self._expire()
        finally:
            for conn in list(self._conns.values()):
                self._drop(conn)
            for _ in self._workers:
                try:
                    self._work.put_nowait(None)
                except queue.Full:
                    break
            self._done.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._done.wait(10)

    def server_close(self) -> None:
        self._sel.close()
        self.socket.close()

    # --- the selector thread ------------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(256):
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: drop the oldest unfinished one and go on
                log.warning("accept failed: %s", exc)
                if self._conns:
                    self._drop(next(iter(self._conns.values())))
                return
            peer = addr[0]
            if self._per_peer[peer] >= self.per_client:
                self.stats["refused_per_client"] += 1
                self._canned(sock, 503, tls_ready=self.tls is None)
                continue
            while len(self._conns) >= self.max_connections:
                self.stats["evicted"] += 1
                self._drop(next(iter(self._conns.values())))
            sock.setblocking(False)
            if self.tls is not None:
                try:
                    sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
            conn = _Conn(sock, peer, time.monotonic() + self.read_timeout_s, ready=self.tls is None)
            self._conns[sock.fileno()] = conn
            self._per_peer[peer] += 1
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _handshake(self, conn: _Conn) -> bool:
        """Advance the TLS handshake; True once done (then the request is read)."""
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except (ssl.SSLError, OSError) as exc:  # no certificate, an untrusted one, not TLS at all...
            self.stats["tls_handshake_failed"] += 1
            log.info("TLS handshake with %s failed: %s", conn.peer, getattr(exc, "reason", None) or exc)
            self._drop(conn)
            return False
        conn.ready = True
        return True

    def _recv(self, conn: _Conn) -> bytes | None:
        """What the socket has now: b"" at EOF, None when nothing (yet)."""
        try:
            chunk = conn.sock.recv(65536)
            if isinstance(conn.sock, ssl.SSLSocket):
                while conn.sock.pending():  # decrypted bytes the selector cannot see
                    chunk += conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None
        except OSError:
            return b""
        return chunk

    def _read(self, conn: _Conn) -> None:
        if not conn.ready and not self._handshake(conn):
            return
        chunk = self._recv(conn)
        if chunk is None:
            return
        if not chunk:
            self._drop(conn)
            return
        conn.buf += chunk
        if conn.need is None:
            end = conn.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.buf) > MAX_HEAD_BYTES:
                    self._release(conn)
                    self._canned(conn.sock, 431)
                return
            if end + 4 > MAX_HEAD_BYTES:
                self._release(conn)
                self._canned(conn.sock, 431)
                return
            length = _body_length(bytes(conn.buf[:end]))
            if length > self.agent.config.max_body_bytes:
                length = 0  # 413 by the handler, body not read
            conn.need = end + 4 + length
        if len(conn.buf) >= conn.need:
            self._release(conn)
            data = bytes(conn.buf[:conn.need])
            try:
                self._work.put_nowait((conn.sock, conn.peer, data))
            except queue.Full:
                self.stats["refused_busy"] += 1
                self._canned(conn.sock, 503)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._conns:
            conn = next(iter(self._conns.values()))
            if conn.deadline > now:
                return
            self.stats["timed_out"] += 1
            self._release(conn)
            self._canned(conn.sock, 408, tls_ready=conn.ready)

    def _release(self, conn: _Conn) -> None:
        """Stop tracking a connection (the socket stays open)."""
        self._conns.pop(conn.sock.fileno(), None)
        self._per_peer[conn.peer] -= 1
        if self._per_peer[conn.peer] <= 0:
            del self._per_peer[conn.peer]
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _drop(self, conn: _Conn) -> None:
        self._release(conn)
        conn.sock.close()

    @staticmethod
    def _canned(sock: socket.socket, status: int, tls_ready: bool = True) -> None:
        """A fixed answer, then close; before a TLS handshake there is no one to answer: close only."""
        try:
            if tls_ready:
                sock.setblocking(False)
                sock.send(_CANNED[status])
        except OSError:
            pass
        finally:
            sock.close()

    # --- workers --------------------------------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            sock, peer, data = item
            try:
                sock.setblocking(True)
                sock.settimeout(WRITE_TIMEOUT_S)
                Handler(sock, (peer, 0), self, data)
            except Exception:  # a bug in one request must not kill the worker
                log.exception("request from %s failed", peer)
            finally:
                _close_after_answer(sock)
                sock.close()


def _close_after_answer(sock: socket.socket) -> None:
    """Half-close: TLS sends its close_notify without waiting for the peer's (a slow peer must not hold
    a worker); plain TCP sends FIN."""
    try:
        if isinstance(sock, ssl.SSLSocket):
            sock.setblocking(False)
            sock.unwrap()
        else:
            sock.shutdown(socket.SHUT_WR)
    except (OSError, ValueError):
        pass


_ENDPOINTS = ("/healthz", "/metrics", "/v1/probes", "/v1/probe")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class Handler(BaseHTTPRequestHandler):
    server: AgentHTTPServer  # type: ignore[assignment]  # not a socketserver.BaseServer, the same interface
    server_version = f"node-agent/{__version__}"
    sys_version = ""  # do not advertise the Python version
    protocol_version = "HTTP/1.1"

    def __init__(self, sock: socket.socket, client_address: tuple[str, int], server: AgentHTTPServer,
                 data: bytes) -> None:
        self._data = data
        super().__init__(sock, client_address, server)  # type: ignore[arg-type]

    def setup(self) -> None:
        # The selector thread has read the whole request: parse it from memory, write to the socket.
        self.connection = self.request
        self.rfile = io.BytesIO(self._data)
        self.wfile = self.connection.makefile("wb", buffering=0)
        self.close_connection = True

    def finish(self) -> None:
        try:
            self.wfile.close()
        except OSError:
            pass

    # --- plumbing -------------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: dict[str, Any] | str, close: bool = False) -> None:
        if isinstance(body, str):
            data, ctype = body.encode("utf-8"), METRICS_CONTENT_TYPE
        else:
            data, ctype = json.dumps(body, separators=(",", ":")).encode(), "application/json"
        path = str(getattr(self, "path", "")).split("?", 1)[0]
        endpoint = path if path in _ENDPOINTS else "other"
        self.server.metrics.inc("node_agent_requests_total", (("endpoint", endpoint), ("status", str(int(status)))))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("X-Triage-Auth", auth.SCHEME_V2)
        self.send_header("Connection", "close")  # one request per connection
        self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _reject(self, status: int, error: str, detail: str, close: bool = False) -> None:
        log.warning("rejected %s %s from %s: %s (%d)", self.command, self.path, self.client_address[0], detail, status)
        self._send(status, {"error": error, "detail": detail}, close=close)

    def _authenticate(self, body: bytes) -> bool:
        try:
            local = self.connection.getsockname()[0]
            names = (auth.HEADER_TIMESTAMP, auth.HEADER_SIGNATURE, auth.HEADER_HOST, auth.HEADER_NONCE)
            auth.verify_request(
                self.server.secret,
                {n: self.headers.get(n) for n in names},
                self.command,
                self.path,
                body,
                accept_host=lambda h: self.server.accepts_host(h, local),
                window_s=self.server.agent.config.auth_window_s,
                nonces=self.server.replays,
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
        if not is_ascii_uint(raw):
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
        if path == "/metrics":  # counts and durations only, no host data: unsigned, like /healthz
            self._send(HTTPStatus.OK, self.server.metrics.render())
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
            status = HTTPStatus.METHOD_NOT_ALLOWED if path in ("/healthz", "/metrics", "/v1/probes") else HTTPStatus.NOT_FOUND
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
