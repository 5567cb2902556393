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


def test_a_prompt_that_runs_srun_does_not_name_the_login_node() -> None:
    # the output after "user@login:~$ srun ..." comes from the compute node srun names, not the login node
    init = _init(
        "ilb@login-1:~$ srun -p dev --container-image=nvcr.io#nvidia/pytorch:23.08-py3 --pty bash\n"
        "slurmstepd: error: Detected 1 oom_kill event in StepId=1054.0. Some of the step tasks have been OOM Killed.\n"
        "srun: error: gpu-7: task 0: Out Of Memory\n"
    )
    assert init["host"] == "gpu-7"
    local = _init("ilb@gpu-3:~$ sudo dmesg | tail\n"
                  "[1038.1] Out of memory: Killed process 4242 (python) total-vm:100kB, anon-rss:90kB\n")
    assert local["host"] == "gpu-3"


def test_output_of_a_command_run_through_ssh_is_on_the_ssh_target() -> None:
    # "$ ssh [options] HOST 'cmd'": the output below ran on HOST, whatever the local prompt says
    init = _init("$ ssh -o BatchMode=yes -o RequestTTY=no gpu-node-5 'nvidia-container-cli info'\n"
                 "nvidia-container-cli: detection error: nvml error: gpu requires reset\n")
    assert (init["signature"], init["host"]) == ("gpu-requires-reset", "gpu-node-5")
    init = _init("alice@login1:~$ ssh -t root@dgx07 nvidia-smi\n"
                 "Unable to determine the device handle for GPU0000:04:00.0: Unknown Error\n")
    assert init["host"] == "dgx07"
    # ssh named in prose is not a prompt
    assert _init("we ssh into gpu-node-5 and run it:\n"
                 "Unable to determine the device handle for GPU0000:04:00.0: Unknown Error\n").get("host") is None


def test_a_lone_nccl_process_takes_the_rank_of_its_prefixed_traceback() -> None:
    # NCCL's WARN goes out unprefixed; torchrun prefixes the same process's traceback
    head = ("node-10:74737:75914 [1] transport/net_socket.cc:488 NCCL WARN NET/Socket : peer 10.0.5.194<41988> "
            "message truncated : receiving 4 bytes instead of 2. If you believe your socket network is in healthy "
            "state, there may be a mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) "
            "between ranks\n")
    tb = ("[rank{r}]: Traceback (most recent call last):\n"
          "[rank{r}]:   File \"/w/pretrain_gpt.py\", line 301, in <module>\n"
          "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage\n")
    assert _init(head + tb.format(r=9))["rank"] == 9
    # a rank that cannot be the device's process (rank 0 on GPU 1), or a second NCCL process: unknown
    assert _init(head + tb.format(r=0)).get("rank") is None
    other = "node-10:74738:74738 [2] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    assert _init(other + head + tb.format(r=9)).get("rank") != 9


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


def test_nccl_tests_device_table_names_the_host_of_an_unprefixed_failure() -> None:
    # nccl-tests prints who runs where, then its own CUDA check fails with no host on the line
    table = ("# Using devices\n"
             "#   Rank  0 on     gpu-a7 device  0 [0x04] Tesla V100-SXM2-16GB\n"
             "#   Rank  1 on     gpu-a7 device  1 [0x05] Tesla V100-SXM2-16GB\n")
    fail = "Cuda failure common.cu:510 'an illegal memory access was encountered'\n"
    report = diagnose_texts([("run.txt", table + fail)], workers=1).to_dict()
    assert report["diagnoses"][0]["signature"] == "cuda-illegal-memory-access"
    assert report["initiating"]["host"] == "gpu-a7"
    # newer tables carry Group and Pid; two hosts leave the host open (the table does not say which failed)
    two = ("#  Rank  0 Group  0 Pid  12345 on    node1 device  0 [0x1b] NVIDIA A100-SXM4-80GB\n"
           "#  Rank  1 Group  0 Pid  23456 on    node2 device  0 [0x1b] NVIDIA A100-SXM4-80GB\n")
    assert diagnose_texts([("run.txt", two + fail)], workers=1).to_dict()["initiating"]["host"] is None


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


# A CUDA kernel's printf reaches stdout past torchrun's "[rankN]:" prefix; the traceback the same
# process prints next carries it (ATen's IndexKernel.cu assertion, PyTorch 2.x torchrun output)
_ASSERT = ('../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [{t},0,0] Assertion '
           '`-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.\n')


def _traceback(prefix: str, full: bool = True) -> str:
    lines = ["Traceback (most recent call last):",
             '  File "/workspace/train.py", line 211, in <module>',
             "    main()",
             '  File "/workspace/train.py", line 180, in main',
             "    loss = model(**batch).loss"]
    if full:
        lines += ["RuntimeError: CUDA error: device-side assert triggered",
                  "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                  "below might be incorrect.",
                  "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                  "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]
    return "".join(f"{prefix}{x}\n" for x in lines)


def test_unprefixed_kernel_assert_takes_the_rank_of_the_one_traceback_after_it() -> None:
    # DeepSpeed's pdsh puts the host first: the assertion names the host only, the traceback rank 3 too
    text = "".join("worker-1: " + _ASSERT.format(t=t) for t in (64, 65, 66)) + \
        "".join("worker-1: " + x + "\n" for x in _traceback("[rank3]: ").splitlines())
    init = _init(text)
    assert (init["rank"], init["host"]) == (3, "worker-1")
    assert "no rank prefix" in init["reason"]


def test_unprefixed_kernel_assert_before_a_cut_traceback_takes_its_rank() -> None:
    # the excerpt ends inside the traceback: its prefix alone tells who printed the assertion
    text = "".join(_ASSERT.format(t=t) for t in range(64, 96)) + _traceback("[rank3]: ", full=False)
    assert _init(text)["rank"] == 3
    # torchrun --tee: "[default3]:" is local rank 3
    init = _init("".join(_ASSERT.format(t=t) for t in (64, 65)) + _traceback("[default3]:", full=False))
    assert (init.get("rank"), init["local_rank"]) == (None, 3)


def test_unprefixed_kernel_assert_followed_by_two_ranks_stays_unset() -> None:
    text = "".join(_ASSERT.format(t=t) for t in (64, 65)) + _traceback("[rank3]: ") + _traceback("[rank5]: ")
    init = _init(text)
    assert init.get("rank") is None and init.get("local_rank") is None
    pdsh = "".join(f"worker-1: {x}\n" for x in text.splitlines())
    init = _init(pdsh)
    assert init.get("rank") is None and init.get("local_rank") is None


def test_an_unprefixed_traceback_of_its_own_does_not_take_the_next_rank() -> None:
    # the unprefixed error closes its own traceback: the [rank4] traceback after it is another process's
    init = _init(_traceback("") + _traceback("[rank4]: ", full=False))
    assert init.get("rank") is None and init.get("local_rank") is None


def test_torchrun_root_cause_still_names_the_rank_of_an_unprefixed_assert() -> None:
    text = "".join(_ASSERT.format(t=t) for t in (64, 65)) + _traceback("") + (
        "E1105 10:01:05.551000 140234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 3 (pid: 12348) of binary: /usr/bin/python\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-11-05_10:01:05\n"
        "  host      : gpu-node-07\n"
        "  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : 1 (pid: 12348)\n"
        "  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n")
    init = _init(text)
    assert (init["rank"], init["host"]) == (3, "gpu-node-07")
    assert "first observed failure" in init["reason"]


def test_a_world_of_one_process_is_rank_zero() -> None:
    log = ("RANK and WORLD_SIZE in environ: 0/1\n"
           "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1201, internal error, "
           "NCCL version 2.14.3\nncclInternalError: Internal check failed.\nLast error:\n"
           "Bootstrap : no socket interface found\n")
    assert _init(log)["rank"] == 0
    # the same failure in a world of eight does not say which rank
    assert _init(log.replace("0/1", "0/8"))["rank"] is None


def test_xid_takes_the_rank_of_the_one_process_that_reported_it_as_a_cuda_error() -> None:
    # the kernel's Xid names a GPU and a pid, never a rank; the watchdog's header went onto a line of its own
    log = (
        "Aug 10 15:36:05 gpu-node-a kernel: NVRM: Xid (PCI:0000:55:00): 48, An uncorrectable double bit error (DBE) "
        "has been detected on GPU in the framebuffer at physAddr 0xe9b9107e0 partition 3, subpartition 0.\n"
        "\n"
        "[rank1]:[E810 15:36:05.945860779 ProcessGroupNCCL.cpp:1899] [PG ID 0 PG GUID 0(default_pg) Rank 1]\n"
        "Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered\n"
    )
    init = _init(log)
    assert (init["signature"], init["rank"], init["host"]) == ("xid-48-dbe", 1, "gpu-node-a")
    assert "reported the GPU's failure as a CUDA error" in init["reason"]
    # two ranks reporting it leave the rank open
    two = log + "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    assert _init(two)["rank"] is None


def test_a_blanked_out_peer_address_is_not_taken_for_a_host() -> None:
    # the poster replaced the address with a placeholder; the reporter's own host stays the answer
    for blank in ("NODE2_IP", "xxx.xxx.xxx.xxx"):
        init = _init(
            "node2: node2:15874:17284 [4] NCCL INFO NET/Socket : Using [0]eth0:10.1.1.2<0>\n"
            f"node2: Net : Call to recv from {blank}<56843> failed : Connection refused\n"
            "node1: node1:15874:17284 [4] NCCL INFO Channel 00 : 4[61000] -> 3[42000] via SHM/direct/direct\n"
        )
        assert init["host"] == "node2", blank
