"""A timestamp header of non-ASCII digits ("¹²", "١٢٣") is refused with 401 by a real agent on
loopback, in either signing scheme, and the agent keeps answering (no traceback, no dropped
connection); `parse_timestamp` takes ASCII digits only."""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

import pytest
from agent_http import request, signed

from node_agent.auth import AuthError, parse_timestamp

BODY = json.dumps({"probes": ["processes"]}).encode()
BAD = ["¹²", "١٢٣", "１７６４５４３６００", "1764543600²", "", " 1764543600", "+1764543600", "1e9", "9" * 13]


@pytest.mark.parametrize("value", BAD)
def test_parse_timestamp_refuses(value: str) -> None:
    with pytest.raises(AuthError, match="not unix seconds"):
        parse_timestamp(value)


def test_parse_timestamp_accepts_ascii_seconds() -> None:
    assert parse_timestamp("1764543600") == 1764543600


def _raw(url: str, headers: dict[str, str | bytes]) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    try:
        conn.putrequest("POST", "/v1/probe")
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(BODY)))
        conn.endheaders(BODY)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("scheme", ["v1", "v2"])
@pytest.mark.parametrize("ts", ["¹²", "١٢٣", "1764543600²"])
def test_agent_answers_401(agents, scheme: str, ts: str) -> None:
    agent = agents()
    good = signed(BODY)  # a valid v2 request's other headers (host, nonce), its timestamp replaced
    try:
        sent: str | bytes = ts.encode("latin-1").decode("latin-1")
    except UnicodeEncodeError:
        sent = ts.encode("utf-8")  # as a client that writes UTF-8 header bytes sends it
    headers: dict[str, str | bytes] = {**good, "X-Triage-Timestamp": sent}
    if scheme == "v1":
        headers["X-Triage-Signature"] = "v1=" + "0" * 64
    status, raw = _raw(agent.url, headers)
    assert status == 401, raw
    assert "Traceback" not in agent.log()
    # and it still serves a valid probe
    status, _ = request(agent.url, "POST", "/v1/probe", BODY, signed(BODY, ts=int(time.time())))
    assert status == 200


def test_content_length_of_superscript_digits_is_400(agents) -> None:
    """'Content-Length: ¹²' passes `str.isdigit()`; the agent must answer 400, not a traceback."""
    agent = agents()
    parts = urlsplit(agent.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    try:
        conn.putrequest("POST", "/v1/probe", skip_accept_encoding=True)
        for k, v in signed(BODY).items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", "¹²".encode())
        conn.endheaders(BODY)
        resp = conn.getresponse()
        assert resp.status == 400, resp.read()
    finally:
        conn.close()
    assert "Traceback" not in agent.log()


@pytest.mark.parametrize("gpu", ["¹", "١"])
def test_gpu_index_of_non_ascii_digits_is_refused(agents, gpu: str) -> None:
    agent = agents()
    body = json.dumps({"probes": ["processes"], "gpus": [gpu]}).encode()
    status, raw = request(agent.url, "POST", "/v1/probe", body, signed(body, ts=int(time.time())))
    assert status == 400, raw
    assert "not a GPU index" in json.dumps(raw)
    assert "Traceback" not in agent.log()
