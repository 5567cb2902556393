"""SlurmJobSource over captured real outputs: which record, which logs, which verdict, which message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.jobs import JobSourceError
from bot.jobs.slurm import RunResult, SlurmJobSource, SlurmSettings
from bot.jobs.slurm_logs import LogSearch

DATA = Path(__file__).parent / "data"
NOT_FOUND = RunResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
ACCT_OFF = RunResult(1, "", "Slurm accounting storage is disabled\n")


class FakeSlurm:
    """Answers argv prefixes with captured outputs; paths under /tmp/cap move to `workdir`."""

    def __init__(self, workdir: Path, answers: dict[tuple[str, ...], RunResult | str]) -> None:
        self.workdir = str(workdir)
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> RunResult:
        self.calls.append(argv)
        tool = os.path.basename(argv[0])
        for key, ans in self.answers.items():
            if (tool, *argv[1:])[: len(key)] == key:
                if isinstance(ans, str):
                    ans = RunResult(0, (DATA / ans).read_text().replace("/tmp/cap", self.workdir), "")
                return ans
        if tool == "scontrol" and argv[1:3] == ["show", "config"]:
            return RunResult(0, "ClusterName             = ci\n", "")
        raise AssertionError(f"unexpected command {argv}")


def make(tmp_path: Path, answers: dict, **search) -> tuple[SlurmJobSource, FakeSlurm]:  # noqa: ANN003
    fake = FakeSlurm(tmp_path, answers)
    settings = SlurmSettings(scontrol="/usr/bin/scontrol", sacct="/usr/bin/sacct",
                             logs=LogSearch(check_owner=False, **search))
    return SlurmJobSource(settings, runner=fake), fake


def write(p: Path, text: str = "x\n") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_failed_job_resolves_with_its_logs(tmp_path: Path) -> None:
    write(tmp_path / "train-nccl-1.out", "Starting\n")
    write(tmp_path / "train-nccl-1.err", "[rank0]: NCCL error\n")
    src, fake = make(tmp_path, {("scontrol", "-dd", "show", "job", "1"): "scontrol-dd-failed-nccl.txt"})
    job = src.resolve("job-1")
    assert (job.job_id, job.name, job.user, job.state, job.exit_code) == ("1", "train-nccl", "root", "FAILED", "1:0")
    assert (job.partition, job.cluster, job.nodes, job.reason) == ("debug", "ci", ["localhost"], "NonZeroExitCode")
    assert [(lg.name, lg.path) for lg in job.logs] == [
        ("train-nccl-1.out", str(tmp_path / "train-nccl-1.out")),
        ("train-nccl-1.err", str(tmp_path / "train-nccl-1.err"))]
    assert all(lg.data is None for lg in job.logs)  # by path: the engine streams big files
    assert job.verdict_lines == []  # a plain FAILED needs no scheduler verdict
    assert job.extra["log_problems"] == [] and job.extra["source"] == "scontrol"
    assert fake.calls[0] == ["/usr/bin/scontrol", "-dd", "show", "job", "1"]


def test_timeout_gives_the_slurmstepd_verdict_line(tmp_path: Path) -> None:
    write(tmp_path / "tl-12.out", (DATA / "timeout-job-output.txt").read_text())
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "12"): "scontrol-dd-timeout.txt"})
    job = src.resolve("12")
    assert job.state == "TIMEOUT"
    assert job.verdict_lines == [
        "slurmstepd: error: *** JOB 12 ON localhost CANCELLED AT 2026-11-30T23:39:18 DUE TO TIME LIMIT ***"]


def test_array_id_picks_the_failed_task_and_lists_the_others(tmp_path: Path) -> None:
    write(tmp_path / "arr-3_2.out", "task 2\n")
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "3"): "scontrol-dd-array-all-tasks.txt"})
    job = src.resolve("3")
    assert (job.job_id, job.state, job.exit_code) == ("3_2", "FAILED", "2:0")
    assert job.extra["array_tasks"] == {"3_1": "COMPLETED", "3_2": "FAILED", "3_3": "COMPLETED"}
    assert [lg.name for lg in job.logs] == ["arr-3_2.out"]


def test_array_task_id(tmp_path: Path) -> None:
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "3_2"): "scontrol-dd-array-task.txt"})
    job = src.resolve("3_2")
    assert job.job_id == "3_2" and job.extra["raw_job_id"] == "11"
    assert job.extra["log_problems"] == [
        f"stdout {tmp_path}/arr-3_2.out was not found on the bot's host (is the job's filesystem mounted here?)"]


def test_het_job_takes_every_component(tmp_path: Path) -> None:
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "4"): "scontrol-het-pending.txt"})
    job = src.resolve("4")
    assert job.job_id == "4+0" and job.extra["het_components"] == {"4+0": "PENDING", "4+1": "PENDING"}


def test_answer_for_another_id_is_refused(tmp_path: Path) -> None:
    # The output names job 1 although 7 was asked for: not ours to show.
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "7"): "scontrol-dd-failed-nccl.txt"})
    with pytest.raises(JobSourceError, match="records of other jobs"):
        src.resolve("7")


def test_forged_record_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "14"): "scontrol-dd-newline-name.txt"})
    with pytest.raises(JobSourceError, match="ambiguous"):
        src.resolve("14")


def test_forgotten_job_falls_back_to_sacct_completion_log(tmp_path: Path) -> None:
    write(tmp_path / "slurm-1.out", "start\n")
    src, fake = make(tmp_path, {
        ("scontrol", "-dd"): NOT_FOUND,
        ("sacct", "-X"): ACCT_OFF,
        ("sacct", "-c"): "sacct-c-timeout.txt",
    })
    job = src.resolve("1")
    assert (job.state, job.name, job.nodes, job.extra["source"]) == ("TIMEOUT", "tl", ["localhost"], "sacct")
    assert [lg.name for lg in job.logs] == ["slurm-1.out"]  # sbatch's default name in WorkDir
    assert "exit code 0:0" in job.extra["note"]
    assert job.verdict_lines[0].endswith("DUE TO TIME LIMIT ***")
    sacct = fake.calls[2]
    assert sacct[:2] == ["/usr/bin/sacct", "-c"] and "--delimiter=\x1f" in sacct and "1" in sacct


def test_unknown_job_says_so(tmp_path: Path) -> None:
    src, _ = make(tmp_path, {("scontrol",): NOT_FOUND, ("sacct", "-X"): ACCT_OFF, ("sacct", "-c"): RunResult(0, "", "")})
    with pytest.raises(JobSourceError, match="Slurm has no job 99999"):
        src.resolve("99999")


def test_sacct_completion_answer_for_an_array_task_is_not_taken_for_it(tmp_path: Path) -> None:
    # `sacct -c -j 3_2` really answers with job 3's row; that is not job 3_2.
    row = "3\x1f3\x1farr\x1froot(0)\x1f0\x1fCOMPLETED\x1f0:0\x1flocalhost\x1f/tmp\x1f2026-11-30T23:37:28\x1f" \
          "2026-11-30T23:37:28\x1fdebug\x1funknown\n"
    src, _ = make(tmp_path, {("scontrol",): NOT_FOUND, ("sacct", "-X"): ACCT_OFF,
                             ("sacct", "-c"): RunResult(0, row, "")})
    with pytest.raises(JobSourceError, match="no job 3_2"):
        src.resolve("3_2")


def test_controller_down_message(tmp_path: Path) -> None:
    down = RunResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    src, _ = make(tmp_path, {("scontrol",): down, ("sacct",): RunResult(1, "", "sacct: error: Problem talking to the database\n")})
    with pytest.raises(JobSourceError, match="Unable to contact slurm controller"):
        src.resolve("1")


def test_missing_binary_and_timeout_messages(tmp_path: Path) -> None:
    src = SlurmJobSource(SlurmSettings(scontrol=str(tmp_path / "no-scontrol"), sacct=str(tmp_path / "no-sacct")))
    with pytest.raises(JobSourceError, match="is not installed on the bot's host"):
        src.resolve("1")
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    src = SlurmJobSource(SlurmSettings(scontrol=str(slow), timeout_s=0.3))
    with pytest.raises(JobSourceError, match="did not answer within 0.3 s"):
        src.resolve("1")


def test_per_rank_logs_by_glob(tmp_path: Path) -> None:
    for r in range(3):
        write(tmp_path / "logs" / "1" / f"rank-{r}.log")
    write(tmp_path / "logs" / "1" / "notes.txt")
    write(tmp_path / "logs" / "2" / "rank-0.log")
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "1"): "scontrol-dd-failed-nccl.txt"},
                  globs=["{workdir}/logs/{job_id}/*.log"])
    names = [lg.name for lg in src.resolve("1").logs]
    assert names == ["logs/1/rank-0.log", "logs/1/rank-1.log", "logs/1/rank-2.log"]


def test_glob_values_are_escaped(tmp_path: Path) -> None:
    # A job named "*" must not widen {name} to every directory.
    write(tmp_path / "logs" / "*" / "a.log")
    write(tmp_path / "logs" / "other" / "b.log")
    src, fake = make(tmp_path, {("scontrol", "-dd", "show", "job", "1"): "scontrol-dd-failed-nccl.txt"},
                     globs=["{workdir}/logs/{name}/*.log"])
    fake.answers[("scontrol", "-dd", "show", "job", "1")] = RunResult(
        0, (DATA / "scontrol-dd-failed-nccl.txt").read_text().replace("/tmp/cap", str(tmp_path))
        .replace("JobName=train-nccl", "JobName=*"), "")
    assert [lg.name for lg in src.resolve("1").logs] == ["logs/*/a.log"]


def test_log_count_is_bounded(tmp_path: Path) -> None:
    write(tmp_path / "train-nccl-1.out")
    for i in range(5):
        write(tmp_path / "many" / f"{i}.log")
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "1"): "scontrol-dd-failed-nccl.txt"},
                  globs=["{workdir}/many/*.log"], max_files=3)
    job = src.resolve("1")
    assert [lg.name for lg in job.logs] == ["train-nccl-1.out", "many/0.log", "many/1.log"]
    assert "stopped at 3 log files (TRIAGE_SLURM_LOG_MAX_FILES)" in job.extra["log_problems"]


def test_bad_glob_template_is_reported_not_raised(tmp_path: Path) -> None:
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "1"): "scontrol-dd-failed-nccl.txt"},
                  globs=["{workdir}/{rank}.log"])
    assert any("log glob" in p and "known fields" in p for p in src.resolve("1").extra["log_problems"])


def test_special_files_are_not_read(tmp_path: Path) -> None:
    # --output=/dev/zero or a FIFO would never end.
    os.mkfifo(tmp_path / "train-nccl-1.out")
    src, _ = make(tmp_path, {("scontrol", "-dd", "show", "job", "1"): "scontrol-dd-failed-nccl.txt"})
    job = src.resolve("1")
    assert [lg.name for lg in job.logs] == []
    assert any("not a regular file" in p for p in job.extra["log_problems"])


def test_files_not_owned_by_the_job_user_are_not_read(tmp_path: Path) -> None:
    out = write(tmp_path / "train-nccl-1.out")
    fake = FakeSlurm(tmp_path, {("scontrol", "-dd", "show", "job", "1"): "scontrol-dd-failed-nccl.txt"})
    src = SlurmJobSource(SlurmSettings(logs=LogSearch(check_owner=True)), runner=fake)
    if os.geteuid() == 0:
        os.chown(out, 12345, 12345)  # the captured job belongs to root(0)
    job = src.resolve("1")
    assert job.logs == []
    assert any("not owned by the job's user root" in p for p in job.extra["log_problems"])


def test_settings_from_env(tmp_path: Path) -> None:
    s = SlurmSettings.from_env({
        "TRIAGE_SLURM_LOG_GLOB": "{workdir}/logs/{job_id}/*.log:{workdir}/rank-*.txt",
        "TRIAGE_SLURM_SCONTROL": "/opt/slurm/bin/scontrol",
        "TRIAGE_SLURM_TIMEOUT": "3",
        "TRIAGE_SLURM_CHECK_OWNER": "0",
        "TRIAGE_SLURM_LOG_MAX_FILES": "9",
        "TRIAGE_SLURM_CLUSTER": "prod",
    })
    assert s.logs.globs == ["{workdir}/logs/{job_id}/*.log", "{workdir}/rank-*.txt"]
    assert (s.scontrol, s.timeout_s, s.logs.check_owner, s.logs.max_files, s.cluster) == (
        "/opt/slurm/bin/scontrol", 3.0, False, 9, "prod")
    assert SlurmJobSource.from_env().name == "slurm"


@pytest.mark.parametrize(("state", "nodelist", "expected"), [
    ("NODE_FAIL", "gpu[01-02]",
     "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2024-06-26T05:06:30 DUE TO NODE FAILURE ***"),
    ("PREEMPTED", "gpu01",
     "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2024-06-26T05:06:30 DUE TO PREEMPTION ***"),
    ("OUT_OF_MEMORY", "gpu01",
     "slurmstepd: error: Detected 1 oom_kill event in StepId=1234.batch. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler."),
    ("CANCELLED", "gpu01", "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2024-06-26T05:06:30 ***"),
    ("CANCELLED", "", None),  # cancelled while pending: it never ran, nothing to say
    ("FAILED", "gpu01", None),
    ("COMPLETED", "gpu01", None),
])
def test_verdict_lines(state: str, nodelist: str, expected: str | None) -> None:
    from datetime import datetime

    from bot.jobs.slurm import verdict_lines
    from bot.jobs.slurm_parse import SlurmJobRecord

    # No BatchHost (a node that died may leave none): the first node of the list is named.
    rec = SlurmJobRecord(job_id="1234", state=state, nodelist=nodelist, end=datetime(2024, 6, 26, 5, 6, 30))
    got = verdict_lines(rec)
    assert got == ([expected] if expected else [])


def test_missing_sacct_does_not_hide_that_the_job_is_unknown(tmp_path: Path) -> None:
    calls = []

    def runner(argv: list[str], timeout: float) -> RunResult:
        calls.append(argv[0])
        if argv[0].endswith("scontrol"):
            return NOT_FOUND
        raise JobSourceError(f"{argv[0]} is not installed on the bot's host.")

    src = SlurmJobSource(SlurmSettings(scontrol="/usr/bin/scontrol", sacct="/nope/sacct"), runner=runner)
    with pytest.raises(JobSourceError, match=r"Slurm has no job 5: .*/nope/sacct is not installed"):
        src.resolve("5")
