"""Pasted command outputs are evidence: each parser on real output formats, and the seed incident
re-ranked by a pasted `nvidia-smi` exactly as by a node agent's `processes` probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import diagnose_paths, diagnose_texts
from bot.engine.pasted import commands_answered, find_outputs
from bot.engine.pasted.base import JobView

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "pasted"
SEED = ROOT / "examples" / "seed-nccl-999"
SEED_PIDS = {48211, 48218, 48225, 48232}


def blocks(name: str):  # noqa: ANN201
    return find_outputs(name, (DATA / name).read_text())


def results(name: str, pids: set[int] = SEED_PIDS, gpus: set[int] | None = None) -> dict[str, dict]:
    from bot.engine.pasted import PARSERS

    out = {}
    for b in blocks(name):
        parser = next(p for p in PARSERS if p.KIND == b.kind)
        for r in parser.results(b, JobView(b.host, set(pids), set(gpus or ()))):
            out[r["probe"]] = r
    return out


def codes(res: dict) -> list[str]:
    return [f["code"] for f in res["findings"]]


def test_nvidia_smi_570_names_the_foreign_process_and_the_host_from_the_prompt() -> None:
    (b,) = blocks("nvidia-smi-570-h200-foreign.txt")
    assert (b.kind, b.host, b.line) == ("nvidia-smi", "gpu-h200-07", 3)
    assert b.data["gpus"][0]["total_mib"] == 143771 and b.data["gpus"][0]["bus_id"] == "00000000:18:00.0"
    proc = results("nvidia-smi-570-h200-foreign.txt", gpus={0, 1, 2, 3})["processes"]
    assert proc["health"] == "degraded" and codes(proc) == ["foreign-process", "gpu-memory-pressure"]
    fp = proc["findings"][0]
    assert (fp["pid"], fp["process"], fp["gpu"], fp["used_mib"]) == (4242, "python3.10", 0, 72694)
    # pid 48218 is rank 1's; tritonserver sits on GPU 4, not one of the job's
    assert all(f.get("pid") not in (48218, 51007) for f in proc["findings"])


def test_nvidia_smi_without_the_jobs_pids_cannot_judge() -> None:
    proc = results("nvidia-smi-470-a100.txt", pids=set())["processes"]
    assert proc["health"] == "unknown" and not proc["findings"]
    (b,) = blocks("nvidia-smi-470-a100.txt")
    assert b.host == "dgx-a100-03" and [len(g["processes"]) for g in b.data["gpus"].values()] == [1, 1]
    proc = results("nvidia-smi-470-a100.txt", pids={19023})["processes"]
    # 1.4 GiB of 79 GiB is under the agent's 5 % share: a foreign process, no memory pressure
    assert [(f["code"], f.get("pid")) for f in proc["findings"]] == [("foreign-process", 7731)]


def test_clean_nvidia_smi_and_compute_apps_csv() -> None:
    proc = results("nvidia-smi-570-h200-clean.txt")["processes"]
    assert proc["health"] == "ok" and not proc["findings"]
    proc = results("nvidia-smi-query-compute-apps.csv")["processes"]
    assert [(f["code"], f["pid"]) for f in proc["findings"]] == [("foreign-process", 4242)]


def test_nvidia_smi_q_ecc_row_remapper_fabric_and_processes() -> None:
    res = results("nvidia-smi-q-h200-remap.txt")
    assert codes(res["ecc"]) == ["ecc-dbe", "row-remap-pending"]
    assert all(f["gpu"] == 1 for f in res["ecc"]["findings"])
    assert res["ecc"]["findings"][0]["volatile_uncorrected"] == 2
    assert res["fabric"]["health"] == "ok" and res["processes"]["health"] == "ok"
    old = results("nvidia-smi-q-v100-retired.txt")["ecc"]
    assert codes(old) == ["ecc-dbe", "retired-pages-pending"] and old["findings"][0]["volatile_uncorrected"] == 1


def test_ibstat_and_ibstatus_ports() -> None:
    ib = results("ibstat-seed.txt")["infiniband"]
    assert [(f["code"], f["device"]) for f in ib["findings"]] == [("ib-port-down", "mlx5_0"), ("ib-port-ethernet", "mlx5_1")]
    assert ib["findings"][0]["phys_state"] == "Disabled" and ib["health"] == "degraded"
    ib = results("ibstatus.txt")["infiniband"]
    assert [(f["code"], f["state"]) for f in ib["findings"]] == [("ib-port-down", "DOWN")]


def test_df_ulimit_free() -> None:
    assert codes(results("df-h-shm-docker.txt")["shm"]) == ["shm-small", "shm-full"]
    assert results("df-h-shm-ok.txt")["shm"]["health"] == "ok"
    lim = results("ulimit-a-bash.txt")["limits"]
    assert codes(lim) == ["nofile-low", "memlock-low"] and lim["findings"][0]["nofile"] == 1024
    assert results("proc-limits.txt")["limits"]["health"] == "ok"
    assert codes(results("free-g.txt")["memory"]) == ["host-memory-low"]


def test_kernel_logs_xid_and_oom() -> None:
    res = results("dmesg-T-xid79.txt")
    (x,) = res["xid"]["findings"]
    assert (x["xid"], x["pci"], x["severity"]) == (79, "PCI:0000:18:00", "critical") and "fell off" in x["meaning"]
    assert res["oom"]["health"] == "ok"
    res = results("journalctl-k-oom.txt")
    (k,) = res["oom"]["findings"]
    assert (k["pid"], k["job_process"], k["severity"]) == (48225, True, "critical")
    assert res["xid"]["health"] == "ok"
    assert blocks("journalctl-k-oom.txt")[0].host == "gpu-h200-07"


def test_a_log_quoting_one_kernel_line_is_no_kernel_log() -> None:
    assert find_outputs("x", "training...\n[  12.345678] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n") == []


@pytest.mark.parametrize(("question", "kinds", "want"), [
    ("What does `nvidia-smi` show on h, and does `sudo dmesg -T | grep -i xid` print anything?", {"nvidia-smi"}, False),
    ("What does `nvidia-smi` show on h, and does `sudo dmesg -T | grep -i xid` print anything?",
     {"nvidia-smi", "dmesg"}, True),
    ("How full is it (`df -h /dev/shm; ls -laS /dev/shm | head`)?", {"df"}, True),
    ("What does `nvidia-smi -q -d ROW_REMAPPER` say?", {"nvidia-smi"}, False),
    ("What does `ip -br addr` print?", {"nvidia-smi"}, False),
])
def test_which_questions_a_paste_answers(question: str, kinds: set[str], want: bool) -> None:
    assert commands_answered(question, kinds) is want


def _seed_with(*pastes: tuple[str, str]):  # noqa: ANN202
    items = [(f"seed-nccl-999/{p.name}", p.read_bytes()) for p in sorted(SEED.iterdir())]
    return diagnose_texts(items + [(n, t) for n, t in pastes])


def test_pasted_nvidia_smi_reranks_the_seed_to_the_foreign_process() -> None:
    before = diagnose_paths([str(SEED)])
    assert any("nvidia-smi" in q for q in before.missing_facts)
    paste = (DATA / "nvidia-smi-570-h200-foreign.txt").read_text()
    rep = _seed_with(("reply 1", paste))
    top = rep.diagnoses[0]
    assert top.signature == "nccl-cuda-999"
    first = top.causes[0]
    assert first.id == "gpu-memory-pressure" and first.score > before.diagnoses[0].causes[0].score + 0.5
    joined = " ".join(first.evidence_for)
    assert "python3.10 (pid 4242) holds 71.0 GiB on GPU 0" in joined and "GPU 0 is rank 0's" in joined
    assert "pasted `nvidia-smi`, reply 1:3" in joined
    assert rep.next_action is not None and "4242" in rep.next_action.text and "4242" in (rep.next_action.command or "")
    assert "gpu-h200-07" in rep.next_action.render()
    assert not any("nvidia-smi" in q for q in rep.missing_facts)  # the question it answered is dropped
    (entry,) = rep.pasted
    assert (entry["source"], entry["command"], entry["from"], entry["host"]) == ("pasted", "nvidia-smi", "reply 1",
                                                                                 "gpu-h200-07")
    assert rep.to_dict()["pasted"][0]["findings"][0]["source"] == "pasted"
    assert rep.probes == {}  # no agent was asked


def test_pasted_clean_nvidia_smi_rules_the_foreign_process_out() -> None:
    rep = _seed_with(("reply 1", (DATA / "nvidia-smi-570-h200-clean.txt").read_text()))
    causes = {c.id: c for c in rep.diagnoses[0].causes}
    assert any("probe processes clean" in x for x in causes["gpu-memory-pressure"].evidence_against)
    assert rep.diagnoses[0].causes[0].id != "gpu-memory-pressure"
    assert not any("nvidia-smi" in q for q in rep.missing_facts)


def test_the_later_paste_stands() -> None:
    rep = _seed_with(("reply 1", (DATA / "nvidia-smi-570-h200-foreign.txt").read_text()),
                     ("reply 2", (DATA / "nvidia-smi-570-h200-clean.txt").read_text()))
    assert [e["from"] for e in rep.pasted] == ["reply 2"]
    assert rep.diagnoses[0].causes[0].id != "gpu-memory-pressure"


def test_pasted_df_confirms_and_rules_out_the_shm_size() -> None:
    log = "RuntimeError: DataLoader worker (pid 4711) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.\n"
    small = diagnose_texts([("log", log), ("reply 1", (DATA / "df-h-shm-docker.txt").read_text())])
    ok = diagnose_texts([("log", log), ("reply 1", (DATA / "df-h-shm-ok.txt").read_text())])
    assert small.diagnoses and small.diagnoses[0].signature == ok.diagnoses[0].signature
    s = {c.id: c for c in small.diagnoses[0].causes}
    o = {c.id: c for c in ok.diagnoses[0].causes}
    shm_cause = next(c for c in s if c.startswith("container-shm"))
    assert s[shm_cause].evidence_for and o[shm_cause].evidence_against
    assert not any("df -h /dev/shm" in q for q in small.missing_facts + ok.missing_facts)


def test_pasted_ulimit_confirms_the_open_file_limit() -> None:
    log = "OSError: [Errno 24] Too many open files: '/data/shard-00123.tar'\n"
    rep = diagnose_texts([("log", log), ("reply 1", (DATA / "ulimit-a-bash.txt").read_text())])
    causes = {c.id: c for c in rep.diagnoses[0].causes}
    assert any("open-file limit (ulimit -n) is 1024" in x for x in causes["limit-too-low"].evidence_for)
    rep = diagnose_texts([("log", log), ("reply 1", (DATA / "proc-limits.txt").read_text())])
    causes = {c.id: c for c in rep.diagnoses[0].causes}
    assert causes["limit-too-low"].evidence_against
