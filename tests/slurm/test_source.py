"""SlurmJobSource against the real scontrol/sacct of the test cluster."""

from __future__ import annotations

import subprocess

import pytest
from conftest import SlurmEnv

from bot.jobs import InvalidJobId, JobSourceError
from bot.jobs.slurm import RunResult, SlurmJobSource, SlurmSettings, run_command

pytestmark = pytest.mark.slurm

NCCL_JOB = """#!/bin/bash
#SBATCH --job-name=src-nccl
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err
mkdir -p logs/$SLURM_JOB_ID
echo "[rank1]: waiting in allreduce" > logs/$SLURM_JOB_ID/rank-1.log
echo "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error" >&2
exit 1
"""


@pytest.fixture
def source(slurm: SlurmEnv, monkeypatch: pytest.MonkeyPatch) -> SlurmJobSource:
    slurm.configure_hook()
    monkeypatch.setenv("TRIAGE_SLURM_LOG_GLOB", "{workdir}/logs/{job_id}/*.log")
    return SlurmJobSource.from_env()


def finished(slurm: SlurmEnv, job: str) -> None:
    state = slurm.cluster.wait_state(job, {"FAILED", "COMPLETED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY"}, 30)
    assert state, f"job {job} did not finish"


def test_resolves_a_failed_job_with_its_logs_and_nodes(slurm: SlurmEnv, source: SlurmJobSource) -> None:
    job = slurm.submit(NCCL_JOB)
    finished(slurm, job)
    info = source.resolve(f"job-{job}")
    assert (info.job_id, info.name, info.state, info.exit_code) == (job, "src-nccl", "FAILED", "1:0")
    assert (info.user, info.partition, info.cluster, info.nodes) == ("root", "debug", "ci", ["localhost"])
    assert [lg.name for lg in info.logs] == [f"src-nccl-{job}.out", f"src-nccl-{job}.err", f"logs/{job}/rank-1.log"]
    err = next(lg for lg in info.logs if lg.name.endswith(".err"))
    assert "NCCL error" in open(err.path).read()  # noqa: SIM115
    assert info.extra["log_problems"] == []


def test_array_job_and_task(slurm: SlurmEnv, source: SlurmJobSource) -> None:
    job = slurm.submit("#!/bin/bash\necho task $SLURM_ARRAY_TASK_ID\n[ $SLURM_ARRAY_TASK_ID = 2 ] && exit 2\nexit 0\n",
                       "-J", "src-arr", "-a", "1-3", "-o", "%x-%A_%a.out")
    for t in (1, 2, 3):
        finished(slurm, f"{job}_{t}")
    whole = source.resolve(job)
    assert (whole.job_id, whole.state, whole.exit_code) == (f"{job}_2", "FAILED", "2:0")
    assert whole.extra["array_tasks"] == {f"{job}_1": "COMPLETED", f"{job}_2": "FAILED", f"{job}_3": "COMPLETED"}
    task = source.resolve(f"{job}_3")
    assert (task.job_id, task.state) == (f"{job}_3", "COMPLETED")
    assert [lg.name for lg in task.logs] == [f"src-arr-{job}_3.out"]


def test_patterns_scontrol_leaves_unexpanded_are_found(slurm: SlurmEnv, source: SlurmJobSource) -> None:
    # %N is the node's own hostname (not its NodeName here), %5j zero-pads: scontrol expands neither.
    job = slurm.submit("#!/bin/bash\necho hello\nexit 4\n", "-J", "src-pat", "-o", "p-%N-%5j-%t.out")
    finished(slurm, job)
    info = source.resolve(job)
    assert len(info.logs) == 1 and info.logs[0].name.endswith(f"-{int(job):05d}-0.out"), info.extra
    assert "hello" in open(info.logs[0].path).read()  # noqa: SIM115


def test_job_name_with_newline_cannot_forge_the_record(slurm: SlurmEnv, source: SlurmJobSource) -> None:
    job = slurm.submit("#!/bin/bash\nexit 5\n", "-J", "x\n   JobState=COMPLETED UserId=nobody(65534)", "-o", "nl-%j.out")
    finished(slurm, job)
    with pytest.raises(JobSourceError, match="ambiguous"):
        source.resolve(job)


def test_forgotten_job_is_found_through_sacct_completion_log(slurm: SlurmEnv, source: SlurmJobSource) -> None:
    job = slurm.submit("#!/bin/bash\necho from-default-output\nexit 7\n", "-J", "src-old")
    finished(slurm, job)

    def scontrol_forgot(argv: list[str], timeout: float) -> RunResult:
        # As after MinJobAge: scontrol no longer knows the job; sacct (real, -c) must.
        if argv[0].endswith("scontrol") and "job" in argv:
            return RunResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
        return run_command(argv, timeout)

    src = SlurmJobSource(SlurmSettings.from_env(), runner=scontrol_forgot)
    info = src.resolve(job)
    assert (info.state, info.exit_code, info.name, info.extra["source"]) == ("FAILED", "7:0", "src-old", "sacct")
    assert [lg.name for lg in info.logs] == [f"slurm-{job}.out"]


def test_unknown_job_and_hostile_ids(slurm: SlurmEnv, source: SlurmJobSource) -> None:
    with pytest.raises(JobSourceError, match="Slurm has no job 4200000000"):
        source.resolve("4200000000")
    for bad in ("1; scancel 1", "$(scontrol shutdown)", "1" * 10_000):
        with pytest.raises(InvalidJobId):
            source.resolve(bad)
    r = subprocess.run(["/usr/bin/sinfo", "-h", "-o", "%T"], env=slurm.cluster.env, capture_output=True, text=True)
    assert r.stdout.strip() in ("idle", "mixed", "allocated")  # the cluster is still there


def test_forgotten_job_with_custom_output_is_read_through_the_hooks_paths(slurm: SlurmEnv,
                                                                           source: SlurmJobSource) -> None:
    """sacct knows no output paths, so a job written to `-o custom/%j.log` that slurmctld forgot is
    found only through the paths the epilog passed along; a hint that is not absolute is ignored."""
    from bot.jobs import LogHints

    job = slurm.submit("#!/bin/bash\necho from-custom-output\nexit 7\n", "-J", "src-hint", "-o", "hinted-%j.log")
    finished(slurm, job)
    path = source.resolve(job).logs[0].path  # while scontrol still knows it

    def scontrol_forgot(argv: list[str], timeout: float) -> RunResult:
        if argv[0].endswith("scontrol") and "job" in argv:
            return RunResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
        return run_command(argv, timeout)

    src = SlurmJobSource(SlurmSettings.from_env(), runner=scontrol_forgot)
    assert [lg.name for lg in src.resolve(job).logs] == []  # the default slurm-N.out does not exist
    info = src.resolve(job, hints=LogHints(stdout=path, stderr=path))
    assert [lg.path for lg in info.logs] == [path]
    assert "from-custom-output" in open(info.logs[0].path).read()  # noqa: SIM115
    assert src.resolve(job, hints=LogHints(stdout="hinted.log")).logs == []
