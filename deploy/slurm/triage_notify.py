#!/usr/bin/python3
"""gpu-triage job-end notifier for Slurm: final state -> signed POST to the bot, spooled until delivered.

Started detached by epilog_slurmctld.sh (EpilogSlurmctld) for every job that had an allocation:

    triage_notify.py [--config FILE] job-end JOBID     # from the epilog (env: SLURM_JOB_*)
    triage_notify.py [--config FILE] flush             # deliver what is spooled (timer / cron / by hand)

Only jobs that may have failed get here: the epilog decides from the exit codes slurmctld passes
and, for a 0:0 end, the Reason one `scontrol show job` shows (a clean end never starts Python). The
job is still COMPLETING then, so this waits for the final state (polls with backoff, at most wait_s,
about 8 looks), then POSTs only the configured failed states, with the job's stdout/stderr paths.
At most max_notifiers of these run at once (the epilog's flock slots); retrying a bot that is down
is left to one detached `flush --loop` process, so a slot is never held for the whole outage.

Delivery: the event is first written to the spool (atomic rename, fsync'd), then POSTed. A 2xx
(202 accepted, 200 duplicate) removes it. On failure the notifier stays alive retrying with
backoff for retry_for_s, and every later notifier run and `flush` retries the spool too. The
event_id is stable per job end (cluster:job:end time) and the bot ignores an event_id it has
seen, so a retry after a lost response never posts twice. Each spool file is locked while it is
posted, so two notifiers never post the same file at once.

When the spool cannot be written (disk full, read-only, permissions) the event is POSTed straight
from memory, retried from memory for a while (at most MEMORY_RETRY_S), and every such event leaves a
line in syslog (journal) as well as the log file, saying the job, whether it was delivered, and why
not: the epilog's own stderr goes nowhere, and the log file may sit on the same full disk.

Standard library only, and Python 3.6 compatible (EL8's /usr/bin/python3): no capture_output, text=,
dataclasses, walrus, f"{x=}" or str.isascii. It runs on the controller, outside the bot's virtualenv.
"""

import argparse
import errno
import fcntl
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

DEFAULT_CONFIG = "/etc/slurm/gpu-triage/notify.conf"
DEFAULTS = {
    "webhook_url": "",
    "secret_file": "/etc/slurm/gpu-triage/webhook.secret",
    "states": "FAILED,NODE_FAIL,OUT_OF_MEMORY,TIMEOUT",
    "spool_dir": "/var/spool/gpu-triage",
    "log_file": "/var/log/slurm/gpu-triage-notify.log",
    "scontrol": "/usr/bin/scontrol",
    "slurm_conf": "",
    "cluster": "",
    "wait_s": "30",
    "poll_s": "0.25",  # first wait; doubles up to 4 s
    "post_timeout_s": "5",
    "retry_for_s": "3600",
    "retry_initial_s": "1",
    "retry_max_interval_s": "60",
    "syslog_socket": "/dev/log",
    "max_notifiers": "4",  # read by epilog_slurmctld.sh: notifiers running at once
    "chain_epilog": "",  # read by epilog_slurmctld.sh: the site's own EpilogSlurmctld, run first
}
MEMORY_RETRY_S = 600  # an event that could not be spooled is retried from memory for at most this long
SPOOL_ERRNOS = {errno.ENOSPC: "disk full", errno.EDQUOT: "quota exceeded", errno.EROFS: "read-only filesystem",
                errno.EACCES: "permission denied", errno.EPERM: "permission denied"}
# syslog(3) priorities, facility daemon
LOG_ERR, LOG_WARNING, LOG_INFO = 3, 4, 6
LOG_DAEMON = 3 << 3
_WAITING = {"COMPLETING", "RUNNING", "CONFIGURING", "SUSPENDED", "STAGE_OUT", "SIGNALING"}
_PATHS = ("StdOut", "StdErr", "WorkDir")
_REST_OF_LINE = ("Command=", "WorkDir=", "StdErr=", "StdIn=", "StdOut=", "Comment=", "AdminComment=",
                 "SystemComment=", "Container=")


class Config:
    def __init__(self, values, path=""):
        self.v = values
        self.path = path

    def __getattr__(self, key):
        return self.v[key]

    def num(self, key):
        return float(self.v[key])

    @property
    def state_set(self):
        return {s.strip().upper() for s in self.v["states"].split(",") if s.strip()}


def load_config(path):
    values = dict(DEFAULTS)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                key, eq, val = line.partition("=")
                key = key.strip()
                if not eq or key not in DEFAULTS:
                    raise SystemExit(f"{path}:{n}: unknown setting {key!r} (known: {', '.join(DEFAULTS)})")
                values[key] = val.strip()
    except OSError as e:
        raise SystemExit(f"cannot read config {path}: {e.strerror}") from e
    if not values["webhook_url"]:
        raise SystemExit(f"{path}: webhook_url is not set")
    return Config(values, path)


def log(cfg, msg, priority=None):
    """A line in the log file. With a priority (or when the log file cannot be written) also in
    syslog and on stderr: what must not go unnoticed never depends on one disk."""
    line = "{} {}\n".format(time.strftime("%Y-%m-%dT%H:%M:%S"), msg)
    try:
        with open(cfg.log_file, "a", encoding="utf-8", errors="replace") as fh:
            fh.write(line)
    except OSError as e:
        priority = LOG_WARNING if priority is None else priority
        msg = "{} (log file {}: {})".format(msg, cfg.log_file, e.strerror)
    if priority is not None:
        syslog(cfg, priority, msg)
        try:
            sys.stderr.write("gpu-triage-notify: " + msg + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def syslog(cfg, priority, msg):
    """One datagram to the local syslog socket (journald and rsyslog both listen on /dev/log),
    in syslog(3)'s own format. Best effort: returns whether it was sent."""
    path = cfg.syslog_socket
    if not path:
        return False
    data = "<{}>{} gpu-triage-notify[{}]: {}".format(
        LOG_DAEMON | priority, time.strftime("%b %d %H:%M:%S"), os.getpid(), msg).encode("utf-8", "replace")[:8000]
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        s = socket.socket(socket.AF_UNIX, kind)
        try:
            s.settimeout(2)
            s.connect(path)
            s.sendall(data if kind == socket.SOCK_DGRAM else data + b"\n")
            return True
        except OSError as e:
            if e.errno != errno.EPROTOTYPE:
                return False
        finally:
            s.close()
    return False


# ---- the job's final record ----------------------------------------------------------------------

def parse_scontrol(text, job_id):
    """Key/value fields of job `job_id` from `scontrol show job` (multi-line form).

    Free-text fields sit alone at the end of their line there, so a job name cannot pose as a
    field; a name with a newline can, which shows as a key seen twice: then "ambiguous" is set.
    """
    fields, ambiguous, cur = {}, False, None
    for raw in text.split("\n"):
        if raw.startswith("JobId="):
            cur = raw.split()[0] == f"JobId={job_id}"
            if not cur:
                continue
            head, _, name = raw.partition(" JobName=")
            for tok in head.split():
                k, _, v = tok.partition("=")
                fields[k] = v
            fields["JobName"] = name
            continue
        if not cur:
            continue
        line = raw.strip(" ")
        if any(line.startswith(p) for p in _REST_OF_LINE) or raw.startswith("     "):
            k, _, v = line.partition("=")
            if k in _PATHS:  # alone on their line, to its end (a path may hold spaces)
                if k in fields:
                    ambiguous = True
                fields[k] = v
            continue
        key = None
        for tok in line.split():
            k, eq, v = tok.partition("=")
            if eq and re.match(r"^[A-Za-z][A-Za-z0-9_:/]*$", k):
                if k in fields:
                    ambiguous = True
                key = k
                fields[k] = v
            elif key:
                fields[key] += " " + tok
    return fields, ambiguous


def final_record(cfg, job_id):
    """Poll until the job leaves COMPLETING (at most wait_s); returns (fields, ambiguous, polls)."""
    env = dict(os.environ, PATH="/usr/bin:/bin:/usr/sbin:/sbin")
    if cfg.slurm_conf:
        env["SLURM_CONF"] = cfg.slurm_conf
    deadline = time.monotonic() + cfg.num("wait_s")
    delay = cfg.num("poll_s")
    polls, fields, ambiguous = 0, {}, False
    while True:
        polls += 1
        try:
            # No capture_output/text (3.7+); and bytes decoded here, not by the locale (3.6 under
            # slurmctld's C locale would take a job name with a non-ASCII letter for an error).
            p = subprocess.run([cfg.scontrol, "show", "job", job_id], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, timeout=15)
            if p.returncode == 0:
                fields, ambiguous = parse_scontrol(p.stdout.decode("utf-8", "replace"), job_id)
        except (OSError, subprocess.TimeoutExpired) as e:
            log(cfg, f"job={job_id} scontrol failed: {e}")
        if fields.get("JobState") not in _WAITING or time.monotonic() >= deadline:
            return fields, ambiguous, polls
        time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
        delay = min(delay * 2, 4.0)


def display_id(fields, job_id):
    if fields.get("ArrayJobId") and fields.get("ArrayTaskId", "").isdigit():
        return "{}_{}".format(fields["ArrayJobId"], fields["ArrayTaskId"])
    if fields.get("HetJobId") and fields.get("HetJobOffset", "").isdigit():
        return "{}+{}".format(fields["HetJobId"], fields["HetJobOffset"])
    return job_id


def display_field(value):
    """Job names are free text; the bot accepts a bounded printable set in display fields (it looks
    the job up by id anyway), so anything else becomes '_' rather than getting the event refused."""
    return re.sub(r"[^\w.:@+\-\[\], /#=]", "_", value or "")[:200]


def build_event(cfg, job_id, fields):
    env = os.environ
    cluster = cfg.cluster or env.get("SLURM_CLUSTER_NAME", "") or "slurm"
    end = fields.get("EndTime", "")
    if not end or end in ("Unknown", "None"):
        end = str(int(time.time()))
    user = env.get("SLURM_JOB_USER") or re.sub(r"\(\d+\)$", "", fields.get("UserId", ""))
    return {
        # Stable per job end: a requeued job that fails again ends at another time, a new event.
        "event_id": f"{cluster}:{job_id}:{end}",
        "job_id": display_id(fields, job_id),
        "state": fields.get("JobState", "UNKNOWN"),
        "exit_code": fields.get("ExitCode", ""),
        # The epilog's environment comes from slurmctld's own structures: preferred over text.
        "name": display_field(env.get("SLURM_JOB_NAME") or fields.get("JobName", "")),
        "user": display_field(user),
        "partition": display_field(env.get("SLURM_JOB_PARTITION") or fields.get("Partition", "")),
        "cluster": cluster,
        "nodes": env.get("SLURM_JOB_NODELIST") or fields.get("NodeList", ""),
        # Where the job wrote: scontrol's form (%j, %u, %x expanded), else the epilog's raw pattern.
        # The bot reads these itself when slurmctld has forgotten the job (MinJobAge).
        "stdout": fields.get("StdOut") or env.get("SLURM_JOB_STDOUT", ""),
        "stderr": fields.get("StdErr") or env.get("SLURM_JOB_STDERR", ""),
        "work_dir": fields.get("WorkDir") or env.get("SLURM_JOB_WORK_DIR", ""),
    }


# ---- spool and delivery ---------------------------------------------------------------------------

def spool_path(cfg, event_id):
    return os.path.join(cfg.spool_dir, hashlib.sha256(event_id.encode()).hexdigest()[:32] + ".json")


def spool(cfg, event):
    """Write atomically: a crash leaves either no file or a whole one, never half an event."""
    os.makedirs(cfg.spool_dir, mode=0o700, exist_ok=True)
    path = spool_path(cfg, event["event_id"])
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(event, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)  # a half-written file on a full disk would only take the space others need
        except OSError:
            pass
        raise
    dfd = os.open(cfg.spool_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


def spool_problem(cfg, e):
    """'spool /var/spool/gpu-triage not writable: disk full (No space left on device)'."""
    what = SPOOL_ERRNOS.get(e.errno, "error")
    return "spool {} not writable: {} ({})".format(cfg.spool_dir, what, e.strerror or e)


def deliver_unspooled(cfg, event, err, t0):
    """The spool cannot be written: POST from memory, retry from memory for a while, and leave a
    line in syslog (and the log file, and stderr) whatever happens. Returns the exit status."""
    job, eid = event["job_id"], event["event_id"]
    why = spool_problem(cfg, err)
    body = json.dumps(event, sort_keys=True).encode()
    deadline = time.monotonic() + min(cfg.num("retry_for_s"), MEMORY_RETRY_S)
    delay = cfg.num("retry_initial_s")
    tries = 0
    while True:
        tries += 1
        try:
            ok, permanent, detail = post(cfg, body)
        except OSError as e:
            ok, permanent, detail = False, False, "secret file {}: {}".format(cfg.secret_file, e.strerror)
        if ok:
            log(cfg, "job={} event={} delivered directly ({}, try {}, after {:.2f}s) but NOT spooled: {}".format(
                job, eid, detail, tries, time.monotonic() - t0, why), LOG_WARNING)
            return 0
        if permanent:
            log(cfg, "job={} event={} LOST: refused by the bot ({}) and not spooled: {}; event: {}".format(
                job, eid, detail, why, body.decode()), LOG_ERR)
            return 1
        if time.monotonic() >= deadline:
            break
        if tries == 1:
            log(cfg, "job={} event={} NOT DELIVERED yet ({}) and not spooled: {}; retrying from memory for "
                     "{:.0f}s".format(job, eid, detail, why, deadline - time.monotonic()), LOG_ERR)
        time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
        delay = min(delay * 2, cfg.num("retry_max_interval_s"))
        try:  # room on the disk again: the spool and its retrier take over from here
            path = spool(cfg, event)
        except OSError:
            continue
        log(cfg, "job={} event={} spooled after all (try {})".format(job, eid, tries), LOG_WARNING)
        if deliver_file(cfg, path) != "sent" or pending(cfg):
            start_retrier(cfg)
        return 0
    log(cfg, "job={} event={} LOST: not delivered ({}, {} tries in {:.0f}s) and not spooled: {}; "
             "event: {}".format(job, eid, detail, tries, time.monotonic() - t0, why, body.decode()), LOG_ERR)
    return 1


def read_secret(cfg):
    with open(cfg.secret_file, "rb") as fh:
        secret = fh.read().rstrip()
    if not secret:
        raise OSError(errno.EINVAL, "secret file is empty")
    return secret


def post(cfg, body):
    """Returns (ok, permanent, detail). Signed fresh each try: the bot refuses a replayed signature."""
    ts = str(int(time.time()))
    sig = hmac.new(read_secret(cfg), b"v1:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(cfg.webhook_url, data=body, method="POST", headers={
        "Content-Type": "application/json", "X-Triage-Timestamp": ts, "X-Triage-Signature": "v1=" + sig,
        "User-Agent": "gpu-triage-slurm-notify/1"})
    try:
        with urllib.request.urlopen(req, timeout=cfg.num("post_timeout_s")) as r:
            return True, False, f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        # 401 may be a secret being rotated or a clock that is off: keep it, someone will fix it.
        # Other 4xx mean this event can never be accepted: move it aside instead of retrying forever.
        permanent = 400 <= e.code < 500 and e.code not in (401, 408, 429)
        return False, permanent, f"HTTP {e.code} {e.read(300).decode('utf-8', 'replace').strip()}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return False, False, str(getattr(e, "reason", e))


def deliver_file(cfg, path):
    """Post one spooled event under an exclusive lock. Returns "sent", "kept", "busy" or "gone"."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return "gone"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "busy"  # another notifier is posting it right now
        if os.fstat(fd).st_nlink == 0:
            return "gone"  # delivered and removed while we waited for the lock
        with os.fdopen(os.dup(fd), "rb") as fh:
            body = fh.read()
        try:
            event = json.loads(body.decode())
        except ValueError:
            where = _move_aside(cfg, path)
            log(cfg, f"spool {path} is not JSON; {where}")
            return "gone"
        try:
            ok, permanent, detail = post(cfg, body)
        except OSError as e:
            ok, permanent, detail = False, False, f"secret file {cfg.secret_file}: {e.strerror}"
        if ok:
            os.unlink(path)
            log(cfg, "job={} event={} delivered ({})".format(event.get("job_id"), event.get("event_id"), detail))
            return "sent"
        if permanent:
            where = _move_aside(cfg, path)
            log(cfg, "job={} event={} REFUSED ({}); {}".format(event.get("job_id"), event.get("event_id"), detail, where))
            return "gone"
        log(cfg, "job={} event={} not delivered ({}); kept in spool".format(
            event.get("job_id"), event.get("event_id"), detail))
        return "kept"
    finally:
        os.close(fd)


def _move_aside(cfg, path):
    """Move a spool file that can never be delivered to spool_dir/failed; says where it went."""
    d = os.path.join(cfg.spool_dir, "failed")
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        os.rename(path, os.path.join(d, os.path.basename(path)))
    except OSError as e:
        return "could not move it to {} ({}); it stays in the spool".format(d, e.strerror)
    return "moved to {}".format(d)


def pending(cfg):
    try:
        names = sorted(os.listdir(cfg.spool_dir))
    except OSError:  # missing, or not readable: nothing this run can deliver
        return []
    return [os.path.join(cfg.spool_dir, n) for n in names if n.endswith(".json")]


def flush_once(cfg):
    """One pass over the spool, oldest name first; returns how many are still waiting."""
    left = 0
    for path in pending(cfg):
        if deliver_file(cfg, path) in ("kept", "busy"):
            left += 1
    return left


def retry_loop(cfg):
    """Keep retrying the spool with backoff. Only one process does this (a lock): a burst of
    failing jobs during a bot outage must not leave hundreds of sleeping retriers."""
    lock_path = os.path.join(cfg.spool_dir, ".retrier.lock")
    deadline = time.monotonic() + cfg.num("retry_for_s")
    delay = cfg.num("retry_initial_s")
    while True:
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as e:
            log(cfg, "cannot retry the spool: lock {}: {}".format(lock_path, e.strerror), LOG_WARNING)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return  # the running retrier rescans the spool each round and will send ours too
        try:
            while pending(cfg) and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 2, cfg.num("retry_max_interval_s"))
                flush_once(cfg)
        finally:
            os.close(fd)  # releases the lock
        # An event spooled just before we let go found the lock taken and left it to us: look again.
        if not pending(cfg) or time.monotonic() >= deadline:
            if pending(cfg):
                log(cfg, f"giving up retrying for now; {len(pending(cfg))} event(s) stay in {cfg.spool_dir} for the "
                         "next notifier run or `triage_notify.py flush`")
            return


def start_retrier(cfg):
    """Leave the retrying to a detached `flush --loop` (one at a time: retry_loop's lock), so this
    notifier exits and frees its slot for the next job instead of sleeping through a bot outage."""
    try:
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--config", cfg.path, "flush", "--loop"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError as e:
        log(cfg, "cannot start the spool retrier ({}); retrying here".format(e), LOG_WARNING)
        retry_loop(cfg)


def job_end(cfg, job_id, reason="unknown"):
    if not re.match(r"^[0-9]{1,10}$", job_id or ""):
        log(cfg, "refusing job id {!r}".format((job_id or "")[:40]))
        return 2
    t0 = time.monotonic()
    fields, ambiguous, polls = final_record(cfg, job_id)
    state = fields.get("JobState", "")
    if ambiguous:
        log(cfg, f"job={job_id} scontrol record is ambiguous (job name with newlines?); state read as {state}")
    reason = display_field(reason)[:40]
    if state not in cfg.state_set:
        log(cfg, f"job={job_id} ended {state or 'unknown'} (reason={reason}, polls={polls}): not a notified state")
        if pending(cfg):
            flush_once(cfg)  # a cheap chance to deliver what an earlier outage left behind
        return 0
    event = build_event(cfg, job_id, fields)
    try:
        path = spool(cfg, event)
    except OSError as e:
        return deliver_unspooled(cfg, event, e, t0)
    result = deliver_file(cfg, path)
    log(cfg, f"job={job_id} state={state} reason={reason} polls={polls} first attempt {result} after "
             f"{time.monotonic() - t0:.2f}s")
    if result == "sent" and pending(cfg):
        flush_once(cfg)  # the bot answers again: deliver what an earlier outage left behind
    if pending(cfg):
        start_retrier(cfg)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="gpu-triage Slurm job-end notifier")
    ap.add_argument("--config", default=os.environ.get("TRIAGE_NOTIFY_CONF", DEFAULT_CONFIG))
    sub = ap.add_subparsers(dest="cmd")
    je = sub.add_parser("job-end", help="notify the bot about a job that just ended (from the epilog)")
    je.add_argument("job_id")
    je.add_argument("--reason", default="unknown", help="the Reason the epilog saw (for the log)")
    fl = sub.add_parser("flush", help="deliver spooled notifications")
    fl.add_argument("--loop", action="store_true", help="keep retrying with backoff (like a notifier does)")
    args = ap.parse_args(argv)
    if not args.cmd:
        ap.error("a command is required: job-end JOBID | flush")
    try:
        cfg = load_config(args.config)
    except SystemExit as e:  # the epilog discards stderr: a broken config must show somewhere
        syslog(Config(dict(DEFAULTS)), LOG_ERR, "not notifying: {}".format(e))
        raise
    os.umask(0o077)  # the spool holds job names and users; the log too
    if args.cmd == "job-end":
        try:
            return job_end(cfg, args.job_id, args.reason)
        except Exception as e:
            log(cfg, "job={} notifier failed: {}: {}".format((args.job_id or "")[:20], type(e).__name__, e), LOG_ERR)
            raise
    left = flush_once(cfg)
    if left and args.loop:
        retry_loop(cfg)
        left = len(pending(cfg))
    print(f"{left} event(s) still spooled in {cfg.spool_dir}")
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())
