"""`nvidia-smi` (the default table: memory per GPU and the process list) and
`nvidia-smi --query-compute-apps=... --format=csv` -> the `processes` probe's findings."""

from __future__ import annotations

import re
from typing import Any

from .base import Block, JobView, finding, gib, result

KIND = "nvidia-smi"
PROBES = ("processes",)
# the commands in the bot's questions and actions this output answers (not -q, -L, topo, nvlink)
ANSWERS = re.compile(r"^(?:sudo\s+)?nvidia-smi(?:\s+--query-compute-apps\S*(?:\s+--format\S*)?)?\s*$")

_HEADER = re.compile(r"NVIDIA-SMI \d+\.\d+")
# |   0  NVIDIA H200                    On  |   00000000:18:00.0 Off |                    0 |
_GPU = re.compile(r"^\|\s*(?P<idx>\d+)\s+(?P<name>.*?)\s+(?:On|Off|WDDM|TCC|N/A)\s*\|\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                  r"[0-9A-Fa-f]{2}\.\d)\s")
_MEM = re.compile(r"\|\s*(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB\s*\|")
# |    0   N/A  N/A            4242      C   python3.10                             72704MiB |  (R450+)
# |    0     12345      C   python                                      10819MiB |            (R418)
_PROC = re.compile(r"^\|\s*(?P<gpu>\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|M\+C|C|G|M)\s+"
                   r"(?P<name>.*?)\s+(?P<mem>\d+\s*MiB|N/A)\s*\|\s*$")
_PROCS_HEAD = re.compile(r"^\|\s*Processes:")
_MIG_HEAD = re.compile(r"^\|\s*MIG devices:")
_CSV_HEAD = re.compile(r"^\s*(?:[\w.]+,\s*)*pid,\s*(?:[\w.]+(?: \[\w+\])?,\s*)*used_(?:gpu_)?memory", re.IGNORECASE)


def _mib(text: str) -> int | None:
    m = re.match(r"(\d+)\s*MiB", text.strip())
    return int(m.group(1)) if m else None


def _table(lines: list[str], start: int) -> tuple[int, dict[str, Any]]:
    """Read the table whose header is at `start`; returns (last line index, data)."""
    gpus: dict[int, dict[str, Any]] = {}
    m = re.search(r"Driver Version:\s*(\S+)", lines[start])
    data: dict[str, Any] = {"driver": m.group(1) if m else None, "gpus": gpus, "process_table": False}
    i, last, section, cur = start + 1, start, "gpus", None
    while i < len(lines):
        line = lines[i].strip()
        if not line:
            if section == "processes" and data["process_table"]:
                break
            i += 1
            continue
        if not line.startswith(("|", "+")):
            if section == "processes" or i - last > 2:
                break
            i += 1
            continue
        last = i
        if _PROCS_HEAD.match(line):
            section = "processes"
            data["process_table"] = True
        elif _MIG_HEAD.match(line):
            section = "mig"
        elif section == "gpus":
            g = _GPU.match(line)
            if g:
                cur = int(g.group("idx"))
                gpus[cur] = {"gpu": cur, "name": g.group("name").strip(), "bus_id": g.group("bus"), "processes": []}
            else:
                mm = _MEM.search(line)
                if mm and cur is not None and "used_mib" not in gpus[cur]:
                    gpus[cur].update(used_mib=int(mm.group("used")), total_mib=int(mm.group("total")))
        elif section == "processes":
            p = _PROC.match(line)
            if p:
                gpu = int(p.group("gpu"))
                gpus.setdefault(gpu, {"gpu": gpu, "processes": []})["processes"].append(
                    {"pid": int(p.group("pid")), "type": p.group("type"), "process": p.group("name").strip() or None,
                     "used_mib": _mib(p.group("mem"))})
        i += 1
    return last, data


def _csv(lines: list[str], start: int) -> tuple[int, dict[str, Any]]:
    cols = [c.strip().lower().split(" ")[0] for c in lines[start].split(",")]
    gpus: dict[Any, dict[str, Any]] = {}
    i = start + 1
    while i < len(lines):
        cells = [c.strip() for c in lines[i].split(",")]
        if len(cells) != len(cols):
            break
        row = dict(zip(cols, cells, strict=True))
        if not row.get("pid", "").isdigit():
            break
        mem = row.get("used_gpu_memory") or row.get("used_memory") or ""
        gpu_key = row.get("gpu_uuid") or row.get("gpu_bus_id") or row.get("gpu_name")
        gpus.setdefault(gpu_key, {"gpu": None, "uuid": row.get("gpu_uuid"), "bus_id": row.get("gpu_bus_id"),
                                  "processes": []})["processes"].append(
            {"pid": int(row["pid"]), "process": row.get("process_name") or row.get("name"), "used_mib": _mib(mem)})
        i += 1
    return i - 1, {"driver": None, "gpus": gpus, "process_table": True, "csv": True}


def find(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _HEADER.search(line) and line.lstrip().startswith("|"):
            end, data = _table(lines, i)
            # a banner pasted above a log (`NVIDIA-SMI 535...` and nothing else) tells nothing
            if data["gpus"] or data["process_table"]:
                start = i - 1 if i > 0 and lines[i - 1].lstrip().startswith("+-") else i
                out.append((start, end, data))
            i = end + 1
            continue
        if _CSV_HEAD.match(line):
            end, data = _csv(lines, i)
            if end > i:
                out.append((i, end, data))
            i = end + 1
            continue
        i += 1
    return out


def processes_result(gpus: list[dict[str, Any]], job: JobView, what: str) -> dict[str, Any]:
    """The `processes` probe from a GPU list: foreign processes and memory others hold on the job's GPUs."""
    nprocs = sum(len(g["processes"]) for g in gpus)
    evidence = {"gpus": gpus}
    if not job.pids:
        return result("processes", [], f"{what} lists {nprocs} process(es), but the log names none of the job's pids: "
                      "the job's own processes cannot be told from others", evidence, health="unknown")
    findings = []
    for g in gpus:
        idx = g.get("gpu")
        if job.gpus and idx is not None and idx not in job.gpus:
            continue
        where = f"GPU {idx}" if idx is not None else f"GPU {g.get('uuid') or g.get('bus_id') or '?'}"
        other = 0
        for p in g["processes"]:
            if p["pid"] in job.pids:
                continue
            used = p.get("used_mib")
            other += used or 0
            held = f"holds {gib(used)}" if used else "holds memory"
            findings.append(finding("foreign-process", f"{p.get('process') or 'a process'} (pid {p['pid']}) {held} on {where}, "
                                    "not one of the job's processes", "warning", idx, pid=p["pid"],
                                    process=p.get("process"), user=None, used_mib=used, owner=None, slurm_job=None,
                                    container_id=None, cgroup=None))
        used, total = g.get("used_mib"), g.get("total_mib")
        if used is not None and total:
            mine = sum(p.get("used_mib") or 0 for p in g["processes"] if p["pid"] in job.pids)
            other = max(other, used - mine)
        if total and other >= 1024 and other >= 0.05 * total:
            findings.append(finding("gpu-memory-pressure", f"{where}: {gib(other)} of {gib(total)} ({100 * other / total:.0f}%) "
                                    "held by processes that are not the job's", "warning", idx, used_mib=used,
                                    total_mib=total, other_mib=other))
    if findings:
        on = sorted({f["gpu"] for f in findings if f["gpu"] is not None})
        if on:
            gpus_txt = ("GPUs " if len(on) > 1 else "GPU ") + ", ".join(map(str, on))
            reason = f"{gpus_txt} hold{'' if len(on) > 1 else 's'} processes that are not the job's"
        else:
            reason = "processes that are not the job's hold GPU memory"
    else:
        reason = f"{nprocs} compute process(es), none foreign on the job's GPUs"
    return result("processes", findings, reason, evidence)


def results(block: Block, job: JobView) -> list[dict[str, Any]]:
    gpus = list(block.data["gpus"].values())
    if not block.data["process_table"]:
        return []  # memory figures alone (a truncated paste) cannot tell whose memory it is
    return [processes_result(gpus, job, "nvidia-smi")]
