"""The Slurm notifier (deploy/slurm/triage_notify.py) on its own: Python 3.6 grammar and APIs, and
a spool it cannot write (a real tiny tmpfs, full or read-only): the job still reaches a real HTTP
receiver on loopback, or one line in syslog and on stderr says which job was lost and why.

The receiver is tests/slurm/hook_receiver.py (the bot's webhook contract, HMAC checked); the job's
record comes from a stand-in `scontrol`; the notifier runs as a real process under the oldest
Python found here (3.6 under pyenv, like EL8's /usr/bin/python3) and under this one.
"""

from __future__ import annotations

import ast
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.hook_receiver import HookReceiver

ROOT = Path(__file__).resolve().parents[2]
NOTIFIER = ROOT / "deploy" / "slurm" / "triage_notify.py"
SECRET = b"notifier-test-secret-0123456789abcdef"
JOB = "4242"
RECORD = f"""JobId={JOB} JobName=train-llm \u00fc
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Priority=1 Nice=0 Account=(null) QOS=normal
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=1:0
   SubmitTime=2024-06-26T05:00:00 EligibleTime=2024-06-26T05:00:00
   StartTime=2024-06-26T05:00:01 EndTime=2024-06-26T05:06:30 Deadline=N/A
   Partition=gpu AllocNode:Sid=login:1
   NodeList=gpu[01-02]
   Command=/home/alice/train.sh
   WorkDir=/home/alice
"""

# APIs and syntax newer than 3.6 that ast.parse(feature_version=(3, 6)) does not catch.
NEW_KEYWORDS = {"capture_output", "text"}  # subprocess.run(..., capture_output=, text=) are 3.7
NEW_ATTRIBUTES = {"isascii", "time_ns", "fromisoformat", "nullcontext", "monotonic_ns", "perf_counter_ns",
                  "create_task", "get_running_loop", "reconfigure"}
NEW_MODULES = {"dataclasses", "contextvars", "importlib.resources", "zoneinfo", "graphlib", "tomllib"}


def oldest_python() -> str | None:
    for cand in ["python3.6", *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.6*/bin/python3.6"))),
                 *sorted(glob.glob("/opt/*/versions/3.6*/bin/python3.6"))]:
        path = shutil.which(cand) if os.sep not in cand else cand
        if path and os.access(path, os.X_OK):
            r = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2] == (3, 6))"],
                               capture_output=True, text=True, timeout=30)
            if r.stdout.strip() == "True":
                return path
    return None


PY36 = oldest_python()
PYTHONS = [pytest.param(PY36, id="python3.6", marks=pytest.mark.skipif(
    PY36 is None, reason="no Python 3.6 interpreter here (pyenv install 3.6 to run the notifier under it)")),
    pytest.param(sys.executable, id="python-current")]


# ---- 3.6 compatibility ----------------------------------------------------------------------------

def test_notifier_parses_with_python_3_6_grammar() -> None:
    src = NOTIFIER.read_text()
    ast.parse(src, filename=str(NOTIFIER), feature_version=(3, 6))  # walrus, f"{x=}", pos-only params...


def test_notifier_uses_no_api_newer_than_python_3_6() -> None:
    tree = ast.parse(NOTIFIER.read_text())
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in NEW_KEYWORDS:
            problems.append(f"line {node.value.lineno}: keyword {node.arg}= (Python 3.7+)")
        elif isinstance(node, ast.Attribute) and node.attr in NEW_ATTRIBUTES:
            problems.append(f"line {node.lineno}: .{node.attr} (Python 3.7+)")
        elif isinstance(node, ast.Import):
            problems += [f"line {node.lineno}: import {a.name} (Python 3.7+)" for a in node.names
                         if a.name in NEW_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.module in NEW_MODULES:
                problems.append(f"line {node.lineno}: from {node.module} (Python 3.7+)")
            if node.module == "__future__" and any(a.name == "annotations" for a in node.names):
                problems.append(f"line {node.lineno}: from __future__ import annotations (Python 3.7+)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "breakpoint":
            problems.append(f"line {node.lineno}: breakpoint() (Python 3.7+)")
    assert not problems, problems


@pytest.mark.skipif(PY36 is None, reason="no Python 3.6 interpreter here")
def test_notifier_compiles_and_starts_under_python_3_6(tmp_path: Path) -> None:
    r = subprocess.run([PY36, "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')",
                        str(NOTIFIER)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([PY36, str(NOTIFIER), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "job-end" in r.stdout, r.stderr


# ---- a spool that cannot be written ----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mount_tmpfs(target: Path, *opts: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs for a full or read-only spool needs root")
    if not shutil.which("mount"):
        pytest.skip("no mount(8) here")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=64k", "mode=0700", *opts)), "tmpfs",
                        str(target)], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): {r.stderr.strip()}")


def umount(target: Path) -> None:
    subprocess.run(["umount", str(target)], capture_output=True, timeout=30)


def fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 1024)
        except OSError:
            pass


@pytest.fixture
def full_fs() -> Iterator[Path]:
    """A 64 KiB tmpfs with no byte left, and the spool directory (an admin made it) on it."""
    d = Path(tempfile.mkdtemp(prefix="triage-full-"))
    mount_tmpfs(d)
    try:
        (d / "spool").mkdir(mode=0o700)
        fill(d / "filler")
        yield d
    finally:
        umount(d)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def readonly_fs() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="triage-ro-"))
    mount_tmpfs(d, "ro")
    try:
        yield d
    finally:
        umount(d)
        shutil.rmtree(d, ignore_errors=True)


class Syslog:
    """A syslog socket of our own (the notifier's syslog_socket), collecting datagrams."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="triage-log-")  # AF_UNIX paths are short
        self.path = os.path.join(self.dir, "log.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)

    def lines(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(65536).decode("utf-8", "replace"))
            except TimeoutError:  # socket.timeout is TimeoutError since 3.10
                return out

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def syslog() -> Iterator[Syslog]:
    s = Syslog()
    try:
        yield s
    finally:
        s.close()


def setup(tmp_path: Path, spool: Path, syslog: Syslog, port: int, **overrides: str) -> Path:
    scontrol = tmp_path / "scontrol"
    scontrol.write_bytes(b"#!/bin/sh\ncat <<'EOF'\n" + RECORD.encode() + b"EOF\n")
    scontrol.chmod(0o755)
    secret = tmp_path / "webhook.secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o400)
    values = {"webhook_url": f"http://127.0.0.1:{port}/hooks/job-failed", "secret_file": str(secret),
              "spool_dir": str(spool / "spool"), "log_file": str(tmp_path / "notify.log"),
              "scontrol": str(scontrol), "cluster": "test", "wait_s": "2", "poll_s": "0.1",
              "post_timeout_s": "3", "retry_for_s": "0", "retry_initial_s": "0.2", "retry_max_interval_s": "0.5",
              "syslog_socket": syslog.path, **overrides}
    conf = tmp_path / "notify.conf"
    conf.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
    return conf


def run_notifier(python: str, conf: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # slurmctld's environment: no locale, minimal PATH (3.6 then reads text as ASCII).
    env = {"PATH": "/usr/bin:/bin", "LANG": "C", "LC_ALL": "C"}
    return subprocess.run([python, str(NOTIFIER), "--config", str(conf), "job-end", JOB], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("python", PYTHONS)
def test_full_spool_the_job_still_reaches_the_bot_directly(python: str, tmp_path: Path, full_fs: Path,
                                                           syslog: Syslog) -> None:
    port = free_port()
    rcv = HookReceiver(secret=SECRET, port=port).start()
    try:
        conf = setup(tmp_path, full_fs, syslog, port)
        r = run_notifier(python, conf)
        assert r.returncode == 0, r.stdout + r.stderr
        (ev,) = rcv.accepted(JOB)
        assert ev["event_id"] == f"test:{JOB}:2024-06-26T05:06:30" and ev["state"] == "FAILED"
        assert ev["name"] == "train-llm \u00fc"  # read as UTF-8 even under the C locale
    finally:
        rcv.stop()
    assert os.listdir(full_fs / "spool") == []  # no half-written file left taking space
    log = (tmp_path / "notify.log").read_text()
    assert f"job={JOB} " in log and "delivered directly (HTTP 202" in log and "disk full" in log
    (line,) = [x for x in syslog.lines() if f"job={JOB} " in x]
    assert line.startswith("<28>") and "gpu-triage-notify[" in line  # daemon.warning
    assert "delivered directly" in line and "NOT spooled" in line and "No space left on device" in line


@pytest.mark.parametrize("python", PYTHONS)
def test_full_spool_and_bot_down_logs_one_line_saying_which_job_and_why(python: str, tmp_path: Path,
                                                                        full_fs: Path, syslog: Syslog) -> None:
    port = free_port()  # nothing listens there
    # The log file is on the same full disk, as /var/log often is next to /var/spool.
    conf = setup(tmp_path, full_fs, syslog, port, log_file=str(full_fs / "notify.log"))
    r = run_notifier(python, conf)
    assert r.returncode == 1, r.stdout + r.stderr
    lost = [x for x in r.stderr.splitlines() if "LOST" in x]
    assert len(lost) == 1, r.stderr
    assert f"job={JOB} event=test:{JOB}:" in lost[0]
    assert "Connection refused" in lost[0] and "disk full (No space left on device)" in lost[0]
    assert '"job_id": "4242"' in lost[0]  # the event itself, to post by hand
    (sys_line,) = [x for x in syslog.lines() if "LOST" in x]
    assert sys_line.startswith("<27>") and f"job={JOB} " in sys_line  # daemon.err


@pytest.mark.parametrize("python", PYTHONS)
def test_read_only_spool_the_job_still_reaches_the_bot(python: str, tmp_path: Path, readonly_fs: Path,
                                                       syslog: Syslog) -> None:
    port = free_port()
    rcv = HookReceiver(secret=SECRET, port=port).start()
    try:
        conf = setup(tmp_path, readonly_fs, syslog, port)
        r = run_notifier(python, conf)
        assert r.returncode == 0, r.stdout + r.stderr
        assert len(rcv.accepted(JOB)) == 1
    finally:
        rcv.stop()
    (line,) = [x for x in syslog.lines() if f"job={JOB} " in x]
    assert "delivered directly" in line and "read-only filesystem" in line


def test_full_spool_bot_back_a_moment_later_is_delivered_from_memory(tmp_path: Path, full_fs: Path,
                                                                   syslog: Syslog) -> None:
    port = free_port()
    conf = setup(tmp_path, full_fs, syslog, port, retry_for_s="20")
    p = subprocess.Popen([PY36 or sys.executable, str(NOTIFIER), "--config", str(conf), "job-end", JOB],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={"PATH": "/usr/bin:/bin", "LANG": "C"})
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 10
        while not any("NOT DELIVERED yet" in x for x in seen):
            assert time.monotonic() < deadline, f"no NOT DELIVERED line: {seen}"
            seen += syslog.lines()
        rcv = HookReceiver(secret=SECRET, port=port).start()
        try:
            out, err = p.communicate(timeout=30)
            assert p.returncode == 0, out + err
            assert len(rcv.accepted(JOB)) == 1
        finally:
            rcv.stop()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    seen += syslog.lines()
    (done,) = [x for x in seen if "delivered directly" in x]
    assert f"job={JOB} " in done and "NOT spooled" in done and "try 1," not in done
    assert not any("LOST" in x for x in seen)
