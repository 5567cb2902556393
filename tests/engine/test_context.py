"""Launcher prefixes give rank, host, pid and time; file names give rank and host."""

from __future__ import annotations

from datetime import datetime

import pytest

from bot.engine import diagnose_texts
from bot.engine.context import continues, parse_line, parse_source_name

CASES = [
    # (line, host, pid, rank, local_rank, gpu)
    ("gpu-node-1:3071:3071 [2] NCCL WARN Cuda failure 'unknown error'", "gpu-node-1", 3071, None, None, 2),
    ("[rank3]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog", None, None, 3, None, None),
    ("[default5]:RuntimeError: boom", None, None, None, 5, None),
    ("12: node07:911:930 [4] NCCL WARN NET/IB : Got completion", "node07", 911, 12, None, 4),
    ("worker-3: RuntimeError: CUDA error: out of memory", "worker-3", None, None, None, None),
    ("[1,6]<stderr>:node03:77:78 [6] NCCL WARN x", "node03", 77, 6, None, 6),
    ("[2]<stderr>:RuntimeError: boom", None, None, 2, None, None),  # horovodrun
    ("Fri Sep 25 16:52:36 2020[0]<stderr>:node03:77:78 [0] NCCL WARN x", "node03", 77, 0, None, 0),
    ("(RayWorkerWrapper pid=1234, ip=10.0.0.1) ERROR x", "10.0.0.1", 1234, None, None, None),
    ("[E ProcessGroupNCCL.cpp:458] [PG 0 Rank 7] Watchdog", None, None, 7, None, None),
    ("[rank: 1] Child process with PID 2977 terminated with code -6.", None, None, 1, None, None),  # Lightning
    # NCCL WARN headers with the source location, as every NCCL >= 2.4 prints them
    ("hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion", "hostname-test", 984, None, None, 4),
    ("mycl-g2:353236:353423 [6] transport/net_ib.cc:2244 NCCL WARN NET/IB: Got completion", "mycl-g2", 353236, None, None, 6),
    ("node1:12:13 [0] include/socket.h 398 NCCL WARN Call to connect returned Connection refused", "node1", 12, None, None, 0),
    ("gpu-bql-144-103:18553:18611 [0] include/socket.h:360 WARN Call to connect failed", "gpu-bql-144-103", 18553, None, None, 0),
    ("[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device", None, None, None, None, 3),
    ("<cluster_name>:12:34 [2] misc/socket.cc:50 NCCL WARN x", None, 12, None, None, 2),  # a placeholder is no host
    ("> node201:127799:127863 [0] transport/[net_ib.cc:101](http://net_ib.cc:101/) NCCL WARN NET/IB : x",
     "node201", 127799, None, None, 0),  # quoted and linkified by an issue tracker
    ("[2026-04-18 12:45:41] gpu002:704798:704908 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 101", "gpu002", 704798,
     None, None, 0),
    ("2025-11-24T03:20:21.001125857Z [2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN x",
     "gpu-server320", None, None, None, 5),
    ("Fri Aug 11 12:31:45 2023[1,0]<stdout>:tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure",
     "tomte401", 1850301, 0, None, 0),
    ("rdma-test-gpu-worker-1: rdma-test-gpu-worker-1:2918:4483 [4] init.cc:263 NCCL WARN Cuda failure",
     "rdma-test-gpu-worker-1", 2918, None, None, 4),
    ("(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: x", None, 1090, 3, None, None),
    # SGLang's process prefix: the TP rank is the global rank with one replica and one pipeline stage
    ("[2025-02-21 22:59:28 TP0] Scheduler hit an exception: Traceback", None, None, 0, None, None),
    ("[2025-02-21 22:59:28 TP5 EP5] RuntimeError: x", None, None, 5, None, None),
    ("[2025-02-21 22:59:28 DP1 TP3] RuntimeError: x", None, None, None, None, None),
    ("[2025-02-21 22:59:28 TP2 PP1] RuntimeError: x", None, None, None, None, None),
    ("[note8:86717] *** Process received signal ***", "note8", 86717, None, None, None),  # Open MPI
    ("RuntimeError: [2]: params[4] in this process with sizes [243, 256] appears not to match", None, None, 2, None, None),
    ("11月 15 14:15:47 leon-NF5468M6 nv-fabricmanager[4177]: request to query NVSwitch", "leon-NF5468M6", None, None, None, None),
    ("slurmstepd-falkor7: error: Detected 1 oom_kill event in StepId=848444.0.", "falkor7", None, None, None, None),
    # slurmstepd's kill notice, both orders (Slurm 14 and older name the node after the closing ***)
    ("slurmstepd: error: *** JOB 1234 ON gpu-7 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***", "gpu-7", None, None, None, None),
    ("slurmstepd: *** JOB 6398 CANCELLED AT 2015-09-04T16:40:47 *** on a1a-u2-c10-b1", "a1a-u2-c10-b1", None, None, None, None),
    # device names in the host's place are not hosts
    ("nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 12028, Non-fatal, Link 36 egress non-posted PRIV error", None, None, None, None, None),
    ("mlx5: host_unknown: got completion with error:", None, None, None, None, None),
    ("mlx5: gpu-node-3: got completion with error:", "gpu-node-3", None, None, None, None),
]


@pytest.mark.parametrize(("line", "host", "pid", "rank", "local_rank", "gpu"), CASES)
def test_prefixes(line: str, host, pid, rank, local_rank, gpu) -> None:  # noqa: ANN001
    ctx = parse_line(line)
    assert (ctx.host, ctx.pid, ctx.rank, ctx.local_rank, ctx.gpu) == (host, pid, rank, local_rank, gpu)


def test_stream_tags_are_peeled() -> None:
    # Azure ML glues "[stderr]" to every line; line-anchored patterns must still see the message
    ctx = parse_line("[stderr]ModuleNotFoundError: No module named 'tensorboard'")
    assert ctx.body == "ModuleNotFoundError: No module named 'tensorboard'"
    assert parse_line("[stdout] 3: RuntimeError: boom").rank == 3


def test_docker_build_step_times_are_peeled() -> None:
    # BuildKit prints each RUN line behind the step's seconds (and "#N" in plain progress mode)
    assert parse_line("129.5     ModuleNotFoundError: No module named 'nemo.x'").body == "ModuleNotFoundError: No module named 'nemo.x'"
    assert parse_line("#8 12.3 RuntimeError: boom").body == "RuntimeError: boom"
    assert parse_line("[rank391] NCCL error: remote process exited").rank == 391


def test_container_log_prefixes_are_peeled() -> None:
    cri = parse_line("2025-07-25T07:53:08.217488644+08:00 stdout F [rank3]: KeyError: 'labels'")
    assert (cri.body, cri.rank, cri.timestamp) == ("KeyError: 'labels'", 3, datetime(2025, 7, 25, 7, 53, 8, 217488))
    assert parse_line("vllm-1  | KeyError: 'labels'").body == "KeyError: 'labels'"
    # nvidia-smi table rows start with "|" and stay whole
    assert parse_line("| 0  NVIDIA H100 80GB HBM3  On |").body.startswith("| 0")


def test_exception_names_are_not_hosts() -> None:
    for line in ("RuntimeError: boom", "torch.distributed.DistBackendError: NCCL error",
                 "ncclUnhandledCudaError: Call to CUDA function failed.",
                 # a module with a digit in its name looks like a dotted host name
                 "sqlite3.OperationalError: table HIP already exists", "h5py.Error: unable to open",
                 "boto3.exceptions.S3UploadFailedError: Failed to upload"):
        assert parse_line(line).host is None, line


def test_python_logger_names_are_not_hosts() -> None:
    # logging's "%(asctime)s %(name)s %(levelname)s:" looks like journalctl's short-iso "<time> <host> <proc>:"
    for line in ("2020-05-10 08:34:41,021 maskrcnn_benchmark INFO: eta: 1:02:03  iter: 20  loss: nan (nan)",
                 "2020-05-10 08:34:41,021 maskrcnn_benchmark.trainer ERROR: Loss is nan, stopping training"):
        ctx = parse_line(line)
        assert ctx.host is None, line
        assert ctx.timestamp == datetime(2020, 5, 10, 8, 34, 41, 21000)
    assert parse_line("2024-06-26T05:06:30+0000 gpu-node-2 kernel: NVRM: Xid").host == "gpu-node-2"


def test_a_stamp_without_a_year_is_not_reported_as_1900() -> None:
    line = "Dec  9 12:34:44 gpu-node-7 kernel: [ 7561.08] NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus."
    report = diagnose_texts([("kern.log", line)])
    started = report.to_dict()["initiating"]
    assert started["host"] == "gpu-node-7"
    assert started["timestamp"] is None and started["time_without_year"] == "12-09T12:34:44"
    evidence = report.to_dict()["diagnoses"][0]["evidence"][0]
    assert evidence["timestamp"] is None and evidence["time_without_year"] == "12-09T12:34:44"


@pytest.mark.parametrize(("line", "when"), [
    ("[rank2]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] x", datetime(1900, 6, 26, 5, 6, 30, 929096)),
    ("E1126 10:15:05.104000 48190 torch/distributed/elastic/multiprocessing/api.py:869] failed",
     datetime(1900, 11, 26, 10, 15, 5, 104000)),
    ("[2025-11-26 10:15:02,118] [INFO] [train.py:142] wrapping", datetime(2025, 11, 26, 10, 15, 2, 118000)),
    ("2024-06-26T05:06:30.123+0000 gpu-node-2 kernel: NVRM: Xid", datetime(2024, 6, 26, 5, 6, 30, 123000)),
    ("Jun 26 05:06:30 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 79", datetime(1900, 6, 26, 5, 6, 30)),
    ("[Wed Jun 26 05:06:30 2024] NVRM: Xid (PCI:0000:3b:00): 79", datetime(2024, 6, 26, 5, 6, 30)),
])
def test_timestamps(line: str, when: datetime) -> None:
    assert parse_line(line).timestamp == when


def test_kernel_uptime_and_journal_host() -> None:
    ctx = parse_line("[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    assert ctx.uptime == pytest.approx(1234.56789)
    assert ctx.body.startswith("NVRM: Xid")
    assert parse_line("Jun 26 05:06:30 gpu-node-17 kernel: NVRM: x").host == "gpu-node-17"


def test_slurm_verdict_gives_job_and_host() -> None:
    ctx = parse_line("slurmstepd: error: *** JOB 1234 ON node17 CANCELLED AT 2023-01-01T00:00:00 DUE TO TIME LIMIT ***")
    assert (ctx.job_id, ctx.host) == ("1234", "node17")


@pytest.mark.parametrize(("name", "rank", "host", "job"), [
    ("rank-3.log", 3, None, None),
    ("rank3.txt", 3, None, None),
    ("node17.err", None, "node17", None),
    ("gpu-node-01/rank3.txt", 3, "gpu-node-01", None),
    ("slurm-1234.out", None, None, "1234"),
    ("worker_5.log", 5, None, None),
    ("log.txt", None, None, None),
    ("stdout", None, None, None),
    ("t1.log", None, None, None),  # a scratch name, not a host
    ("n12.log", None, "n12", None),
])
def test_source_names(name: str, rank, host, job) -> None:  # noqa: ANN001
    ctx = parse_source_name(name)
    assert (ctx.rank, ctx.host, ctx.job_id) == (rank, host, job)


@pytest.mark.parametrize("name", ["dmesg-gpu-node-02.txt", "gpu-node-02-dmesg.log", "journal-gpu-node-02.log",
                                  "gpu-node-02.kern.log", "gpu-node-02_syslog", "nvidia-smi-gpu-node-02.txt"])
def test_kernel_log_file_names_name_the_host(name: str) -> None:
    assert parse_source_name(name).host == "gpu-node-02"


# -- forms met in a blind round of real logs (Rh-*) ------------------------------------------------

def test_launcher_prefix_may_be_an_ip_address() -> None:
    # DeepSpeed/pdsh with an IP hostfile; a kernel log collected per node
    assert parse_line("192.168.13.81: [rank19]: RuntimeError: CUDA error").host == "192.168.13.81"
    assert parse_line("192.168.13.81: [rank19]: RuntimeError: CUDA error").rank == 19
    assert parse_line("10.0.0.7: kern: warning: [123.4]: NVRM: Xid (PCI:0000:18:00): 79").host == "10.0.0.7"
    assert parse_line("1.2.3: not an address").host is None
    assert parse_line("300.1.1.1: not an address").host is None


def test_nccl_header_names_the_machine_over_a_launcher_ip() -> None:
    line = "10.10.23.10: so-ucloud-10-10-23-10:1307367:1307388 [0] NCCL WARN Cuda failure 'unknown error'"
    assert parse_line(line).host == "so-ucloud-10-10-23-10"


def test_ucx_signal_header_of_a_container_id_host() -> None:
    ctx = parse_line("[09677202c889:5283 :0:5704] Caught signal 7 (Bus error: nonexistent physical address)")
    assert (ctx.host, ctx.pid) == ("09677202c889", 5283)
    assert parse_line("[12345.678901] NVRM: Xid 79").host is None  # dmesg uptime, not host:pid


def test_hard_wrapped_continuation_lines() -> None:
    head = "[rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 0] Process group watchdog thread terminated with exception: CUDA erro"
    assert continues(head, "r: unspecified launch failure")
    assert continues("x" * 90 + " last enqueued ", "NCCL work: 2082, last completed NCCL work: 2069.")
    # a new record, a short line, or a line ended by its writer is not a continuation
    assert not continues(head, "[rank1]: RuntimeError: boom")
    assert not continues(head.replace(" erro", " error."), "next line")
    assert not continues("short line erro", "r: x")
    assert not continues(head + "r", "Traceback (most recent call last):")


def test_slurm_output_file_names_hold_a_job_not_a_host() -> None:
    ctx = parse_source_name("train-llm-1234.out")
    assert (ctx.host, ctx.job_id) == (None, "1234")
    assert parse_source_name("myjob_55123_3.err").job_id == "55123"
    assert parse_source_name("gpu-node-02.out").host == "gpu-node-02"


def test_host_named_in_a_key_value_field() -> None:
    # CNTK's cuBLAS failure, logfmt lines
    line = "CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED ; GPU=1 ; hostname=rg404.bbn.com ; expr=cublasgemm"
    assert parse_line(line).host == "rg404.bbn.com"
    assert parse_line("level=error host=gpu-node-7 msg=boom").host == "gpu-node-7"
    assert parse_line("ghost=abc1 myhost=n1 hostname=localhost").host is None


def test_env_settings_keep_their_whole_comma_list() -> None:
    # the list is the setting: "0" for CUDA_VISIBLE_DEVICES=0,1,...,7 would send the on-call engineer to GPU 0 only
    log = ("Setting CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7\n"
           "node1:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to en,eth,em,bond\n"
           "NCCL_DEBUG=INFO, NCCL_IB_HCA=mlx5_0,mlx5_1, NCCL_P2P_DISABLE=1\n")
    env = diagnose_texts([("job.log", log)]).to_dict()["facts"]["env"]
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
                   "NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "en,eth,em,bond"}


def test_nccl_tests_failures_name_their_host_even_without_a_digit() -> None:
    ctx = parse_line("gpu: Test CUDA failure common.cu:1030 'system not yet initialized'")
    assert ctx.host == "gpu"
    ctx = parse_line(" .. node-a pid 3018: Test failure common.cu:937")
    assert (ctx.host, ctx.pid) == ("node-a", 3018)
    # an ordinary "Word: message" line is no host
    assert parse_line("RuntimeError: Test CUDA kernels failed").host is None


def test_skypilot_task_prefixes_are_peeled() -> None:
    ctx = parse_line("(worker1, rank=1, pid=2563, ip=10.128.0.3) RuntimeError: CUDA error: out of memory")
    assert (ctx.rank, ctx.pid, ctx.host) == (1, 2563, "10.128.0.3")
    assert ctx.body.startswith("RuntimeError")
    assert parse_line("(task, pid=13917) ValueError: Bfloat16 is only supported").body.startswith("ValueError")


def test_a_kernel_line_quoted_after_a_monitors_words_names_its_host() -> None:
    ctx = parse_line("Xid errors on instance: ip-26-0-146-100, Error: May 19 07:08:57 ip-26-0-146-100 kernel: "
                     "[680111.646286] NVRM: Xid (PCI:0000:10:1c): 63, pid=1850, Row Remapper: New row marked")
    assert ctx.host == "ip-26-0-146-100"


def test_json_log_lines_are_read_for_the_message_they_carry() -> None:
    # Docker's json-file log and log shippers: one JSON object per line, the printed text in "log"/"message"
    line = '{"log":"[rank3]: RuntimeError: CUDA error: out of memory\\n","stream":"stderr","time":"2024-03-01T10:00:00Z"}'
    ctx = parse_line(line)
    assert (ctx.rank, ctx.body) == (3, "RuntimeError: CUDA error: out of memory")
    assert parse_line('{"message": "NCCL WARN boom", "level": "error"}').body == "NCCL WARN boom"
    # JSON that is not such a record stays as it is
    assert parse_line('{"loss": 2.31, "step": 10}').body == '{"loss": 2.31, "step": 10}'


def test_a_line_number_gutter_is_not_part_of_the_message() -> None:
    assert parse_line("  12  Traceback (most recent call last):").body == "Traceback (most recent call last):"
    assert parse_line("7\tAssertionError: boom").body == "AssertionError: boom"
    # nccl-tests result rows are numbers all the way
    row = "     8             2     float     sum      -1    18.55    0.00    0.00      0"
    assert parse_line(row).body.split()[:2] == ["8", "2"]
