"""Strict Slurm job-id validation: what a user types in Slack -> a canonical id, or a refusal.

Accepted: "1234", "job-1234", "job 1234", "job_1234", "#1234", "JobId=1234", array tasks
"1234_7", het job components "1234+1", and step ids ("1234.0", "1234_7.batch") for their job.
Everything else is refused before it goes anywhere near a subprocess (and the ids never reach
a shell anyway: argv lists only). The refusal never echoes the input back: it may be 10 KB, or
Slack markup such as <!channel>.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .base import InvalidJobId

MAX_INPUT = 64  # longest sane spelling: "JobId=4294967294_4000000" is 24 characters
MAX_JOB_ID = 4294967293  # Slurm reserves 0xfffffffe/0xffffffff (NO_VAL)
MAX_ARRAY_TASK = 4_000_000  # MaxArraySize is capped at 4000001
MAX_HET_OFFSET = 127  # at most 128 het job components

# [0-9], not \d: \d also matches Arabic-Indic and other Unicode digits.
_ID = re.compile(
    r"(?:(?:job|jobid)\s*[-_:=#\s]?\s*|\#)?"
    r"(?P<job>[0-9]{1,10})(?:_(?P<task>[0-9]{1,7})|\+(?P<het>[0-9]{1,3}))?"
    # A step id as sacct prints it (1234.0, 1234.batch) names its job: diagnosis is per job.
    r"(?:\.(?:[0-9]{1,5}|batch|extern|interactive))?",
    re.ASCII | re.IGNORECASE,
)

HELP = ("Use the id Slurm printed: `1234`, `job-1234`, an array task `1234_7` or a het job "
        "component `1234+1`.")


@dataclass(frozen=True)
class SlurmJobId:
    job: int
    task: int | None = None
    het: int | None = None

    def __str__(self) -> str:
        if self.task is not None:
            return f"{self.job}_{self.task}"
        if self.het is not None:
            return f"{self.job}+{self.het}"
        return str(self.job)


def parse_slurm_job_id(text: str) -> SlurmJobId:
    if not isinstance(text, str):
        raise InvalidJobId(f"That is not a Slurm job id. {HELP}")
    s = text.strip().strip("`")
    if len(s) > MAX_INPUT:
        raise InvalidJobId(f"That is not a Slurm job id (it is {len(text)} characters long). {HELP}")
    m = _ID.fullmatch(s)
    if not m:
        raise InvalidJobId(f"That is not a Slurm job id. {HELP}")
    job = int(m.group("job"))
    if not 1 <= job <= MAX_JOB_ID:
        raise InvalidJobId(f"Slurm job ids run from 1 to {MAX_JOB_ID}. {HELP}")
    task = int(m.group("task")) if m.group("task") is not None else None
    het = int(m.group("het")) if m.group("het") is not None else None
    if task is not None and task > MAX_ARRAY_TASK:
        raise InvalidJobId(f"Array task ids run from 0 to {MAX_ARRAY_TASK}. {HELP}")
    if het is not None and het > MAX_HET_OFFSET:
        raise InvalidJobId(f"Het job components run from +0 to +{MAX_HET_OFFSET}. {HELP}")
    return SlurmJobId(job, task, het)
