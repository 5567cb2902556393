"""`node-agent probe` and `node-agent scenarios` as a user runs them."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys

import pytest

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH", "")]))}


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "node_agent", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver")
def test_probe_on_a_host_without_nvml_is_a_clear_finding_not_a_traceback():
    p = run("probe", "--json")
    assert "Traceback" not in p.stderr
    answer = json.loads(p.stdout)
    assert answer["simulated"] is False
    inv = next(r for r in answer["results"] if r["probe"] == "inventory")
    assert inv["health"] == "failed"
    assert [f["code"] for f in inv["findings"]] == ["nvml-unavailable"]
    assert "libnvidia-ml.so.1" in inv["reason"]
    assert p.returncode == 1  # a failed probe: scripts (Slurm prolog, health checks) can act on it
    host = next(r for r in answer["results"] if r["probe"] == "host")
    assert host["health"] in ("ok", "degraded") and host["evidence"]["disks"]


def test_probe_simulated_text_report():
    p = run("probe", "--simulate", "seed-8xh200", "--job-id", "1234", "--job-gpus", "0,1,2,3", "processes", "ecc")
    assert p.returncode == 0, p.stderr
    assert "SIMULATED (seed-8xh200)" in p.stdout
    assert "DEGRADED  processes  GPUs 0, 2, 3 hold processes that are not the job's" in p.stdout
    assert "python3.10 (pid 4242, user alice) holds 55.0 GiB on GPU 0" in p.stdout
    assert "OK        ecc" in p.stdout


def test_probe_rejects_unknown_probe_names():
    p = run("probe", "--simulate", "healthy-8xh100", "gpu-vibes")
    assert p.returncode == 2 and "unknown probe(s) gpu-vibes" in p.stderr


def test_probe_with_a_missing_scenario_says_which_exist():
    p = run("probe", "--simulate", "no-such-scenario")
    assert p.returncode == 2 and "unknown scenario 'no-such-scenario'" in p.stderr and "seed-8xh200" in p.stderr


def test_scenarios_lists_the_built_in_ones():
    p = run("scenarios")
    names = {line.split()[0] for line in p.stdout.splitlines()}
    assert {"healthy-8xh100", "seed-8xh200", "xid79-gpu-lost", "dbe-row-remap", "hung-nvml", "driver-not-loaded",
            "driver-mismatch", "fabric-manager-down"} <= names
