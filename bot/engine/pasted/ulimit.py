"""`ulimit -a` (bash, zsh, dash spellings) and `/proc/<pid>/limits` -> the open-file and locked-memory
limits (probe `limits`): `nofile-low` and `memlock-low`, codes only pasted outputs give (no agent reads
a job's limits)."""

from __future__ import annotations

import re
from typing import Any

from .base import Block, JobView, finding, result

KIND = "ulimit"
PROBES = ("limits",)
ANSWERS = re.compile(r"^(?:ulimit\s+-[aSHnl]+|cat /proc/\S+/limits|grep .*(?:open files|locked memory).*/proc/\S+/limits|prlimit\b)")

NOFILE_LOW = 65536  # below this a job with many DataLoader workers, shards and NCCL sockets runs out
CODES = ("nofile-low", "memlock-low")

# bash: "open files                          (-n) 1024"; zsh: "-n: file descriptors            1024"
_BASH = re.compile(r"^\s*(?P<what>open files|max locked memory)\s+\((?:kbytes, )?-(?P<flag>[nl])\)\s+(?P<val>\d+|unlimited)\s*$")
_ZSH = re.compile(r"^\s*-(?P<flag>[nl]):\s+(?:file descriptors|locked-in-memory size \(kbytes\))\s+(?P<val>\d+|unlimited)\s*$")
_DASH = re.compile(r"^\s*-(?P<flag>[nl]):\s+(?:number of files|locked memory \(kb\))\s+(?P<val>\d+|unlimited)\s*$")
# /proc/<pid>/limits: "Max open files            1024                 4096                 files"
_PROC = re.compile(r"^\s*Max (?P<what>open files|locked memory)\s+(?P<soft>\d+|unlimited)\s+(?P<hard>\d+|unlimited)\s+\w+\s*$")


def find(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    got: dict[str, Any] = {}
    idx = []
    for i, line in enumerate(lines):
        m = _BASH.match(line) or _ZSH.match(line) or _DASH.match(line)
        if m:
            key = "nofile" if m.group("flag") == "n" else "memlock_kib"
            got[key] = m.group("val")
            idx.append(i)
            continue
        m = _PROC.match(line)
        if m:
            if m.group("what") == "open files":
                got["nofile"], got["nofile_hard"] = m.group("soft"), m.group("hard")
            else:  # bytes in /proc/<pid>/limits
                soft = m.group("soft")
                got["memlock_kib"] = soft if soft == "unlimited" else str(int(soft) // 1024)
            idx.append(i)
    if not idx:
        return []
    return [(idx[0], idx[-1], got)]


def results(block: Block, job: JobView) -> list[dict[str, Any]]:
    d = block.data
    findings = []
    nofile = d.get("nofile")
    if nofile and nofile != "unlimited" and int(nofile) < NOFILE_LOW:
        findings.append(finding("nofile-low", f"open-file limit (ulimit -n) is {nofile}"
                                + (f", hard limit {d['nofile_hard']}" if d.get("nofile_hard") else ""), "warning", None,
                                nofile=int(nofile), nofile_hard=d.get("nofile_hard")))
    memlock = d.get("memlock_kib")
    if memlock and memlock != "unlimited":
        findings.append(finding("memlock-low", f"locked-memory limit (ulimit -l) is {memlock} KiB, not unlimited: "
                                "InfiniBand/GPUDirect RDMA registration needs it unlimited", "warning", None,
                                memlock_kib=int(memlock)))
    parts = [f"open files {nofile}" if nofile else None, f"max locked memory {memlock}" if memlock else None]
    return [result("limits", findings, "; ".join(f["detail"] for f in findings) if findings
                   else ", ".join(p for p in parts if p), dict(d))]
