"""The real library on the two orders of a collective timeout and a transport error: printed
before the timeout, the transport error started the failure; printed after it, it is the abort's
echo (ProcessGroupNCCL tears the communicator down and closes its sockets and queue pairs)."""

from __future__ import annotations

import pytest

from bot.engine import diagnose_texts
from bot.engine.model import Level

TIMEOUT = ("[rank3]:[E1201 04:54:22.123456 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=216, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
           "ran for 600045 milliseconds before timing out.")
ECHOES = {
    "nccl-ib-completion-error": "node7:1234:1300 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                                "from peer 10.0.0.8<36012> with error 5, opcode 0, len 0, vendor err 249 (Recv)",
    "nccl-socket-error": "node7:1234:1300 [3] misc/socket.cc:538 NCCL WARN socketProgress: Connection closed by "
                         "remote peer node8<46011>",
}


@pytest.mark.parametrize("sig", sorted(ECHOES))
def test_transport_error_after_the_timeout_is_its_echo(sig: str) -> None:
    # the teardown chatter between them can be long: order, not distance, makes the echo
    chatter = "".join(f"node7:1234:1300 [3] NCCL INFO comm 0x55d0 rank 3 nranks 8 - Abort step {i}\n" for i in range(12))
    r = diagnose_texts([("rank3.log", f"{TIMEOUT}\n{chatter}{ECHOES[sig]}\n")], workers=1)
    assert r.diagnoses[0].signature == "nccl-watchdog-timeout"
    echo = next(d for d in r.diagnoses if d.signature == sig)
    assert echo.level == Level.SECONDARY and echo.explained_by == "nccl-watchdog-timeout"


@pytest.mark.parametrize("sig", sorted(ECHOES))
def test_transport_error_before_the_timeout_started_it(sig: str) -> None:
    r = diagnose_texts([("rank3.log", f"{ECHOES[sig]}\n{TIMEOUT}\n")], workers=1)
    assert r.diagnoses[0].signature == sig and r.diagnoses[0].level == Level.INITIATING


def test_the_jobs_own_exception_beats_the_timeouts_and_closures_it_caused() -> None:
    # rank 0's code raised; the peers time out, abort with SIGABRT and see rank 0's sockets close
    log = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/workspace/train.py", line 88, in <module>',
        "[rank0]:     batch = collate(samples)",
        "[rank0]: ValueError: expected sequence of length 512 at dim 1 (got 498)",
        ECHOES["nccl-socket-error"],
        TIMEOUT,
        "  exitcode  : -6 (pid: 3437)",
        "  traceback : Signal 6 (SIGABRT) received by PID 3437",
    ]) + "\n"
    r = diagnose_texts([("job.log", log)], workers=1)
    assert r.diagnoses[0].signature == "python-exception"
    assert "ValueError" in r.diagnoses[0].summary


XID45 = "[ 1234.567] NVRM: Xid (PCI:0000:3b:00): 45, pid=4321, name=python, Ch 00000010"
KILLS = {
    "worker-sigkill": "srun: error: node01: task 0: Killed",
    "python-exception": "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                        "    train()\nKeyboardInterrupt",
}


@pytest.mark.parametrize("sig", sorted(KILLS))
def test_xid_45_after_a_kill_is_the_kills_channel_teardown(sig: str) -> None:
    r = diagnose_texts([("node01.log", f"{KILLS[sig]}\n{XID45}\n")], workers=1)
    assert r.diagnoses[0].signature == sig
    xid = next(d for d in r.diagnoses if d.signature == "xid-other")
    assert xid.level == Level.SECONDARY and xid.explained_by == sig


def test_a_hardware_xid_after_a_kill_is_still_the_diagnosis() -> None:
    # the echo rule is Xid 45's alone: an Xid 62 (internal micro-controller halt) is a fault of its own
    r = diagnose_texts([("node01.log", f"{KILLS['worker-sigkill']}\n{XID45.replace(': 45,', ': 62,')}\n")], workers=1)
    assert r.diagnoses[0].signature == "xid-other" and r.diagnoses[0].level == Level.INITIATING


def test_xid_45_alone_is_still_named() -> None:
    r = diagnose_texts([("node01.log", f"{XID45}\n")], workers=1)
    assert [d.signature for d in r.diagnoses] == ["xid-other"]


def test_communicator_used_after_an_error_echoes_it_and_breaks_no_tie() -> None:
    # nccl-internal-error defers to nccl-invalid-usage (a forced NCCL_ALGO), while invalid usage's "Attempt
    # to use communicator" after the internal error is that error's echo: the internal error must lead
    log = ("node4:901:966 [2] nccl_ofi_rdma.c:1353 NCCL WARN NET/OFI Unexpected status (2) for message 17\n"
           "node4:901:966 [2] NCCL INFO transport/net.cc:1190 -> 3\n"
           "node4:901:901 [2] init.cc:430 NCCL WARN Attempt to use communicator before the previous operation "
           "returned ncclSuccess\n"
           "RuntimeError: NCCL communicator encountered error set to ncclInternalError\n")
    r = diagnose_texts([("rank2.log", log)], workers=1)
    assert [d.signature for d in r.diagnoses][:2] == ["nccl-internal-error", "nccl-invalid-usage"]
    assert r.diagnoses[0].level == Level.INITIATING
    assert r.diagnoses[1].explained_by == "nccl-internal-error"
