"""Socket Mode: the bot dials the stand-in's WebSocket with the app token; no public URL needed."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qsl

from bot.slack.runtime import TriageBot
from bot.slack.settings import Settings
from tests.slack.logs import NCCL_999
from tests.support.bot_server import CHANNEL, bot_env
from tests.support.slack_requests import event_body, message_event, slash_body
from tests.support.slack_standin import SlackStandIn


def test_events_and_commands_over_socket_mode(slack: SlackStandIn, tmp_path: Path) -> None:
    env = bot_env(slack, tmp_path)
    del env["SLACK_SIGNING_SECRET"]
    env["SLACK_APP_TOKEN"] = slack.app_token
    bot = TriageBot(Settings.from_env(env))
    try:
        bot.connect_socket_mode()
        hooks = bot.serve_http(0, "127.0.0.1", slack=False)  # `--hooks-port`: webhook + healthz only
        slack.wait_socket()
        assert slack.calls_to("apps.connections.open")[0].token == slack.app_token

        ev = message_event(CHANNEL, NCCL_999)
        slack.socket_send({"envelope_id": "env-1", "type": "events_api", "accepts_response_payload": False,
                           "retry_attempt": 0, "retry_reason": "", "payload": json.loads(event_body(ev))})
        assert slack.wait_socket_ack("env-1")["envelope_id"] == "env-1"
        post = slack.wait_for("chat.postMessage")[0]
        assert post.params["thread_ts"] == ev["ts"] and "nccl-cuda-999" in post.params["text"]

        form = dict(parse_qsl(slash_body("", response_url=slack.response_url()).decode()))
        slack.socket_send({"envelope_id": "env-2", "type": "slash_commands", "accepts_response_payload": True,
                           "payload": form})
        ack = slack.wait_socket_ack("env-2")
        assert "/diagnose 1234" in json.dumps(ack.get("payload"))  # help, in the ack itself

        # Without a signing secret the HTTP side serves no /slack/events, only the hooks and health.
        import urllib.error
        import urllib.request

        req = urllib.request.Request(hooks.url + "/slack/events", data=b"{}", method="POST")
        try:
            urllib.request.urlopen(req, timeout=5)
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
        with urllib.request.urlopen(hooks.url + "/healthz", timeout=5) as resp:
            assert json.loads(resp.read())["socket_mode"] is True
    finally:
        bot.close()
