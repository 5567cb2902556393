"""Ranking, initiating rank/host, causes and questions, on a small fixture library whose rules
do not move when the real library is tuned."""

from __future__ import annotations

from bot.engine import diagnose_texts
from bot.engine.conditions import ProbeView
from bot.engine.diagnose import build_report
from bot.engine.model import Level


def _diag(lib, items):  # noqa: ANN001, ANN202
    return diagnose_texts(items, library=lib, workers=1)


def test_nothing_found_is_an_empty_list(fixture_library) -> None:  # noqa: ANN001
    r = _diag(fixture_library, [("a.log", "all good\nstep 1 loss 2.3\n")])
    assert r.diagnoses == [] and r.initiating is None and r.next_action is None
    assert r.to_dict()["diagnoses"] == []


def test_initiating_beats_downstream_even_when_later_in_the_log(fixture_library) -> None:  # noqa: ANN001
    r = _diag(fixture_library, [("a.log", "FIXTURE TIMEOUT seq=4\nFIXTURE TIMEOUT seq=4\n[rank2]: FIXTURE BOOM code=7\n")])
    assert [d.signature for d in r.diagnoses] == ["fx-initiating", "fx-downstream"]
    assert r.diagnoses[1].level == Level.DOWNSTREAM
    assert r.to_dict()["diagnoses"][1]["downstream"] is True
    assert r.initiating.rank == 2


def test_secondary_and_catch_all_rank_last(fixture_library) -> None:  # noqa: ANN001
    text = "[rank0]: FixtureError: wrapped\nFIXTURE WRAPPER\nFIXTURE TIMEOUT seq=1\nFIXTURE BOOM code=3\n"
    r = _diag(fixture_library, [("a.log", text)])
    sigs = [d.signature for d in r.diagnoses]
    assert sigs[0] == "fx-initiating"
    assert sigs.index("fx-downstream") < sigs.index("fx-wrapper")
    assert {d.signature: d.explained_by for d in r.diagnoses}["fx-catchall"] is not None
    alone = _diag(fixture_library, [("a.log", "[rank0]: FixtureError: mine\n")])
    assert alone.diagnoses[0].signature == "fx-catchall"
    assert alone.diagnoses[0].summary == "FixtureError raised."


def test_supporting_pattern_alone_does_not_fire(fixture_library) -> None:  # noqa: ANN001
    assert _diag(fixture_library, [("a", "FIXTURE CONTEXT\n")]).diagnoses == []
    r = _diag(fixture_library, [("a", "FIXTURE CONTEXT\nFIXTURE BOOM code=1\n")])
    assert r.diagnoses[0].evidence_count == 2
    assert r.diagnoses[0].evidence[0].pattern == "boom"  # primary lines are shown first


def test_min_count_and_exclusions(fixture_library) -> None:  # noqa: ANN001
    assert _diag(fixture_library, [("a", "FIXTURE REPEAT\nFIXTURE REPEAT\n")]).diagnoses == []
    assert _diag(fixture_library, [("a", "FIXTURE REPEAT\n" * 3)]).diagnoses[0].signature == "fx-wrapper"
    assert _diag(fixture_library, [("a", "FIXTURE WRAPPER benign wrapper\n")]).diagnoses == []


def test_earlier_failure_by_minutes_ranks_first_across_ranks(fixture_library) -> None:  # noqa: ANN001
    # fx-kernel has the higher priority, but the initiating failure came 8 minutes earlier
    boom = "[rank2]:[E626 05:06:30.929 X.cpp:1] [Rank 2] FIXTURE BOOM code=1\n"
    kern = "Jun 26 05:14:36 gpu-node-2 kernel: NVRM: FIXTUREXID 31\n"
    r = _diag(fixture_library, [("rank2.log", boom), ("gpu-node-2.kern", kern)])
    assert [d.signature for d in r.diagnoses][:2] == ["fx-initiating", "fx-kernel"]
    same_time = kern.replace("05:14:36", "05:06:31")
    r = _diag(fixture_library, [("rank2.log", boom), ("gpu-node-2.kern", same_time)])
    assert r.diagnoses[0].signature == "fx-kernel"


def test_initiating_rank_from_timestamps_and_host_from_nccl_init(fixture_library) -> None:  # noqa: ANN001
    logs = []
    for r, t in ((0, "05:06:31"), (1, "05:06:29"), (2, "05:06:33")):
        logs.append((f"rank-{r}.log",
                     f"node{r // 2}:1{r}:1{r} [{r}] NCCL INFO comm 0x1 rank {r} nranks 3 cudaDev {r} busId 1000 - Init COMPLETE\n"
                     f"[2025-01-02 {t},000] [INFO] about to fail\nFIXTURE BOOM code={r}\n"))
    rep = _diag(fixture_library, logs)
    assert (rep.initiating.rank, rep.initiating.host) == (1, "node0")
    assert "earliest" in rep.initiating.reason
    assert rep.to_dict()["initiating"]["rank"] == 1


def test_downstream_only_names_the_rank_that_never_reported(fixture_library) -> None:  # noqa: ANN001
    init = "".join(f"h{r // 4}:1:1 [{r % 4}] NCCL INFO comm 0x1 rank {r} nranks 8 cudaDev {r % 4} - Init COMPLETE\n" for r in range(8))
    waits = "".join(f"[rank{r}]: [Rank {r}] FIXTURE TIMEOUT seq=9\n" for r in range(8) if r != 5)
    rep = _diag(fixture_library, [("all.log", init + waits)])
    assert rep.diagnoses[0].level == Level.DOWNSTREAM
    assert (rep.initiating.rank, rep.initiating.host) == (5, "h1")
    assert any("rank 5 (h1)" in q for q in rep.missing_facts)


def test_launcher_root_cause_block_names_rank_and_host(fixture_library) -> None:  # noqa: ANN001
    text = ("Root Cause (first observed failure):\n[0]:\n  time      : 2025-11-25_21:34:12\n"
            "  host      : a100-node-3\n  rank      : 2 (local_rank: 2)\n  FIXTURE BOOM code=1\n")
    # the block is only read around torchrun's `exitcode :` lines
    rep = _diag(fixture_library, [("x", text)])
    assert rep.initiating.host is None
    text2 = text.replace("  FIXTURE BOOM code=1\n", "  exitcode  : 1 (pid: 20404) FIXTURE BOOM code=1\n")
    rep = _diag(fixture_library, [("x", text2)])
    assert (rep.initiating.rank, rep.initiating.host) == (2, "a100-node-3")


def test_causes_move_with_signatures_facts_and_probes(fixture_library) -> None:  # noqa: ANN001
    base = _diag(fixture_library, [("a", "FIXTURE BOOM code=1\n")])
    top = base.diagnoses[0]
    assert [c.id for c in top.causes] == ["software", "hardware"]
    assert base.missing_facts == ["What does nvidia-smi show on <host>?"]
    # an NCCL version fact confirms the software cause
    r = _diag(fixture_library, [("a", "h:1:1 [0] NCCL INFO NCCL version 2.14.3+cuda11.7\nFIXTURE BOOM code=1\n")])
    assert r.diagnoses[0].causes[0].evidence_for == ["versions.nccl = 2.14.3"]
    # a co-occurring kernel fault confirms hardware and makes the question moot
    r = _diag(fixture_library, [("a", "FIXTURE BOOM code=1\n"), ("k", "[1.0] NVRM: FIXTUREXID 79\n")])
    d = {x.signature: x for x in r.diagnoses}["fx-initiating"]
    assert d.causes[0].id == "hardware" and "fx-kernel also in the log" in d.causes[0].evidence_for[0]
    assert d.missing_facts == []


def test_probe_findings_reorder_causes(fixture_library) -> None:  # noqa: ANN001
    rep = _diag(fixture_library, [("a", "node9:1:1 [0] NCCL WARN FIXTURE BOOM code=1\n")])
    view = ProbeView(findings=[{"host": "node9", "probe": "xid", "code": "xid", "xid": 79,
                                "detail": "Xid 79 on GPU 0"}], ran={"xid": ["node9"]})
    from bot.engine.diagnose import evidence_by_signature  # noqa: F401 - API used by fusion

    ev = [e for d in rep.diagnoses for e in d.evidence]
    again = build_report(fixture_library, ev, _facts(), rep.sources, probe_view=view)
    top = again.diagnoses[0]
    assert top.causes[0].id == "hardware"
    assert "node9: Xid 79 on GPU 0" in top.causes[0].evidence_for[0]
    clean = ProbeView(ok={"xid": ["node9"]}, ran={"xid": ["node9"]})
    again = build_report(fixture_library, ev, _facts(), rep.sources, probe_view=clean)
    hw = {c.id: c for c in again.diagnoses[0].causes}["hardware"]
    assert hw.evidence_against == ["probe xid clean on node9"]


def _facts():  # noqa: ANN202
    from bot.engine.facts import Facts

    return Facts()


def test_next_action_fills_host_placeholder(fixture_library) -> None:  # noqa: ANN001
    rep = _diag(fixture_library, [("a", "FIXTURE BOOM code=1\n"), ("k", "Nov 26 02:44:03 gpu-node-17 kernel: NVRM: FIXTUREXID 79\n")])
    d = {x.signature: x for x in rep.diagnoses}["fx-initiating"]
    assert d.causes[0].next_action.command == "scontrol update nodename=<host> state=drain reason=fixture"
    rep = _diag(fixture_library, [("a", "node4:1:1 [0] NCCL WARN FIXTURE BOOM code=1\n")])
    assert rep.diagnoses[0].summary == "Initiating failure with code 1 on node4."


def test_wrapper_reads_the_last_error_that_follows(fixture_library) -> None:  # noqa: ANN001
    rep = _diag(fixture_library, [("a", "[rank1]: FIXTURE WRAPPER\n[rank1]: Last error:\n[rank1]: Attribute busid of node nic not found\n")])
    assert rep.diagnoses[0].evidence[0].captures["last_error"] == "Attribute busid of node nic not found"
    rep = _diag(fixture_library, [("a", "FIXTURE WRAPPER. Last error: socket closed\n")])
    assert rep.diagnoses[0].evidence[0].captures["last_error"] == "socket closed"


def test_pattern_context_must_match_around_the_hit(fixture_library) -> None:  # noqa: ANN001
    shm = ('  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n'
           "    sl = self._semlock = _multiprocessing.SemLock(\nOSError: FIXTURE NO SPACE\n")
    rep = _diag(fixture_library, [("a", shm)])
    assert rep.diagnoses[0].signature == "fx-shm-full"
    assert rep.diagnoses[0].summary == "/dev/shm is full (multiprocessing/synchronize.py:57 in __init__)."
    assert _diag(fixture_library, [("a", "writing /data/x\nFIXTURE NO SPACE\n")]).diagnoses == []


def test_catch_all_outranks_downstream_but_not_initiating(fixture_library) -> None:  # noqa: ANN001
    rep = _diag(fixture_library, [("a", "[rank0]: [Rank 0] FIXTURE TIMEOUT seq=3\n[rank3]: FixtureError: 'labels'\n")])
    assert [d.signature for d in rep.diagnoses] == ["fx-catchall", "fx-downstream"]
    assert rep.initiating.rank == 3
    rep = _diag(fixture_library, [("a", "FIXTURE BOOM code=1\n[rank3]: FixtureError: wrapped\n")])
    assert [d.signature for d in rep.diagnoses] == ["fx-initiating", "fx-catchall"]


def test_catch_all_leaves_lines_another_signature_explains(fixture_library) -> None:  # noqa: ANN001
    # the exception line that wraps a downstream report belongs to that report, not to the catch-all
    rep = _diag(fixture_library, [("a", "FixtureError: FIXTURE TIMEOUT seq=4\n")])
    assert [d.signature for d in rep.diagnoses] == ["fx-downstream"]


def test_root_cause_entry_wins_over_other_failures(fixture_library) -> None:  # noqa: ANN001
    block = ("Failures:\n[1]:\n  time      : 2024-06-26_05:20:41\n  host      : node17\n"
             "  rank      : 9 (local_rank: 1)\n  exitcode  : -9 (pid: 1235) FIXTURE BOOM code=9\n"
             "  error_file: <N/A>\n------------------------------------------------------------\n"
             "Root Cause (first observed failure):\n[0]:\n  time      : 2024-06-26_05:20:11\n"
             "  host      : node18\n  rank      : 11 (local_rank: 3)\n  exitcode  : -9 (pid: 1237) FIXTURE BOOM code=9\n")
    rep = _diag(fixture_library, [("torchrun.log", block)])
    assert (rep.initiating.rank, rep.initiating.host) == (11, "node18")


def test_placeholders_come_from_any_evidence_line(fixture_library) -> None:  # noqa: ANN001
    # the first evidence line has no `code` capture (a supporting line); a later one has it
    rep = _diag(fixture_library, [("a", "node2:1:1 [0] NCCL WARN FIXTURE CONTEXT\nFIXTURE BOOM code=42\n")])
    assert rep.diagnoses[0].summary.startswith("Initiating failure with code 42")


def _hard_wrap(text: str, width: int) -> str:
    return "\n".join(line[i:i + width] for line in text.splitlines() for i in range(0, max(len(line), 1), width)) + "\n"


def test_terminal_hard_wrapped_lines_are_rejoined(fixture_library) -> None:  # noqa: ANN001
    # A pasted terminal wraps at a fixed width, even mid-word: "FIXTURE BO" / "OM code=7".
    head = "x" * 62 + " FIXTURE BO"
    text = "step 1 loss 2.3\n" + head + "OM code=7 on the device\nshort tail line\n"
    wrapped = _hard_wrap(text, len(head))
    assert "FIXTURE BOOM" not in wrapped
    r = _diag(fixture_library, [("paste.log", wrapped)])
    assert [d.signature for d in r.diagnoses] == ["fx-initiating"]
    ev = r.diagnoses[0].evidence[0]
    assert ev.line == 2 and "hard-wrapped" in ev.captures["unwrapped"]


def test_an_excerpt_cut_at_a_wrapped_line_is_still_rejoined(fixture_library) -> None:  # noqa: ANN001
    # a search excerpt ends on a full-width line: three lines of exactly that width still mean a hard wrap
    head = "x" * 62 + " FIXTURE BO"
    text = "step 1 loss 2.3\n" + head + "OM code=7 on the device\n" + "y" * 200 + "\n"
    wrapped = _hard_wrap(text, len(head)).rstrip("\n").rsplit("\n", 1)[0] + "\n"  # cut after a full line
    assert len(wrapped.splitlines()[-1]) == len(head)
    r = _diag(fixture_library, [("paste.log", wrapped)])
    assert [d.signature for d in r.diagnoses] == ["fx-initiating"]
    # a box table ending the text fills the width on every row: not wrapped text
    rows = ["| GPU 0 FIXTURE BO" + " " * 60 + "|", "| OM code=7" + " " * 67 + "|"] * 2
    assert _diag(fixture_library, [("smi.txt", "\n".join(rows) + "\n")]).diagnoses == []


def test_a_wrapped_line_is_measured_in_characters_not_bytes(fixture_library) -> None:  # noqa: ANN001
    # the terminal wraps at 73 columns: a line holding a three-byte ellipsis is as wide as the ASCII
    # line the failure was cut in
    head = "x" * 62 + " FIXTURE BO"
    text = ("\u2026 " + "y" * 100 + "\n" + head + "OM code=7 on the device\nshort tail line\n")
    wrapped = _hard_wrap(text, len(head))
    r = _diag(fixture_library, [("paste.log", wrapped)])
    assert [d.signature for d in r.diagnoses] == ["fx-initiating"]


def test_table_cells_wrapped_across_rows_are_rejoined(fixture_library) -> None:  # noqa: ANN001
    # dcgmi diag wraps a cell's text onto rows whose first cell is empty, cutting words
    rows = ["+----------+--------------------+",
            "| Memory   | Fail - GPU: 0      |",
            "| Warning  | GPU 0 FIXTURE BO   |",
            "|          | OM code=7 seen     |",
            "+----------+--------------------+"]
    r = _diag(fixture_library, [("diag.txt", "\n".join(rows) + "\n")])
    assert [d.signature for d in r.diagnoses] == ["fx-initiating"]
    ev = r.diagnoses[0].evidence[0]
    assert ev.line == 3 and "table cells" in ev.captures["unwrapped"]
    # a row that starts a new key is not a continuation
    rows[3] = "| Info     | OM code=7 seen     |"
    assert _diag(fixture_library, [("diag.txt", "\n".join(rows) + "\n")]).diagnoses == []


def test_lines_shorter_than_the_widest_are_not_joined(fixture_library) -> None:  # noqa: ANN001
    # the split line is not at the text's widest column, so it is not a terminal wrap
    text = "FIXTURE BO\nOM code=7\n" + "y" * 80 + "\nlast\n"
    assert _diag(fixture_library, [("a.log", text)]).diagnoses == []


def test_echo_printed_after_a_timeout_ranks_behind_it(fixture_library) -> None:  # noqa: ANN001
    # the abort after a collective timeout closes sockets: that closure is the timeout's echo
    r = _diag(fixture_library, [("a.log", "FIXTURE TIMEOUT seq=4\n[rank1]: FIXTURE SOCKET CLOSED by peer\n")])
    assert [d.signature for d in r.diagnoses] == ["fx-downstream", "fx-echo"]
    assert r.diagnoses[1].level == Level.SECONDARY and r.diagnoses[1].explained_by == "fx-downstream"


def test_echo_printed_before_the_timeout_started_it(fixture_library) -> None:  # noqa: ANN001
    r = _diag(fixture_library, [("a.log", "FIXTURE SOCKET CLOSED\nFIXTURE TIMEOUT seq=4\n")])
    assert [d.signature for d in r.diagnoses] == ["fx-echo", "fx-downstream"]
    # in other files without a clock, line order says nothing: the closure stays initiating
    r = _diag(fixture_library, [("rank0.log", "FIXTURE TIMEOUT seq=4\n"), ("rank1.log", "x\nx\nFIXTURE SOCKET CLOSED\n")])
    assert r.diagnoses[0].signature == "fx-echo" and r.diagnoses[0].level == Level.INITIATING
    # with clocks, the clock decides across files
    r = _diag(fixture_library, [("rank0.log", "2024-06-26 05:06:30 FIXTURE TIMEOUT seq=4\n"),
                                ("rank1.log", "2024-06-26 05:06:31 FIXTURE SOCKET CLOSED\n")])
    assert [d.signature for d in r.diagnoses] == ["fx-downstream", "fx-echo"]


def test_catch_all_is_not_explained_by_a_failure_that_is_itself_explained(fixture_library) -> None:  # noqa: ANN001
    # rank 0's own exception, then the peers' timeout and the abort's echo: the job's code is the cause
    text = "[rank0]: FixtureError: bad batch\nFIXTURE TIMEOUT seq=1\nFIXTURE SOCKET CLOSED\n"
    r = _diag(fixture_library, [("a.log", text)])
    assert [(d.signature, d.level) for d in r.diagnoses] == [
        ("fx-catchall", Level.INITIATING), ("fx-downstream", Level.DOWNSTREAM), ("fx-echo", Level.SECONDARY)]


def _xid(day: int, clock: str, pci: str, code: int, rest: str) -> str:
    return f"[Mon Aug  {day} {clock} 2024] NVRM: Xid (PCI:0000:00:{pci}): {code}, {rest}"


_XID31 = "pid=2512125, name=python3.10, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS faulted @ 0x7_0"
_XID79 = "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_failures_hours_apart_are_separate_incidents_the_graver_leads() -> None:
    # a dmesg over days: an application's MMU fault on one GPU, days later another GPU lost
    log = "\n".join([_xid(5, "03:54:13", "07", 31, _XID31), _xid(9, "11:02:40", "08", 79, _XID79)]) + "\n"
    r = diagnose_texts([("dmesg.txt", log)], workers=1)
    assert r.diagnoses[0].signature == "xid-79-fallen-off-bus", [d.signature for d in r.diagnoses]


def test_within_a_cascade_the_earlier_failure_still_starts_it() -> None:
    # minutes apart: the earlier fault is taken to have started the failure, whatever its priority
    log = "\n".join([_xid(5, "03:54:13", "07", 31, _XID31), _xid(5, "03:58:40", "08", 79, _XID79)]) + "\n"
    r = diagnose_texts([("dmesg.txt", log)], workers=1)
    assert r.diagnoses[0].signature == "xid-13-31-app-fault", [d.signature for d in r.diagnoses]


_RETRY = "node7:236813:236852 [1] NCCL INFO Call to connect returned Connection refused, retrying"
_WRAPPER = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
            "internal error, NCCL version 2.14.3")


def test_a_wrapper_that_names_no_cause_takes_it_from_retry_lines() -> None:
    alone = diagnose_texts([("a.log", "\n".join([_RETRY] * 3) + "\n")], workers=1)
    assert alone.diagnoses == []  # a start-up race that resolved itself is healthy
    wrapped = diagnose_texts([("a.log", "\n".join([_RETRY] * 3 + [_WRAPPER]) + "\n")], workers=1)
    assert [d.signature for d in wrapped.diagnoses][:2] == ["nccl-socket-error", "nccl-internal-error"]
    # a log with a cause of its own keeps it: the retries at start-up do not take over
    cuda = "node7:236813:236852 [1] enqueue.cc:100 NCCL WARN Cuda failure 'an illegal memory access was encountered'"
    own = diagnose_texts([("a.log", "\n".join([_RETRY] * 3 + [cuda, _WRAPPER]) + "\n")], workers=1)
    assert "nccl-socket-error" not in [d.signature for d in own.diagnoses], [d.signature for d in own.diagnoses]


def test_non_fatal_sxids_do_not_outrank_the_gpu_that_failed() -> None:
    # the driver could not bring up a GPU; corrected NVSwitch link interrupts print around it
    log = "\n".join([
        "[   38.268983] NVRM: GPU 0000:05:00.0: RmInitAdapter failed! (0x22:0x3f:744)",
        "[   38.279408] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 57 Minion Link DLREQ interrupt",
        "[   38.286738] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 58 Minion Link DLREQ interrupt",
    ]) + "\n"
    r = diagnose_texts([("dmesg.txt", log)], workers=1)
    assert [d.signature for d in r.diagnoses][:2] == ["gpu-rm-init-adapter-failed", "nvswitch-sxid"]


def test_a_finer_signature_reports_its_taxonomy_parent_in_the_json() -> None:
    # scorers and other tools key on `signature`: a split of a taxonomy id gives the parent there, itself as variant
    report = diagnose_texts([("job.log", "node1:311:405 [0] transport/net_ib.cc:199 NCCL WARN NET/IB : mlx5_3:1 "
                                         "Got async error event: port error\n")], workers=1)
    assert report.diagnoses[0].signature == "nccl-ib-port-error"
    top = report.to_dict()["diagnoses"][0]
    assert (top["signature"], top["variant"], top["parent"]) == ("nccl-ib-completion-error", "nccl-ib-port-error",
                                                                 "nccl-ib-completion-error")
    assert report.to_dict()["initiating"]["signature"] == "nccl-ib-completion-error"
