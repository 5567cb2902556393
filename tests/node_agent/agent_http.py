"""Signed HTTP helpers for the agent tests (stdlib http.client: what a real caller sends)."""

from __future__ import annotations

import http.client
import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

from node_agent.auth import request_headers
from node_agent.testing import RunningAgent

SECRET = "test-secret-0123456789abcdef"


def request(url: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
            timeout: float = 15.0) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    return resp.status, json.loads(raw) if raw else {}


def signed(body: bytes, secret: str = SECRET, ts: int | None = None, method: str = "POST",
           path: str = "/v1/probe", host: str = "127.0.0.1", nonce: str | None = None) -> dict[str, str]:
    """Scheme v2 headers: method, path, the host meant, timestamp and a fresh nonce are signed."""
    now = time.time() if ts is None else ts
    return {**request_headers(secret.encode(), method, path, host, body, now=now, nonce=nonce),
            "Content-Type": "application/json"}


def probe(agent: RunningAgent, timeout: float = 15.0, **fields: Any) -> dict[str, Any]:
    body = json.dumps({**fields, "nonce": os.urandom(8).hex()}).encode()
    status, answer = request(agent.url, "POST", "/v1/probe", body, signed(body), timeout=timeout)
    assert status == 200, answer
    return answer


def result(answer: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in answer["results"] if r["probe"] == name)


def codes(res: dict[str, Any]) -> list[str]:
    return [f["code"] for f in res["findings"]]
