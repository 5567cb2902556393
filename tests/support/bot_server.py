"""Run the real bot (TriageBot: store, service, Bolt app, HTTP server) on loopback for a test.

    with SlackStandIn() as slack, run_bot(slack, tmp_path) as bot:
        status, _ = bot.send_event(message_event("C0ONCALL", LOG))   # signed, over real HTTP
        slack.wait_for("chat.postMessage")
        status, body = bot.send_hook({"event_id": "e1", "job_id": "1234", ...})  # HMAC-signed webhook

`run_bot` writes the webhook secret to a 0600 file, points TRIAGE_DB at a fresh SQLite file in
`tmp_path` and SLACK_API_URL at the stand-in; `env` adds or overrides variables (TRIAGE_ROUTES,
TRIAGE_JOB_SOURCE, TRIAGE_AGENT_URL, ...). The bot listens on 127.0.0.1:<free port>.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.slack.runtime import TriageBot
from bot.slack.server import TriageHTTPServer
from bot.slack.settings import Settings
from bot.store import Store
from node_agent.auth import signed_headers

from .slack_requests import event_body, interaction_body, post, post_signed, slash_body
from .slack_standin import SlackStandIn

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
WEBHOOK_SECRET = b"webhook-shared-secret-for-tests-0123456789"
CHANNEL = "C0ONCALL"


def hook_headers(secret: bytes, body: bytes, now: float | None = None) -> dict[str, str]:
    """X-Triage-Timestamp / X-Triage-Signature for a webhook body (scheme v1, node_agent.auth)."""
    return {"Content-Type": "application/json", **signed_headers(secret, body, now)}


@dataclass
class RunningBot:
    bot: TriageBot
    server: TriageHTTPServer
    slack: SlackStandIn
    signing_secret: str
    webhook_secret: bytes | None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def events_url(self) -> str:
        return self.url + "/slack/events"

    @property
    def hooks_url(self) -> str:
        return self.url + "/hooks/job-failed"

    @property
    def store(self) -> Store:
        return self.bot.store

    def send_event(self, event: dict[str, Any], *, event_id: str | None = None, **kw: Any) -> tuple[int, bytes]:
        return post_signed(self.events_url, event_body(event, event_id=event_id), self.signing_secret, **kw)

    def send_command(self, text: str, **kw: Any) -> tuple[int, bytes]:
        body_kw = {k: kw.pop(k) for k in ("channel", "user", "response_url") if k in kw}
        return post_signed(self.events_url, slash_body(text, **body_kw), self.signing_secret,
                           content_type="application/x-www-form-urlencoded", **kw)

    def send_interaction(self, payload: dict[str, Any], **kw: Any) -> tuple[int, bytes]:
        return post_signed(self.events_url, interaction_body(payload), self.signing_secret,
                           content_type="application/x-www-form-urlencoded", **kw)

    def send_hook(self, payload: dict[str, Any] | bytes, *, secret: bytes | None = None,
                  headers: dict[str, str] | None = None, now: float | None = None) -> tuple[int, dict[str, Any]]:
        """POST /hooks/job-failed signed with `secret` (default: the bot's); `headers` replaces the signing."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        hdrs = headers if headers is not None else hook_headers(secret or self.webhook_secret or b"", body, now)
        status, raw = post(self.hooks_url, body, hdrs)
        try:
            return status, json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return status, {"raw": raw.decode("utf-8", "replace")}

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until the worker pool has nothing queued or running."""
        time.sleep(0.05)  # let a just-acked listener hand its work to the pool
        assert self.bot.wait_idle(timeout), "the bot's workers did not finish in time"


def bot_env(slack: SlackStandIn, tmp_path: Path, *, webhook_secret: bytes | None = WEBHOOK_SECRET,
            env: dict[str, str] | None = None) -> dict[str, str]:
    out = {
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "TRIAGE_DB": str(tmp_path / "triage.db"),
        "TRIAGE_CHANNEL": CHANNEL,
        "TRIAGE_WORKERS": "4",
    }
    if webhook_secret is not None:
        secret_file = tmp_path / "webhook.secret"
        secret_file.write_bytes(webhook_secret)
        os.chmod(secret_file, 0o600)
        out["TRIAGE_WEBHOOK_SECRET_FILE"] = str(secret_file)
    out.update(env or {})
    return out


@contextmanager
def run_bot(slack: SlackStandIn, tmp_path: Path, *, env: dict[str, str] | None = None,
            webhook_secret: bytes | None = WEBHOOK_SECRET) -> Iterator[RunningBot]:
    settings = Settings.from_env(bot_env(slack, tmp_path, webhook_secret=webhook_secret, env=env))
    bot = TriageBot(settings)
    server = bot.serve_http(0, "127.0.0.1")
    try:
        yield RunningBot(bot, server, slack, SIGNING_SECRET, webhook_secret)
    finally:
        bot.close(drain_s=30)
