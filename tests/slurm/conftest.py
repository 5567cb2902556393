"""Session fixture: a real single-node Slurm with the gpu-triage EpilogSlurmctld hook installed.

Runs when it can: root on Linux (packages are apt-get installed when missing). Elsewhere the
tests skip with the reason, except under CI (env CI set), where a skip would hide a broken setup
and so fails instead.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm_cluster import ClusterUnavailable, SlurmCluster

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "slurm"


@pytest.hookimpl(tryfirst=True)  # before -m deselects: a module that forgot its pytestmark still counts
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/slurm carries the marker, so `pytest -m slurm` selects exactly these.
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slurm)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the Slurm tests, but: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class SlurmEnv:
    cluster: SlurmCluster
    hook_dir: Path
    jobs_dir: Path
    secret: bytes
    port: int  # where the hook posts: the test receiver or the bot listens here

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/job-failed"

    @property
    def spool(self) -> Path:
        return self.hook_dir / "spool"

    @property
    def notify_log(self) -> Path:
        return self.hook_dir / "notify.log"

    def configure_hook(self, **overrides: str) -> None:
        """(Re)write notify.conf; each notifier reads it when it starts."""
        values = {
            "webhook_url": self.url,
            "secret_file": str(self.hook_dir / "webhook.secret"),
            "states": "FAILED,NODE_FAIL,OUT_OF_MEMORY,TIMEOUT",
            "spool_dir": str(self.spool),
            "log_file": str(self.notify_log),
            "scontrol": "/usr/bin/scontrol",
            "slurm_conf": str(self.cluster.conf),  # the test cluster's conf is not at the default path
            "wait_s": "30",
            "post_timeout_s": "3",
            "retry_for_s": "90",  # long enough for the bot-down test, short enough to end on its own
            "retry_initial_s": "0.5",
            "retry_max_interval_s": "1",
        }
        values.update(overrides)
        text = "".join(f"{k} = {v}\n" for k, v in values.items())
        tmp = self.hook_dir / "notify.conf.tmp"
        tmp.write_text(text)
        tmp.replace(self.hook_dir / "notify.conf")

    def submit(self, script: str, *args: str) -> str:
        return self.cluster.sbatch(script, self.jobs_dir, *args)

    def spooled(self) -> list[Path]:
        return sorted(self.spool.glob("*.json")) if self.spool.exists() else []

    def log_lines(self, job_id: str | None = None) -> list[str]:
        if not self.notify_log.exists():
            return []
        lines = self.notify_log.read_text().splitlines()
        return [ln for ln in lines if job_id is None or f"job={job_id} " in ln]

    def wait_log(self, job_id: str, needle: str, timeout: float = 40) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for ln in self.log_lines(job_id):
                if needle in ln:
                    return ln
            time.sleep(0.1)
        raise AssertionError(f"notifier log has no {needle!r} for job {job_id}:\n" + "\n".join(self.log_lines()))


@contextmanager
def exclusive(path: Path, timeout: float = 900) -> Iterator[None]:
    """One test session at a time owns the cluster: the fixed base dir and ports are shared, and a
    second session's setup would stop the first one's daemons."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        end = time.monotonic() + timeout
        waited = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    unavailable(f"another test session held the Slurm test cluster ({path}) for {timeout:.0f} s")
                if not waited:
                    print(f"[slurm] waiting for another test session's Slurm cluster ({path})")
                    waited = True
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmEnv]:
    reason = SlurmCluster.why_unavailable()
    if reason:
        unavailable(reason)
    with exclusive(Path(f"{SlurmCluster().base}.lock")):
        yield from _session_cluster(tmp_path_factory)


def _unmount_below(path: Path) -> None:
    """Detach what an earlier run left mounted under `path` (the full-spool test's tmpfs, when its
    umount found it busy or the run was killed): rmtree cannot remove a mount point."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return
    for line in mounts:
        fields = line.split()
        if len(fields) > 1 and fields[1].startswith(f"{path}/"):
            subprocess.run(["umount", "-l", fields[1]], capture_output=True, timeout=30, check=False)


def _session_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmEnv]:
    cluster = SlurmCluster()
    hook_dir = cluster.base / "hook"
    if hook_dir.exists():
        _unmount_below(hook_dir)
        shutil.rmtree(hook_dir)
    hook_dir.mkdir(parents=True)
    # Installed the way docs/slurm.md tells an admin to: the two scripts side by side, 0755.
    for name in ("epilog_slurmctld.sh", "triage_notify.py"):
        shutil.copy(DEPLOY / name, hook_dir / name)
        (hook_dir / name).chmod(0o755)
    secret = os.urandom(32).hex().encode()
    (hook_dir / "webhook.secret").write_bytes(secret + b"\n")
    (hook_dir / "webhook.secret").chmod(0o400)
    cluster.epilog = hook_dir / "epilog_slurmctld.sh"
    env = SlurmEnv(cluster=cluster, hook_dir=hook_dir, jobs_dir=tmp_path_factory.mktemp("slurm-jobs"),
                   secret=secret, port=free_port())
    env.jobs_dir.chmod(0o755)
    env.configure_hook()
    try:
        cluster.up()
    except (ClusterUnavailable, OSError, subprocess.SubprocessError) as e:
        cluster.down()
        unavailable(f"could not start the test Slurm cluster: {e}")
    for line in cluster.log:
        print(f"[slurm] {line}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)  # for SlurmJobSource() and the bot's subprocesses
    try:
        yield env
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        cluster.down()
