"""`triage serve` as an operator runs it: a real process, configured by environment variables."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.slack.logs import NCCL_999
from tests.support.bot_server import CHANNEL, SIGNING_SECRET, bot_env
from tests.support.slack_requests import event_body, message_event, post_signed
from tests.support.slack_standin import SlackStandIn

TRIAGE = [sys.executable, "-m", "bot.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
    keep.setdefault("TRIAGE_CACHE_DIR", os.environ.get("TRIAGE_CACHE_DIR", "/tmp"))
    return {**keep, **extra}


def test_http_mode_process_answers_and_stops_cleanly(slack: SlackStandIn, tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(bot_env(slack, tmp_path))
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([*TRIAGE, "serve", "--http", "--port", str(port), "--host", "127.0.0.1"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/slack/events"
        deadline = time.monotonic() + 30
        while b"listening on" not in (tmp_path / "serve.log").read_bytes():
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "triage serve did not start"
            time.sleep(0.05)
        ev = message_event(CHANNEL, NCCL_999)
        assert post_signed(url, event_body(ev), SIGNING_SECRET)[0] == 200
        post = slack.wait_for("chat.postMessage", timeout=30)[0]
        assert post.params["thread_ts"] == ev["ts"] and "nccl-cuda-999" in post.params["text"]
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        log.close()
    assert rc == 0, (tmp_path / "serve.log").read_text()
    assert Path(env["TRIAGE_DB"]).exists()


def test_missing_settings_are_named(tmp_path: Path) -> None:
    p = subprocess.run([*TRIAGE, "serve", "--http"], env=clean_env({"TRIAGE_DB": str(tmp_path / "x.db")}),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "SLACK_BOT_TOKEN is not set" in p.stderr
    p = subprocess.run([*TRIAGE, "serve", "--http"], env=clean_env({"SLACK_BOT_TOKEN": "xoxb-1"}),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "SLACK_SIGNING_SECRET" in p.stderr
    p = subprocess.run([*TRIAGE, "serve", "--socket"], env=clean_env({"SLACK_BOT_TOKEN": "xoxb-1"}),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "SLACK_APP_TOKEN" in p.stderr
    secret = tmp_path / "hook.secret"
    secret.write_text("s3cret")
    os.chmod(secret, 0o644)
    p = subprocess.run([*TRIAGE, "serve", "--http"],
                       env=clean_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "x",
                                      "TRIAGE_DB": str(tmp_path / "x.db"), "TRIAGE_WEBHOOK_SECRET_FILE": str(secret),
                                      "SLACK_API_URL": "http://127.0.0.1:9/api/"}),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "world-readable" in p.stderr


def test_a_rejected_token_stops_start_up(slack: SlackStandIn, tmp_path: Path) -> None:
    env = clean_env({**bot_env(slack, tmp_path), "SLACK_BOT_TOKEN": "xoxb-revoked-token"})
    p = subprocess.run([*TRIAGE, "serve", "--http", "--port", "0"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "cannot start with this Slack token" in p.stderr and "invalid_auth" in p.stderr
