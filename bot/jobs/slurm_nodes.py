"""Slurm node control for the human-approved drain: state, drain, resume, the jobs running there.

Every command is an argv list (no shell, ever) and the node name is checked before any command
runs: one node, no host-list expression (`gpu[01-64]` would drain 64 nodes), no spaces, `=` or
quotes. The reason is one line of printable text; it travels as one argv element, so quotes and
semicolons in it are text, not syntax.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .base import JobSourceError
from .nodelist import NodeListError, expand_nodelist

# Slurm NodeNames as sites write them: letters, digits, '.', '_', '-'; starts with a letter or digit.
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
REASON_MAX = 200
MAX_RUNNING_LINES = 20000  # squeue output read per look-up (a big cluster's running jobs)
_JOB_ID = re.compile(r"[0-9]{1,10}(?:_[0-9]{1,10}|\+[0-9]{1,4})?", re.ASCII)
_SQUEUE_FORMAT = "%i|%u|%T|%M|%P|%N|%j"  # the free-text name last: a '|' in it cannot shift the columns


class InvalidNodeName(JobSourceError):
    """Not one Slurm node name (a host list, spaces, shell syntax, too long)."""


@dataclass(frozen=True)
class NodeStatus:
    name: str
    state: str  # as scontrol prints it: IDLE, MIXED+DRAIN, IDLE+DRAIN, DOWN*+DRAIN ...
    reason: str | None = None

    @property
    def flags(self) -> set[str]:
        return {f.rstrip("*~#!%$@^-") for f in self.state.upper().split("+")}

    @property
    def drained(self) -> bool:
        """Drained or draining: no new jobs start there."""
        return bool(self.flags & {"DRAIN", "DRAINED", "DRAINING"})


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    user: str
    state: str
    elapsed: str
    partition: str
    nodes: str
    name: str


def check_node_name(host: object) -> str:
    if not isinstance(host, str) or not _NODE.fullmatch(host):
        raise InvalidNodeName("That is not one Slurm node name (letters, digits, '.', '_' and '-'; one node, "
                              "not a host list), so nothing was run.")
    return host


def check_reason(text: object) -> str:
    """The drain reason as Slurm will store it; raises ValueError with what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("Give a reason: Slurm requires one to drain a node, and it is what `sinfo -R` shows.")
    text = " ".join(text.split())  # one line: newlines and tabs become spaces
    if _CONTROL.search(text):
        raise ValueError("The reason holds control characters; use plain text.")
    if len(text) > REASON_MAX:
        raise ValueError(f"The reason is {len(text)} characters long; Slurm's reason should fit in {REASON_MAX}.")
    return text


Run = Callable[[list[str], float], object]  # slurm.run_command: returns RunResult(rc, out, err)


def _fail(what: str, r: object) -> str:
    msg = ((getattr(r, "err", "") or getattr(r, "out", "") or "").strip().splitlines() or ["no output"])[-1]
    return f"{what}: {msg}"


def node_status(run: Run, scontrol: str, host: str, timeout: float) -> NodeStatus | None:
    """`scontrol -o show node HOST`; None when Slurm has no such node."""
    check_node_name(host)
    r = run([scontrol, "-o", "show", "node", host], timeout)
    out = getattr(r, "out", "")
    if getattr(r, "rc", 1) != 0 or not out.strip():
        if "not found" in (getattr(r, "err", "") + out):
            return None
        raise JobSourceError(_fail(f"Slurm could not show node {host}", r))
    line = out.strip().splitlines()[0]
    name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
    state = re.search(r"\sState=(\S+)", line)
    if not name or not state or name.group(1) != host:
        raise JobSourceError(f"Slurm's answer for node {host} does not name it; not guessing.")
    reason = re.search(r"\sReason=(.*?)(?: \[[^\]]*@[^\]]*\])?(?:$| [A-Z][A-Za-z]+=)", line)
    return NodeStatus(name=host, state=state.group(1), reason=reason.group(1) if reason else None)


def update_node(run: Run, scontrol: str, host: str, timeout: float, *, state: str, reason: str | None = None) -> list[str]:
    """`scontrol update NodeName=HOST State=DRAIN Reason=...` (or State=RESUME). Returns the argv run."""
    check_node_name(host)
    if state not in ("DRAIN", "RESUME"):
        raise ValueError(f"unsupported node state {state!r}")
    argv = [scontrol, "update", f"NodeName={host}", f"State={state}"]
    if state == "DRAIN":
        argv.append(f"Reason={check_reason(reason)}")
    r = run(argv, timeout)
    if getattr(r, "rc", 1) != 0:
        raise JobSourceError(_fail(f"Slurm refused to {'drain' if state == 'DRAIN' else 'resume'} {host}", r))
    return argv


def running_jobs(run: Run, squeue: str, host: str, timeout: float, limit: int = 50) -> tuple[list[RunningJob], int]:
    """Jobs running (or completing) on HOST: (the first `limit`, how many in all).

    squeue 22.05 rewrites `-w localhost` to the machine's own hostname, so the running jobs are
    listed and filtered here by their expanded node lists instead.
    """
    check_node_name(host)
    r = run([squeue, "-h", "-t", "RUNNING,COMPLETING", "-o", _SQUEUE_FORMAT], timeout)
    if getattr(r, "rc", 1) != 0:
        raise JobSourceError(_fail("squeue failed", r))
    out: list[RunningJob] = []
    total = 0
    for line in getattr(r, "out", "").splitlines()[:MAX_RUNNING_LINES]:
        parts = line.split("|", 6)
        if len(parts) != 7 or not _JOB_ID.fullmatch(parts[0]):
            continue  # a job name with a newline continues on the next line: not a record
        try:
            nodes = expand_nodelist(parts[5], limit=4096)
        except NodeListError:
            continue
        if host not in nodes:
            continue
        total += 1
        if len(out) < limit:
            out.append(RunningJob(*parts))
    return out, total
