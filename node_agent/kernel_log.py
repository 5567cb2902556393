"""Kernel log records in a time window: /dev/kmsg, else `journalctl -k`, else `dmesg`.

/dev/kmsg keeps only the ring buffer (old Xids age out); journald keeps more when it stores kernel
messages persistently, which is why it is the fallback rather than a second source.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from datetime import datetime

from node_agent.hostenv import HostEnv


@dataclass(frozen=True)
class KernelRecord:
    time: float  # unix seconds
    text: str
    prio: int | None = None


@dataclass
class KernelLog:
    records: list[KernelRecord]
    source: str  # "kmsg", "journalctl", "dmesg" or "none"
    error: str | None = None  # why earlier sources were skipped, or why there is nothing


def parse_kmsg_record(raw: str, boot_time: float) -> KernelRecord | None:
    """'<prio>,<seq>,<usec since boot>,<flags>;<text>' (continuation lines start with a space)."""
    if not raw or raw[0] == " ":
        return None
    head, sep, text = raw.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3 or not fields[0].isdigit() or not fields[2].isdigit():
        return None
    return KernelRecord(boot_time + int(fields[2]) / 1e6, text.rstrip("\n"), int(fields[0]) & 7)


def _read_kmsg(env: HostEnv) -> list[str]:
    path = str(env.kmsg_path)
    st = os.stat(path)
    if not stat.S_ISCHR(st.st_mode):  # fixture: a plain file of records, one per line
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    out: list[str] = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)  # one record per read()
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break  # end of the backlog
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten while reading: keep going
                if exc.errno == errno.EINVAL:
                    continue
                raise
            if not chunk:
                break
            out.append(chunk.decode("utf-8", "replace").split("\n", 1)[0])
            if len(out) > 200_000:
                break
    finally:
        os.close(fd)
    return out


def _parse_journal(stdout: str) -> list[KernelRecord]:
    """`journalctl -k -o short-unix`: '1718000000.123456 host kernel: text'."""
    out = []
    for line in stdout.splitlines():
        ts, _, rest = line.partition(" ")
        try:
            when = float(ts)
        except ValueError:
            continue
        _, _, text = rest.partition("kernel: ")
        out.append(KernelRecord(when, text or rest))
    return out


def _parse_dmesg(stdout: str) -> list[KernelRecord]:
    """`dmesg --time-format iso`: '2024-05-01T12:00:00,123456+00:00 text'."""
    out = []
    for line in stdout.splitlines():
        ts, _, text = line.partition(" ")
        try:
            when = datetime.fromisoformat(ts.replace(",", ".")).timestamp()
        except ValueError:
            continue
        out.append(KernelRecord(when, text))
    return out


def read_kernel_log(env: HostEnv, start: float | None = None, end: float | None = None) -> KernelLog:
    notes = []
    records: list[KernelRecord] | None = None
    source = "none"
    boot = env.boot_time()
    try:
        if boot is None:
            raise OSError(errno.ENOENT, "boot time unknown (no btime in /proc/stat)")
        records = [r for raw in _read_kmsg(env) if (r := parse_kmsg_record(raw, boot)) is not None]
        source = "kmsg"
    except OSError as exc:
        notes.append(f"{env.kmsg_path}: {exc.strerror or exc}")
    if records is None and not env.simulated:
        argv = ["journalctl", "-k", "-o", "short-unix", "--no-pager", "-q"]
        if start is not None:
            argv.append(f"--since=@{int(start)}")
        res = env.run(argv)
        if res is not None and res[0] == 0:
            records, source = _parse_journal(res[1]), "journalctl"
        else:
            notes.append("journalctl -k: unavailable or failed")
            res = env.run(["dmesg", "--time-format", "iso"])
            if res is not None and res[0] == 0:
                records, source = _parse_dmesg(res[1]), "dmesg"
            else:
                notes.append("dmesg: unavailable or not permitted (needs CAP_SYSLOG when kernel.dmesg_restrict=1)")
    if records is None:
        return KernelLog([], "none", "; ".join(notes) or "no kernel log source")
    lo = float("-inf") if start is None else start
    hi = float("inf") if end is None else end
    return KernelLog([r for r in records if lo <= r.time <= hi], source, "; ".join(notes) or None)
