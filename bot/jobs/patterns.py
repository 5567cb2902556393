"""Slurm output-file patterns ("%x-%j.out") -> the file name slurmstepd actually wrote.

Why the bot expands them itself: in 22.05 `scontrol show job` expands only some symbols
(%A %a %j %u %x) and leaves %J %s %t %n %N %% and every zero-padded form ("%5j") as they are;
squeue's JSON, the EpilogSlurmctld environment and jobcomp expand nothing. The rules below were
checked against the files slurmstepd created on a real 22.05 node (tests/jobs/test_patterns.py):

    %% -> %     %j -> job id    %A -> array master id (the job id when not an array)
    %a -> array task id (4294967294 when not an array)   %u -> user   %x -> job name
    %J -> job id (batch step)   %s -> "batch"   %t, %n -> 0 (batch script output)   %N -> host
    %5j -> 00016 (a width zero-pads numeric symbols, at most 10 digits)
    any backslash in the pattern -> no symbol is replaced; backslash escapes are removed
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

NO_ARRAY_TASK = "4294967294"  # Slurm's NO_VAL-1, what %a gives for a job that is not an array
_SYMBOL = re.compile(r"%(\d*)([%AaJjNnstux])", re.ASCII)
_NUMERIC = set("AaJjnst")


@dataclass(frozen=True)
class PatternFields:
    job_id: str
    name: str = ""
    user: str = ""
    array_job_id: str | None = None
    array_task_id: str | None = None
    host: str | None = None  # batch host, for %N; None leaves %N unknown


def expand_pattern(pattern: str, f: PatternFields, unknown: str | None = None,
                   escape: Callable[[str], str] | None = None) -> str:
    """Expand the symbols in `pattern`.

    `unknown` replaces symbols whose value is not known (%N without a host): pass "*" with
    escape=glob.escape to get a glob in which only the unknown parts are wildcards.
    """
    esc = escape or (lambda s: s)
    if "\\" in pattern:
        return esc(re.sub(r"\\(.?)", r"\1", pattern))

    values = {
        "%": "%",
        "j": f.job_id,
        "J": f.job_id,
        "A": f.array_job_id or f.job_id,
        "a": f.array_task_id if f.array_task_id is not None else NO_ARRAY_TASK,
        "u": f.user,
        "x": f.name,
        "s": "batch",
        "t": "0",
        "n": "0",
        "N": f.host,
    }

    def sub(m: re.Match[str]) -> str:
        width, sym = m.group(1), m.group(2)
        val = values.get(sym)
        if val is None:
            return unknown if unknown is not None else esc(m.group(0))
        if width and sym in _NUMERIC and val.isdigit():
            val = val.zfill(min(int(width), 10))
        return esc(val)

    out, pos = [], 0
    for m in _SYMBOL.finditer(pattern):
        out.append(esc(pattern[pos:m.start()]))
        out.append(sub(m))
        pos = m.end()
    out.append(esc(pattern[pos:]))
    return "".join(out)


def has_symbols(path: str) -> bool:
    return "\\" not in path and _SYMBOL.search(path) is not None
