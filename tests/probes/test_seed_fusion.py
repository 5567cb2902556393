"""The seed incident end to end: `triage diagnose --probe` against a simulated seed node ranks
memory pressure from the named foreign processes first, cites GPUs and ranks, says Xid/ECC were
checked and clean, and notes the IB ports; an unreachable agent is itself evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent.testing import free_port, running_agent, write_agent_map, write_secret

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed-nccl-999"


def _diagnose(*args: str) -> tuple[dict, str]:
    p = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", *args, str(SEED)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return (json.loads(p.stdout) if "--json" in args else {}), p.stdout


@pytest.fixture(scope="module")
def seed_agent(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    base = tmp_path_factory.mktemp("seed-agent")
    with running_agent(base, "seed-8xh200", "gpu-h200-07", address="127.0.0.7", port=free_port(["127.0.0.7"]),
                       secret="seed-secret-0a1b2c3d4e5f") as (agent, secret):
        yield secret, write_agent_map(base / "agents.yaml", {"gpu-h200-07": agent.url})


def test_seed_incident_probe_ranks_foreign_processes_first(seed_agent) -> None:  # noqa: ANN001
    secret, amap = seed_agent
    rep, _ = _diagnose("--json", "--probe", "--agent-map", str(amap), "--agent-secret-file", str(secret))
    top = rep["diagnoses"][0]
    assert top["signature"] == "nccl-cuda-999"
    assert (rep["initiating"]["rank"], rep["initiating"]["host"]) == (0, "gpu-h200-07")
    first = top["causes"][0]
    assert first["id"] == "gpu-memory-pressure"
    joined = " ".join(first["evidence_for"])
    assert "python3.10 (pid 4242" in joined and "55.0 GiB on GPU 0" in joined
    assert "GPU 0 is rank 0's" in joined and "GPU 2 is rank 2's" in joined and "tritonserver" in joined
    faulted = {c["id"]: c for c in top["causes"]}["gpu-faulted"]
    assert any("probe xid clean" in x for x in faulted["evidence_against"])
    assert any("probe ecc clean" in x for x in faulted["evidence_against"])
    assert faulted["score"] < first["score"]
    answer = rep["probes"]["gpu-h200-07"]
    assert answer["simulated"] is True and answer["reachable"] is True
    health = {r["probe"]: r["health"] for r in answer["results"]}
    assert health["infiniband"] == "degraded" and health["xid"] == "ok" and health["ecc"] == "ok"
    assert "gpu-h200-07" in rep["next_action"]


def test_seed_incident_human_form_says_what_was_ruled_out(seed_agent) -> None:  # noqa: ANN001
    secret, amap = seed_agent
    _, out = _diagnose("--probe", "--agent-map", str(amap), "--agent-secret-file", str(secret))
    assert "Checked and ruled out:" in out and "probe xid clean on gpu-h200-07" in out
    assert "gpu-h200-07 infiniband: degraded" in out


def test_without_probes_the_causes_stay_open_and_a_question_is_asked() -> None:
    rep, _ = _diagnose("--json")
    top = rep["diagnoses"][0]
    assert all(not c["evidence_against"] for c in top["causes"])
    assert rep["missing_facts"] and "gpu-h200-07" in rep["missing_facts"][0]
    assert rep["probes"] == {}


def test_unreachable_agent_is_evidence_not_an_error(tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "s", "seed-secret-0a1b2c3d4e5f")
    port = free_port(["127.0.0.8"])
    amap = tmp_path / "agents.yaml"
    amap.write_text(f"gpu-h200-07: http://127.0.0.8:{port}\n")  # nothing listens there
    rep, _ = _diagnose("--json", "--probe", "--agent-map", str(amap), "--agent-secret-file", str(secret),
                       "--probe-deadline", "1")
    answer = rep["probes"]["gpu-h200-07"]
    assert answer["reachable"] is False and answer["error"]
    assert rep["diagnoses"][0]["signature"] == "nccl-cuda-999"
