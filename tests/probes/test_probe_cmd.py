"""`triage probe` as a user runs it (python -m bot.cli.main probe ...)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def triage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "bot.cli.main", "probe", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=ROOT)


def test_human_report_with_an_unreachable_host(fleet):
    p = triage("--agent-url", fleet.template, "--agent-secret-file", str(fleet.secret_file), "--job-id", "1234",
               "--job-gpus", "0,1,2,3", "--probes", "processes,ecc,xid", "--deadline", "3",
               "127.0.0.2", "127.0.0.9")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "127.0.0.2  (http://127.0.0.2:" in out and "SIMULATED: seed-8xh200" in out
    assert "DEGRADED  processes  GPUs 0, 2, 3 hold processes that are not the job's" in out
    assert "foreign-process: python3.10 (pid 4242, user alice) holds 55.0 GiB on GPU 0" in out
    assert "-> Free GPUs 0, 2, 3 before resubmitting" in out
    assert "OK        ecc" in out and "OK        xid" in out
    assert "127.0.0.9  UNREACHABLE  127.0.0.9 refused the connection" in out


def test_json_output(fleet):
    p = triage("--json", "--agent-url", fleet.template, "--agent-secret-file", str(fleet.secret_file),
               "--probes", "inventory", "127.0.0.4", "127.0.0.9")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert set(data["probes"]) == {"127.0.0.4", "127.0.0.9"}
    lost = data["probes"]["127.0.0.4"]
    assert lost["reachable"] is True and lost["results"][0]["findings"][0]["code"] == "gpu-lost"
    assert data["probes"]["127.0.0.9"]["reachable"] is False


def test_usage_errors_exit_2(fleet, tmp_path):
    p = triage("--agent-secret-file", str(fleet.secret_file), "127.0.0.2")
    assert p.returncode == 2 and "--agent-url" in p.stderr
    loose = tmp_path / "loose.secret"
    loose.write_text("x")
    loose.chmod(0o644)
    p = triage("--agent-url", fleet.template, "--agent-secret-file", str(loose), "127.0.0.2")
    assert p.returncode == 2 and "world-readable" in p.stderr
    p = triage("--agent-url", "not-a-url", "--agent-secret-file", str(fleet.secret_file), "127.0.0.2")
    assert p.returncode == 2 and "not an http(s):// URL" in p.stderr
