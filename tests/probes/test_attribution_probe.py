"""The whole loop on NCCL lines as real logs print them (`host:pid:tid [dev] file.cc:line NCCL WARN`):
the header gives host, pid and GPU, attribution names the process that started it, the probes go
to that host, and the agent's answer re-ranks the causes. A container id with no agent mapped is
named in the answer with the reason it was not probed, and no request goes to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent.testing import free_port, running_agent, write_agent_map

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "fixtures" / "attribution" / "ib-two-hosts"


def _diagnose(*args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", *args, str(LOG)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    base = tmp_path_factory.mktemp("ib-agent")
    with running_agent(base, "seed-8xh200", "gpu-h200-07", address="127.0.0.11", port=free_port(["127.0.0.11"]),
                       secret="ib-secret-5e6f7a8b9c0d") as (running, secret):
        yield secret, write_agent_map(base / "agents.yaml", {"gpu-h200-07": running.url})


def test_header_with_source_location_gives_host_pid_and_gpu() -> None:
    rep = json.loads(_diagnose("--json").stdout)
    top = rep["diagnoses"][0]
    assert top["signature"] == "nccl-ib-completion-error"
    ev = next(e for e in top["evidence"] if e["host"] == "gpu-h200-07")
    assert (ev["pid"], ev["gpu"], ev["rank"]) == (48214, 3, 11)  # rank from the same pid's Init COMPLETE line
    init = rep["initiating"]
    # the status=12 side started it; the status=5 flush on the other host follows
    assert (init["host"], init["rank"], init["gpu"], init["pid"]) == ("gpu-h200-07", 11, 3, 48214)
    asked = {h for p in top["probes"] for h in p["hosts"]}
    assert "gpu-h200-07" in asked


def test_probe_of_the_initiating_host_is_fused_into_the_causes(agent) -> None:  # noqa: ANN001
    secret, amap = agent
    rep = json.loads(_diagnose("--json", "--probe", "--agent-map", str(amap), "--agent-secret-file", str(secret),
                               "--agent-url", "http://{host}:9").stdout)
    answer = rep["probes"]["gpu-h200-07"]
    assert answer["reachable"] is True and answer["simulated"] is True
    top = rep["diagnoses"][0]
    first = top["causes"][0]
    assert first["id"] in ("link-flap", "link-state")
    assert any("gpu-h200-07" in x and "is DOWN" in x for x in first["evidence_for"]), first
    skipped = rep["probes"]["3f2a9c1b7d4e"]
    assert skipped["probed"] is False and skipped["reachable"] is False
    assert "container id" in skipped["error"] and "agent map" in skipped["error"]
    assert "url" not in skipped  # no request was made to it


def test_human_form_names_the_starter_once_and_why_a_host_was_not_probed(agent) -> None:  # noqa: ANN001
    secret, amap = agent
    out = _diagnose("--probe", "--agent-map", str(amap), "--agent-secret-file", str(secret),
                    "--agent-url", "http://{host}:9").stdout
    started = [line for line in out.splitlines() if line.startswith("Started by:")]
    assert started == [started[0]] and "rank 11 on gpu-h200-07, GPU 3, pid 48214" in started[0]
    assert "3f2a9c1b7d4e: not probed: 3f2a9c1b7d4e looks like a container id" in out
