"""Real `node-agent serve` processes on loopback, in simulated mode, and signed HTTP helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_http import SECRET

from node_agent.testing import RunningAgent, start_agent, write_secret


@pytest.fixture(scope="session")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_secret(tmp_path_factory.mktemp("secret") / "agent.secret", SECRET)


@pytest.fixture(scope="session")
def agents(tmp_path_factory: pytest.TempPathFactory, secret_file: Path) -> Iterator[Callable[..., RunningAgent]]:
    """Start (or reuse) one agent per scenario/options for the whole session; all stopped at the end."""
    started: dict[tuple[Any, ...], RunningAgent] = {}
    log_dir = tmp_path_factory.mktemp("agent-logs")

    def get(scenario: str = "healthy-8xh100", fresh: bool = False, **kw: Any) -> RunningAgent:
        key = (scenario, tuple(sorted((k, str(v)) for k, v in kw.items())))
        if fresh or key not in started or started[key].proc.poll() is not None:
            agent = start_agent(secret_file, log_dir, scenario, **kw)
            if fresh:
                key = (*key, agent.pid)
            started[key] = agent
        return started[key]

    yield get
    for agent in started.values():
        agent.stop()

