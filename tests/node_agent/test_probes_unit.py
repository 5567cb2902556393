"""Each probe against the fake NVML and a fixture root, through user-written scenario files (extends/overrides)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import Agent
from node_agent.config import AgentConfig
from node_agent.request import ProbeRequest


def run_probe(tmp_path: Path, name: str, scenario: dict[str, Any] | str, **req: Any) -> dict[str, Any]:
    if isinstance(scenario, dict):
        path = tmp_path / f"custom-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(scenario))
        scenario = str(path)
    agent = Agent(AgentConfig(simulate=scenario))
    try:
        answer = agent.probe(ProbeRequest(probes=[name], **req))
    finally:
        agent.close()
    (res,) = answer["results"]
    assert res["simulated"] is True
    return res


def custom(**patch: Any) -> dict[str, Any]:
    return {"extends": "healthy-8xh100", **patch}


def codes(res: dict[str, Any]) -> set[tuple[str, Any]]:
    return {(f["code"], f["gpu"]) for f in res["findings"]}


def test_inventory_count_modes_and_mig(tmp_path):
    res = run_probe(tmp_path, "inventory", custom(
        nvml={"count": 7},
        gpu_overrides={"1": {"persistence": 0}, "2": {"compute_mode": 3}, "4": {"mig": [1, 1]}}))
    found = {f["code"] for f in res["findings"]}
    assert found == {"gpu-count-mismatch", "persistence-off", "compute-mode-exclusive", "mig-enabled"}
    assert res["health"] == "failed"
    assert res["evidence"]["count"] == 7 and res["evidence"]["expected"] == 8


def test_processes_job_named_by_pid_includes_its_children(tmp_path):
    # pid 4200 is job 998's launcher; 4242 and 4243 are its children on GPU 0.
    res = run_probe(tmp_path, "processes", "seed-8xh200", job_pids=[4200], job_gpus=[0, 2])
    foreign = {(f["pid"], f["gpu"]) for f in res["findings"] if f["code"] == "foreign-process"}
    assert foreign == {(7301, 2)}
    gpu0 = next(g for g in res["evidence"]["gpus"] if g["gpu"] == 0)
    assert all(p["job"] for p in gpu0["processes"])


def test_processes_without_a_job_flags_job_gpus_not_in_job_pids(tmp_path):
    res = run_probe(tmp_path, "processes", "seed-8xh200", job_gpus=[1, 3])
    assert {(f["code"], f["gpu"], f.get("pid")) for f in res["findings"] if f["code"] == "foreign-process"} == {
        ("foreign-process", 3, 7301)}


def test_processes_gpu_selection_by_uuid(tmp_path):
    res = run_probe(tmp_path, "processes", "seed-8xh200", gpus=["GPU-2b3f9e2c-81d4-4a6e-b0f2-5c7d9e1a3b02"])
    assert [g["gpu"] for g in res["evidence"]["gpus"]] == [2]


def test_process_not_visible_in_pid_namespace_is_still_reported(tmp_path):
    res = run_probe(tmp_path, "processes", custom(gpu_overrides={"0": {"memory_used_mib": 2048,
                                                                    "processes": [{"pid": 31337, "used_mib": 2000}]}}),
                    job_id="5", job_gpus=[0])
    (f,) = [f for f in res["findings"] if f["code"] == "foreign-process"]
    assert f["owner"] == "unknown" and "host PID namespace" in f["detail"]


def test_ecc_sbe_high_remap_failure_and_reset_required(tmp_path):
    res = run_probe(tmp_path, "ecc", custom(gpu_overrides={
        "0": {"ecc": {"volatile": {"corrected": 5000, "uncorrected": 0}}},
        "1": {"remapped_rows": [3, 8, 0, 1]},
        "6": {"errors": {"*": "ResetRequired"}}}))
    assert codes(res) == {("ecc-sbe-high", 0), ("row-remap-failed", 1), ("reset-required", 6)}
    assert res["health"] == "failed"
    assert "RMA" in res["suggested_action"] or "nvidia-smi -r" in res["suggested_action"]


def test_thermal_hw_slowdown_and_power_cap(tmp_path):
    res = run_probe(tmp_path, "thermal", custom(gpu_overrides={
        "2": {"clocks_event_reasons": 0x48, "temperature_c": 89}, "5": {"clocks_event_reasons": 0x4}}))
    assert codes(res) == {("thermal-throttle", 2), ("hw-slowdown", 2), ("power-throttle", 5)}
    assert res["health"] == "degraded"


def test_pcie_width_and_replays(tmp_path):
    res = run_probe(tmp_path, "pcie", custom(gpu_overrides={
        "1": {"pcie": {"width": 8}}, "6": {"pcie": {"replays": 4321}}, "7": {"pcie": {"gen": 1}}}))
    assert codes(res) == {("pcie-link-degraded", 1), ("pcie-replays", 6)}  # gen 1 at idle is power saving


def test_nvlink_down_and_errors(tmp_path):
    res = run_probe(tmp_path, "nvlink", custom(gpu_overrides={
        "0": {"nvlink": {"down": [3, 4]}}, "4": {"nvlink": {"errors": {"7": {"recovery": 2, "crc_flit": 10}}}},
        "5": {"nvlink": {"down": list(range(18))}}}))
    by = {(f["code"], f["gpu"]): f for f in res["findings"]}
    assert set(by) == {("nvlink-down", 0), ("nvlink-errors", 4), ("nvlink-down", 5)}
    assert by[("nvlink-down", 0)]["severity"] == "warning" and by[("nvlink-down", 5)]["severity"] == "critical"
    assert by[("nvlink-errors", 4)]["links"] == [7]


def test_pcie_only_gpus_have_no_nvlink(tmp_path):
    res = run_probe(tmp_path, "nvlink", custom(nvml={"gpu_defaults": {"nvlink": {"links": 0}}}))
    assert res["health"] == "ok" and "no NVLink" in res["reason"]


def test_fabric_unhealthy_summary_and_pcie_system(tmp_path):
    res = run_probe(tmp_path, "fabric", custom(gpu_overrides={"3": {"fabric": {"health_summary": 3,
                                                                               "health_mask": 1}}}))
    assert codes(res) == {("fabric-not-ready", 3)} and res["health"] == "degraded"
    res = run_probe(tmp_path, "fabric", custom(nvml={"gpu_defaults": {"fabric": None}},
                                               host={"services": {"nvidia-fabricmanager": "inactive"}}))
    assert res["health"] == "ok" and res["evidence"]["nvswitch_system"] is False


def test_infiniband_error_counters(tmp_path):
    scen = json.loads((Path(__file__).parents[2] / "node_agent/scenarios/healthy-8xh100.json").read_text())
    ib = scen["host"]["infiniband"]
    ib["mlx5_4"]["ports"]["1"]["counters"].update({"symbol_error": 512, "link_downed": 3})
    ib["mlx5_5"]["ports"]["1"]["counters"]["port_rcv_errors"] = "N/A (no PMA)"
    res = run_probe(tmp_path, "infiniband", custom(host={"infiniband": ib}))
    (f,) = res["findings"]
    assert f["code"] == "ib-port-errors" and f["device"] == "mlx5_4" and f["counters"] == {"symbol_error": 512}


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ({"fs": {"/dev/shm": {"total_gib": 0.0625, "used_gib": 0.01}}}, {"shm-small"}),
        ({"fs": {"/dev/shm": {"total_gib": 64, "used_gib": 63.9}}}, {"shm-full"}),
        ({"fs": {"/": {"total_gib": 800, "used_gib": 799.9}}}, {"disk-full"}),
        ({"memory": {"total_gib": 2015, "available_gib": 20}}, {"host-memory-low"}),
    ],
)
def test_host_resources(tmp_path, host, expected):
    res = run_probe(tmp_path, "host", custom(host=host))
    assert {f["code"] for f in res["findings"]} == expected


def test_host_oom_kill_of_a_job_process_in_the_window(tmp_path):
    kmsg = [{"t": -50, "text": "Out of memory: Killed process 4711 (python3) total-vm:1234kB, anon-rss:999kB"},
            {"t": -40, "text": "oom-kill:constraint=CONSTRAINT_MEMCG,task=pt_data_worker,pid=4800,uid=1002"},
            {"t": -90000, "text": "Out of memory: Killed process 12 (old) total-vm:1kB"}]
    now = time.time()
    res = run_probe(tmp_path, "host", custom(host={"kmsg": kmsg}), job_pids=[4711], window=(now - 600, now + 60))
    kills = {f["pid"]: f for f in res["findings"]}
    assert set(kills) == {4711, 4800}, "the kill outside the window is not reported"
    assert kills[4711]["severity"] == "critical" and kills[4711]["job_process"] is True
    assert res["health"] == "failed"


def test_xid_window_excludes_old_records(tmp_path):
    now = time.time()
    res = run_probe(tmp_path, "xid", "xid79-gpu-lost", window=(now - 60, now + 60))
    assert res["health"] == "ok" and res["findings"] == []
    assert res["evidence"]["kernel_log_source"] == "kmsg"


def test_xid_45_follows_the_earlier_xid(tmp_path):
    kmsg = [{"t": -30, "text": "NVRM: Xid (PCI:0000:18:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x0)"},
            {"t": -29, "text": "NVRM: Xid (PCI:0000:18:00): 45, pid=5521, name=python3, Ch 00000001 caused by "
                               "previous Xid 149"}]
    res = run_probe(tmp_path, "xid", custom(host={"kmsg": kmsg}))
    assert res["reason"].startswith("Xid 149 (NVLink5 NETIR error") and ") on GPU 0 at " in res["reason"]
    f45 = next(f for f in res["findings"] if f["xid"] == 45)
    assert f45["caused_by"] == 149 and f45["process"] == "python3" and f45["pid"] == 5521
    assert f45["severity"] == "critical"  # the echo weighs what Xid 149 weighs (no word on the 45 line)
    assert next(f for f in res["findings"] if f["xid"] == 149)["severity"] == "critical"  # "Fatal"


def test_hang_in_gpu_identity_does_not_hold_up_host_file_probes(tmp_path):
    path = tmp_path / "hang-uuid.json"
    path.write_text(json.dumps(custom(gpu_overrides={"2": {"hang": ["nvmlDeviceGetUUID"]}})))
    agent = Agent(AgentConfig(simulate=str(path)))
    try:
        answer = agent.probe(ProbeRequest(probes=["inventory", "host", "infiniband"], deadline_s=3))
    finally:
        agent.close()
    res = {r["probe"]: r for r in answer["results"]}
    (hang,) = [f for f in res["inventory"]["findings"] if f["code"] == "nvml-hang"]
    assert (hang["gpu"], hang["call"]) == (2, "nvmlDeviceGetUUID")
    assert res["inventory"]["evidence"]["count"] == 8  # the other GPUs were still read
    assert res["host"]["health"] == "ok" and res["host"]["duration_ms"] < 1000
    assert res["infiniband"]["health"] == "ok" and answer["duration_ms"] < 3000
