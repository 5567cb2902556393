"""Slow clients cannot starve the agent: real sockets on loopback against a real agent process."""

from __future__ import annotations

import json
import socket
import time

from agent_http import request, signed

from node_agent.testing import start_agent

SLOW = 1000
PER_SOURCE = 25  # below max_connections_per_client (32): the per-address cap is not what saves us here


def _open_slow(n: int, port: int, first_source: int = 1) -> list[socket.socket]:
    socks = []
    for i in range(n):
        s = socket.socket()
        s.bind((f"127.0.1.{first_source + i // PER_SOURCE}", 0))
        s.connect(("127.0.0.1", port))
        s.send(b"P")  # one byte of "POST ...", and then nothing: a slowloris
        socks.append(s)
    return socks


def _probe_latency(url: str) -> float:
    body = json.dumps({"probes": ["host"]}).encode()
    t0 = time.monotonic()
    status, answer = request(url, "POST", "/v1/probe", body, signed(body), timeout=5)
    assert status == 200 and answer["results"], answer
    return time.monotonic() - t0


def test_valid_probes_answered_within_1s_under_1000_slow_connections(tmp_path, secret_file):
    agent = start_agent(secret_file, tmp_path, "healthy-8xh100", address="127.0.0.1",
                        extra=["--log-level", "WARNING"], env={"NODE_AGENT_READ_TIMEOUT_S": "4"})
    port = int(agent.url.rsplit(":", 1)[1])
    socks: list[socket.socket] = []
    try:
        _probe_latency(agent.url)  # warm: NVML worker started
        t_open = time.monotonic()
        socks = _open_slow(SLOW, port)
        latencies = [_probe_latency(agent.url) for _ in range(5)]
        probed_within = time.monotonic() - t_open
        assert probed_within < 4, "the slow connections must still be open while the probes run"
        assert max(latencies) < 1.0, latencies
        # none of the slow connections was answered or closed before its deadline...
        for s in socks[:50]:
            s.setblocking(False)
            try:
                assert s.recv(1) == b"", "closed early"
            except BlockingIOError:
                pass
        # ...and every one of them is cut at the whole-request deadline (4 s), not kept for ever
        time.sleep(max(0.0, t_open + 4.5 - time.monotonic()))
        deadline = time.monotonic() + 5
        for s in socks:
            s.setblocking(True)
            s.settimeout(max(0.1, deadline - time.monotonic()))
            data = s.recv(4096)
            assert data == b"" or data.startswith(b"HTTP/1.1 408"), data[:80]
        print(f"\nprobe latency with {SLOW} slow connections open: max {max(latencies) * 1000:.0f} ms, "
              f"all {[round(x * 1000) for x in latencies]} ms")
        assert agent.proc.poll() is None
    finally:
        for s in socks:
            s.close()
        agent.stop()


def test_one_address_cannot_hold_more_than_its_share(tmp_path, secret_file):
    agent = start_agent(secret_file, tmp_path, "healthy-8xh100", address="127.0.0.1",
                        env={"NODE_AGENT_MAX_CONNECTIONS_PER_CLIENT": "8"})
    port = int(agent.url.rsplit(":", 1)[1])
    socks = []
    try:
        for _ in range(12):
            s = socket.socket()
            s.bind(("127.0.2.1", 0))
            s.connect(("127.0.0.1", port))
            s.send(b"GET /hea")
            socks.append(s)
        refused = 0
        for s in socks:
            s.settimeout(0.3)
            try:
                data = s.recv(4096)
            except OSError:  # a timeout: socket.timeout (its own class before 3.10) is an OSError
                continue
            refused += data.startswith(b"HTTP/1.1 503")
        assert refused == 4
        assert _probe_latency(agent.url) < 1.0  # other addresses are still served
    finally:
        for s in socks:
            s.close()
        agent.stop()


def test_at_the_total_cap_the_oldest_unfinished_connection_makes_room(tmp_path, secret_file):
    agent = start_agent(secret_file, tmp_path, "healthy-8xh100", address="127.0.0.1",
                        env={"NODE_AGENT_MAX_CONNECTIONS": "16"})
    port = int(agent.url.rsplit(":", 1)[1])
    socks = []
    try:
        for i in range(20):
            s = socket.socket()
            s.bind((f"127.0.3.{i + 1}", 0))
            s.connect(("127.0.0.1", port))
            s.send(b"GET /hea")
            socks.append(s)
        time.sleep(0.3)
        assert _probe_latency(agent.url) < 1.0
        socks[0].settimeout(1)
        try:
            assert socks[0].recv(10) == b""  # the oldest was dropped
        except ConnectionResetError:
            pass  # dropped too (closed with unread bytes)
    finally:
        for s in socks:
            s.close()
        agent.stop()


def test_headers_too_large_and_body_deadline(tmp_path, secret_file):
    agent = start_agent(secret_file, tmp_path, "healthy-8xh100", address="127.0.0.1",
                        env={"NODE_AGENT_READ_TIMEOUT_S": "1"})
    port = int(agent.url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 431")
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            # headers at once, then a body that never completes: cut at the deadline for the whole request
            s.sendall(b"POST /v1/probe HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
            t0 = time.monotonic()
            assert s.recv(4096).startswith(b"HTTP/1.1 408")
            assert time.monotonic() - t0 < 1.5
    finally:
        agent.stop()
