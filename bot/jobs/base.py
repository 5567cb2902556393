"""The job-source interface the bot uses for `/diagnose <job id>` and scheduler webhooks.

A job source validates an id strictly (ids never reach a shell), resolves it to the job's state,
nodes and log files, and states the scheduler's verdict as evidence lines the engine can match
("slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT ... DUE TO TIME LIMIT ***").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


class JobSourceError(Exception):
    """A failure to show the user as is (no traceback): unknown job, scheduler unreachable, ..."""


class InvalidJobId(JobSourceError):
    """The text is not a job id this source accepts (shell metacharacters, too long, wrong form)."""


@dataclass
class JobLog:
    name: str  # shown as the evidence source, e.g. "slurm-1234.out" or "rank-3.log"
    path: str | None = None
    data: bytes | None = None


@dataclass
class JobInfo:
    job_id: str
    name: str | None = None
    user: str | None = None
    state: str | None = None  # FAILED, NODE_FAIL, TIMEOUT, CANCELLED, OUT_OF_MEMORY, ...
    exit_code: str | None = None  # "1:0" (code:signal), as Slurm prints it
    reason: str | None = None
    partition: str | None = None
    cluster: str | None = None
    nodes: list[str] = field(default_factory=list)  # expanded host names: the hosts to probe
    start: datetime | None = None
    end: datetime | None = None
    logs: list[JobLog] = field(default_factory=list)
    verdict_lines: list[str] = field(default_factory=list)  # scheduler verdict, as evidence text
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"job {self.job_id}"]
        if self.name:
            parts.append(f"({self.name})")
        if self.state:
            parts.append(f"state {self.state}")
        if self.exit_code:
            parts.append(f"exit {self.exit_code}")
        if self.nodes:
            parts.append("on " + ",".join(self.nodes[:8]) + (" ..." if len(self.nodes) > 8 else ""))
        return " ".join(parts)


def is_log_path(path: object) -> bool:
    """An absolute path of printable characters, as slurmctld reports a job's output files (the one
    rule for paths that arrive from outside: the webhook refuses others, the job source ignores them)."""
    return (isinstance(path, str) and path.startswith("/") and len(path) <= 4096
            and not any(ord(c) < 32 or ord(c) == 127 for c in path))


@dataclass(frozen=True)
class LogHints:
    """Output paths the scheduler's hook passed along (EpilogSlurmctld's SLURM_JOB_STDOUT/STDERR):
    used only where the scheduler itself no longer knows them (a job aged out of slurmctld), and
    read under the same rules as any job log (owned by the job's user)."""

    stdout: str | None = None
    stderr: str | None = None
    work_dir: str | None = None


class JobSource(Protocol):
    name: str

    def parse_job_id(self, text: str) -> str:
        """Return the canonical id for `text` ("job-1234", "1234", "1234_7", "1234+1"), or raise InvalidJobId."""
        ...

    def resolve(self, job_id: str, hints: LogHints | None = None) -> JobInfo:
        """Look the job up; raise JobSourceError with a message fit for the user."""
        ...


class NoJobSource:
    """Used until a scheduler is configured: says so plainly instead of failing."""

    name = "none"

    def parse_job_id(self, text: str) -> str:
        raise JobSourceError(
            "No job source is configured, so job ids cannot be looked up. Paste the log instead, "
            "or configure Slurm (TRIAGE_JOB_SOURCE=slurm)."
        )

    def resolve(self, job_id: str, hints: LogHints | None = None) -> JobInfo:
        return self.parse_job_id(job_id)  # type: ignore[return-value]


class NodeControl(Protocol):
    """What a job source offers for the human-approved drain (Slurm: bot/jobs/slurm_nodes.py).
    A source without it (NoJobSource) cannot drain: the bot then offers no Drain button."""

    def node_status(self, host: str) -> Any: ...  # NodeStatus, or None for an unknown node
    def drain_node(self, host: str, reason: str) -> list[str]: ...  # the argv it ran
    def resume_node(self, host: str) -> list[str]: ...
    def jobs_on_node(self, host: str, limit: int = 50) -> tuple[list[Any], int]: ...  # (RunningJob..., total)


def node_control(source: object) -> NodeControl | None:
    """The source's node control, or None when it has none."""
    names = ("node_status", "drain_node", "resume_node", "jobs_on_node")
    return source if all(callable(getattr(source, n, None)) for n in names) else None  # type: ignore[return-value]
