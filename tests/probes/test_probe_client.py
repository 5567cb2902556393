"""probe_hosts against real agents: fan-out, deadlines, unreachable and rejected agents as evidence."""

from __future__ import annotations

import os
import signal
import time

import pytest

from bot.probes.client import AgentDirectory, DirectoryError, fetch_catalogue, probe_hosts
from node_agent.auth import load_secret
from node_agent.testing import start_agent


def test_fan_out_to_several_agents(fleet):
    directory = AgentDirectory(fleet.template)
    secret = load_secret(fleet.secret_file)
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    t0 = time.monotonic()
    reports = probe_hosts(directory, hosts, secret, probes=["processes", "xid", "ecc"], job_id="1234",
                          job_gpus_by_host={"127.0.0.2": [0, 1, 2, 3]}, deadline_s=5)
    assert time.monotonic() - t0 < 5
    assert list(reports) == hosts
    assert all(r.reachable and r.error is None and r.simulated for r in reports.values())
    seed = reports["127.0.0.2"]
    assert seed.result("processes")["reason"] == "GPUs 0, 2, 3 hold processes that are not the job's"
    assert reports["127.0.0.3"].result("processes")["health"] == "ok"
    assert any(f["code"] == "xid" and f["xid"] == 79 for f in reports["127.0.0.4"].findings())
    d = seed.to_dict()
    assert {"reachable", "error", "url", "latency_ms", "results", "host", "simulated", "scenario"} <= set(d)
    assert d["url"] == f"http://127.0.0.2:{fleet.port}" and d["host"] == "sim-127.0.0.2" and d["latency_ms"] >= 0


def test_agent_not_running_is_reported_not_raised(fleet):
    reports = probe_hosts(AgentDirectory(fleet.template), ["127.0.0.9", "127.0.0.3"], load_secret(fleet.secret_file),
                          probes=["host"], deadline_s=2)
    down = reports["127.0.0.9"]
    assert down.reachable is False and "refused the connection" in down.error
    assert down.to_dict()["results"] == [] and down.to_dict()["reachable"] is False
    assert reports["127.0.0.3"].reachable


def test_hung_agent_is_reported_within_the_deadline(tmp_path, fleet):
    agent = start_agent(fleet.secret_file, tmp_path, "healthy-8xh100", address="127.0.0.6", port=fleet.port)
    try:
        os.kill(agent.pid, signal.SIGSTOP)  # the kernel still accepts connections; nobody answers
        t0 = time.monotonic()
        reports = probe_hosts(AgentDirectory(fleet.template), ["127.0.0.6"], load_secret(fleet.secret_file),
                              deadline_s=1)
        elapsed = time.monotonic() - t0
        assert reports["127.0.0.6"].reachable is False
        assert reports["127.0.0.6"].error == "127.0.0.6 did not answer in 1 s"
        assert elapsed < 1.8
    finally:
        agent.stop()


def test_wrong_secret_is_an_unreachable_report_with_the_reason(fleet):
    (report,) = probe_hosts(AgentDirectory(fleet.template), ["127.0.0.3"], b"wrong", deadline_s=3).values()
    assert report.reachable is False and report.status == 401
    assert "rejected the request" in report.error and "signature mismatch" in report.error
    assert report.results == []


def test_hung_nvml_answers_inside_the_client_deadline(fleet):
    t0 = time.monotonic()
    (report,) = probe_hosts(AgentDirectory(fleet.template), ["127.0.0.5"], load_secret(fleet.secret_file),
                            probes=["processes", "host"], deadline_s=3).values()
    assert time.monotonic() - t0 < 3
    assert report.reachable, report.error
    assert report.result("processes")["health"] == "failed"
    assert any(f["code"] == "nvml-hang" and f["gpu"] == 3 for f in report.findings())
    assert report.result("host")["health"] == "ok"


def test_same_request_twice_in_a_second_is_not_a_replay(fleet):
    directory, secret = AgentDirectory(fleet.template), load_secret(fleet.secret_file)
    first = probe_hosts(directory, ["127.0.0.3"], secret, probes=["host"])
    second = probe_hosts(directory, ["127.0.0.3"], secret, probes=["host"])
    assert first["127.0.0.3"].reachable and second["127.0.0.3"].reachable


def test_agent_map_overrides_template_by_host_name(tmp_path, fleet):
    amap = tmp_path / "agents.yaml"
    amap.write_text(f"gpu-node-07: http://127.0.0.2:{fleet.port}\ngpu-node-08: http://127.0.0.3:{fleet.port}/\n")
    directory = AgentDirectory.from_files("http://{host}.cluster.internal:9477", amap)
    assert directory.url_for("gpu-node-07.cluster") == f"http://127.0.0.2:{fleet.port}"
    assert directory.url_for("gpu-node-99") == "http://gpu-node-99.cluster.internal:9477"
    reports = probe_hosts(directory, ["gpu-node-07", "gpu-node-08"], load_secret(fleet.secret_file), probes=["host"])
    assert reports["gpu-node-07"].answer["scenario"] == "seed-8xh200"
    assert reports["gpu-node-08"].answer["scenario"] == "healthy-8xh100"


def test_fixed_url_template(fleet):
    directory = AgentDirectory(f"http://127.0.0.3:{fleet.port}")
    assert directory.url_for("anything") == f"http://127.0.0.3:{fleet.port}"


@pytest.mark.parametrize("bad", ["127.0.0.1:9477", "ftp://{host}/", "http://"])
def test_bad_templates_are_rejected(bad):
    with pytest.raises(DirectoryError):
        AgentDirectory(bad)


def test_bad_map_file(tmp_path):
    amap = tmp_path / "agents.yaml"
    amap.write_text("- just\n- a list\n")
    with pytest.raises(DirectoryError, match="mapping of host: url"):
        AgentDirectory.from_files("http://{host}:9477", amap)


def test_catalogue(fleet):
    report = fetch_catalogue(AgentDirectory(fleet.template), "127.0.0.3", load_secret(fleet.secret_file))
    assert report.reachable and len(report.answer["probes"]) == 10
