"""Output-file patterns: expected names are the files slurmstepd really created on Slurm 22.05."""

from __future__ import annotations

import glob

import pytest

from bot.jobs.patterns import PatternFields, expand_pattern, has_symbols

JOB16 = PatternFields(job_id="16", name="pp", user="root", host="vm")


@pytest.mark.parametrize(("pattern", "fields", "real_name"), [
    ("p-%J-%s-%t-%n-%N-%5j-%A-%a-%u-%x-%%.out", JOB16, "p-16-batch-0-0-vm-00016-16-4294967294-root-pp-%.out"),
    ("q-%A-%a-%j-%3a.out", PatternFields(job_id="18", name="ar", user="root", array_job_id="18", array_task_id="5"),
     "q-18-5-18-005.out"),
    ("e-%j-%12j-%x.out", PatternFields(job_id="21", name="tw", user="root"), "e-21-0000000021-tw.out"),
    ("arr-%A_%a.out", PatternFields(job_id="11", name="arr", user="root", array_job_id="3", array_task_id="2"),
     "arr-3_2.out"),
    ("o-%j-%u-%N.out", PatternFields(job_id="2", name="x", user="root", host="vm"), "o-2-root-vm.out"),
    ("%x-%j.err", PatternFields(job_id="1", name="train-nccl", user="root"), "train-nccl-1.err"),
    # Any backslash: no symbol is replaced, escapes are removed.
    ("c\\-%j.out", JOB16, "c-%j.out"),
    ("b\\\\-%j.out", JOB16, "b\\-%j.out"),
    ("d-%j\\.out", JOB16, "d-%j.out"),
])
def test_expands_like_slurmstepd(pattern: str, fields: PatternFields, real_name: str) -> None:
    assert expand_pattern(pattern, fields) == real_name


def test_finishes_what_scontrol_left_unexpanded() -> None:
    # scontrol printed this for job 16: %A %a %u %x done, %J %s %t %n %N %5j %% left as they were.
    partial = "/tmp/cap/p-%J-%s-%t-%n-%N-%5j-16-4294967294-root-pp-%%.out"
    assert expand_pattern(partial, JOB16) == "/tmp/cap/p-16-batch-0-0-vm-00016-16-4294967294-root-pp-%.out"


def test_unknown_host_becomes_a_wildcard_and_the_rest_is_escaped(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "run[1]-vm.out").write_text("x")
    (tmp_path / "run1-vm.out").write_text("decoy")
    f = PatternFields(job_id="7", name="run[1]", user="u")
    pat = expand_pattern(str(tmp_path / "%x-%N.out"), f, unknown="*", escape=glob.escape)
    assert glob.glob(pat) == [str(tmp_path / "run[1]-vm.out")]


def test_unknown_symbols_stay_when_no_replacement_is_given() -> None:
    assert expand_pattern("a-%N.out", PatternFields(job_id="1")) == "a-%N.out"


def test_has_symbols() -> None:
    assert has_symbols("/x/%N.out") and not has_symbols("/x/a.out") and not has_symbols("/x/a\\%j.out")
