"""Parse `scontrol -dd show job` (multi-line form) and `sacct -P` rows into SlurmJobRecord.

Why the multi-line form and not `-o`: free-text fields (JobName, Command, WorkDir, StdOut, StdErr,
Comment) sit alone at the end of their line there, so a job named "a JobState=COMPLETED" cannot
pose as a field. A job name may still contain a *newline* (Slurm 22.05 accepts `sbatch -J $'a\\n
JobState=COMPLETED'` and prints it raw), so the parser also checks the structure: every record
starts with a JobId line, has each key once, and the records form one consistent job. Anything
else is refused as ambiguous rather than guessed (a spoofed UserId would let a job point the bot
at another user's files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

# Fields whose value is the rest of their line (free text, may contain spaces and '=').
_REST_OF_LINE = ("Command=", "WorkDir=", "StdErr=", "StdIn=", "StdOut=", "Comment=", "AdminComment=",
                 "SystemComment=", "Container=")
_REQUIRED = ("JobId", "JobName", "UserId", "JobState", "ExitCode")
_NO_TIME = {"", "Unknown", "None", "N/A", "(null)"}
SACCT_FIELDS = ("JobID", "JobIDRaw", "JobName", "User", "UID", "State", "ExitCode", "NodeList", "WorkDir",
                "Start", "End", "Partition", "Cluster")
SACCT_DELIM = "\x1f"  # ASCII unit separator: a job name or path with '|' cannot shift the columns


class SlurmParseError(ValueError):
    """The scheduler's output is malformed or ambiguous; the message is fit for the user."""


@dataclass
class SlurmJobRecord:
    job_id: str  # the raw JobId (an array task has its own)
    name: str = ""
    user: str = ""
    uid: int | None = None
    state: str = ""
    reason: str = ""
    exit_code: str = ""
    partition: str = ""
    nodelist: str = ""
    batch_host: str = ""
    work_dir: str = ""
    std_out: str = ""
    std_err: str = ""
    start: datetime | None = None
    end: datetime | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    het_job_id: str | None = None
    het_job_offset: str | None = None
    cluster: str = ""
    node_details: list[dict[str, str]] = field(default_factory=list)  # -dd: CPU_IDs, Mem, GRES per node
    array_tasks: dict[str, str] = field(default_factory=dict)  # asked for a whole array: task -> state
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def display_id(self) -> str:
        """How users name this job: 1234, 1234_7 (array task), 1234+1 (het component)."""
        if self.array_job_id and self.array_task_id and self.array_task_id.isdigit():
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.het_job_id and self.het_job_offset is not None:
            return f"{self.het_job_id}+{self.het_job_offset}"
        return self.job_id


def parse_time(value: str | None) -> datetime | None:
    if value is None or value.strip() in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        return None


def split_user(value: str) -> tuple[str, int | None]:
    """"alice(1001)" -> ("alice", 1001); "alice" -> ("alice", None)."""
    m = re.fullmatch(r"(.*?)\((\d+)\)", value.strip())
    if m:
        return m.group(1), int(m.group(2))
    return value.strip(), None


def _put(fields: dict[str, str], key: str, value: str, rec_first_line: str) -> None:
    if key in fields:
        raise SlurmParseError(
            f"Slurm's record for job {rec_first_line} is ambiguous: the field {key} appears twice (the "
            "job's name, paths or comment contain text that looks like Slurm fields). Not guessing: paste "
            "the job's log instead.")
    fields[key] = value


def _parse_record(lines: list[str]) -> SlurmJobRecord:
    first = lines[0]
    if not first.startswith("JobId="):
        raise SlurmParseError("Slurm's job record does not start with JobId= (unexpected scontrol output).")
    fields: dict[str, str] = {}
    details: list[dict[str, str]] = []
    head, sep, name = first.partition(" JobName=")
    label = head.split()[0][len("JobId="):]
    for tok in head.split():
        k, _, v = tok.partition("=")
        _put(fields, k, v, label)
    if sep:
        _put(fields, "JobName", name, label)
    for raw in lines[1:]:
        line = raw.strip(" ")
        if not line:
            continue
        if raw.startswith("     Nodes="):  # -dd: one line per allocated node
            details.append(dict(t.partition("=")[::2] for t in line.split() if "=" in t))
            continue
        rest = next((p for p in _REST_OF_LINE if line.startswith(p)), None)
        if rest:
            value = line[len(rest):]
            _put(fields, rest[:-1], value.rstrip() if rest in ("Comment=", "AdminComment=") else value, label)
            continue
        key = None
        for tok in line.split():
            k, eq, v = tok.partition("=")
            if eq and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", k):
                key = k
                _put(fields, k, v, label)
            elif key is not None:  # a value with spaces, e.g. an admin's Reason
                fields[key] += " " + tok
            else:
                raise SlurmParseError(f"Unexpected text in Slurm's record for job {label}.")
    missing = [k for k in _REQUIRED if k not in fields]
    if missing:
        raise SlurmParseError(f"Slurm's record for job {label} lacks {', '.join(missing)} (unexpected output).")
    user, uid = split_user(fields["UserId"])
    return SlurmJobRecord(
        job_id=fields["JobId"],
        name=fields.get("JobName", ""),
        user=user,
        uid=uid,
        state=fields.get("JobState", ""),
        reason=fields.get("Reason", ""),
        exit_code=fields.get("ExitCode", ""),
        partition=fields.get("Partition", ""),
        nodelist=fields.get("NodeList", ""),
        batch_host=fields.get("BatchHost", ""),
        work_dir=fields.get("WorkDir", ""),
        std_out=fields.get("StdOut", ""),
        std_err=fields.get("StdErr", ""),
        start=parse_time(fields.get("StartTime")),
        end=parse_time(fields.get("EndTime")),
        array_job_id=fields.get("ArrayJobId"),
        array_task_id=fields.get("ArrayTaskId"),
        het_job_id=fields.get("HetJobId"),
        het_job_offset=fields.get("HetJobOffset"),
        node_details=details,
        fields=fields,
    )


def parse_scontrol_jobs(text: str) -> list[SlurmJobRecord]:
    """All records in `scontrol -dd show job ID` output (an array or het job gives several)."""
    records: list[list[str]] = []
    cur: list[str] = []
    for line in text.split("\n"):
        if line.startswith("JobId="):
            if cur:
                records.append(cur)
            cur = [line]
        elif cur:
            cur.append(line)
        elif line.strip():
            raise SlurmParseError("scontrol printed text before the first job record (unexpected output).")
    if cur:
        records.append(cur)
    parsed = [_parse_record(r) for r in records]
    ids = [r.job_id for r in parsed]
    if len(set(ids)) != len(ids):
        raise SlurmParseError("Slurm's output names the same job twice (the job's name or paths contain "
                              "text that looks like Slurm records). Not guessing: paste the job's log instead.")
    return parsed


def parse_sacct_rows(text: str, fields: tuple[str, ...] = SACCT_FIELDS) -> list[dict[str, str]]:
    """Rows of `sacct -n -P --delimiter=<US> -o <fields>`; a row with the wrong column count is refused."""
    rows = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        cols = line.split(SACCT_DELIM)
        if len(cols) != len(fields):
            raise SlurmParseError("sacct printed a row that does not split into its columns (a job name "
                                  "with a newline?). Not guessing: paste the job's log instead.")
        rows.append(dict(zip(fields, cols, strict=True)))
    return rows


def record_from_sacct(row: dict[str, str]) -> SlurmJobRecord:
    user, uid = split_user(row.get("User", ""))
    if uid is None and row.get("UID", "").isdigit():
        uid = int(row["UID"])
    job_id = row.get("JobIDRaw") or row["JobID"]
    array_job = array_task = het_job = het_off = None
    m = re.fullmatch(r"(\d+)_(\d+)", row.get("JobID", ""))
    if m:
        array_job, array_task = m.groups()
    m = re.fullmatch(r"(\d+)\+(\d+)", row.get("JobID", ""))
    if m:
        het_job, het_off = m.groups()
    return SlurmJobRecord(
        job_id=job_id,
        name=row.get("JobName", ""),
        user=user,
        uid=uid,
        state=row.get("State", "").split(" ")[0],  # "CANCELLED by 1001" -> CANCELLED
        exit_code=row.get("ExitCode", ""),
        partition=row.get("Partition", ""),
        nodelist=row.get("NodeList", ""),
        work_dir=row.get("WorkDir", ""),
        start=parse_time(row.get("Start")),
        end=parse_time(row.get("End")),
        array_job_id=array_job,
        array_task_id=array_task,
        het_job_id=het_job,
        het_job_offset=het_off,
        cluster="" if row.get("Cluster") in (None, "unknown") else row["Cluster"],
        fields=dict(row),
    )
