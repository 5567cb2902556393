"""Unauthenticated, tampered, stale, replayed, oversized and malformed requests are refused with no data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from agent_http import SECRET, request, signed

from node_agent.testing import agent_command, start_agent, write_secret

BODY = json.dumps({"probes": ["processes"]}).encode()


def _assert_no_data(answer):
    assert set(answer) == {"error", "detail"}, answer


def test_healthz_needs_no_auth_and_says_nothing(agents):
    status, answer = request(agents().url, "GET", "/healthz")
    assert status == 200 and answer == {"status": "ok"}


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({}, "missing"),
        ({"X-Triage-Timestamp": "1"}, "missing"),
        ("wrong-secret", "signature mismatch"),
        ("stale", "outside the 300 s window"),
        ("future", "outside the 300 s window"),
        ("tampered", "signature mismatch"),
        ({"X-Triage-Timestamp": "soon", "X-Triage-Signature": "v2=00", "X-Triage-Host": "127.0.0.1",
              "X-Triage-Nonce": "0123456789abcdef"}, "not unix seconds"),
    ],
)
def test_bad_signatures_are_rejected_and_logged(agents, headers, detail):
    agent = agents()
    body = BODY
    if headers == "wrong-secret":
        headers = signed(body, secret="not-the-secret")
    elif headers == "stale":
        headers = signed(body, ts=int(time.time()) - 301)
    elif headers == "future":
        headers = signed(body, ts=int(time.time()) + 301)
    elif headers == "tampered":
        headers = signed(body)
        body = json.dumps({"probes": ["processes", "ecc"]}).encode()
    status, answer = request(agent.url, "POST", "/v1/probe", body, headers)
    assert status == 401
    _assert_no_data(answer)
    assert detail in answer["detail"]
    log = agent.log()
    assert "rejected POST /v1/probe from 127.0.0.1" in log
    assert SECRET not in log and "not-the-secret" not in log


def test_replayed_request_is_rejected(agents):
    agent = agents()
    body = json.dumps({"probes": ["host"], "nonce": "replay-test"}).encode()
    headers = signed(body)
    assert request(agent.url, "POST", "/v1/probe", body, headers)[0] == 200
    status, answer = request(agent.url, "POST", "/v1/probe", body, headers)
    assert status == 401 and "replayed" in answer["detail"]


def test_catalogue_requires_auth(agents):
    agent = agents()
    status, answer = request(agent.url, "GET", "/v1/probes")
    assert status == 401
    _assert_no_data(answer)
    status, answer = request(agent.url, "GET", "/v1/probes", headers=signed(b"", method="GET", path="/v1/probes"))
    assert status == 200
    names = [p["name"] for p in answer["probes"]]
    assert names == ["inventory", "processes", "ecc", "xid", "thermal", "pcie", "nvlink", "fabric", "infiniband", "host"]
    assert all(p["description"] and p["privileges"] for p in answer["probes"])


def test_oversized_body_is_refused_before_it_is_read(agents):
    body = b'{"probes": [' + b'"host",' * 12000 + b'"host"]}'
    assert len(body) > 64 * 1024
    status, answer = request(agents().url, "POST", "/v1/probe", body, signed(body))
    assert status == 413 and answer["error"] == "body-too-large"


@pytest.mark.parametrize(
    ("body", "error", "detail"),
    [
        (b"{not json", "bad-json", "not valid JSON"),
        (b"[1, 2]", "bad-request", "JSON object"),
        (b'{"probes": ["gpu-vibes"]}', "bad-request", "unknown probes: gpu-vibes"),
        (b'{"gpus": [true]}', "bad-request", "not a GPU index"),
        (b'{"window": {"start": 10, "end": 5}}', "bad-request", "window.end"),
        (b'{"job_pids": [-3]}', "bad-request", "job_pids"),
        (b'{"colour": "blue"}', "bad-request", "unknown fields: colour"),
    ],
)
def test_malformed_bodies_get_a_clear_400(agents, body, error, detail):
    status, answer = request(agents().url, "POST", "/v1/probe", body, signed(body))
    assert status == 400 and answer["error"] == error and detail in answer["detail"]


def test_unknown_paths_and_methods(agents):
    agent = agents()
    assert request(agent.url, "GET", "/v1/secrets")[0] == 404
    assert request(agent.url, "GET", "/v1/probe")[0] == 405
    assert request(agent.url, "PUT", "/v1/probe", b"{}")[0] == 405


def test_concurrency_limit_answers_503(agents):
    agent = agents("hung-nvml", env={"NODE_AGENT_MAX_CONCURRENT": "1"})
    slow = json.dumps({"probes": ["processes"], "deadline_s": 3, "nonce": "slow"}).encode()
    first: dict = {}
    t = threading.Thread(target=lambda: first.update(r=request(agent.url, "POST", "/v1/probe", slow, signed(slow))))
    t.start()
    time.sleep(0.4)
    body = json.dumps({"probes": ["host"], "nonce": "second"}).encode()
    status, answer = request(agent.url, "POST", "/v1/probe", body, signed(body))
    t.join(10)
    assert status == 503 and answer["error"] == "busy"
    assert first["r"][0] == 200


@pytest.mark.parametrize(("mode", "content", "why"), [(0o644, SECRET, "world-readable"), (0o600, "  \n", "is empty")])
def test_agent_refuses_to_start_with_an_unsafe_secret_file(tmp_path, mode, content, why):
    secret = tmp_path / "secret"
    secret.write_text(content)
    os.chmod(secret, mode)
    p = subprocess.run(agent_command(secret, "127.0.0.1:0", "healthy-8xh100"), capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2
    assert "refusing to start" in p.stderr and why in p.stderr
    assert "Traceback" not in p.stderr


def test_agent_refuses_to_start_without_a_secret(tmp_path):
    p = subprocess.run([sys.executable, "-m", "node_agent", "serve", "--listen", "127.0.0.1:0"], capture_output=True,
                       text=True, timeout=30, env={**os.environ, "NODE_AGENT_SECRET_FILE": ""})
    assert p.returncode == 2 and "no secret file" in p.stderr


def test_secret_from_env_and_listen_from_config_file(tmp_path):
    secret = write_secret(tmp_path / "s", SECRET)
    cfg = tmp_path / "agent.json"
    cfg.write_text(json.dumps({"listen": "127.0.0.3:0", "name": "gpu-node-03", "simulate": "healthy-8xh100"}))
    agent = start_agent(None, tmp_path, None, address=None, extra=["--config", str(cfg)],
                        env={"NODE_AGENT_SECRET_FILE": str(secret)})
    try:
        assert agent.url.startswith("http://127.0.0.3:")
        body = json.dumps({"probes": ["host"]}).encode()
        status, answer = request(agent.url, "POST", "/v1/probe", body, signed(body, host="gpu-node-03"))
        assert status == 200 and answer["host"] == "gpu-node-03" and answer["simulated"] is True
    finally:
        agent.stop()


def test_config_file_with_an_unknown_key_is_an_error(tmp_path, secret_file):
    cfg = tmp_path / "agent.json"
    cfg.write_text(json.dumps({"listn": "127.0.0.1:0"}))
    p = subprocess.run([sys.executable, "-m", "node_agent", "serve", "--config", str(cfg), "--secret-file",
                        str(secret_file)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "unknown keys listn" in p.stderr
