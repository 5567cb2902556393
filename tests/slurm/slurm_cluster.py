"""A real single-node Slurm 22.05 on localhost for the tests (and for developers), no systemd.

    sudo .venv/bin/python tests/slurm/slurm_cluster.py up     # prints the SLURM_CONF to export
    sudo .venv/bin/python tests/slurm/slurm_cluster.py down

Everything lives under one base directory with its own slurm.conf (exported as SLURM_CONF) and
non-default ports, so the tests never touch /etc/slurm or a real cluster's daemons on the same
host. munged is shared: an already running one is reused and left running.

Recipe and timings: docs/slurm.md ("Tests on a real Slurm"). Packages are installed with apt-get
when missing (root on Debian/Ubuntu); that takes about 10 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
BASE = Path(os.environ.get("TRIAGE_TEST_SLURM_BASE", "/tmp/gpu-triage-slurm"))
# Not 6817/6818: a developer's host may run a real slurmd; ours must not collide with it.
CTLD_PORT = 16817
SLURMD_PORT = 16818
MARKER = "# written by gpu-triage tests/slurm/slurm_cluster.py"
SBIN = Path("/usr/sbin")
BIN = Path("/usr/bin")


class ClusterUnavailable(Exception):
    """This host cannot run the test cluster; the message says why (shown as the skip reason)."""


@dataclass
class SlurmCluster:
    base: Path = BASE
    epilog: Path | None = None  # EpilogSlurmctld script, absolute
    cpus: int = 8  # advertised CPUs (config_overrides): lets the slow TIMEOUT job run beside the others
    log: list[str] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """Environment for clients (sbatch, scontrol, the bot): points them at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---- checks and install -------------------------------------------------------------------

    @staticmethod
    def why_unavailable() -> str | None:
        if platform.system() != "Linux":
            return "the test Slurm cluster needs Linux"
        if os.geteuid() != 0:
            return "the test Slurm cluster needs root (it installs packages and starts munged/slurmctld/slurmd)"
        if not all((SBIN / d).exists() for d in ("slurmctld", "slurmd", "munged")) and not shutil.which("apt-get"):
            return "Slurm is not installed and apt-get is not available to install it"
        return None

    def install(self) -> None:
        """apt-get the minimal package set if a binary is missing (the metapackage pulls in 43 packages)."""
        needed = [SBIN / "slurmctld", SBIN / "slurmd", SBIN / "munged", BIN / "sbatch", BIN / "scontrol"]
        if all(p.exists() for p in needed):
            return
        t0 = time.monotonic()
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise ClusterUnavailable(f"{' '.join(argv)} failed: {r.stderr.strip()[-2000:]}")
        self.log.append(f"installed {' '.join(PACKAGES)} in {time.monotonic() - t0:.1f}s")

    # ---- munge --------------------------------------------------------------------------------

    def _munge_ok(self) -> bool:
        try:
            enc = subprocess.run([str(BIN / "munge"), "-n"], capture_output=True, timeout=5)
            if enc.returncode != 0:
                return False
            dec = subprocess.run([str(BIN / "unmunge")], input=enc.stdout, capture_output=True, timeout=5)
            return dec.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def start_munge(self) -> None:
        if self._munge_ok():
            return  # someone's munged is up: reuse it, never stop it
        key = Path("/etc/munge/munge.key")
        if not key.exists() or key.stat().st_size == 0:
            subprocess.run([str(SBIN / "mungekey"), "--create", f"--keyfile={key}"], check=True)
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        # Without systemd nobody creates /run/munge, and munged refuses to start without it.
        for d, mode in (("/run/munge", 0o755), ("/var/log/munge", 0o700), ("/var/lib/munge", 0o700)):
            Path(d).mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
            os.chmod(d, mode)
        subprocess.run(["runuser", "-u", "munge", "--", str(SBIN / "munged")], check=True, timeout=30)
        (self.base / "run").mkdir(parents=True, exist_ok=True)
        (self.base / "run" / "munged.ours").write_text("1")  # so `down` stops only a munged we started
        _wait(self._munge_ok, 10, "munged did not answer")

    # ---- config -------------------------------------------------------------------------------

    def write_config(self) -> None:
        for sub in ("etc", "state", "spool", "log", "run"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        # Fresh state: job ids restart at 1 and the jobcomp history with them (stale "job 1" rows
        # from an earlier run would otherwise confuse `sacct -c -j 1`).
        for sub in ("state", "spool"):
            shutil.rmtree(self.base / sub)
            (self.base / sub).mkdir()
        (self.base / "log" / "jobcomp.log").write_text("")
        mem_mb = _mem_total_mb() - 512
        b = self.base
        lines = [
            MARKER,
            "ClusterName=ci",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={CTLD_PORT}",
            f"SlurmdPort={SLURMD_PORT}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "MpiDefault=none",
            # No cgroups: linuxproc tracking works in containers and gVisor alike.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=task=1",
            "JobAcctGatherParams=OverMemoryKill",
            "AccountingStorageType=accounting_storage/none",
            # Makes `sacct -c` work without slurmdbd: the fallback path of the job source is real.
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={b}/log/jobcomp.log",
            *([f"EpilogSlurmctld={self.epilog}"] if self.epilog else []),
            "SchedulerType=sched/backfill",
            # Without this a queued job waits for the backfill pass, up to 30 s.
            "SchedulerParameters=sched_interval=1,bf_interval=2",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            # Without it every job takes all node memory and jobs run one at a time.
            "DefMemPerCPU=256",
            # Accept the advertised CPUs although the host has fewer.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            # Fresh job ids per start, away from any earlier run's: a job step that outlived an
            # earlier cluster (slurmstepd survives `scontrol shutdown`) reports its end by job id
            # and would otherwise complete the new cluster's job with the same number.
            f"FirstJobId={random.randrange(1000, 5_000_000)}",
            "MinJobAge=86400",
            "KillWait=5",
            "InactiveLimit=0",
            "MailProg=/bin/true",
            f"SlurmctldPidFile={b}/run/slurmctld.pid",
            f"SlurmdPidFile={b}/run/slurmd.pid",
            f"StateSaveLocation={b}/state",
            f"SlurmdSpoolDir={b}/spool",
            f"SlurmctldLogFile={b}/log/slurmctld.log",
            f"SlurmdLogFile={b}/log/slurmd.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"NodeName=localhost CPUs={self.cpus} RealMemory={mem_mb} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    # ---- daemons ------------------------------------------------------------------------------

    def _pid(self, name: str) -> int | None:
        try:
            pid = int((self.base / "run" / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def node_state(self) -> str:
        r = subprocess.run([str(BIN / "sinfo"), "-h", "-n", "localhost", "-o", "%T"],
                           env=self.env, capture_output=True, text=True, timeout=10)
        return r.stdout.strip()

    def up(self) -> None:
        t0 = time.monotonic()
        reason = self.why_unavailable()
        if reason:
            raise ClusterUnavailable(reason)
        self.install()
        self.down()  # a cluster left over from an aborted run: start clean
        self.start_munge()
        self.write_config()
        conf = str(self.conf)
        for argv in ([str(SBIN / "slurmctld"), "-f", conf], [str(SBIN / "slurmd"), "-f", conf, "-N", "localhost"]):
            r = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise ClusterUnavailable(f"{argv[0]} failed: {r.stderr.strip()}\n{self.tail_logs()}")
        try:
            _wait(lambda: self.node_state() == "idle", 30, "node did not become idle")
        except TimeoutError as e:
            raise ClusterUnavailable(f"{e}\n{self.tail_logs()}") from e
        self.log.append(f"cluster up in {time.monotonic() - t0:.1f}s (conf {conf})")

    def down(self) -> None:
        """Stop by PID file only (never by process name): slurmctld, slurmd, and munged if ours."""
        pids = [p for p in (self._pid("slurmctld"), self._pid("slurmd")) if p]
        if pids and self.conf.exists():
            # Jobs first: their slurmstepd and processes would outlive the daemons.
            subprocess.run([str(BIN / "scancel"), "--partition=debug"], env=self.env, capture_output=True,
                           timeout=30)
            try:
                _wait(lambda: not self._active_jobs(), 30, "jobs did not end")
            except TimeoutError:
                self.log.append("some jobs were still ending at shutdown")
            subprocess.run([str(BIN / "scontrol"), "shutdown"], env=self.env, capture_output=True, timeout=30)
        for pid in pids:
            _stop(pid)
        ours = self.base / "run" / "munged.ours"
        if ours.exists():
            try:
                pid = int(Path("/run/munge/munged.pid").read_text().strip())
            except (OSError, ValueError):
                pid = 0
            if pid and _alive(pid):
                _stop(pid)
            ours.unlink()

    def _active_jobs(self) -> list[str]:
        r = subprocess.run([str(BIN / "squeue"), "-h", "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-o",
                            "%i"], env=self.env, capture_output=True, text=True, timeout=10)
        return r.stdout.split() if r.returncode == 0 else []

    def tail_logs(self, n: int = 30) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            p = self.base / "log" / name
            if p.exists():
                out.append(f"--- {p} (last {n} lines)\n" + "\n".join(p.read_text(errors="replace").splitlines()[-n:]))
        return "\n".join(out)

    # ---- jobs ---------------------------------------------------------------------------------

    def sbatch(self, script: str, cwd: Path, *args: str) -> str:
        """Submit a batch script (text); returns the job id (e.g. "12" or "12;ci")."""
        path = cwd / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script)
        r = subprocess.run([str(BIN / "sbatch"), "--parsable", *args, str(path)], cwd=cwd, env=self.env,
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr}")
        return r.stdout.strip().split(";")[0]

    def scontrol(self, *args: str) -> str:
        r = subprocess.run([str(BIN / "scontrol"), *args], env=self.env, capture_output=True, text=True,
                           timeout=30)
        return r.stdout + r.stderr

    def job_state(self, job_id: str) -> str:
        for tok in self.scontrol("-o", "show", "job", job_id).split():
            if tok.startswith("JobState="):
                return tok.split("=", 1)[1]
        return ""

    def wait_state(self, job_id: str, states: set[str], timeout: float) -> str:
        end = time.monotonic() + timeout
        while True:
            st = self.job_state(job_id)
            if st in states or time.monotonic() > end:
                return st
            time.sleep(0.2)


def _wait(pred, timeout: float, what: str) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is "alive" to kill(0); /proc tells the truth.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _stop(pid: int, grace: float = 10) -> None:
    end = time.monotonic() + grace
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.1)
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _mem_total_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 4096


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--epilog", type=Path, help="EpilogSlurmctld script (absolute path)")
    args = ap.parse_args(argv)
    c = SlurmCluster(epilog=args.epilog)
    try:
        c.up() if args.action == "up" else c.down()
    except ClusterUnavailable as e:
        print(f"slurm_cluster: {e}", file=sys.stderr)
        return 1
    for line in c.log:
        print(line)
    if args.action == "up":
        print(f"export SLURM_CONF={c.conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
