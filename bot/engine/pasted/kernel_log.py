"""`dmesg` / `dmesg -T` / `journalctl -k` (or syslog's kernel lines) -> the `xid` probe's findings
(every NVRM Xid, with NVIDIA's catalog meaning) and the kernel OOM killer's kills (`oom`)."""

from __future__ import annotations

import re
from typing import Any

from .. import catalog
from .base import Block, JobView, finding, result

KIND = "dmesg"
PROBES = ("xid", "oom")
ANSWERS = re.compile(r"^(?:sudo\s+)?(?:dmesg|journalctl\b.*\s-k\b|journalctl\b.*--dmesg\b)")

MIN_LINES = 3  # kernel lines a source needs to count as a pasted kernel log (one quoted Xid line is not one)

_PREFIX = re.compile(
    r"^\s*(?:"
    r"\[\s*\d+\.\d+\]"  # dmesg
    r"|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4}\]"  # dmesg -T
    r"|kern\s*:\s*\w+\s*:"  # dmesg -x
    r"|\w{3}\s+\d+ \d\d:\d\d:\d\d (?P<host>[\w.-]+) kernel:"  # journalctl -k, syslog
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[.,\d]*(?:[+-]\d\d:?\d\d|Z)? (?P<host2>[\w.-]+) kernel:"  # journalctl -o short-iso
    r")")
_XID = re.compile(r"NVRM: Xid \((?P<pci>PCI:[0-9a-fA-F:.]+)\): (?P<xid>\d+), (?P<rest>.*)$")
_XID_PID = re.compile(r"pid=(?:'?(?P<pid>\d+)'?|'?<unknown>'?),\s*name=(?P<name>[^,]+)")
_OOM = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (?P<pid>\d+) \((?P<comm>[^)]+)\)")
_OOM_TASK = re.compile(r"oom-kill:.*?\btask=(?P<comm>[^,]+),pid=(?P<pid>\d+)")


def find(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    kernel = []
    hosts: set[str] = set()
    for i, line in enumerate(lines):
        m = _PREFIX.match(line)
        if m:
            kernel.append(i)
            h = m.group("host") or m.group("host2")
            if h:
                hosts.add(h)
    if len(kernel) < MIN_LINES:
        return []
    xids, ooms = [], []
    seen_oom: set[int] = set()
    for i in kernel:
        line = lines[i]
        m = _XID.search(line)
        if m:
            p = _XID_PID.search(m.group("rest"))
            xids.append({"xid": int(m.group("xid")), "pci": m.group("pci"), "line": i + 1,
                         "pid": int(p.group("pid")) if p and p.group("pid") else None,
                         "process": p.group("name").strip() if p and p.group("name").strip() != "<unknown>" else None,
                         "text": m.group("rest")[:200]})
            continue
        m = _OOM.search(line) or _OOM_TASK.search(line)
        if m and int(m.group("pid")) not in seen_oom:
            seen_oom.add(int(m.group("pid")))
            ooms.append({"pid": int(m.group("pid")), "process": m.group("comm"), "line": i + 1})
    data = {"xids": xids, "ooms": ooms, "lines": len(kernel), "host": hosts.pop() if len(hosts) == 1 else None}
    return [(kernel[0], kernel[-1], data)]


def results(block: Block, job: JobView) -> list[dict[str, Any]]:
    xids: dict[tuple[int, str], dict[str, Any]] = {}
    for x in block.data["xids"]:
        key = (x["xid"], x["pci"])
        if key in xids:
            xids[key]["count"] += 1
            continue
        info = catalog.describe(str(x["xid"]), None)
        meaning = info.get("xid_meaning", "")
        sev = "critical" if info.get("xid_severity") == "fatal" else "warning"
        xids[key] = finding("xid", f"Xid {x['xid']} on {x['pci']}" + (f": {meaning}" if meaning else "")
                            + (f" (pid {x['pid']}, {x['process']})" if x["pid"] else ""), sev, None,
                            xid=x["xid"], meaning=meaning or None, mnemonic=info.get("xid_name"),
                            bucket=info.get("xid_bucket"), action=info.get("xid_action"), pci=x["pci"], pid=x["pid"], process=x["process"],
                            count=1, line=x["text"], source="kernel log")
    xf = list(xids.values())
    out = [result("xid", xf, f"Xid {', '.join(str(f['xid']) for f in xf)} in the kernel log" if xf
                  else f"no Xid in {block.data['lines']} kernel log lines")]
    kills = []
    for k in block.data["ooms"]:
        mine = k["pid"] in job.pids
        kills.append(finding("host-oom-kill", f"kernel OOM killer killed {k['process']} (pid {k['pid']})"
                             + (" — a process of the job" if mine else ""), "critical" if mine else "warning", None,
                             pid=k["pid"], process=k["process"], job_process=mine))
    out.append(result("oom", kills, f"{len(kills)} OOM kill(s) in the kernel log" if kills else "no OOM kill in the kernel log"))
    return out
