"""A hung NVML call costs one deadline and one worker, never the daemon."""

from __future__ import annotations

import time
from pathlib import Path

from agent_http import probe, request, result


def _read(path: Path) -> str:
    # Threads and children come and go while we look: a vanished entry is simply not live.
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _live_children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in _read(task / "children").split():
            stat = _read(Path(f"/proc/{child}/stat"))
            if stat and stat.rsplit(")", 1)[1].split()[0] != "Z":
                out.append(int(child))
    return out


def test_hung_call_is_a_failed_nvml_hang_finding_within_the_deadline(agents):
    agent = agents("hung-nvml", fresh=True)
    t0 = time.monotonic()
    answer = probe(agent, probes=["processes", "host", "infiniband"], deadline_s=3)
    elapsed = time.monotonic() - t0
    assert elapsed < 3.0, f"answered after {elapsed:.2f} s"
    procs = result(answer, "processes")
    assert procs["health"] == "failed"
    (hang,) = [f for f in procs["findings"] if f["code"] == "nvml-hang"]
    assert hang["gpu"] == 3 and hang["call"] == "nvmlDeviceGetMemoryInfo" and hang["retried"] is True
    assert hang["detail"].startswith("nvmlDeviceGetMemoryInfo on GPU 3 did not return in ")
    assert hang["detail"].endswith("s: the GPU or driver is hung")
    # Partial results: the other GPUs' memory and the host-file probes are still there.
    other = [g for g in procs["evidence"]["gpus"] if g["gpu"] != 3]
    assert len(other) == 7 and all(g["total_mib"] == 81559 for g in other)
    assert result(answer, "host")["health"] == "ok"
    assert result(answer, "infiniband")["health"] == "ok"

    # The daemon keeps answering: liveness at once, and a second probe without waiting on GPU 3 again.
    status, _ = request(agent.url, "GET", "/healthz", timeout=1)
    assert status == 200
    t1 = time.monotonic()
    again = result(probe(agent, probes=["processes"], deadline_s=3), "processes")
    assert time.monotonic() - t1 < 1.5
    (hang2,) = [f for f in again["findings"] if f["code"] == "nvml-hang"]
    assert hang2["gpu"] == 3 and hang2["retried"] is False and "quarantined" in hang2["detail"]
    inv = result(probe(agent, probes=["inventory"]), "inventory")
    assert inv["evidence"]["nvml_quarantine"][0]["gpu"] == 3
    # The stuck worker was killed and replaced: one live NVML worker, not a pile of them.
    assert len(_live_children(agent.pid)) == 1
    assert "nvmlDeviceGetMemoryInfo on GPU 3 did not return" in agent.log()


def test_configured_call_timeout_is_the_one_reported(agents):
    agent = agents("hung-nvml", env={"NODE_AGENT_NVML_CALL_TIMEOUT_S": "1"})
    t0 = time.monotonic()
    procs = result(probe(agent, probes=["processes"]), "processes")
    assert time.monotonic() - t0 < 3
    (hang,) = [f for f in procs["findings"] if f["code"] == "nvml-hang"]
    assert "did not return in 1 s: the GPU or driver is hung" in hang["detail"]
