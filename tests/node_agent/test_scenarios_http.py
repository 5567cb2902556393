"""Each simulated scenario, asked over real HTTP, yields the finding an operator needs to see."""

from __future__ import annotations

import time

from agent_http import codes, probe, result


def test_healthy_node_reports_every_probe_ok_and_clean(agents):
    answer = probe(agents("healthy-8xh100"))
    assert answer["simulated"] is True and answer["scenario"] == "healthy-8xh100"
    assert [r["probe"] for r in answer["results"]] == [
        "inventory", "processes", "ecc", "xid", "thermal", "pcie", "nvlink", "fabric", "infiniband", "host"]
    for res in answer["results"]:
        assert res["health"] == "ok", res
        assert res["findings"] == [], res
        assert res["simulated"] is True
        assert set(res) >= {"probe", "health", "reason", "evidence", "findings", "suggested_action", "duration_ms"}


def test_seed_node_names_the_foreign_processes_on_the_jobs_gpus(agents):
    answer = probe(agents("seed-8xh200"), job_id="1234", job_gpus=[0, 1, 2, 3],
                   probes=["inventory", "processes", "ecc", "xid", "infiniband"])
    inv = result(answer, "inventory")
    assert inv["evidence"]["driver_version"] == "570.172.08"
    assert inv["evidence"]["cuda_driver_version"] == "12.8"
    assert {g["name"] for g in inv["evidence"]["gpus"]} == {"NVIDIA H200"}

    procs = result(answer, "processes")
    assert procs["health"] == "degraded"
    assert procs["reason"] == "GPUs 0, 2, 3 hold processes that are not the job's"
    foreign = [f for f in procs["findings"] if f["code"] == "foreign-process"]
    assert sorted({f["gpu"] for f in foreign}) == [0, 2, 3]
    big = next(f for f in foreign if f["pid"] == 4242)
    assert (big["gpu"], big["process"], big["user"], big["used_mib"]) == (0, "python3.10", "alice", 56320)
    assert big["owner"] == "slurm job 998"
    assert big["detail"] == "python3.10 (pid 4242, user alice) holds 55.0 GiB on GPU 0"
    triton = next(f for f in foreign if f["gpu"] == 2)
    assert triton["process"] == "tritonserver" and triton["owner"].startswith("container 3f2a1b4c5d6e")
    pressure = {f["gpu"] for f in procs["findings"] if f["code"] == "gpu-memory-pressure"}
    assert pressure == {0, 2, 3}
    assert "scancel 998" in procs["suggested_action"] and "docker stop 3f2a1b4c5d6e" in procs["suggested_action"]
    gpu1 = next(g for g in procs["evidence"]["gpus"] if g["gpu"] == 1)
    assert gpu1["used_mib"] == 4 and gpu1["processes"] == []

    # Xid and ECC were checked and are clean: what lets the engine rule those causes out.
    for name in ("ecc", "xid"):
        assert result(answer, name)["health"] == "ok" and result(answer, name)["findings"] == []

    ib = result(answer, "infiniband")
    down = {f["device"] for f in ib["findings"] if f["code"] == "ib-port-down"}
    assert down == {f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)}
    eth = [f for f in ib["findings"] if f["code"] == "ib-port-ethernet"]
    assert {f["device"] for f in eth} == {"mlx5_1", "mlx5_7"}
    assert all(f["rate"] == "100 Gb/sec (4X EDR)" and f["severity"] == "info" for f in eth)
    assert ib["health"] == "degraded"


def test_seed_node_without_a_job_only_lists_processes(agents):
    procs = result(probe(agents("seed-8xh200"), probes=["processes"]), "processes")
    assert procs["health"] == "ok" and procs["findings"] == []
    assert sum(len(g["processes"]) for g in procs["evidence"]["gpus"]) == 8


def test_xid79_gpu_lost(agents):
    answer = probe(agents("xid79-gpu-lost"), probes=["inventory", "xid", "host"])
    inv = result(answer, "inventory")
    assert inv["health"] == "failed"
    lost = [f for f in inv["findings"] if f["code"] == "gpu-lost"]
    assert [f["gpu"] for f in lost] == [3]
    xid = result(answer, "xid")
    assert xid["health"] == "failed"
    f79 = next(f for f in xid["findings"] if f["xid"] == 79)
    assert f79["gpu"] == 3 and "fell off the PCIe bus" in f79["meaning"]
    assert "reboot" in f79["action"] and isinstance(f79["time"], float)
    assert xid["reason"].startswith("Xid 79 (the GPU fell off the PCIe bus and no longer answers the driver) on GPU 3")
    assert result(answer, "host")["health"] == "ok"


def test_dbe_row_remap_and_nvml_xid_event_after_start(agents):
    agent = agents("dbe-row-remap")
    # The scenario's NVML event is due 0.3 s after agent start; the worker records it when it arrives.
    for _ in range(50):
        answer = probe(agent, probes=["ecc", "xid"])
        if any(f["source"] == "nvml" for f in result(answer, "xid")["findings"]):
            break
        time.sleep(0.1)
    ecc = result(answer, "ecc")
    assert ecc["health"] == "failed"
    assert {(f["code"], f["gpu"]) for f in ecc["findings"]} == {
        ("ecc-dbe", 5), ("row-remap-pending", 5), ("recovery-action", 5)}
    assert "nvidia-smi -r -i 5" in ecc["suggested_action"]
    xid = result(answer, "xid")
    xids = [(f["xid"], f["gpu"], f["source"]) for f in xid["findings"]]
    assert (48, 5, "kmsg") in xids and (63, 5, "kmsg") in xids
    assert (48, 5, "nvml") in xids, "the Xid 48 NVML event seen after agent start is reported"
    assert xid["reason"].startswith("Xid 48")


def test_driver_not_loaded(agents):
    answer = probe(agents("driver-not-loaded"), probes=["inventory", "ecc", "infiniband"])
    inv = result(answer, "inventory")
    assert inv["health"] == "failed" and codes(inv) == ["driver-not-loaded"]
    assert "modprobe nvidia" in inv["suggested_action"]
    assert result(answer, "ecc")["health"] == "failed"
    assert result(answer, "infiniband")["health"] == "ok"  # host-file probes still answer


def test_driver_library_mismatch_names_both_versions(agents):
    inv = result(probe(agents("driver-mismatch"), probes=["inventory"]), "inventory")
    (f,) = inv["findings"]
    assert f["code"] == "driver-library-mismatch"
    assert (f["kernel_module_version"], f["library_version"]) == ("550.90.07", "570.172.08")
    assert "reboot" in inv["suggested_action"]


def test_fabric_manager_down(agents):
    fab = result(probe(agents("fabric-manager-down"), probes=["fabric"]), "fabric")
    assert fab["health"] == "failed"
    assert set(codes(fab)) == {"fabric-manager-down", "fabric-not-ready"}
    assert "systemctl restart nvidia-fabricmanager" in fab["suggested_action"]


def test_old_driver_falls_back_to_versioned_process_call(agents):
    procs = result(probe(agents("old-driver-bindings"), probes=["processes"], job_id="1", job_gpus=[0]), "processes")
    (f,) = [f for f in procs["findings"] if f["code"] == "foreign-process"]
    assert (f["pid"], f["owner"], f["user"]) == (6100, "slurm job 2077", "dave")
    assert "nvmlDeviceGetComputeRunningProcesses" in procs["evidence"]["not_supported"]
