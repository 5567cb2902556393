"""The EpilogSlurmctld hook on a real Slurm: final state, signed POST, spool, retry, exactly once.

The receiver here has the bot's webhook contract (HMAC verified with node_agent.auth, 202 new /
200 duplicate); test_bot_chain.py runs the same hook into the real bot.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from conftest import SlurmEnv
from hook_receiver import HookReceiver

pytestmark = pytest.mark.slurm

FAIL_SCRIPT = """#!/bin/bash
#SBATCH --job-name=hook-fail
#SBATCH --output=%x-%j.out
echo "training step 1"
echo "[rank0]: RuntimeError: boom" >&2
exit 3
"""


def notifiers_running() -> list[str]:
    """Notifier and retrier processes still alive (this session's cluster is the only one here)."""
    out = subprocess.run(["pgrep", "-af", "triage_notify.py"], capture_output=True, text=True, check=False)
    return [ln for ln in out.stdout.splitlines() if "pgrep" not in ln]


@pytest.fixture
def receiver(slurm: SlurmEnv) -> Iterator[HookReceiver]:
    # An earlier test's notifier or `flush --loop` retrier (the bot-chain tests share the spool and
    # the port) would hold a slot or post into this test's receiver: let them finish first.
    end = time.monotonic() + 120
    while notifiers_running() and time.monotonic() < end:
        time.sleep(0.5)
    slurm.configure_hook()
    rcv = HookReceiver(secret=slurm.secret, port=slurm.port).start()
    try:
        yield rcv
    finally:
        rcv.stop()


def wait_for(pred, timeout: float, what: str):  # noqa: ANN001, ANN201
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_failed_job_is_posted_once_signed_with_its_final_state(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    job = slurm.submit(FAIL_SCRIPT)
    events = wait_for(lambda: receiver.accepted(job), 30, f"the hook POST for job {job}")
    assert slurm.cluster.job_state(job) == "FAILED"
    ev = events[0]
    assert ev == {
        "event_id": ev["event_id"],
        "job_id": job,
        "state": "FAILED",
        "exit_code": "3:0",
        "name": "hook-fail",
        "user": "root",
        "partition": "debug",
        "cluster": "ci",
        "nodes": "localhost",
        # where the job wrote, as scontrol reports it: the bot can read the logs without asking Slurm
        "stdout": f"{slurm.jobs_dir}/hook-fail-{job}.out",
        "stderr": f"{slurm.jobs_dir}/hook-fail-{job}.out",
        "work_dir": str(slurm.jobs_dir),
    }
    # Stable per job end: cluster:job:end time as scontrol prints it.
    end_time = slurm.cluster.scontrol("show", "job", job).split("EndTime=")[1].split()[0]
    assert ev["event_id"] == f"ci:{job}:{end_time}"
    time.sleep(1.5)  # anything duplicated would have arrived by now
    assert len(receiver.for_job(job)) == 1
    assert slurm.spooled() == []


def test_successful_and_cancelled_jobs_are_not_posted(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    ok = slurm.submit("#!/bin/bash\necho fine\n", "-J", "hook-ok", "-o", "%x-%j.out")
    running = slurm.submit("#!/bin/bash\nsleep 300\n", "-J", "hook-cx", "-o", "%x-%j.out")
    assert slurm.cluster.wait_state(running, {"RUNNING"}, 20) == "RUNNING"
    subprocess.run(["/usr/bin/scancel", running], env=slurm.cluster.env, check=True)
    # Decided in the epilog from the exit code and one scontrol look: no notifier, no polling.
    for job in (ok, running):
        slurm.wait_log(job, "ended 0:0 with Reason=None")
        assert not [ln for ln in slurm.log_lines(job) if "polls=" in ln], slurm.log_lines(job)
    time.sleep(1)
    assert receiver.for_job(ok) == [] and receiver.for_job(running) == []
    assert slurm.cluster.job_state(ok) == "COMPLETED" and slurm.cluster.job_state(running) == "CANCELLED"


def test_a_burst_of_failures_runs_at_most_max_notifiers_at_once(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    slurm.configure_hook(max_notifiers="2")
    receiver.delay_s = 1.5  # a slow bot: unbounded notifiers would all be posting at the same time
    jobs = [slurm.submit(FAIL_SCRIPT) for _ in range(6)]
    t0 = time.monotonic()
    try:
        wait_for(lambda: all(receiver.accepted(j) for j in jobs), 120, "all six events")
    except AssertionError as e:  # say where each job got to: Slurm, the notifier or the receiver
        states = {j: slurm.cluster.job_state(j) for j in jobs}
        log = "\n".join(ln for j in jobs for ln in slurm.log_lines(j))
        raise AssertionError(f"{e}\nstates {states}\naccepted {[j for j in jobs if receiver.accepted(j)]}\n"
                             f"running {notifiers_running()}\nnotifier log:\n{log}") from None
    took = time.monotonic() - t0
    assert receiver.max_in_flight <= 2, f"{receiver.max_in_flight} notifiers posted at once"
    assert all(len(receiver.for_job(j)) == 1 for j in jobs)
    print(f"[slurm] 6 failed jobs, max_notifiers=2, bot answering in 1.5 s: all posted after {took:.1f}s")


def test_cancelled_jobs_are_posted_when_configured(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    slurm.configure_hook(states="FAILED,CANCELLED")
    job = slurm.submit("#!/bin/bash\nsleep 300\n", "-J", "hook-cx2", "-o", "%x-%j.out")
    assert slurm.cluster.wait_state(job, {"RUNNING"}, 20) == "RUNNING"
    subprocess.run(["/usr/bin/scancel", job], env=slurm.cluster.env, check=True)
    ev = wait_for(lambda: receiver.accepted(job), 30, "the CANCELLED event")[0]
    final = slurm.cluster.scontrol("show", "job", job).split("ExitCode=")[1].split()[0]
    assert ev["state"] == "CANCELLED" and ev["exit_code"] == final and final in ("0:15", "143:0")


def test_bot_down_event_is_spooled_then_delivered_once(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    receiver.stop()
    job = slurm.submit(FAIL_SCRIPT)
    slurm.wait_log(job, "not delivered")
    files = wait_for(slurm.spooled, 5, "a spool file")
    assert len(files) == 1
    spooled = json.loads(files[0].read_text())
    assert spooled["job_id"] == job and spooled["state"] == "FAILED"
    time.sleep(1.0)  # a few failed retries while the receiver is down
    receiver.start()
    wait_for(lambda: receiver.accepted(job), 15, "the spooled event after the receiver came back")
    wait_for(lambda: not slurm.spooled(), 5, "an empty spool")
    time.sleep(2)
    assert [r.status for r in receiver.for_job(job)] == [202]
    assert receiver.accepted(job)[0]["event_id"] == spooled["event_id"]


def test_lost_response_is_retried_with_the_same_event_id(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    # The bot got the event but its answer was lost: the retry must carry the same event_id, so
    # the bot answers "duplicate" (200) instead of opening a second incident.
    receiver.drop_next = 1
    job = slurm.submit(FAIL_SCRIPT)
    wait_for(lambda: [r for r in receiver.for_job(job) if r.status == 200], 20, "the retried POST")
    wait_for(lambda: not slurm.spooled(), 5, "an empty spool")
    got = receiver.for_job(job)
    assert [r.status for r in got] == [202, 200]
    assert got[0].body == got[1].body
    assert len(receiver.accepted(job)) == 1


def test_wrong_secret_keeps_the_event_spooled(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    bad = slurm.hook_dir / "wrong.secret"
    bad.write_text("not-the-secret\n")
    bad.chmod(0o400)
    slurm.configure_hook(secret_file=str(bad), retry_for_s="2")
    job = slurm.submit(FAIL_SCRIPT)
    slurm.wait_log(job, "HTTP 401")
    assert receiver.accepted(job) == []
    assert len(slurm.spooled()) == 1
    wait_for(lambda: "giving up" in slurm.notify_log.read_text(), 10, "the retrier to give up")
    assert len(slurm.spooled()) == 1
    # Fixed secret: the next flush (the timer's job) delivers it.
    slurm.configure_hook()
    r = subprocess.run(["/usr/bin/python3", str(slurm.hook_dir / "triage_notify.py"), "--config",
                        str(slurm.hook_dir / "notify.conf"), "flush"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 event(s) still spooled" in r.stdout
    assert len(receiver.accepted(job)) == 1


def test_free_text_job_name_does_not_get_the_event_refused(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    job = slurm.submit(FAIL_SCRIPT, "-J", "train (v2) 'lr=3e-4' ü")
    ev = wait_for(lambda: receiver.accepted(job), 30, "the hook POST")[0]
    assert ev["name"] == "train _v2_ _lr=3e-4_ ü"


def test_full_spool_filesystem_the_failed_job_still_reaches_the_bot(slurm: SlurmEnv, receiver: HookReceiver) -> None:
    # The spool on a real, tiny, full filesystem (64 KiB tmpfs, filled): the notifier posts from
    # memory and says so in its log (and syslog); nothing half-written is left on the full disk.
    full = slurm.hook_dir / "full-spool"
    full.mkdir(exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(full)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        (full / "spool").mkdir(mode=0o700)
        with open(full / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 1024)
            except OSError:
                pass
        slurm.configure_hook(spool_dir=str(full / "spool"), syslog_socket="")
        job = slurm.submit(FAIL_SCRIPT)
        (ev,) = wait_for(lambda: receiver.accepted(job), 30, "the hook POST with a full spool")
        assert ev["state"] == "FAILED" and ev["job_id"] == job
        line = slurm.wait_log(job, "delivered directly")
        assert "NOT spooled" in line and "disk full (No space left on device)" in line
        # nothing spooled (the epilog's empty slot files take an inode, no blocks)
        assert [p.name for p in (full / "spool").iterdir() if not p.name.startswith(".notifier-slot.")] == []
    finally:
        slurm.configure_hook()
        if subprocess.run(["umount", str(full)], capture_output=True, timeout=30).returncode != 0:
            # busy (a notifier still holds a slot file): detach it now, freed when the file closes
            subprocess.run(["umount", "-l", str(full)], capture_output=True, timeout=30)
