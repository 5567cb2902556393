"""Follow the install instructions literally, as a new operator would, on this machine, with real systemd.

    sudo .venv/bin/python tests/deploy/walkthrough.py   # = tests/deploy/test_walkthrough.py, every step printed

The instructions are read from where an operator reads them, at run time, so an edit there is followed:
the install comments of deploy/systemd/{node-agent.service,node-agent.slice,triage-bot.service}, the command
blocks of docs/node-agent.md, the install and check blocks of deploy/slurm/README.md (linked from
docs/slurm.md) and the drop-in of docs/slurm.md ("Bot settings").
Each command runs as written, in one root shell per block (so `cd` and `umask` carry over as they do for a
person typing them), unless the step record says why it was adapted: a placeholder such as `'xoxb-...'`
filled in, a file edited instead of `$EDITOR`, a second host that is this one. A command that is no longer
in the instructions is an error, not a silent skip.

The "machine" is this host seen through private mount, PID, UTS and IPC namespaces: /etc, /opt, /var,
/root and /home are overlays whose writes land in a throwaway directory, /run and /etc/systemd/system
start empty, and /lib/systemd/systemd runs as PID 1 there (this container has no systemd of its own). So `systemctl enable
--now`, DynamicUser=, LoadCredential=, %d, Type=notify and the sandbox are systemd's own, not an
emulation. The network is the host's: ports 9477 and 9478 must be free. The Slurm part uses the test
cluster of tests/slurm (same base directory, ports and lock, so it never runs beside a `pytest -m slurm`
session), started inside the namespaces, with its slurm.conf seen at /etc/slurm/slurm.conf.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SLURM_BASE = Path(os.environ.get("TRIAGE_TEST_SLURM_BASE", "/tmp/gpu-triage-slurm"))
PORTS = (9477, 9478)  # the agent's and the bot's hooks port, as the units and agent.json say
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Units the two services' default dependencies name; empty stand-ins, so that sysinit.target does not pull
# in this host's mounts, udev or sysctl. journald is the real one: `journalctl -u` is how an operator looks.
STUB_TARGETS = ["sysinit", "basic", "sockets", "timers", "paths", "shutdown", "network", "network-online",
                "multi-user", "time-set", "time-sync", "nss-user-lookup"]
JOURNALD = ["systemd-journald.service", "systemd-journald.socket", "systemd-journald-dev-log.socket"]


class WalkthroughError(Exception):
    """A documented step failed; the message names the step, the command and its output."""


@dataclass
class Step:
    source: str  # where an operator reads it: "deploy/slurm/README.md, Install"
    written: str  # the command as the document has it
    ran: str  # what was run ("" when it could not run)
    note: str = ""  # why it differs, or why it did not run and what ran instead
    seconds: float = 0.0
    output: str = ""

    def line(self) -> str:
        how = "as written" if self.ran == self.written and not self.note else self.note
        return f"[{self.seconds:5.1f}s] {self.source}: {self.written}\n         -> {how}"


def replace(text: str, old: str, new: str) -> str:
    """`old` must be in `text`: when the document changes, the walkthrough says so instead of drifting."""
    if old not in text:
        raise WalkthroughError(f"the instructions changed: {old!r} is no longer in {text!r}")
    return text.replace(old, new)


# ---- reading the instructions ---------------------------------------------------------------------------

def unit_install_commands(unit: Path) -> list[str]:
    """The `#   command` lines under `# Install, as root` in a unit's leading comment."""
    lines = unit.read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.startswith("# Install, as root"))
    except StopIteration:
        raise WalkthroughError(f"{unit.name} has no '# Install, as root' comment") from None
    out = []
    for ln in lines[start + 1:]:
        if not ln.startswith("#   "):
            break
        out.append(ln[4:].strip())
    return out


def fenced_block(md: Path, heading: str, lang: str) -> list[str]:
    """The lines of the first ```lang block after the heading line `heading`."""
    lines = md.read_text(encoding="utf-8").splitlines()
    try:
        i = lines.index(heading)
        start = next(j for j in range(i, len(lines)) if lines[j].strip() == f"```{lang}")
        end = next(j for j in range(start + 1, len(lines)) if lines[j].strip() == "```")
    except (ValueError, StopIteration):
        raise WalkthroughError(f"{md.name}: no ```{lang} block under {heading!r}") from None
    return lines[start + 1:end]


def block_containing(md: Path, start: str, lang: str) -> list[str]:
    """The lines of the first ```lang block that has a line starting with `start`."""
    lines = md.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == f"```{lang}":
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
            body = lines[i + 1:end]
            if any(ln.strip().startswith(start) for ln in body):
                return body
            i = end
        i += 1
    raise WalkthroughError(f"{md.name}: no ```{lang} block with a line starting {start!r}")


def console_commands(block: list[str]) -> list[str]:
    """`$ command   # comment` lines of a console block, prompt and comments removed, `\\` lines joined."""
    out: list[str] = []
    more = False
    for ln in block:
        if ln.startswith("$ ") or (more and out):
            part = strip_comment(ln[2:] if ln.startswith("$ ") and not more else ln.strip())
            more = part.endswith("\\")
            part = part[:-1].rstrip() if more else part
            out.append(f"{out.pop()} {part}" if out and ln[:2] != "$ " else part)
    return out


def strip_comment(cmd: str) -> str:
    """Drop a trailing `# comment`: a `#` that starts a shell word, outside quotes."""
    quote, out = None, []
    for i, ch in enumerate(cmd):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or cmd[i - 1] in " \t"):
            break
        out.append(ch)
    return "".join(out).rstrip()


def unit_exec_start(unit: Path) -> str:
    for ln in unit.read_text(encoding="utf-8").splitlines():
        if ln.startswith("ExecStart="):
            return ln.split("=", 1)[1]
    raise WalkthroughError(f"{unit.name} has no ExecStart=")


# ---- the machine: this host in private namespaces, systemd as PID 1 ---------------------------------------

BOOT = r"""
set -eu
W=$1
for d in etc opt var root home; do
  mkdir -p "$W/up/$d" "$W/work/$d"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$W/up/$d,workdir=$W/work/$d" "/$d"
done
mount -t tmpfs -o mode=0755 tmpfs /etc/systemd/system   # a fresh install: nothing enabled yet
mkdir -p "$W/hostrun" && mount --rbind /run "$W/hostrun"
mount -t tmpfs -o mode=0755 tmpfs /run
if [ "$2" = 1 ]; then  # the host's munged answers: it serves Slurm in here too (else the cluster starts its own)
  mkdir -p /run/munge && mount --bind "$W/hostrun/munge" /run/munge
fi
mount --make-rshared /   # systemd moves credential mounts across its namespaces; not done in "containers"
export SYSTEMD_UNIT_PATH="/etc/systemd/system:$W/units" container=gpu-triage-walkthrough
exec /lib/systemd/systemd --system --unit=walkthrough.target
"""


@dataclass
class Machine:
    work: Path
    pid1: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """A root login shell's environment on this host (pip keeps this machine's package mirror)."""
        keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
        return {**keep, "PATH": LOGIN_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
                "LANG": "C.UTF-8", "TERM": "dumb", "SYSTEMD_PAGER": "cat", "SYSTEMD_COLORS": "0",
                "SYSTEMD_UNIT_PATH": f"/etc/systemd/system:{self.work}/units"}

    def boot(self) -> None:
        units = self.work / "units"
        units.mkdir(parents=True)
        wants = " ".join(JOURNALD)
        (units / "walkthrough.target").write_text(f"[Unit]\nDescription=walkthrough\nWants={wants}\n")
        for t in STUB_TARGETS:
            (units / f"{t}.target").write_text(f"[Unit]\nDescription={t} (walkthrough stand-in)\n")
        (units / "system.slice").write_text("[Unit]\nDescription=System Slice\nDefaultDependencies=no\n")
        for name in JOURNALD:
            shutil.copy(Path("/lib/systemd/system") / name, units / name)
        boot = self.work / "boot.sh"
        boot.write_text(BOOT)
        log = open(self.work / "pid1.log", "wb")  # noqa: SIM115 - lives as long as PID 1
        # If this process dies, unshare dies (PR_SET_PDEATHSIG) and takes PID 1 with it (--kill-child): no
        # systemd, agent, bot or Slurm is left holding the ports and the cluster after a crashed test.
        self.proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--uts", "--ipc",
             "--propagation", "private", "bash", str(boot), str(self.work), "1" if _host_munge_ok() else "0"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, preexec_fn=_die_with_parent)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            self.pid1 = _child_of(self.proc.pid)
            if self.pid1 and self.sh("systemctl is-system-running --wait", check=False).returncode in (0, 1):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise WalkthroughError(f"systemd did not come up: {(self.work / 'pid1.log').read_text(errors='replace')}")

    def sh(self, script: str, *, check: bool = True, cwd: str = "/root", timeout: float = 600,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run a bash script as root inside the machine."""
        p = subprocess.run(
            # cd inside: nsenter's --wd resolves the directory before it enters the mount namespace
            ["nsenter", "-t", str(self.pid1), "-m", "-p", "-u", "-i", "--wd=/", "--", "bash", "-c",
             f"cd {shlex.quote(cwd)} || exit 1\n{script}"],
            env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise WalkthroughError(f"failed ({p.returncode}): {script}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        return p

    def journal(self, unit: str, lines: int = 40) -> str:
        return self.sh(f"journalctl --no-pager -n {lines} -u {shlex.quote(unit)}", check=False).stdout

    def shutdown(self) -> None:
        if self.pid1:
            # Stop the services first so that systemd removes their PrivateTmp directories under /tmp.
            self.sh("systemctl stop triage-bot.service node-agent.service gpu-triage-notify-flush.timer", check=False,
                    timeout=60)
            try:
                os.kill(self.pid1, signal.SIGKILL)  # PID 1 of the namespace: the kernel ends the rest
            except ProcessLookupError:
                pass
        if self.proc:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _host_munge_ok() -> bool:
    try:
        enc = subprocess.run(["munge", "-n"], capture_output=True, timeout=5)
        return enc.returncode == 0 and subprocess.run(["unmunge"], input=enc.stdout, capture_output=True,
                                                      timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _child_of(pid: int) -> int:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    return int(kids[0]) if kids else 0


# ---- the walk -------------------------------------------------------------------------------------------

@dataclass
class Walkthrough:
    slack_api_url: str
    bot_token: str
    app_token: str
    channel: str = "C0ONCALL"
    steps: list[Step] = field(default_factory=list)
    machine: Machine | None = None
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu-triage-walkthrough-")))
    echo: bool = False
    slurm_user: str = ""
    checkout: Path = Path()

    # -- plumbing

    def run(self, source: str, written: str, ran: str | None = None, note: str = "", *, cwd: str = "/root",
            check: bool = True, ok_codes: tuple[int, ...] = (0,)) -> Step:
        ran = written if ran is None else ran
        step = Step(source, written, ran, note)
        t0 = time.monotonic()
        p = self.m.sh(ran, cwd=cwd, check=False) if ran else None
        step.seconds = time.monotonic() - t0
        if p is not None:
            step.output = (p.stdout + p.stderr).strip()
        self._record(step)
        if p is not None and check and p.returncode not in ok_codes:
            raise WalkthroughError(f"{source}: `{ran}` exited {p.returncode}\n{step.output[-4000:]}")
        return step

    def block(self, source: str, commands: list[tuple[str, str, str]], *, cwd: str) -> Step:
        """Run (written, ran, note) commands in one shell, as typed one after the other; stops at the first failure."""
        # `|| exit`: set -e alone lets the first part of `a && b` fail unnoticed, which a person would see
        script = "set -e\n" + "\n".join(f"{ran} || exit $?" for _, ran, _ in commands if ran)
        step = Step(source, " ; ".join(w for w, _, _ in commands), script)
        t0 = time.monotonic()
        p = self.m.sh(script, cwd=cwd, check=False)
        step.seconds = time.monotonic() - t0
        step.output = (p.stdout + p.stderr).strip()
        step.note = "one shell, in order" + "".join(f"\n           {w!r}: {n}" for w, _, n in commands if n)
        self._record(step)
        if p.returncode != 0:
            raise WalkthroughError(f"{source}: the block exited {p.returncode}\n{script}\n{step.output[-4000:]}")
        return step

    def not_run(self, source: str, written: str, why: str, instead: str = "") -> Step:
        step = Step(source, written, "", f"not run: {why}" + (f"; instead: {instead}" if instead else ""))
        self._record(step)
        return step

    def _record(self, step: Step) -> None:
        self.steps.append(step)
        if self.echo:
            print(step.line(), flush=True)

    @property
    def m(self) -> Machine:
        assert self.machine is not None, "boot() first"
        return self.machine

    def report(self) -> str:
        return "\n".join(s.line() for s in self.steps)

    # -- phases

    def boot(self) -> None:
        busy = ports_in_use()
        if busy:
            raise WalkthroughError(f"ports {busy} are in use on this host; the documented ports must be free")
        # The operator's copy of the source tree: what git would check out (tracked and new files), no
        # build output, no .venv; pip and build.py write only there.
        self.checkout = self.work / "gpu-triage"
        files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, check=True).stdout.decode().split("\0")
        for rel in filter(None, files):
            src = ROOT / rel
            if src.is_file():
                dest = self.checkout / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)
        self.machine = Machine(self.work / "machine")
        self.machine.work.mkdir()
        self.machine.boot()
        self.run("(machine)", "systemctl is-system-running", note="systemd 252 as PID 1 of this walkthrough's namespaces",
                 ok_codes=(0, 1))

    def node_agent(self) -> None:
        """deploy/systemd/node-agent.service's install comment, then docs/node-agent.md's commands."""
        unit = self.checkout / "deploy" / "systemd" / "node-agent.service"
        src = "deploy/systemd/node-agent.service, Install"
        cmds = []
        for c in unit_install_commands(unit):
            cmds.append((c, c, ""))
        self.block(src, cmds, cwd=str(self.checkout))
        st = self.run("(check)", "systemctl is-active node-agent.service", note="the unit's Type=notify start returned")
        if st.output.strip() != "active":
            raise WalkthroughError(f"node-agent.service is not active:\n{self.m.journal('node-agent.service')}")
        # the unit's ExecStart, expanded by systemd itself
        shown = self.m.sh("systemctl show -p ExecStart -p Environment node-agent.service").stdout
        self._record(Step("(check)", "systemctl show -p ExecStart -p Environment node-agent.service",
                          "systemctl show -p ExecStart -p Environment node-agent.service", output=shown))
        if "NODE_AGENT_SECRET_FILE=/run/credentials/node-agent.service/agent-secret" not in shown:
            raise WalkthroughError(f"%d was not expanded to the credentials directory:\n{shown}")
        self._agent_doc_commands()

    def _agent_doc_commands(self) -> None:
        doc = self.checkout / "docs" / "node-agent.md"
        src = "docs/node-agent.md, Running it"
        cmds = console_commands(fenced_block(doc, "## Running it", "console"))
        exe = "/opt/gpu-triage-agent/bin/node-agent"
        on_path = f"`node-agent` is not on root's PATH: the venv's {exe}"
        for c in cmds:
            if "head -c 32 /dev/urandom" in c:
                self.not_run(src, c, "the unit's install comment already made /etc/node-agent/secret; a second "
                             "secret would have to reach the bot again", "kept the one made above")
            elif c.startswith("node-agent serve"):
                self.not_run(src, c, "under systemd the unit's ExecStart= starts it (done above, "
                             f"`{unit_exec_start(self.checkout / 'deploy/systemd/node-agent.service')}`)")
            elif c.startswith("node-agent probe"):
                # no GPU here: the NVML probes fail and `probe` exits 1 by design; 2 would be a usage error
                self.run(src, c, replace(c, "node-agent", exe, ), on_path + "; exit 1 accepted (no GPU: NVML "
                         "probes fail, which is what the exit status reports)", ok_codes=(0, 1))
            else:
                self.run(src, c, replace(c, "node-agent", exe), on_path)

    def probe_round(self, secret: str = "/etc/gpu-triage/agent-secret", triage: str = "/opt/gpu-triage/.venv/bin/triage",
                    *, ca_file: str = "") -> dict[str, Any]:
        """The bot side of docs/node-agent.md: `triage probe` over signed HTTP(S), to this host's agent."""
        host = socket.gethostname()
        written = ("triage probe [--json] --agent-url TEMPLATE [--agent-map FILE] --agent-secret-file F [--probes a,b] "
                   "[--deadline S] [--job-id ID] [--job-gpus 0,1] [--since SECONDS] HOST...")
        scheme, env = ("https", f"TRIAGE_AGENT_CA_FILE={ca_file} ") if ca_file else ("http", "")
        ran = (f"{env}{triage} probe --json --agent-url '{scheme}://{{host}}:9477' --agent-allow {host},127.0.0.0/8 "
               f"--agent-secret-file {secret} {host}")
        step = self.run("docs/node-agent.md, Client", written, ran,
                        f"{host} resolves to 127.0.0.1 here, which the bot refuses unless allowed (Which hosts the "
                        f"bot contacts): --agent-allow {host},127.0.0.0/8")
        try:
            report = json.loads(step.output)["probes"][host]
        except (ValueError, KeyError) as e:
            raise WalkthroughError(f"`triage probe --json` printed no report for {host} ({e}):\n{step.output}") from None
        if not report.get("reachable") or not report.get("results"):
            raise WalkthroughError(f"the agent did not answer the signed probe round: {report.get('error')}")
        return report

    def edit(self, source: str, unit: str, body: str, note: str = "") -> Step:
        """`systemctl edit UNIT` opens an editor on /etc/systemd/system/UNIT.d/override.conf; written directly."""
        d = f"/etc/systemd/system/{unit}.d"
        return self.run(source, f"systemctl edit {unit}: {body!r}", f"mkdir -p {d} && cat >> {d}/override.conf <<'EOF'\n"
                        f"{body}\nEOF\nsystemctl daemon-reload", "the override.conf `systemctl edit` writes, written "
                        "without the editor" + (f"; {note}" if note else ""))

    def simulate(self) -> str:
        """No GPU: the unit's comment says how to make the agent answer for a simulated host; returns the scenario."""
        unit = self.checkout / "deploy" / "systemd" / "node-agent.service"
        src = "deploy/systemd/node-agent.service, no GPU"
        m = re.search(r"`systemctl edit node-agent.service`, add `\[Service\]` and\n# `(Environment=NODE_AGENT_SIMULATE="
                      r"([\w.-]+))`", unit.read_text(encoding="utf-8"))
        if not m:
            raise WalkthroughError("node-agent.service no longer says how to simulate a host")
        self.edit(src, "node-agent.service", f"[Service]\n{m.group(1)}")
        self.run(src, "systemctl restart node-agent.service", note="so that the edit takes effect")
        return m.group(2)

    def agent_endpoints(self) -> None:
        """docs/node-agent.md, HTTP API: the two unsigned endpoints."""
        src = "docs/node-agent.md, HTTP API"
        health = self.run(src, "GET /healthz", "curl -fsS http://127.0.0.1:9477/healthz", "with curl, on this host")
        if json.loads(health.output) != {"status": "ok"}:
            raise WalkthroughError(f"/healthz answered {health.output!r}")
        metrics = self.run(src, "GET /metrics", "curl -fsS http://127.0.0.1:9477/metrics", "with curl, on this host")
        for series in ("node_agent_probe_duration_seconds", "node_agent_requests_total", "node_agent_info"):
            if series not in metrics.output:
                raise WalkthroughError(f"/metrics has no {series}:\n{metrics.output[:2000]}")
        self.not_run("docs/node-agent.md, Operations", "prometheus.yml: - job_name: node-agent ...", "no Prometheus "
                     "here; the endpoint it scrapes answered above")
        self.not_run("docs/node-agent.md, Checking on a real GPU host", "deploy/node-agent/gpu-check.sh",
                     "needs a GPU; this machine has none (the agent's NVML probes say so)")

    def agent_slice(self) -> None:
        """deploy/systemd/node-agent.slice's comment; the slice must then carry its limits."""
        unit = self.checkout / "deploy" / "systemd" / "node-agent.slice"
        src = "deploy/systemd/node-agent.slice, Install"
        for c in unit_install_commands(unit):
            if c.startswith("systemctl edit "):
                m = re.match(r"systemctl edit (\S+)\s+# add: (\[Service\]) (.+)$", c)
                if not m:
                    raise WalkthroughError(f"cannot read the edit in {c!r}")
                self.edit(src, m.group(1), f"{m.group(2)}\n{m.group(3)}")
            else:
                self.run(src, c, strip_comment(c), cwd=str(self.checkout))
        shown = self.m.sh("systemctl show -p Slice node-agent.service; systemctl show -p CPUQuotaPerSecUSec "
                          "-p MemoryMax -p TasksMax node-agent.slice").stdout.split()
        if shown != ["Slice=node-agent.slice", "CPUQuotaPerSecUSec=500ms", f"MemoryMax={384 << 20}", "TasksMax=128"]:
            raise WalkthroughError(f"the agent is not in a node-agent.slice with its limits: {shown}")

    def agent_tls(self) -> dict[str, Any]:
        """docs/node-agent.md "TLS and the firewall" and the unit's TLS comment; returns the HTTPS probe report."""
        doc = self.checkout / "docs" / "node-agent.md"
        src = "docs/node-agent.md, TLS and the firewall"
        host = socket.gethostname()
        serve = console_commands(block_containing(doc, "$ node-agent serve --config", "console"))[0]
        self.not_run(src, serve, "under systemd the unit says how (next steps); --tls-client-ca is optional")
        ca_dir = "/root/agent-ca"
        self.m.sh(f"mkdir -p {ca_dir}")
        cmds = []
        for c in console_commands(block_containing(doc, "$ openssl req -x509", "console")):
            cmds.append((c, c.replace("gpu-node-07", host), f"the node is {host}" if "gpu-node-07" in c else ""))
        self.block(src, cmds, cwd=ca_dir)
        unit = self.checkout / "deploy" / "systemd" / "node-agent.service"
        text = unit.read_text(encoding="utf-8")
        for line in ("# LoadCredential=agent-tls-key:/etc/node-agent/tls/agent.key",
                     "# Environment=NODE_AGENT_TLS_KEY=%d/agent-tls-key",
                     "`--tls-cert /etc/node-agent/tls/agent.pem` to ExecStart= and uncomment:"):
            replace(text, line, "")  # still what the comment says
        installed = "/etc/systemd/system/node-agent.service"
        self.run("deploy/systemd/node-agent.service, TLS comment",
                 "add `--tls-cert /etc/node-agent/tls/agent.pem` to ExecStart= and uncomment the two lines",
                 f"sed -i -e 's|^# LoadCredential=agent-tls-key:|LoadCredential=agent-tls-key:|' "
                 f"-e 's|^# Environment=NODE_AGENT_TLS_KEY=|Environment=NODE_AGENT_TLS_KEY=|' "
                 f"-e 's|^ExecStart=.*|& --tls-cert /etc/node-agent/tls/agent.pem|' {installed} && "
                 "systemctl daemon-reload && systemctl restart node-agent.service",
                 "the edit of the installed unit, made with sed")
        if "(TLS)" not in self.m.journal("node-agent.service", 5):
            raise WalkthroughError(f"the agent did not say it listens with TLS:\n{self.m.journal('node-agent.service')}")
        for c in block_containing(doc, "nft add table inet node_agent", "console"):
            if c.strip() and not c.startswith("#"):
                self.not_run(src, c, "the firewall would be this host's own: the walkthrough shares its network "
                             "namespace with the other work on it")
        self.not_run(src, "IPAddressAllow=10.0.0.5 10.0.0.6 / IPAddressDeny=any in the unit",
                     "commented out in the unit; needs the cgroup BPF firewall, and the addresses are a site's")
        return self.probe_round(ca_file=f"{ca_dir}/ca.pem")

    @contextmanager
    def slurm_cluster(self) -> Iterator[None]:
        """The tests' single-node Slurm, started inside the machine, one session at a time (tests/slurm's lock)."""
        lock = open(f"{SLURM_BASE}.lock", "w")  # noqa: SIM115 - held for the whole block
        end = time.monotonic() + 900
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise WalkthroughError("another session held the Slurm test cluster for 15 minutes") from None
                time.sleep(1)
        py = ROOT / ".venv" / "bin" / "python"
        try:
            self.run("docs/slurm.md, Tests on a real Slurm", f"{py} tests/slurm/slurm_cluster.py up",
                     cwd=str(ROOT), note="the cluster to install the hook on (root; its slurm.conf under "
                     f"{SLURM_BASE}/etc, shown at /etc/slurm by a bind mount)")
            self.m.sh(f"mount --bind {SLURM_BASE}/etc /etc/slurm")
            yield
        finally:
            try:
                self.m.sh(f"{py} tests/slurm/slurm_cluster.py down", cwd=str(ROOT), check=False, timeout=120)
                shutil.rmtree(SLURM_BASE / "etc" / "gpu-triage", ignore_errors=True)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
                lock.close()

    def slurm_hook(self) -> None:
        """deploy/slurm/README.md, "Install (on the slurmctld host, as root)"."""
        readme = self.checkout / "deploy" / "slurm" / "README.md"
        src = "deploy/slurm/README.md, Install"
        conf = self.m.sh("scontrol show config").stdout
        m = re.search(r"^SlurmUser\s*=\s*(\S+?)\(", conf, re.M)
        if not m:
            raise WalkthroughError(f"no SlurmUser in `scontrol show config`:\n{conf[:2000]}")
        self.slurm_user = user = m.group(1)
        self.run(src, "scontrol show config | grep SlurmUser", "scontrol show config | grep SlurmUser",
                 f"`slurm` above is your SlurmUser: here {user}")
        url = "http://127.0.0.1:9478/hooks/job-failed"
        cmds = []
        for raw in fenced_block(readme, "## Install (on the slurmctld host, as root)", "bash"):
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#   scp "):
                cmds.append((line[4:].split("   ")[0], "", "not run: the bot's install comment fetches it (its scp "
                             "line); both hosts are this one"))
                continue
            if line.startswith("#"):
                continue
            c = strip_comment(line)
            ran, note = c, ""
            if c.startswith("$EDITOR"):
                ran = f"sed -i 's|^webhook_url = .*|webhook_url = {url}|' /etc/slurm/gpu-triage/notify.conf"
                note = f"the edit, made with sed: webhook_url = {url} (the bot runs on this host)"
            elif c.startswith("systemctl restart slurmctld"):
                ran = (f"pid=$(cat {SLURM_BASE}/run/slurmctld.pid) && kill $pid && while kill -0 $pid 2>/dev/null;"
                       " do sleep 0.2; done && /usr/sbin/slurmctld && until scontrol ping | grep -q UP; do sleep 0.2; done")
                note = ("the test cluster's slurmctld is no systemd unit: stopped by its PID file and started again "
                        "(it reads /etc/slurm/slurm.conf)")
            elif "slurm:" in c or "-o slurm -g slurm" in c:
                ran = c.replace("slurm: ", f"{user}: ").replace("-o slurm -g slurm", f"-o {user} -g {user}")
                note = f"SlurmUser is {user} on this cluster"
            cmds.append((c, ran, note))
        self.block(src, cmds, cwd=str(self.checkout / "deploy" / "slurm"))
        self.not_run(src, "Already have an EpilogSlurmctld? ... chain_epilog = ...", "this cluster had none "
                     "(tests/deploy/test_notifier.py and tests/slurm cover chaining)")
        shown = self.m.sh("scontrol show config").stdout
        if "/etc/slurm/gpu-triage/epilog_slurmctld.sh" not in shown:
            raise WalkthroughError("EpilogSlurmctld is not set after `scontrol reconfigure`")

    def bot(self, *, with_slurm: bool) -> None:
        """deploy/systemd/triage-bot.service's install comment."""
        unit = self.checkout / "deploy" / "systemd" / "triage-bot.service"
        src = "deploy/systemd/triage-bot.service, Install"
        cmds = []
        extra = [f"SLACK_API_URL={self.slack_api_url}", f"TRIAGE_AGENT_ALLOW={socket.gethostname()},127.0.0.0/8"]
        if with_slurm:
            extra.append("TRIAGE_JOB_SOURCE=slurm")
        for c in unit_install_commands(unit):
            ran, note = strip_comment(c), ""
            if "/path/to/gpu-triage" in ran:
                ran, note = ran.replace("/path/to/gpu-triage", str(self.checkout)), "the source tree: this checkout's copy"
            elif "'xoxb-...'" in ran:
                ran, note = replace(ran, "xoxb-...", self.bot_token), "the stand-in Slack's bot token"
            elif "'xapp-...'" in ran:
                ran, note = replace(ran, "xapp-...", self.app_token), "the stand-in Slack's app token"
            elif ran.startswith("printf 'TRIAGE_CHANNEL="):
                ran = (replace(ran, "C0123ABCD", self.channel) + " && printf '%s\\n' "
                       + " ".join(map(shlex.quote, extra)) + " >> bot.env")
                note = ("the stand-in's channel; plus SLACK_API_URL (the stand-in instead of slack.com), "
                        "TRIAGE_AGENT_ALLOW (the agent is on loopback here)"
                        + (", TRIAGE_JOB_SOURCE=slurm (docs/slurm.md, Bot settings)" if with_slurm else ""))
            elif ran.startswith("scp ") and "webhook" in ran:
                if with_slurm:
                    ran = "cp /etc/slurm/gpu-triage/webhook.secret webhook-secret"
                    note = "the slurmctld host is this host: cp instead of scp"
                else:
                    ran, note = "", "optional, and no Slurm in this part: skipped"
            elif ran.startswith("scp ") and "node-agent/secret" in ran:
                ran, note = "cp /etc/node-agent/secret agent-secret", "the node is this host: cp instead of scp"
            cmds.append((c, ran, note))
        self.block(src, cmds, cwd="/root")
        if with_slurm:
            doc = self.checkout / "docs" / "slurm.md"
            dropin = "\n".join(block_containing(doc, "[Service]", "ini")) + "\n"
            d = "/etc/systemd/system/triage-bot.service.d"
            self.run("docs/slurm.md, Bot settings", f"{d}/slurm.conf:\n{dropin}", f"mkdir -p {d} && cat > {d}/slurm.conf "
                     f"<<'EOF'\n{dropin}EOF\nsystemctl daemon-reload && systemctl restart triage-bot",
                     "the drop-in written as a file, then daemon-reload and restart, as it says")
        st = self.run("(check)", "systemctl is-active triage-bot.service", check=False)
        if st.output.strip() != "active":
            raise WalkthroughError(f"triage-bot.service is not active:\n{self.m.journal('triage-bot.service')}")
        health = self.run("deploy/systemd/triage-bot.service, ExecStart comment", "GET /healthz on port 9478",
                          "curl -fsS http://127.0.0.1:9478/healthz", "with curl, on this host")
        if not json.loads(health.output).get("ok"):
            raise WalkthroughError(f"the bot's /healthz says {health.output}")
        self.not_run(src, "HTTP mode instead: ... change ExecStart to `triage serve --http --port 3000`",
                     "Socket Mode is the unit's default and what ran; HTTP mode needs Slack to reach this host")

    def bot_fails_start(self) -> Step:
        """The unit's comment: "a bot that cannot start fails the start" (Type=notify); then the right token again."""
        src = "deploy/systemd/triage-bot.service, Type=notify comment"
        f = "/etc/gpu-triage/slack-bot-token"
        step = self.run(src, "a bot that cannot start fails the start",
                        f"cp {f} {f}.good && printf 'xoxb-revoked\\n' > {f} && ! systemctl restart triage-bot.service",
                        "a revoked bot token: `systemctl restart` must fail, not report a started bot")
        said = self.m.journal("triage-bot.service", 15)
        if "invalid_auth" not in said:
            raise WalkthroughError(f"the failed start does not say why:\n{said}")
        self.run(src, "(the right token back)", f"mv {f}.good {f} && systemctl restart triage-bot.service",
                 "and the bot starts again")
        return step

    def failed_job(self, user: str = "alice") -> str:
        """deploy/slurm/README.md: "Check the setup without waiting for a real failure"; returns the job id."""
        readme = self.checkout / "deploy" / "slurm" / "README.md"
        src = "deploy/slurm/README.md, check"
        home = f"/home/{user}"
        self.run("(machine)", f"useradd -m {user}", f"id {user} >/dev/null 2>&1 || useradd -m {user}; chmod 0755 {home}",
                 "a cluster user whose home others may read, as the README asks (Debian makes homes 0700)")
        block = [ln.strip() for ln in block_containing(readme, "sbatch ", "bash")]
        sbatch = next(c for c in block if c.startswith("sbatch "))
        step = self.run(src, sbatch, f"runuser -u {user} -- {sbatch}", f"as {user}, in {home}", cwd=home)
        m = re.search(r"Submitted batch job (\d+)", step.output)
        if not m:
            raise WalkthroughError(f"sbatch said: {step.output}")
        job = m.group(1)
        tail = next(c for c in block if c.startswith("tail -f "))
        log = tail.split()[-1]
        t0 = time.monotonic()
        line = ""
        while time.monotonic() - t0 < 90:
            out = self.m.sh(f"cat {log}", check=False).stdout
            line = next((ln for ln in out.splitlines() if f"job={job} " in ln and " delivered (HTTP 202)" in ln), "")
            if line:
                break
            time.sleep(0.5)
        self._record(Step(src, tail, f"until grep 'job={job} .* delivered (HTTP 202)' {log}; do sleep 0.5; done",
                          "tail -f never ends: polled for the line it says to expect",
                          time.monotonic() - t0, line))
        if not line:
            raise WalkthroughError(f"no 'delivered (HTTP 202)' for job {job} in {log}:\n"
                                   f"{self.m.sh(f'cat {log}', check=False).stdout[-3000:]}\n"
                                   f"{self.m.journal('triage-bot.service')}")
        return job

    def drain_as_dynamic_user(self) -> Step:
        """docs/slurm.md, Draining: the unit's DynamicUser is no Slurm operator; Slurm refuses, as the docs say."""
        # systemd-run needs D-Bus, which this machine lacks (systemctl talks to PID 1 directly): a unit file instead
        unit = "walkthrough-drain.service"
        cmd = (f"printf '[Service]\\nType=oneshot\\nDynamicUser=yes\\nExecStart=/usr/bin/scontrol update "
               f"NodeName=localhost State=DRAIN Reason=walkthrough\\n' > /etc/systemd/system/{unit} && "
               f"systemctl daemon-reload && ! systemctl start {unit}")
        step = self.run("docs/slurm.md, Draining from Slack", "scontrol update NodeName=NODE State=DRAIN Reason=...",
                        cmd, "as a DynamicUser= service, like the bot's; Slurm must refuse it")
        said = self.m.journal(unit)
        if "slurm_update error: Invalid user id" not in said:  # the answer docs/slurm.md quotes
            raise WalkthroughError(f"a DynamicUser was not refused by Slurm: {said}")
        step.output = said
        return step

    def flush_timer(self) -> None:
        readme = self.checkout / "deploy" / "slurm" / "README.md"
        src = "deploy/slurm/README.md, safety net"
        block = [ln.strip() for ln in block_containing(readme, "systemctl enable --now gpu-triage-notify-flush", "bash")]
        self.block(src, [(c, c, "") for c in block if c], cwd=str(self.checkout / "deploy" / "slurm"))
        if self.slurm_user != "slurm":
            d = "/etc/systemd/system/gpu-triage-notify-flush.service.d"
            self.run(src, "systemctl edit gpu-triage-notify-flush.service: [Service] User=...",
                     f"mkdir -p {d} && printf '[Service]\\nUser={self.slurm_user}\\n' > {d}/user.conf && "
                     "systemctl daemon-reload", f"SlurmUser is {self.slurm_user}: the drop-in `systemctl edit` would write")
        self.run(src, "systemctl start gpu-triage-notify-flush.service",
                 note="what the timer starts every 5 minutes, started now to see it succeed")
        self.not_run(src, "*/5 * * * * slurm /usr/bin/python3 /etc/slurm/gpu-triage/triage_notify.py flush >/dev/null",
                     "the cron line is for hosts without systemd; the timer ran")
        out = self.m.journal("gpu-triage-notify-flush.service")
        if "0 event(s) still spooled in /var/spool/gpu-triage" not in out:
            raise WalkthroughError(f"the flush service did not report an empty spool:\n{out}")
        if self.m.sh("systemctl is-active gpu-triage-notify-flush.timer", check=False).stdout.strip() != "active":
            raise WalkthroughError("gpu-triage-notify-flush.timer is not active")

    def close(self) -> None:
        if self.machine:
            self.machine.shutdown()
        shutil.rmtree(self.work, ignore_errors=True)


def ports_in_use() -> list[int]:
    busy = []
    for port in PORTS:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    return busy


def main() -> int:
    """By hand: the test, which runs every phase in order and checks what the documents promise."""
    if os.geteuid() != 0:
        print("walkthrough: needs root (private namespaces, systemd as their PID 1, Slurm)", file=sys.stderr)
        return 2
    import pytest

    return int(pytest.main(["-q", "-s", "-p", "no:cacheprovider", str(Path(__file__).with_name("test_walkthrough.py"))]))


if __name__ == "__main__":
    sys.exit(main())
