from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.bot_server import RunningBot, run_bot
from tests.support.slack_standin import SlackStandIn


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    with SlackStandIn() as s:
        yield s


@pytest.fixture
def bot(slack: SlackStandIn, tmp_path: Path) -> Iterator[RunningBot]:
    with run_bot(slack, tmp_path) as b:
        yield b
