"""Job ids typed in Slack: the accepted spellings, and hostile input refused before any command runs."""

from __future__ import annotations

import pytest

from bot.jobs import InvalidJobId
from bot.jobs.slurm import RunResult, SlurmJobSource, SlurmSettings


class RecordingRunner:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> RunResult:
        self.calls.append(argv)
        return RunResult(1, "", "slurm_load_jobs error: Invalid job id specified")


@pytest.fixture
def source() -> tuple[SlurmJobSource, RecordingRunner]:
    runner = RecordingRunner()
    return SlurmJobSource(SlurmSettings(), runner=runner), runner


@pytest.mark.parametrize(("text", "canonical"), [
    ("1234", "1234"),
    ("  1234\n", "1234"),
    ("job-1234", "1234"),
    ("job 1234", "1234"),
    ("Job_1234", "1234"),
    ("JobId=1234", "1234"),
    ("#1234", "1234"),
    ("`1234`", "1234"),
    ("1234_7", "1234_7"),
    ("job-1234_7", "1234_7"),
    ("1234+1", "1234+1"),
    ("001234", "1234"),
    ("4294967293", "4294967293"),
    ("1234.0", "1234"),  # a step, as sacct lists it: its job
    ("1234_7.batch", "1234_7"),
])
def test_accepted_spellings(source, text: str, canonical: str) -> None:  # noqa: ANN001
    src, _ = source
    assert src.parse_job_id(text) == canonical


@pytest.mark.parametrize("text", [
    "1234; rm -rf /",
    "$(id)",
    "`id`",
    "1234 && reboot",
    "1234|cat /etc/shadow",
    "../../etc/passwd",
    "-1",
    "0",
    "4294967294",  # NO_VAL - 1: never a real job
    "99999999999",
    "1234_",
    "1234+",
    "1234_7_8",
    "1234+1+2",
    "1234_4000001",
    "1234+128",
    "1234,1235",
    "1234.",
    "1234.0.1",
    "1234.extern;id",
    "--help",
    "1234\n5678",
    "١٢٣٤",  # Arabic-Indic digits: \d would take them, Slurm would not
    "<!channel> 1234",
    "",
    "job",
    "1" * 10_000,
    "job-" + "9" * 5000,
])
def test_hostile_or_malformed_ids_are_refused_without_running_anything(source, text: str) -> None:  # noqa: ANN001
    src, runner = source
    with pytest.raises(InvalidJobId) as exc:
        src.resolve(text)
    msg = str(exc.value)
    assert "Slurm job id" in msg or "run from" in msg
    assert "1234_7" in msg  # tells the user what would work
    assert len(msg) < 300
    if len(text.strip()) > 6:
        assert text.strip() not in msg  # never echoed: it may be 10 KB, or Slack markup
    assert runner.calls == []


def test_long_input_refusal_says_why(source) -> None:  # noqa: ANN001
    src, _ = source
    with pytest.raises(InvalidJobId, match="10000 characters long"):
        src.parse_job_id("1" * 10_000)


def test_valid_id_reaches_scontrol_as_one_argv_item(source) -> None:  # noqa: ANN001
    src, runner = source
    with pytest.raises(Exception, match="no job 1234_7"):
        src.resolve("job 1234_7")
    assert runner.calls[0][1:] == ["-dd", "show", "job", "1234_7"]
