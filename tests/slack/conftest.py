from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slack.payload_check import call_problems
from tests.support.bot_server import RunningBot, run_bot
from tests.support.slack_standin import SlackStandIn


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    """The Web API stand-in; after the test, every payload the bot sent is checked as Slack would
    (slack_sdk.models validation, no empty block, escaped mrkdwn): 0 invalid payloads in the suite."""
    with SlackStandIn() as s:
        yield s
        problems = [p for c in s.calls for p in call_problems(c.method, c.params)]
        problems += [f"response_url: {p}" for r in s.responses for p in call_problems(
            "chat.postMessage", {"text": r.get("text"), "blocks": r.get("blocks")})]
        assert not problems, "invalid payloads:\n" + "\n".join(problems[:20])


@pytest.fixture
def bot(slack: SlackStandIn, tmp_path: Path) -> Iterator[RunningBot]:
    with run_bot(slack, tmp_path) as b:
        yield b
