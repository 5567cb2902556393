"""Slack answering 429 / 5xx, and failures inside the bot reaching the user in the thread."""

from __future__ import annotations

import time

from tests.slack.logs import NCCL_999
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import message_event
from tests.support.slack_standin import SlackStandIn


def test_rate_limited_then_posted_once(bot: RunningBot, slack: SlackStandIn) -> None:
    slack.fail("chat.postMessage", status=429, retry_after=1)
    ev = message_event(CHANNEL, NCCL_999)
    t0 = time.monotonic()
    bot.send_event(ev)
    calls = slack.wait_for("chat.postMessage", n=2)
    bot.wait_idle()
    assert calls[1].at - calls[0].at >= 1.0  # waited out Retry-After
    assert len(slack.bot_messages(CHANNEL)) == 1  # one answer in the thread, not two
    assert slack.bot_messages(CHANNEL)[0]["thread_ts"] == ev["ts"]
    assert time.monotonic() - t0 < 10


def test_server_errors_are_retried(bot: RunningBot, slack: SlackStandIn) -> None:
    slack.fail("chat.postMessage", status=503, retry_after=None, error="service_unavailable")
    bot.send_event(message_event(CHANNEL, NCCL_999))
    slack.wait_for("chat.postMessage", n=2)
    bot.wait_idle()
    assert len(slack.bot_messages(CHANNEL)) == 1


def test_a_refused_layout_is_sent_in_its_text_form(bot: RunningBot, slack: SlackStandIn) -> None:
    # Slack refuses the answer's layout: the answer still arrives, as text, in the thread.
    slack.fail("chat.postMessage", status=200, retry_after=None, error="invalid_blocks", times=1)
    ev = message_event(CHANNEL, NCCL_999)
    bot.send_event(ev)
    calls = slack.wait_for("chat.postMessage", n=2)
    bot.wait_idle()
    assert calls[1].params["thread_ts"] == ev["ts"]
    assert not calls[1].params.get("blocks") and "nccl-cuda-999" in calls[1].params["text"]
    assert len(slack.bot_messages(CHANNEL)) == 1


def test_ack_is_immediate_while_the_workers_are_busy(bot: RunningBot, slack: SlackStandIn) -> None:
    # Every Slack call is slow (rate limited): workers stall, yet Slack's requests are acked at once.
    for _ in range(6):
        slack.fail("chat.postMessage", status=429, retry_after=2)
    for _ in range(6):
        bot.send_event(message_event(CHANNEL, NCCL_999))
    t0 = time.monotonic()
    status, _ = bot.send_event(message_event(CHANNEL, NCCL_999))
    assert status == 200 and time.monotonic() - t0 < 0.5
    bot.wait_idle(60)
