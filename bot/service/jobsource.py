"""Pick the job source named by TRIAGE_JOB_SOURCE; read job logs with a size budget."""

from __future__ import annotations

import os

from bot.jobs import JobInfo, JobSource, NoJobSource

from .evidence import Piece, prepare


class JobSourceConfigError(Exception):
    pass


def load_job_source(name: str) -> JobSource:
    if name in ("", "none"):
        return NoJobSource()
    if name == "slurm":
        try:
            from bot.jobs.slurm import SlurmJobSource  # lazy: needs Slurm's CLI tools only when chosen
        except ImportError as exc:
            raise JobSourceConfigError(f"TRIAGE_JOB_SOURCE=slurm but the Slurm job source is unavailable: {exc}") from exc
        factory = getattr(SlurmJobSource, "from_env", None)
        return factory() if callable(factory) else SlurmJobSource()
    raise JobSourceConfigError(f"unknown TRIAGE_JOB_SOURCE {name!r}")


def read_tail(path: str, limit: int) -> tuple[bytes, str | None]:
    """The whole file, or its last `limit` bytes (the failure is at the end) with a note saying so."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        if size <= limit:
            return fh.read(), None
        fh.seek(size - limit)
        data = fh.read()
    nl = data.find(b"\n")
    data = data[nl + 1:] if 0 <= nl < 4096 else data
    return data, f"{os.path.basename(path)}: read the last {limit >> 20} MB of {size >> 20} MB"


def job_pieces(job: JobInfo, *, limit: int) -> tuple[list[Piece], list[str]]:
    """Evidence from a resolved job: its logs, then the scheduler's verdict lines."""
    pieces: list[Piece] = []
    notes: list[str] = []
    for log in job.logs:
        try:
            if log.data is not None:
                data, note = log.data[-limit:], None
            elif log.path:
                data, note = read_tail(log.path, limit)
            else:
                continue
        except OSError as exc:
            notes.append(f"{log.name}: cannot read ({exc.strerror or exc})")
            continue
        if note:
            notes.append(note)
        pieces.append(prepare("job-log", log.name, data, ref={"job_id": job.job_id, "path": log.path}))
    if job.verdict_lines:
        text = "\n".join(job.verdict_lines).encode("utf-8")
        pieces.append(prepare("verdict", "scheduler verdict", text,
                              ref={"job_id": job.job_id}))
    return pieces, notes
