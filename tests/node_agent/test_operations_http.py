"""Operating the agent: GET /metrics (Prometheus text), JSON logs, systemd readiness, and TLS.

Real `node-agent serve --simulate` processes; every request is a real HTTP(S) request on loopback.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from agent_http import SECRET, signed
from pki import PKI, make_pki

from node_agent.testing import RunningAgent, start_agent

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def get(url: str, path: str, context: ssl.SSLContext | None = None, method: str = "GET", body: bytes = b"",
        headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, Content-Type, body) of one request, as curl would make it."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=10,
                                                                       context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text exposition; each line must be a comment or a sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not an exposition line: {line!r}"
        out[(m.group(1), frozenset(_LABEL.findall(m.group(2) or "")))] = float(m.group(3))
    try:  # where the bot's dependencies are installed, Prometheus' own parser must read it too
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        pass
    else:
        assert list(text_string_to_metric_families(text))
    return out


def value(s: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return s.get((name, frozenset(labels.items())))


def probe_once(agent: RunningAgent, context: ssl.SSLContext | None = None, **fields: object) -> dict[str, object]:
    body = json.dumps({**fields, "nonce": os.urandom(8).hex()}).encode()
    status, _, raw = get(agent.url, "/v1/probe", context, "POST", body, signed(body))
    assert status == 200, raw
    return json.loads(raw)


def test_metrics_count_probes_by_name_and_health(agents) -> None:
    agent = agents("healthy-8xh100", fresh=True)
    status, ctype, text = get(agent.url, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    before = samples(text)
    assert value(before, "node_agent_info", version=__import__("node_agent").__version__, simulated="true") == 1
    assert value(before, "node_agent_probe_duration_seconds_count", probe="ecc") is None
    probe_once(agent, probes=["ecc", "thermal"])
    after = samples(get(agent.url, "/metrics")[2])
    for name in ("ecc", "thermal"):
        assert value(after, "node_agent_probe_duration_seconds_count", probe=name) == 1
        assert value(after, "node_agent_probe_duration_seconds_bucket", probe=name, le="+Inf") == 1
        assert value(after, "node_agent_probe_results_total", probe=name, health="ok") == 1
    assert value(after, "node_agent_probe_duration_seconds_count", probe="host") is None  # not asked for
    assert value(after, "node_agent_requests_total", endpoint="/v1/probe", status="200") == 1
    assert value(after, "node_agent_requests_total", endpoint="/metrics", status="200") == 1
    assert value(after, "node_agent_nvml_stuck_workers") == 0
    # A bad signature is counted under its status; /metrics itself needs no signature.
    status, _, _ = get(agent.url, "/v1/probes", headers={"X-Triage-Signature": "v2=00"})
    assert status == 401
    assert value(samples(get(agent.url, "/metrics")[2]), "node_agent_requests_total",
                 endpoint="/v1/probes", status="401") == 1


def test_metrics_count_nvml_hangs_and_quarantine(agents) -> None:
    agent = agents("hung-nvml", fresh=True, env={"NODE_AGENT_NVML_CALL_TIMEOUT_S": "1"})
    probe_once(agent, probes=["processes"], deadline_s=3)
    s = samples(get(agent.url, "/metrics")[2])
    assert value(s, "node_agent_nvml_hangs_total", fn="nvmlDeviceGetMemoryInfo") == 1
    assert value(s, "node_agent_nvml_quarantines", gpu="3") == 1
    assert value(s, "node_agent_probe_results_total", probe="processes", health="failed") == 1
    # the hung call cost about its 1 s timeout, and the histogram shows it
    assert value(s, "node_agent_probe_duration_seconds_bucket", probe="processes", le="0.5") == 0
    assert value(s, "node_agent_probe_duration_seconds_bucket", probe="processes", le="2.5") == 1


def test_json_logs_and_systemd_readiness(tmp_path: Path, secret_file: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(sock_path))
    listener.settimeout(20)
    agent = start_agent(secret_file, tmp_path, "healthy-8xh100", extra=["--log-format", "json"],
                        env={"NOTIFY_SOCKET": str(sock_path)})
    try:
        ready = listener.recv(4096).decode()
        assert ready.splitlines()[0] == "READY=1" and f"STATUS=listening on {agent.url}" in ready
        assert get(agent.url, "/healthz")[0] == 200  # READY means the port answers
        get(agent.url, "/v1/probes", headers={"X-Triage-Signature": "v2=00"})  # a logged rejection
        probe_once(agent, probes=["ecc"])
        agent.proc.terminate()
        assert listener.recv(4096).decode() == "STOPPING=1"
        assert agent.proc.wait(10) == 0
    finally:
        agent.stop()
        listener.close()
    lines = [ln for ln in agent.log().splitlines() if ln.strip()]
    assert lines[0].startswith("node-agent ") and "listening on" in lines[0]  # the start line stays plain
    records = [json.loads(ln) for ln in lines[1:]]  # everything logged is one JSON object per line
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any(r["level"] == "WARNING" and r["message"].startswith("rejected GET /v1/probes") for r in records)
    assert any(r["level"] == "INFO" and r["message"].startswith("probe ecc from 127.0.0.1") for r in records)
    assert SECRET not in agent.log()


# --- TLS ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _client(pki: PKI, cert: bool = True, ca: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca or pki.ca))
    if cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return ctx


def _tls_args(pki: PKI, client_ca: bool) -> list[str]:
    args = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    return args + (["--tls-client-ca", str(pki.ca)] if client_ca else [])


def test_tls_server_certificate(agents, pki: PKI) -> None:
    agent = agents("healthy-8xh100", extra=_tls_args(pki, client_ca=False))
    assert agent.url.startswith("https://127.0.0.1:")
    assert "(TLS)" in agent.log()
    answer = probe_once(agent, _client(pki, cert=False), probes=["ecc"])
    assert answer["results"][0]["health"] == "ok"
    # A client that trusts another CA refuses the agent; plain HTTP gets no answer at all.
    with pytest.raises(ssl.SSLCertVerificationError):
        get(agent.url, "/healthz", _client(pki, cert=False, ca=pki.other_ca))
    with pytest.raises((http.client.HTTPException, OSError)):
        get(agent.url.replace("https://", "http://"), "/healthz")
    s = samples(get(agent.url, "/metrics", _client(pki, cert=False))[2])
    assert (value(s, "node_agent_connections_dropped_total", reason="tls_handshake_failed") or 0) >= 1


def test_tls_client_certificate_required(agents, pki: PKI) -> None:
    agent = agents("healthy-8xh100", extra=_tls_args(pki, client_ca=True))
    assert "(TLS, client certificate required)" in agent.log()
    assert probe_once(agent, _client(pki), probes=["ecc"])["results"][0]["probe"] == "ecc"
    # Without a client certificate nothing is answered, not even /healthz (TLS 1.3 reports it on read).
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(agent.url, "/healthz", _client(pki, cert=False))
    # The HMAC signature still applies with a valid certificate.
    status, _, raw = get(agent.url, "/v1/probes", _client(pki), headers={"X-Triage-Signature": "v2=00"})
    assert status == 401 and json.loads(raw)["error"] == "unauthorized"


@pytest.mark.parametrize("args, message", [
    (["--tls-key", "KEY"], "tls_key and tls_client_ca need tls_cert"),
    (["--tls-cert", "MISSING"], "TLS certificate or key not found"),
    (["--tls-cert", "CA", "--tls-key", "SERVER_KEY"], "are not a usable pair"),
])
def test_bad_tls_settings_refuse_to_start(tmp_path: Path, secret_file: Path, pki: PKI, args: list[str],
                                          message: str) -> None:
    subst = {"KEY": str(pki.server_key), "MISSING": str(tmp_path / "nope.pem"), "CA": str(pki.ca),
             "SERVER_KEY": str(pki.server_key)}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    p = subprocess.run([sys.executable, "-m", "node_agent", "serve", "--listen", "127.0.0.1:0", "--secret-file",
                        str(secret_file), "--simulate", "healthy-8xh100", *[subst.get(a, a) for a in args]],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and message in p.stderr, p.stderr

