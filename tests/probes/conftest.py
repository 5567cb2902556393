"""A small fleet of real simulated agents, one per loopback address (127.0.0.x act as hosts)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from node_agent.testing import RunningAgent, free_port, start_agent, write_secret

FLEET = {"127.0.0.2": "seed-8xh200", "127.0.0.3": "healthy-8xh100", "127.0.0.4": "xid79-gpu-lost",
         "127.0.0.5": "hung-nvml"}


@dataclass
class Fleet:
    port: int
    agents: dict[str, RunningAgent]
    secret_file: Path
    template: str


@pytest.fixture(autouse=True, scope="session")
def _allow_loopback_agents() -> Iterator[None]:
    # the fleet's agents run on 127.0.0.x, which the probe client refuses unless explicitly allowed
    mp = pytest.MonkeyPatch()
    mp.setenv("TRIAGE_AGENT_ALLOW", "127.0.0.0/8")
    yield
    mp.undo()


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("fleet")
    secret = write_secret(base / "fleet.secret", "fleet-secret-9f8e7d6c5b4a")
    port = free_port([*FLEET, "127.0.0.9"])
    agents = {}
    try:
        for addr, scenario in FLEET.items():
            agents[addr] = start_agent(secret, base, scenario, address=addr, port=port, name=f"sim-{addr}")
        yield Fleet(port, agents, secret, f"http://{{host}}:{port}")
    finally:
        for agent in agents.values():
            agent.stop()
