"""Where host facts come from: real /proc, /sys and commands, or a scenario's fixture root.

Probes read the host only through HostEnv, so the simulated agent exercises the same parsing code
on files laid out like the real ones.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FsUsage:
    path: str
    total_bytes: int
    used_bytes: int
    avail_bytes: int

    @property
    def used_pct(self) -> float:
        return 100.0 * self.used_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass
class HostEnv:
    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    etc_root: Path = Path("/etc")
    kmsg_path: Path = Path("/dev/kmsg")
    log_root: Path = Path("/var/log")
    simulated: bool = False
    # Simulated only: statvfs figures by path, and `systemctl is-active` answers by unit.
    fs_table: dict[str, dict[str, int]] = field(default_factory=dict)
    services: dict[str, str] | None = None
    command_timeout_s: float = 2.0

    def read_text(self, path: Path) -> str | None:
        try:
            return path.read_text(errors="replace")
        except (OSError, ValueError):
            return None

    def fs_usage(self, path: str) -> FsUsage | None:
        if self.simulated:
            fig = self.fs_table.get(path)
            if fig is None:
                return None
            total, used = int(fig["total_bytes"]), int(fig["used_bytes"])
            return FsUsage(path, total, used, int(fig.get("avail_bytes", total - used)))
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        total = st.f_blocks * st.f_frsize
        free = st.f_bfree * st.f_frsize
        return FsUsage(path, total, total - free, st.f_bavail * st.f_frsize)

    def service_state(self, unit: str) -> tuple[str | None, str]:
        """(`systemctl is-active` answer or None when it cannot be asked, how we know)."""
        if self.simulated:
            if self.services is None or unit not in self.services:
                return None, "systemctl not available (scenario has no service table)"
            return self.services[unit], f"systemctl is-active {unit} (simulated)"
        if shutil.which("systemctl") is None:
            return None, "systemctl not found (container without systemd?)"
        out = self.run(["systemctl", "is-active", unit])
        if out is None:
            return None, f"systemctl is-active {unit} did not answer in {self.command_timeout_s:g} s"
        if not out[1].strip():  # e.g. "System has not been booted with systemd" (stderr only): cannot tell
            return None, f"systemctl is-active {unit} gave no answer (systemd not running here?)"
        return out[1].strip().splitlines()[0], f"systemctl is-active {unit}"

    def run(self, argv: list[str]) -> tuple[int, str] | None:
        """Run a read-only command with a timeout; None if it is missing or hangs."""
        if self.simulated:
            return None
        try:
            res = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.command_timeout_s, check=False,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.returncode, res.stdout

    def user_name(self, uid: int) -> str:
        if not self.simulated:
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return str(uid)
        text = self.read_text(self.etc_root / "passwd") or ""
        for line in text.splitlines():
            parts = line.split(":")
            if len(parts) > 2 and parts[2] == str(uid):
                return parts[0]
        return str(uid)

    def boot_time(self) -> float | None:
        text = self.read_text(self.proc_root / "stat") or ""
        for line in text.splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
        return None

    def describe(self) -> dict[str, Any]:
        return {"proc_root": str(self.proc_root), "sys_root": str(self.sys_root), "kmsg": str(self.kmsg_path)}
