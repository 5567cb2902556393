"""A webhook receiver with the bot's contract, for testing the Slurm hook on its own.

It verifies the HMAC signature with the project's own node_agent.auth.verify, answers 202 for a
new event_id and 200 for a repeated one (as the bot does), and can be told to drop the
connection after recording an event (a response lost on the way back).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from node_agent.auth import HEADER_SIGNATURE, HEADER_TIMESTAMP, AuthError, verify


@dataclass
class Received:
    at: float
    status: int
    body: dict[str, Any]


@dataclass
class HookReceiver:
    secret: bytes
    port: int
    path: str = "/hooks/job-failed"
    requests: list[Received] = field(default_factory=list)
    drop_next: int = 0  # record, then close the connection without a response
    delay_s: float = 0.0  # answer each POST this late (a slow bot), to see how many notifiers post at once
    in_flight: int = 0
    max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> HookReceiver:
        rcv = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                with rcv._lock:
                    rcv.in_flight += 1
                    rcv.max_in_flight = max(rcv.max_in_flight, rcv.in_flight)
                try:
                    time.sleep(rcv.delay_s)
                    self._post()
                finally:
                    with rcv._lock:
                        rcv.in_flight -= 1

            def _post(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != rcv.path:
                    return self._reply(404, {"error": "not found"})
                try:
                    verify(rcv.secret, self.headers.get(HEADER_TIMESTAMP), self.headers.get(HEADER_SIGNATURE), body)
                except AuthError as e:
                    rcv.requests.append(Received(time.time(), 401, {}))
                    return self._reply(401, {"error": e.reason})
                event = json.loads(body)
                dup = any(r.status in (200, 202) and r.body.get("event_id") == event.get("event_id")
                          for r in rcv.requests)
                status = 200 if dup else 202
                rcv.requests.append(Received(time.time(), status, event))
                if rcv.drop_next:
                    rcv.drop_next -= 1
                    self.close_connection = True
                    self.connection.close()
                    return None
                return self._reply(status, {"ok": True, "duplicate": dup})

            def _reply(self, status: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def accepted(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """Events accepted for the first time (202), optionally for one job."""
        return [r.body for r in self.requests if r.status == 202 and (job_id is None or r.body["job_id"] == job_id)]

    def for_job(self, job_id: str) -> list[Received]:
        return [r for r in self.requests if r.body.get("job_id") == job_id]
