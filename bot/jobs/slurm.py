"""SlurmJobSource: `/diagnose 1234` and the job-failed webhook resolve jobs through Slurm.

    TRIAGE_JOB_SOURCE=slurm          the bot selects this source (imported lazily by the bot)
    TRIAGE_SLURM_LOG_GLOB            per-rank logs, e.g. "{workdir}/logs/{job_id}/*.log" (several
                                     separated by ':'; fields in docs/slurm.md)
    TRIAGE_SLURM_SCONTROL / _SACCT / _SQUEUE  client binaries (default: found on PATH, else /usr/bin/...)
    TRIAGE_SLURM_TIMEOUT             seconds per Slurm command (default 10)
    TRIAGE_SLURM_CLUSTER             cluster name shown in answers (default: scontrol show config)
    TRIAGE_SLURM_LOG_MAX_FILES       log files read per job, all together (default 256)
    TRIAGE_SLURM_CHECK_OWNER         0 to read log files not owned by the job's user (default 1)
    TRIAGE_SLURM_DEFAULT_OUTPUT      output name when only sacct knows the job (default slurm-%j.out)
    SLURM_CONF                       as for any Slurm client

Lookup order: `scontrol -dd show job ID` (jobs still in slurmctld memory, MinJobAge; it has the
output paths), then `sacct -X -P` (slurmdbd), then `sacct -c` (jobcomp/filetxt, no database).
Never `sacct --json`: 22.05 reports exit code 0 for jobs that exited 1. Ids are validated before
any command runs and commands are argv lists (no shell).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .base import JobInfo, JobSourceError, LogHints, is_log_path
from .nodelist import NodeListError, expand_nodelist, first_node
from .slurm_ids import SlurmJobId, parse_slurm_job_id
from .slurm_logs import LogSearch, find_logs
from .slurm_nodes import NodeStatus, RunningJob, node_status, running_jobs, update_node
from .slurm_parse import (
    SACCT_DELIM,
    SACCT_FIELDS,
    SlurmJobRecord,
    SlurmParseError,
    parse_sacct_rows,
    parse_scontrol_jobs,
    record_from_sacct,
)

# States that did not end well, for picking the task of an array that matters.
FAILED_STATES = {"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "PREEMPTED", "BOOT_FAIL",
                 "DEADLINE"}
_NOT_FOUND = ("Invalid job id specified", "not found")


@dataclass(frozen=True)
class RunResult:
    rc: int
    out: str
    err: str


Runner = Callable[[list[str], float], RunResult]


def run_command(argv: list[str], timeout: float) -> RunResult:
    """argv only, never a shell; stdin closed; a hung controller cannot hold a worker forever."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise JobSourceError(f"{argv[0]} is not installed on the bot's host. Install the Slurm client "
                             "(slurm-client) or set TRIAGE_SLURM_SCONTROL / TRIAGE_SLURM_SACCT.") from e
    except subprocess.TimeoutExpired as e:
        raise JobSourceError(f"Slurm did not answer within {timeout:g} s ({os.path.basename(argv[0])}).") from e
    return RunResult(p.returncode, p.stdout, p.stderr)


def _client(env: dict[str, str], var: str, name: str) -> str:
    return env.get(var) or shutil.which(name) or f"/usr/bin/{name}"


@dataclass
class SlurmSettings:
    scontrol: str = "/usr/bin/scontrol"
    sacct: str = "/usr/bin/sacct"
    squeue: str = "/usr/bin/squeue"
    timeout_s: float = 10.0
    cluster: str | None = None
    logs: LogSearch = field(default_factory=LogSearch)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> SlurmSettings:
        e = dict(os.environ if env is None else env)
        globs = [g for g in e.get("TRIAGE_SLURM_LOG_GLOB", "").split(os.pathsep) if g.strip()]
        return cls(
            scontrol=_client(e, "TRIAGE_SLURM_SCONTROL", "scontrol"),
            sacct=_client(e, "TRIAGE_SLURM_SACCT", "sacct"),
            squeue=_client(e, "TRIAGE_SLURM_SQUEUE", "squeue"),
            timeout_s=float(e.get("TRIAGE_SLURM_TIMEOUT") or 10),
            cluster=e.get("TRIAGE_SLURM_CLUSTER") or None,
            logs=LogSearch(
                globs=globs,
                max_files=int(e.get("TRIAGE_SLURM_LOG_MAX_FILES") or 256),
                check_owner=(e.get("TRIAGE_SLURM_CHECK_OWNER", "1").strip().lower() not in ("0", "false", "no")),
                default_output=e.get("TRIAGE_SLURM_DEFAULT_OUTPUT") or "slurm-%j.out",
            ),
        )


def verdict_lines(rec: SlurmJobRecord) -> list[str]:
    """The scheduler's verdict in the words slurmstepd writes into job logs, so the engine's
    scheduler signatures match it even when the log is gone or the node died before writing."""
    host = rec.batch_host or first_node(rec.nodelist) or "unknown"
    when = rec.end.isoformat() if rec.end else "Unknown"
    head = f"slurmstepd: error: *** JOB {rec.job_id} ON {host} CANCELLED AT {when}"
    due = {"TIMEOUT": "TIME LIMIT", "NODE_FAIL": "NODE FAILURE", "PREEMPTED": "PREEMPTION"}
    if rec.state in due:
        return [f"{head} DUE TO {due[rec.state]} ***"]
    if rec.state == "OUT_OF_MEMORY":
        return [f"slurmstepd: error: Detected 1 oom_kill event in StepId={rec.job_id}.batch. Some of your "
                "processes may have been killed by the cgroup out-of-memory handler."]
    if rec.state == "CANCELLED" and rec.nodelist:  # cancelled while running (pending ones wrote no log)
        return [f"{head} ***"]
    return []


class SlurmJobSource:
    name = "slurm"

    def __init__(self, settings: SlurmSettings | None = None, runner: Runner | None = None) -> None:
        self.settings = settings or SlurmSettings.from_env()
        self._run = runner or run_command
        self._cluster: str | None = self.settings.cluster

    @classmethod
    def from_env(cls) -> SlurmJobSource:
        return cls(SlurmSettings.from_env())

    # ---- JobSource protocol -------------------------------------------------------------------

    def parse_job_id(self, text: str) -> str:
        return str(parse_slurm_job_id(text))

    def resolve(self, job_id: str, hints: LogHints | None = None) -> JobInfo:
        jid = parse_slurm_job_id(job_id)
        try:
            records, source = self._lookup(jid)
        except SlurmParseError as e:
            raise JobSourceError(str(e)) from e
        if hints and source != "scontrol" and records:
            # accounting knows no output paths; the epilog saw them while the job was still in memory
            rec = records[0]
            records[0] = replace(rec, std_out=rec.std_out or _abs(hints.stdout),
                                 std_err=rec.std_err or _abs(hints.stderr) or _abs(hints.stdout),
                                 work_dir=rec.work_dir or _abs(hints.work_dir))
        return self._job_info(jid, records, source)

    # ---- node control (bot.jobs.base.NodeControl): the approved drain, resume, jobs on a host ----

    def node_status(self, host: str) -> NodeStatus | None:
        return node_status(self._run, self.settings.scontrol, host, self.settings.timeout_s)

    def drain_node(self, host: str, reason: str) -> list[str]:
        return update_node(self._run, self.settings.scontrol, host, self.settings.timeout_s, state="DRAIN",
                           reason=reason)

    def resume_node(self, host: str) -> list[str]:
        return update_node(self._run, self.settings.scontrol, host, self.settings.timeout_s, state="RESUME")

    def jobs_on_node(self, host: str, limit: int = 50) -> tuple[list[RunningJob], int]:
        return running_jobs(self._run, self.settings.squeue, host, self.settings.timeout_s, limit)

    # ---- lookup -------------------------------------------------------------------------------

    def _lookup(self, jid: SlurmJobId) -> tuple[list[SlurmJobRecord], str]:
        s = self.settings
        r = self._run([s.scontrol, "-dd", "show", "job", str(jid)], s.timeout_s)
        if r.rc == 0 and r.out.strip():
            return _select(jid, parse_scontrol_jobs(r.out)), "scontrol"
        scontrol_msg = (r.err or r.out).strip().splitlines()[-1:] or ["no output"]
        # Not found (older than MinJobAge) or controller unreachable: accounting may still know it.
        try:
            rec, sacct_problem = self._sacct(jid), ""
        except JobSourceError as e:  # sacct missing or hanging must not hide scontrol's answer
            rec, sacct_problem = None, f" ({e})"
        if rec:
            return [rec], "sacct"
        if not any(n in scontrol_msg[0] for n in _NOT_FOUND):
            raise JobSourceError(f"Slurm could not look up job {jid}: {scontrol_msg[0]}{sacct_problem}")
        raise JobSourceError(
            f"Slurm has no job {jid}: scontrol does not know it (finished jobs are forgotten MinJobAge after "
            f"they end) and neither does sacct{sacct_problem}. Check the id, or paste the job's log.")

    def _sacct(self, jid: SlurmJobId) -> SlurmJobRecord | None:
        s = self.settings
        base = [s.sacct, "-X", "-n", "-P", f"--delimiter={SACCT_DELIM}", "-j", str(jid), "-o", ",".join(SACCT_FIELDS)]
        r = self._run(base, s.timeout_s)
        if r.rc != 0 and "accounting storage is disabled" in (r.err + r.out):
            # No slurmdbd: the jobcomp/filetxt record (`sacct -c`) still has state, nodes, workdir.
            r = self._run([s.sacct, "-c", *base[1:]], s.timeout_s)
        if r.rc != 0:
            return None
        # -c ignores the array/het form and answers with another job; keep only an exact match.
        rows = [row for row in parse_sacct_rows(r.out) if row.get("JobID") == str(jid)]
        return record_from_sacct(rows[-1]) if rows else None

    def cluster_name(self) -> str | None:
        if self._cluster is None:
            try:
                r = self._run([self.settings.scontrol, "show", "config"], self.settings.timeout_s)
            except JobSourceError:
                r = RunResult(1, "", "")
            self._cluster = next((ln.split("=", 1)[1].strip() for ln in r.out.splitlines()
                                  if ln.startswith("ClusterName") and "=" in ln), "")
        return self._cluster or None

    # ---- JobInfo ------------------------------------------------------------------------------

    def _job_info(self, jid: SlurmJobId, records: list[SlurmJobRecord], source: str) -> JobInfo:
        main = records[0]
        nodes: list[str] = []
        problems: list[str] = []
        for rec in records:  # a het job's components each have their own nodes
            try:
                nodes += [n for n in expand_nodelist(rec.nodelist) if n not in nodes]
            except NodeListError as e:
                problems.append(f"node list {rec.nodelist!r}: {e}")
        if not nodes and main.batch_host:
            nodes = [main.batch_host]
        logs, seen = [], set[str]()
        for rec in records:
            found = find_logs(rec, self.settings.logs, seen)
            logs += found.logs
            problems += found.problems
        extra: dict[str, object] = {
            "source": source,
            "raw_job_id": main.job_id,
            "work_dir": main.work_dir,
            "batch_host": main.batch_host,
            "uid": main.uid,
            "log_problems": problems,
        }
        if main.node_details:
            extra["node_details"] = main.node_details
        if main.array_job_id:
            extra["array_job_id"], extra["array_task_id"] = main.array_job_id, main.array_task_id
        if len(records) > 1 and main.het_job_id:
            extra["het_components"] = {r.display_id: r.state for r in records}
        if main.array_tasks:
            extra["array_tasks"] = main.array_tasks
        if source == "sacct":
            extra["note"] = ("Slurm no longer holds this job in memory; details come from accounting, "
                             "where TIMEOUT/CANCELLED jobs may show exit code 0:0.")
        return JobInfo(
            job_id=main.display_id,
            name=main.name or None,
            user=main.user or None,
            state=main.state or None,
            exit_code=main.exit_code or None,
            reason=main.fields.get("Reason") or None,
            partition=main.partition or None,
            cluster=main.cluster or self.cluster_name(),
            nodes=nodes,
            start=main.start,
            end=main.end,
            logs=logs,
            verdict_lines=[ln for rec in records for ln in verdict_lines(rec)],
            extra=extra,
        )


def _select(jid: SlurmJobId, records: list[SlurmJobRecord]) -> list[SlurmJobRecord]:
    """Keep the records that belong to the asked-for job, first the one that matters.

    A plain id may name a single job, an array (one record per task) or a het job (one per
    component). Records that do not belong, or that disagree on the user, mean the output was
    forged through a job name with newlines: refused rather than guessed.
    """
    q = str(jid.job)
    if jid.task is not None:
        keep = [r for r in records if r.array_job_id == q and r.array_task_id == str(jid.task)]
    elif jid.het is not None:
        keep = [r for r in records if r.het_job_id == q and r.het_job_offset == str(jid.het)]
    elif len(records) == 1 and records[0].job_id == q:
        keep = records
    elif all(r.array_job_id == q for r in records):
        keep = sorted(records, key=_array_order)
    elif all(r.het_job_id == q for r in records):
        keep = sorted(records, key=lambda r: int(r.het_job_offset or 0))
    else:
        keep = []
    if len(keep) != len(records) or not keep or len({r.uid for r in keep}) != 1:
        raise SlurmParseError(f"Slurm's answer for job {jid} holds records of other jobs or users (a job name "
                              "with newlines?). Not guessing: paste the job's log instead.")
    if jid.task is None and jid.het is None and keep[0].array_job_id == q and len(keep) > 1:
        tasks = {r.display_id: r.state for r in keep}
        failed = [r for r in keep if r.state in FAILED_STATES]
        first = failed[0] if failed else keep[0]
        return [replace(first, array_tasks=tasks)]
    return keep


def _array_order(r: SlurmJobRecord) -> tuple[int, str]:
    t = r.array_task_id or ""
    return (int(t) if t.isdigit() else 1 << 30, t)


def _abs(path: str | None) -> str:
    """The hint if it is a log path, else "" (a hint is never a relative path)."""
    return path if path and is_log_path(path) else ""
