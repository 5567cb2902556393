"""Find a Slurm job's log files: its stdout/stderr and per-rank logs matched by configurable globs.

Files are handed to the engine by path (it streams them: a 2 GB log is never loaded here). Each
candidate must be a regular file (an --output=/dev/zero would otherwise never end) and, by
default, owned by the job's user: the paths come from the job, so without that check a user
could make the bot read files only the bot may read.
"""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass, field, replace

from .base import JobLog
from .nodelist import first_node
from .patterns import PatternFields, expand_pattern, has_symbols
from .slurm_parse import SlurmJobRecord


@dataclass
class LogSearch:
    globs: list[str] = field(default_factory=list)  # "{workdir}/logs/{job_id}/*.log"
    max_files: int = 256  # log files per job, all sources together
    check_owner: bool = True
    default_output: str = "slurm-%j.out"  # sbatch's default; used when Slurm no longer knows the path


@dataclass
class FoundLogs:
    logs: list[JobLog] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # shown to the user: why a file was not read


def _fields(rec: SlurmJobRecord) -> PatternFields:
    host = rec.batch_host or first_node(rec.nodelist) or None
    task = rec.array_task_id if rec.array_task_id and rec.array_task_id.isdigit() else None
    return PatternFields(job_id=rec.job_id, name=rec.name, user=rec.user,
                         array_job_id=rec.array_job_id if task else None, array_task_id=task, host=host)


def output_candidates(rec: SlurmJobRecord, default_output: str) -> list[tuple[str, list[str]]]:
    """(label, [paths to try, first existing wins]) for stdout and stderr."""
    out: list[tuple[str, list[str]]] = []
    f = _fields(rec)
    std = [("stdout", rec.std_out)]
    if rec.std_err != rec.std_out:  # without --error, StdErr is StdOut
        std.append(("stderr", rec.std_err))
    if not rec.std_out and not rec.std_err:  # sacct knows no paths: sbatch's default naming
        default = "slurm-%A_%a.out" if f.array_task_id and default_output == "slurm-%j.out" else default_output
        std = [("stdout", default)]
    for label, path in std:
        if not path or path == "/dev/null":
            continue
        if not os.path.isabs(path):
            path = os.path.join(rec.work_dir or "/", path)
        tries = [path]
        if has_symbols(path):
            # scontrol leaves %N, %t, %5j ... unexpanded; the path as printed may also be the real name.
            tries.append(expand_pattern(path, f))
            # Last resort, a glob: %N is the node's own short hostname, which need not be its
            # NodeName. Only the unknown parts are wildcards; the rest is escaped.
            tries.append(expand_pattern(path, replace(f, host=None), unknown="*", escape=glob.escape))
        out.append((label, tries))
    return out


def _glob_values(rec: SlurmJobRecord) -> dict[str, str]:
    # Escaped: a job named "*" must not widen the search to every file in the directory.
    vals = {
        "workdir": rec.work_dir or "/nonexistent",
        "job_id": rec.job_id,
        "id": rec.display_id,
        "array_job_id": rec.array_job_id or rec.job_id,
        "array_task_id": rec.array_task_id or "",
        "het_job_id": rec.het_job_id or rec.job_id,
        "name": rec.name,
        "user": rec.user,
    }
    return {k: glob.escape(v) for k, v in vals.items()}


def find_logs(rec: SlurmJobRecord, search: LogSearch, seen: set[str] | None = None) -> FoundLogs:
    found = FoundLogs()
    seen = seen if seen is not None else set()

    def admit(path: str, label: str) -> bool:
        real = os.path.realpath(path)
        if real in seen:
            return True
        try:
            st = os.stat(path)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):
            found.problems.append(f"{label} {path} is not a regular file; not read")
            seen.add(real)
            return True
        if search.check_owner and rec.uid is not None and st.st_uid != rec.uid:
            found.problems.append(f"{label} {path} is not owned by the job's user {rec.user}; not read")
            seen.add(real)
            return True
        if len(found.logs) >= search.max_files:
            if not found.problems or not found.problems[-1].startswith("stopped at"):
                found.problems.append(f"stopped at {search.max_files} log files (TRIAGE_SLURM_LOG_MAX_FILES)")
            return True
        seen.add(real)
        found.logs.append(JobLog(name=_display_name(path, rec.work_dir), path=path))
        return True

    for label, tries in output_candidates(rec, search.default_output):
        hit = False
        for p in tries:
            is_glob = len(tries) > 1 and p is tries[-1]
            matches = sorted(glob.glob(p)) if is_glob else [p]
            for m in matches[: search.max_files]:
                hit = admit(m, label) or hit
            if hit:
                break
        if not hit:
            found.problems.append(
                f"{label} {tries[0]} was not found on the bot's host (is the job's filesystem mounted here?)")

    values = _glob_values(rec)
    for template in search.globs:
        try:
            pattern = template.format(**values)
        except (KeyError, IndexError, ValueError) as e:
            found.problems.append(f"log glob {template!r} is invalid ({e}); known fields: {', '.join(values)}")
            continue
        matches = sorted(glob.glob(pattern, recursive=True))
        if len(matches) > search.max_files:
            found.problems.append(f"log glob {pattern} matched {len(matches)} files; read the first "
                                  f"{search.max_files}")
        for m in matches[: search.max_files]:
            admit(m, "log")
    return found


def _display_name(path: str, work_dir: str) -> str:
    if work_dir and path.startswith(work_dir.rstrip("/") + "/"):
        return path[len(work_dir.rstrip("/")) + 1:]
    return os.path.basename(path)
