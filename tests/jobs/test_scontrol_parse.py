"""Parsing real `scontrol -dd show job` and `sacct` output captured from Slurm 22.05.8 (data/)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from bot.jobs.slurm_parse import SlurmParseError, parse_sacct_rows, parse_scontrol_jobs, record_from_sacct

DATA = Path(__file__).parent / "data"


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_failed_nccl_job() -> None:
    [r] = parse_scontrol_jobs(load("scontrol-dd-failed-nccl.txt"))
    assert (r.job_id, r.name, r.user, r.uid) == ("1", "train-nccl", "root", 0)
    assert (r.state, r.reason, r.exit_code) == ("FAILED", "NonZeroExitCode", "1:0")
    assert (r.partition, r.nodelist, r.batch_host) == ("debug", "localhost", "localhost")
    assert r.std_out == "/tmp/cap/train-nccl-1.out" and r.std_err == "/tmp/cap/train-nccl-1.err"
    assert r.work_dir == "/tmp/cap"
    assert r.start == datetime(2026, 11, 30, 23, 37, 28) and r.end == datetime(2026, 11, 30, 23, 37, 28)
    assert r.node_details == [{"Nodes": "localhost", "CPU_IDs": "0", "Mem": "256", "GRES": ""}]
    assert r.display_id == "1"


def test_name_with_spaces_and_field_lookalike_stays_the_name() -> None:
    [r] = parse_scontrol_jobs(load("scontrol-dd-name-with-spaces.txt"))
    assert r.name == "name with JobState=COMPLETED spaces"
    assert r.state == "FAILED" and r.exit_code == "3:0"
    assert r.std_out.endswith("o-2-root-%N.out")  # scontrol leaves %N alone


def test_name_with_newline_that_forges_a_field_is_refused() -> None:
    # sbatch -J $'line1\n   JobState=COMPLETED' really prints a second JobState line.
    with pytest.raises(SlurmParseError, match="JobState appears twice"):
        parse_scontrol_jobs(load("scontrol-dd-newline-name.txt"))


def test_forged_second_record_is_refused() -> None:
    text = load("scontrol-dd-failed-nccl.txt")
    forged = text.replace("JobName=train-nccl", "JobName=x\n\n" + text.split("\n", 1)[0], 1)
    with pytest.raises(SlurmParseError):
        parse_scontrol_jobs(forged)


def test_array_master_lists_every_task() -> None:
    recs = parse_scontrol_jobs(load("scontrol-dd-array-all-tasks.txt"))
    assert [(r.job_id, r.display_id, r.state) for r in recs] == [
        ("3", "3_3", "COMPLETED"), ("11", "3_2", "FAILED"), ("10", "3_1", "COMPLETED")]


def test_array_task() -> None:
    [r] = parse_scontrol_jobs(load("scontrol-dd-array-task.txt"))
    assert (r.job_id, r.array_job_id, r.array_task_id, r.display_id) == ("11", "3", "2", "3_2")
    assert r.exit_code == "2:0"


def test_het_job_components() -> None:
    recs = parse_scontrol_jobs(load("scontrol-het-pending.txt"))
    assert [(r.job_id, r.display_id, r.state, r.nodelist) for r in recs] == [
        ("4", "4+0", "PENDING", ""), ("5", "4+1", "PENDING", "")]
    [r] = parse_scontrol_jobs(load("scontrol-dd-het-component-cancelled.txt"))
    assert (r.display_id, r.state) == ("4+1", "CANCELLED")


@pytest.mark.parametrize(("name", "state", "reason", "exit_code"), [
    ("scontrol-dd-timeout.txt", "TIMEOUT", "TimeLimit", "0:15"),
    ("scontrol-dd-cancelled-running.txt", "CANCELLED", "None", "0:15"),
    ("scontrol-dd-segv.txt", "FAILED", "JobLaunchFailure", "0:11"),
    ("scontrol-dd-overmemkill.txt", "FAILED", "JobLaunchFailure", "0:9"),
])
def test_endings(name: str, state: str, reason: str, exit_code: str) -> None:
    [r] = parse_scontrol_jobs(load(name))
    assert (r.state, r.reason, r.exit_code) == (state, reason, exit_code)


def test_one_line_form_is_refused_not_misread() -> None:
    # -o puts every field on one line behind the free-text JobName: unreadable without guessing,
    # which is why the source asks for the multi-line form.
    with pytest.raises(SlurmParseError, match="lacks UserId"):
        parse_scontrol_jobs(load("scontrol-o-failed-nccl.txt"))


def test_sacct_completion_rows() -> None:
    [row] = parse_sacct_rows(load("sacct-c-timeout.txt"))
    r = record_from_sacct(row)
    assert (r.job_id, r.name, r.user, r.uid, r.state) == ("1", "tl", "root", 0, "TIMEOUT")
    assert r.exit_code == "0:0"  # jobcomp records TIMEOUT before the final exit code is known
    assert r.cluster == ""  # jobcomp says "unknown"
    assert r.end == datetime(2026, 11, 30, 23, 50, 12)
    assert parse_sacct_rows(load("sacct-c-missing.txt")) == []


def test_sacct_row_with_wrong_column_count_is_refused() -> None:
    with pytest.raises(SlurmParseError):
        parse_sacct_rows("1\x1fa\x1fb\n")


def test_sacct_state_and_ids_from_slurmdbd_form() -> None:
    fields = ("JobID", "JobIDRaw", "JobName", "User", "UID", "State", "ExitCode", "NodeList", "WorkDir",
              "Start", "End", "Partition", "Cluster")
    row = "\x1f".join(["1234_7", "1241", "train", "alice", "1001", "CANCELLED by 1001", "0:15", "gpu[01-02]",
                       "/home/alice", "2024-06-26T05:00:00", "2024-06-26T05:06:30", "gpu", "prod"])
    r = record_from_sacct(parse_sacct_rows(row, fields)[0])
    assert (r.job_id, r.display_id, r.state, r.uid, r.cluster) == ("1241", "1234_7", "CANCELLED", 1001, "prod")
