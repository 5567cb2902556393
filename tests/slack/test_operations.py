"""Operating the bot: GET /metrics on a running bot, one log line per diagnosis, /healthz that follows
the Socket Mode link, JSON logs and systemd readiness of `triage serve`, probes to agents over TLS."""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.slack.runtime import TriageBot
from bot.slack.settings import Settings
from node_agent.testing import RunningAgent, running_agent, write_secret
from tests.node_agent.pki import PKI, make_pki
from tests.slack.logs import NCCL_999
from tests.slack.test_serve_cli import TRIAGE, clean_env, free_port
from tests.support.bot_server import CHANNEL, RunningBot, bot_env, run_bot
from tests.support.slack_requests import event_body, message_event
from tests.support.slack_standin import SlackStandIn

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed-nccl-999"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def scrape(url: str) -> Samples:
    """GET /metrics, read with Prometheus' own parser: (name, labels) -> value."""
    status, ctype, body = get(url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(body.decode()) for s in fam.samples}


def v(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_agent(tmp_path_factory: pytest.TempPathFactory, pki: PKI) -> Iterator[tuple[RunningAgent, Path]]:
    with running_agent(tmp_path_factory.mktemp("agents"), "seed-8xh200", "gpu-h200-07",
                       secret="agent-secret-for-operations-tests",
                       extra=["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                              "--tls-client-ca", str(pki.ca)]) as started:
        yield started


@pytest.fixture
def tls_bot(slack: SlackStandIn, tmp_path: Path, pki: PKI, tls_agent: tuple[RunningAgent, Path]) -> Iterator[RunningBot]:
    agent, secret = tls_agent
    (tmp_path / "agents.yaml").write_text(f"gpu-h200-07: {agent.url}\n")
    env = {"TRIAGE_AGENT_MAP": str(tmp_path / "agents.yaml"), "TRIAGE_AGENT_SECRET_FILE": str(secret),
           "TRIAGE_AGENT_URL": "http://127.0.0.1:9/{host}", "TRIAGE_AGENT_CA_FILE": str(pki.ca),
           "TRIAGE_AGENT_CLIENT_CERT": str(pki.client_cert), "TRIAGE_AGENT_CLIENT_KEY": str(pki.client_key)}
    with run_bot(slack, tmp_path, env=env) as bot:
        yield bot


def test_metrics_and_the_diagnosis_line_after_a_probed_diagnosis(
        tls_bot: RunningBot, slack: SlackStandIn, caplog: pytest.LogCaptureFixture) -> None:
    bot = tls_bot
    before = scrape(bot.url)
    caplog.set_level(logging.INFO, logger="bot.service.workflow")
    slack.fail("chat.postMessage", status=429, retry_after=0, error="ratelimited")  # one refused attempt
    ev = message_event(CHANNEL, (SEED / "rank-0.log").read_text())
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage", n=2, timeout=30)[-1]
    bot.wait_idle()
    # The agent was asked over TLS with a client certificate: its finding is in the answer.
    assert "pids 4242, 4243 are not the job's" in json.dumps(post.params["blocks"])
    after = scrape(bot.url)

    def delta(name: str, **labels: str) -> float:
        return v(after, name, **labels) - v(before, name, **labels)

    assert delta("triage_diagnoses_total", signature="nccl-cuda-999", trigger="initial") == 1
    assert delta("triage_diagnosis_latency_seconds_count", trigger="initial") == 1
    assert delta("triage_engine_seconds_count") >= 1 and delta("triage_probe_seconds_count") == 1
    assert delta("triage_work_seconds_count", kind="message", outcome="done") == 1
    assert delta("triage_slack_api_errors_total", method="chat.postMessage", error="ratelimited") == 1
    assert delta("triage_agent_requests_total", outcome="reachable") == 1
    assert v(after, "triage_agent_reachable", host="gpu-h200-07") == 1
    assert v(after, "triage_work_items", state="queued") == 0 and v(after, "triage_work_items", state="done") >= 1
    assert v(after, "triage_worker_pool_inflight") == 0
    assert ("triage_socket_mode_connected", frozenset()) not in after  # HTTP mode: no such link

    incident = bot.store.find_incident(CHANNEL, ev["ts"])
    (rec,) = [r for r in caplog.records if r.getMessage().startswith("diagnosis ")]
    assert rec.getMessage().startswith(f"diagnosis incident={incident.id} version=1 signature=nccl-cuda-999 ")
    assert re.search(r" trigger=initial latency_ms=\d+$", rec.getMessage())
    assert (rec.incident, rec.signature, rec.trigger) == (incident.id, "nccl-cuda-999", "initial")  # type: ignore[attr-defined]
    assert 0 <= rec.latency_ms < 30_000  # type: ignore[attr-defined]


def test_an_unreachable_agent_shows_in_metrics(slack: SlackStandIn, tmp_path: Path) -> None:
    dead = free_port()  # nothing listens there
    (tmp_path / "agents.yaml").write_text(f"gpu-h200-07: http://127.0.0.1:{dead}\n")
    secret = write_secret(tmp_path / "agent.secret", "agent-secret-for-operations-tests")
    env = {"TRIAGE_AGENT_MAP": str(tmp_path / "agents.yaml"), "TRIAGE_AGENT_SECRET_FILE": str(secret)}
    with run_bot(slack, tmp_path, env=env) as bot:
        before = scrape(bot.url)
        bot.send_event(message_event(CHANNEL, (SEED / "rank-0.log").read_text()))
        slack.wait_for("chat.postMessage", timeout=30)
        bot.wait_idle()
        after = scrape(bot.url)
    assert v(after, "triage_agent_requests_total", outcome="unreachable") - \
        v(before, "triage_agent_requests_total", outcome="unreachable") == 1
    assert v(after, "triage_agent_reachable", host="gpu-h200-07") == 0


def _wait_health(url: str, status: int, timeout: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        got, _, body = get(url + "/healthz")
        if got == status:
            return json.loads(body)
        assert time.monotonic() < deadline, f"/healthz stayed {got}: {body!r}"
        time.sleep(0.1)


@pytest.mark.slow  # ~35 s: the link is declared down after 15 s without a pong, then reconnects
def test_healthz_is_503_while_socket_mode_is_down(slack: SlackStandIn, tmp_path: Path) -> None:
    env = bot_env(slack, tmp_path)
    del env["SLACK_SIGNING_SECRET"]
    env["SLACK_APP_TOKEN"] = slack.app_token
    bot = TriageBot(Settings.from_env(env))
    try:
        bot.connect_socket_mode()
        hooks = bot.serve_http(0, "127.0.0.1", slack=False)
        slack.wait_socket()
        up = _wait_health(hooks.url, 200)
        assert up["socket_mode"] is True and up["slack_connected"] is True
        assert v(scrape(hooks.url), "triage_socket_mode_connected") == 1
        # Slack drops the link and will not hand out a new one for now.
        slack.fail("apps.connections.open", status=200, retry_after=None, error="internal_error", times=10_000)
        slack.drop_sockets()
        down = _wait_health(hooks.url, 503, timeout=40)  # no pong for 15 s (runtime.SOCKET_STALE_S)
        assert down["slack_connected"] is False and down["store"] is True
        assert v(scrape(hooks.url), "triage_socket_mode_connected") == 0
        slack.clear_failures("apps.connections.open")  # Slack is back: the bot reconnects by itself
        assert _wait_health(hooks.url, 200, timeout=60)["slack_connected"] is True
    finally:
        bot.close()


def test_serve_json_logs_readiness_and_metrics(slack: SlackStandIn, tmp_path: Path) -> None:
    """`triage serve --socket --hooks-port N` as the systemd unit runs it (Type=notify), with JSON logs."""
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(30)
    env = clean_env(bot_env(slack, tmp_path))
    del env["SLACK_SIGNING_SECRET"]
    env.update(SLACK_APP_TOKEN=slack.app_token, TRIAGE_LOG_FORMAT="json", NOTIFY_SOCKET=str(tmp_path / "notify.sock"))
    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*TRIAGE, "serve", "--socket", "--hooks-port", str(port), "--host", "127.0.0.1"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        ready = notify.recv(4096).decode()
        assert ready.splitlines()[0] == "READY=1", ready
        assert f"hooks, /healthz and /metrics on http://127.0.0.1:{port}" in ready
        url = f"http://127.0.0.1:{port}"
        assert get(url + "/healthz")[0] == 200  # ready means connected and listening, no wait
        s = scrape(url)
        assert v(s, "triage_socket_mode_connected") == 1 and v(s, "triage_work_items", state="queued") == 0
        assert any(name == "triage_build_info" for name, _ in s)
        ev = message_event(CHANNEL, NCCL_999)
        slack.socket_send({"envelope_id": "env-1", "type": "events_api", "accepts_response_payload": False,
                           "retry_attempt": 0, "retry_reason": "", "payload": json.loads(event_body(ev))})
        slack.wait_for("chat.postMessage", timeout=30)
        deadline = time.monotonic() + 10
        while b'"signature": "nccl-cuda-999"' not in log_path.read_bytes():
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        assert v(scrape(url), "triage_diagnoses_total", signature="nccl-cuda-999", trigger="initial") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert notify.recv(4096).decode() == "STOPPING=1"
    notify.close()
    assert rc == 0, log_path.read_text()
    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    (diag,) = [r for r in records if r["message"].startswith("diagnosis ")]
    assert diag["signature"] == "nccl-cuda-999" and diag["incident"] == 1 and diag["trigger"] == "initial"
    assert isinstance(diag["latency_ms"], int) and diag["logger"] == "bot.service.workflow"
    assert slack.bot_token not in log_path.read_text() and slack.app_token not in log_path.read_text()


def test_json_log_lines_are_redacted_fields_included() -> None:
    from bot import logsafe
    from node_agent.logfmt import JsonFormatter

    logsafe.install()
    token = "xoxb-" + "1234567890-0987654321-" + "AbCdEfGhIjKlMnOpQrStUvWx"
    rec = logging.getLogger("bot.test").makeRecord(
        "bot.test", logging.INFO, __file__, 1, "posting with %s", (token,), None,
        extra={"note": f"retry with {token}", "incident": 7})
    out = json.loads(JsonFormatter(clean=logsafe.clean_message).format(rec))
    assert token not in json.dumps(out)
    assert "[REDACTED]" in out["message"] and "[REDACTED]" in out["note"] and out["incident"] == 7
