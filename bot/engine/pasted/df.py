"""`df -h` (`/dev/shm`, and any filesystem it lists) -> `shm-small` / `shm-full` (probe `shm`) and
`disk-full` (probe `disk`), with the node agent's thresholds."""

from __future__ import annotations

import re
from typing import Any

from .base import Block, JobView, finding, result, size_bytes

KIND = "df"
PROBES = ("shm", "disk")
ANSWERS = re.compile(r"^(?:sudo\s+)?df\b")

SHM_MIN_BYTES = 1 << 30  # the agent's shm_min_bytes
SHM_FULL_PCT = 90
DISK_MIN_FREE_PCT = 5

_HEAD = re.compile(r"^\s*Filesystem\s+(?:Size|1K-blocks|1024-blocks|1M-blocks)\s+Used\s+Avail(?:able)?\s+(?:Use|Capacity)%\s+"
                   r"Mounted on\s*$")
_ROW = re.compile(r"^\s*(?P<fs>\S+)\s+(?P<size>\S+)\s+(?P<used>\S+)\s+(?P<avail>\S+)\s+(?P<pct>\d+|-)%?\s+(?P<mnt>/\S*)\s*$")


def _bytes(text: str, blocks: int | None) -> int | None:
    if blocks and text.isdigit():
        return int(text) * blocks
    return size_bytes(text)


def find(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    out = []
    for i, line in enumerate(lines):
        if not _HEAD.match(line):
            continue
        blocks = 1024 if "1K-blocks" in line or "1024-blocks" in line else (1 << 20) if "1M-blocks" in line else None
        rows = []
        j = i + 1
        while j < len(lines):
            m = _ROW.match(lines[j])
            if not m:
                break
            rows.append({"filesystem": m.group("fs"), "size_bytes": _bytes(m.group("size"), blocks),
                         "used_bytes": _bytes(m.group("used"), blocks), "avail_bytes": _bytes(m.group("avail"), blocks),
                         "used_pct": int(m.group("pct")) if m.group("pct").isdigit() else None,
                         "mounted_on": m.group("mnt"), "size": m.group("size")})
            j += 1
        if rows:
            out.append((i, j - 1, {"filesystems": rows}))
    return out


def results(block: Block, job: JobView) -> list[dict[str, Any]]:
    out = []
    shm = [r for r in block.data["filesystems"] if r["mounted_on"] == "/dev/shm"]
    if shm:
        r, findings = shm[-1], []
        size = r["size_bytes"]
        if size is not None and size < SHM_MIN_BYTES:
            findings.append(finding("shm-small", f"/dev/shm is only {size >> 20} MiB (below {SHM_MIN_BYTES >> 20} MiB): NCCL "
                                    "and DataLoader workers need more", "warning", None, size_mib=size >> 20))
        if r["used_pct"] is not None and r["used_pct"] >= SHM_FULL_PCT:
            findings.append(finding("shm-full", f"/dev/shm {r['used_pct']}% full (size {r['size']})",
                                    "critical" if r["used_pct"] >= 99 else "warning", None, used_pct=r["used_pct"]))
        out.append(result("shm", findings, "; ".join(f["detail"] for f in findings) if findings
                          else f"/dev/shm is {r['size']}, {r['used_pct']}% used", {"shm": r}))
    disks = [r for r in block.data["filesystems"] if r["mounted_on"] != "/dev/shm" and r["size_bytes"]]
    if disks:
        findings = []
        for r in disks:
            free_pct = 100 * (r["avail_bytes"] or 0) / r["size_bytes"]
            if free_pct < DISK_MIN_FREE_PCT:
                findings.append(finding("disk-full", f"{r['mounted_on']} has {free_pct:.1f}% free ({r['filesystem']})",
                                        "critical" if (r["avail_bytes"] or 0) < 256 << 20 else "warning", None,
                                        path=r["mounted_on"], free_pct=round(free_pct, 1)))
        out.append(result("disk", findings, "; ".join(f["detail"] for f in findings[:3]) if findings
                          else f"{len(disks)} filesystem(s) with room", {"disks": disks}))
    return out
