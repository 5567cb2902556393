"""Who started it, on small logs in the forms real launchers print: the rank and host the probes go
to, the peers named as gone, and a Started-by line that never contradicts itself."""

from __future__ import annotations

from pathlib import Path

from bot.engine import diagnose_paths, diagnose_texts
from bot.engine.attribution import started_by
from bot.engine.render import render_text


def _init(text: str, name: str = "job.log") -> dict:
    return diagnose_texts([(name, text)], workers=1).to_dict()["initiating"] or {}


def test_elastic_failed_line_and_sigterm_list_name_the_dead_worker() -> None:
    init = _init(
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1167 closing signal SIGTERM\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1169 closing signal SIGTERM\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 1168) of binary: /usr/bin/python\n"
    )
    assert (init["local_rank"], init["pid"]) == (1, 1168)
    assert "did not have to send SIGTERM" in init["reason"]


def test_srun_teardown_kills_are_not_the_start() -> None:
    init = _init(
        "srun: error: nid003056: task 1: Killed\n"
        "srun: error: nid003053: task 0: Exited with exit code 16\n"
        "srun: error: nid003056: task 2: Killed\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity)\n"
    )
    assert (init["rank"], init["host"]) == (0, "nid003053")


def test_deepspeed_launcher_local_rank_is_not_the_failed_one() -> None:
    # DeepSpeed prints the cmd of the last process it spawned, whichever one failed
    init = _init(
        "[2024-01-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4100\n"
        "[2024-01-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4101\n"
        "[2024-01-01 10:00:00,100] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
        "'--local_rank=1'] exits with return code = -9\n"
    )
    assert init.get("rank") is None and init.get("local_rank") is None


def test_store_error_names_rank_zero_over_the_reporters() -> None:
    init = _init(
        "RuntimeError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
        "store by key '0', but store->get('0') got error: Connection reset by peer. This may indicate a possible "
        "application crash on rank 0 or a network set up issue.\n"
    )
    assert init["rank"] == 0
    assert init["suspects"][0]["rank"] == 0 and init["suspects"][0]["went_away"] is True


def test_desync_report_names_the_rank_that_did_not_join() -> None:
    init = _init(
        "[rank0]:[E515 18:36:47.341808597 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=241, OpType=ALLREDUCE, NumelIn=6, NumelOut=6, Timeout(ms)=600000) ran for 600086 "
        "milliseconds before timing out.\n"
        "             [7] finished collective #182, but didn't join collective #183 (count from 1)\n"
    )
    assert init["rank"] == 7


def test_lagging_work_counters_name_the_rank_behind() -> None:
    lines = []
    for r, enq in ((0, 20), (1, 20), (2, 19), (3, 20)):
        lines.append(f"[rank{r}]:[E1201 10:00:0{r}.000 ProcessGroupNCCL.cpp:1537] [PG 0 Rank {r}] Timeout at NCCL "
                     f"work: {enq}, last enqueued NCCL work: {enq}, last completed NCCL work: 18.\n")
        lines.append(f"[rank{r}]:[E1201 10:00:0{r}.000 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
                     f"operation timeout: WorkNCCL(SeqNum={enq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                     "Timeout(ms)=600000) ran for 600034 milliseconds before timing out.\n")
    init = _init("".join(lines))
    assert init["rank"] == 2 and "never entered the collective" in init["reason"]


def test_remote_peer_by_fqdn_is_the_short_node_name_srun_uses() -> None:
    init = _init(
        "srun: error: gpu-node1: task 0: Exited with exit code 1\n"
        "gpu-node2:2985003:2985024 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
        "gpu-node1.int.example.edu<45074>\n"
    )
    assert (init["host"], init["rank"]) == ("gpu-node1", 0)


def test_one_file_per_rank_names_the_rank_from_the_file(tmp_path: Path) -> None:
    for r in (0, 1, 2):
        (tmp_path / f"rank-{r}.log").write_text(
            f"[E1201 10:10:0{r}.000000 ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 "
            "milliseconds before timing out.\n")
    (tmp_path / "rank-3.log").write_text(
        "[E1201 10:00:00.000000 ProcessGroupNCCL.cpp:1500] RuntimeError: CUDA error: an illegal memory access was "
        "encountered\n")
    init = diagnose_paths([str(tmp_path)], workers=1).to_dict()["initiating"]
    assert init["rank"] == 3 and init["source"].endswith("rank-3.log")


def test_sxid_lines_never_take_the_switch_for_the_host() -> None:
    text = ("nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Non-fatal, Link 36 egress non-posted PRIV error (First)\n"
            "nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Data {0x00000000, 0x00000000}\n")
    report = diagnose_texts([("kern.txt", text)], workers=1).to_dict()
    assert report["diagnoses"], "the SXid must be diagnosed"
    assert all(not h.startswith("nvidia-nvswitch") for d in report["diagnoses"] for h in d["hosts"])
    assert (report["initiating"] or {}).get("host") is None
    journal = "Jun 26 05:06:30 dgx-07 kernel: " + text.splitlines()[0] + "\n"
    assert diagnose_texts([("kern.txt", journal)], workers=1).to_dict()["initiating"]["host"] == "dgx-07"


def test_no_started_by_line_when_the_log_cannot_tell() -> None:
    report = diagnose_texts([("paste.txt", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                           "20.00 MiB (GPU 0; 79.35 GiB total capacity)\n")], workers=1)
    assert report.diagnoses and started_by(report) is None
    assert "Started by" not in render_text(report) and "unknown" not in render_text(report)


def test_started_by_counts_other_ranks_without_contradiction() -> None:
    text = ("[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "[rank0]:[E1201 10:10:00.000 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600100 milliseconds before timing out.\n")
    line = started_by(diagnose_texts([("job.log", text)], workers=1))
    assert line is not None and line.startswith("rank 3")
    assert "only process that printed it" in line and "1 other rank reported only its effects" in line
    assert "reported it too" not in line
