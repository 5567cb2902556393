"""What the bot says about an incident, as data (no Slack here): built from the engine's Report,
redacted, ready for bot.slack.blocks to render and for the store to keep (answer_json)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.engine import Report
from bot.engine.attribution import started_by
from bot.engine.model import Level, NextAction
from bot.redact import redact

DECISIVE_LINES = 5
MAX_FINDINGS_PER_HOST = 3


@dataclass
class EvidenceLine:
    where: str  # "rank3.log:812"
    who: str  # "rank 3, gpu-node-17" or ""
    text: str


@dataclass
class CauseLine:
    summary: str
    evidence_for: list[str] = field(default_factory=list)
    evidence_against: list[str] = field(default_factory=list)


@dataclass
class HostProbe:
    host: str
    ok: bool
    lines: list[str]  # "processes (failed): 2 foreign processes on GPU 3", or why it did not answer


@dataclass
class Answer:
    incident_id: int
    version: int
    signature: str
    title: str
    confidence: float
    level: str  # initiating | downstream | secondary
    summary: str
    initiating: str | None = None  # "rank 0 on gpu-node-17 (the only rank that reported it)"
    evidence: list[EvidenceLine] = field(default_factory=list)
    evidence_total: int = 0
    causes: list[CauseLine] = field(default_factory=list)
    next_text: str | None = None
    next_command: str | None = None
    question: str | None = None
    probes: list[HostProbe] = field(default_factory=list)
    recurrence: list[str] = field(default_factory=list)
    also_seen: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    job: str | None = None
    probes_enabled: bool = False
    feedback: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    next_on: str | None = None  # where the command runs: a host ("gpu-node-17") or "the failing host"
    next_hints: list[str] = field(default_factory=list)  # "`JOB_ID`: the job id (`sacct ...`)": set before pasting
    # lifecycle (bot.service.lifecycle): mrkdwn status lines, the status word, the job owner's Slack id
    status: list[str] = field(default_factory=list)
    lifecycle: str = "open"  # open | acknowledged | snoozed | resolved
    mention: str | None = None
    # the human-approved drain (bot.service.drain): the host and reason the "Drain host" button offers,
    # and where that stands: None (offered) | drained | repaired
    drain_host: str | None = None
    drain_reason: str | None = None
    drain_state: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Answer:
        d = dict(d)
        d["evidence"] = [EvidenceLine(**e) for e in d.get("evidence", [])]
        d["causes"] = [CauseLine(**c) for c in d.get("causes", [])]
        d["probes"] = [HostProbe(**p) for p in d.get("probes", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def headline(self) -> str:
        return f"{self.signature}: {self.title} ({self.confidence:.0%})"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _who(rank: int | None, host: str | None) -> str:
    return ", ".join(x for x in (f"rank {rank}" if rank is not None else None, host) if x)


def esc(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters (`<!channel>` in a log
    line must not ping anyone)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def probe_lines(report: Report) -> list[HostProbe]:
    return probe_host_lines(report.probes or {})


def probe_host_lines(probes: dict[str, Any]) -> list[HostProbe]:
    """Per host: what the agent found (non-ok results and their findings), or why it did not answer."""
    out: list[HostProbe] = []
    for host, res in sorted(probes.items()):
        if not isinstance(res, dict):
            continue
        if res.get("probed") is False:
            out.append(HostProbe(host, False, [redact(res.get("error") or "not probed")]))
            continue
        if res.get("reachable") is False or res.get("error") and not res.get("results"):
            out.append(HostProbe(host, False, [redact(f"did not answer: {res.get('error') or 'no reply'}")]))
            continue
        lines: list[str] = []
        for r in res.get("results", []):
            if r.get("health") in ("ok", None):
                continue
            lines.append(redact(f"{r.get('probe')} ({r.get('health')}): {r.get('reason') or ''}".rstrip(": ")))
            findings = [f for f in r.get("findings", []) if f.get("severity") != "info"]
            for f in findings[:MAX_FINDINGS_PER_HOST]:
                lines.append(redact(f"  {f.get('code')}: {f.get('detail') or ''}"))
        if not lines:
            lines = [f"all {len(res.get('results', []))} probes ok"]
            out.append(HostProbe(host, True, lines))
        else:
            out.append(HostProbe(host, False, lines))
    return out


def build_answer(report: Report, *, incident_id: int, version: int, job: str | None = None,
                 recurrence: list[str] | None = None, probes_enabled: bool = False,
                 extra_warnings: list[str] | None = None, changes: list[str] | None = None,
                 redactions: int = 0) -> Answer:
    """The answer for the top diagnosis. `report` must have at least one diagnosis. `redactions`:
    secrets removed from the incident's evidence, told to the people who pasted it (one short line)."""
    top = report.diagnoses[0]
    initiating = started_by(report)
    evidence = [
        EvidenceLine(where=f"{e.source}:{e.line}", who=_who(e.context.rank, e.context.host), text=redact(e.text.strip()))
        for e in top.evidence[:DECISIVE_LINES]
    ]
    causes = [CauseLine(redact(c.summary), [redact(x) for x in c.evidence_for[:3]],
                        [redact(x) for x in c.evidence_against[:3]]) for c in top.causes[:3]]
    also = []
    for d in report.diagnoses[1:6]:
        tag = {Level.DOWNSTREAM: "downstream", Level.SECONDARY: f"explained by {d.explained_by}"}.get(d.level, "")
        also.append(f"{d.signature} ×{d.evidence_count}" + (f" ({tag})" if tag else ""))
    warnings = [redact(w) for w in (extra_warnings or []) + list(report.warnings)][:8]
    if redactions:
        warnings.insert(0, redaction_note(redactions))
    if top.level != Level.INITIATING:
        warnings.insert(0, "Only downstream reports were found: the cause may be in a log that is not here "
                           "(the failing rank's own log, or the host's kernel log).")
    nxt = concrete_action(report)
    return Answer(
        incident_id=incident_id,
        version=version,
        signature=top.signature,
        title=redact(top.title),
        confidence=float(top.confidence),
        level=top.level.name.lower(),
        summary=redact(top.summary),
        initiating=redact(initiating) if initiating else None,
        evidence=evidence,
        evidence_total=top.evidence_count,
        causes=causes,
        next_text=redact(nxt.text) if nxt else None,
        next_command=redact(nxt.command) if nxt and nxt.command else None,
        next_on=redact(nxt.on) if nxt and nxt.on else None,
        next_hints=[redact(h) for h in nxt.hints] if nxt else [],
        question=redact(report.missing_facts[0]) if report.missing_facts else None,
        probes=probe_lines(report),
        recurrence=list(recurrence or []),
        also_seen=also,
        warnings=warnings,
        job=redact(job) if job else None,
        probes_enabled=probes_enabled,
        changes=list(changes or []),
    )


def redaction_note(count: int) -> str:
    return f"{count} secret{'s' if count != 1 else ''} redacted from the pasted text."


# -- the next action, made concrete ----------------------------------------------------------------
#
# The engine fills a signature's `{host}`/`{job_id}`/capture placeholders from the log and leaves the
# ones it does not know (`<host>`, `<job id>`, `{module}`, and the library's own `<gpu>`, `<half>`,
# `<job log>`...). No placeholder may reach a user: a shell reads `<half>` as a redirection. Known
# values (the initiating host, GPU, pid, the job id, the failing rank's log file, the foreign pids
# the agents named) go in; an unknown one becomes a shell variable and the text says how to find it.

_BRACE = re.compile(r"\{([a-z][a-z0-9_]*)\}")
_ANGLE = re.compile(r"<([a-z0-9][a-z0-9 _./-]*)>", re.I)
_FLAG_BEFORE = re.compile(r"--([a-z][a-z0-9-]*)[= ]$")
_PART_SPLIT = re.compile(r"\s*(?:;|&&|\|\|)\s*")
# Programs that look at the GPU host itself: the command runs there, not on a login node.
_HOST_LOCAL = re.compile(
    r"^(?:sudo\s+)?(?:timeout\s+\d+\s+)?(?:nvidia-smi|dmesg|journalctl|ibstat|ibstatus|perfquery|lsmod|modprobe|"
    r"modinfo|dcgmi|ipmitool|systemctl|lspci|free|df|ulimit|ls -la? /dev/shm|cat /proc|ldconfig|dpkg|"
    r"nv-fabricmanager|coredumpctl|grep [^|]*/var/log)\b")

# placeholder (as the library writes it) -> (variable, how to find the value)
_HOW_TO_FIND: dict[str, tuple[str, str]] = {
    "host": ("NODE", "the failing host (the hostname in the failing rank's log, or `sacct -j JOB -o NodeList`)"),
    "job id": ("JOB_ID", "the job id (`sacct -X -u $USER -S today -o JobID,JobName,State`)"),
    "job_id": ("JOB_ID", "the job id (`sacct -X -u $USER -S today -o JobID,JobName,State`)"),
    "gpu": ("GPU", "the GPU index (`nvidia-smi -L` on the host; the failing rank's local rank)"),
    "pid": ("PID", "the rank's pid (`pgrep -af python` on the host)"),
    "rank pid": ("PID", "the rank's pid (`pgrep -af python` on the host)"),
    "pid of the stuck rank": ("PID", "the stuck rank's pid (`pgrep -af python` on its host)"),
    "pid of that rank": ("PID", "that rank's pid (`pgrep -af python` on its host)"),
    "job log": ("LOG", "the job's log file (`scontrol show job JOB | grep StdOut`)"),
    "log": ("LOG", "the job's log file (`scontrol show job JOB | grep StdOut`)"),
    "log of the failed rank": ("LOG", "the failed rank's log file"),
    "launcher log": ("LOG", "the launcher's (torchrun/srun) log file"),
    "path": ("DATA_PATH", "the path in the error message"),
    "file": ("FILE", "the file named in the error message"),
    "checkpoint dir": ("CKPT_DIR", "the checkpoint directory"),
    "previous checkpoint": ("PREV_CKPT", "the checkpoint before the failing one"),
    "output dir": ("OUT_DIR", "the job's output directory"),
    "mount": ("MOUNT", "the file system's mount point (`df -h .`)"),
    "container": ("CONTAINER", "the container id (`docker ps`)"),
    "pod": ("POD", "the pod name (`kubectl get pods`)"),
    "peer-ip": ("PEER_IP", "the peer's address from the error"),
    "model": ("MODEL", "the model you serve"),
    "extension": ("EXTENSION", "the extension package named in the error"),
    "module": ("MODULE", "the module named in the error"),
    "library": ("LIBRARY", "the library named in the error"),
    "device": ("IB_DEVICE", "the device named in the error (`ibstat -l`)"),
}
_RELATIVE = {"half": "half the current", "2x": "twice the current", "higher": "a higher", "fits": "a fitting"}


@dataclass
class ConcreteAction:
    text: str
    command: str | None
    on: str | None  # the host the command runs on, or "the failing host"; None: anywhere
    hints: list[str] = field(default_factory=list)  # how to find the values the command leaves as $VARS


def _log_name(report: Report) -> str | None:
    """The failing rank's log file as it was uploaded (not "message" or "reply 2": those are no files)."""
    init = report.initiating
    names = [init.source] if init and init.source else []
    names += [e.source for e in report.diagnoses[0].evidence[:1]] if report.diagnoses else []
    for n in names:
        if n and "." in n and " " not in n and "/" not in n:
            return n
    return None


def _known_values(report: Report) -> dict[str, str]:
    init = report.initiating
    vals: dict[str, str] = {}
    if init is not None:
        if init.host:
            vals["host"] = init.host
        if init.gpu is not None:
            vals["gpu"] = str(init.gpu)
        if init.pid is not None:
            vals["pid"] = vals["rank pid"] = str(init.pid)
    job = (report.facts or {}).get("job_id") if isinstance(report.facts, dict) else None
    if isinstance(job, str | int) and str(job).strip():
        vals["job id"] = vals["job_id"] = str(job)
    log = _log_name(report)
    if log:
        for k in ("job log", "log", "log of the failed rank"):
            vals[k] = log
    return vals


def _var_for(name: str, before: str) -> tuple[str, str]:
    key = name.lower().strip()
    if key in _HOW_TO_FIND:
        return _HOW_TO_FIND[key]
    flag = _FLAG_BEFORE.search(before)
    if key in _RELATIVE and flag:
        return flag.group(1).upper().replace("-", "_"), f"{_RELATIVE[key]} `--{flag.group(1)}`"
    var = re.sub(r"[^A-Z0-9]+", "_", key.upper()).strip("_") or "VALUE"
    return var, _RELATIVE[key] + " value" if key in _RELATIVE else "the " + key


def fill_command(command: str, known: dict[str, str]) -> tuple[str, list[str]]:
    """Known placeholders filled, unknown ones as $VARIABLES; returns (command, "`VAR`: how" hints)."""
    hints: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1).replace("_", " ") if m.re is _BRACE and m.group(1) == "job_id" else m.group(1)
        key = name.lower()
        if key in known:
            return known[key]
        var, how = _var_for(name, m.string[: m.start()])
        hints.setdefault(var, how)
        return "$" + var

    out = _ANGLE.sub(sub, _BRACE.sub(sub, command))
    return out, [f"`{v}`: {h}" for v, h in hints.items()]


def fill_text(text: str, known: dict[str, str]) -> str:
    """Placeholders in prose become words: "on <host>" -> "on the failing host (see Started by)"."""
    def sub(m: re.Match[str]) -> str:
        key = m.group(1).replace("_", " ").lower()
        if key in known:
            return known[key]
        if key == "host":
            return "the failing host (see Started by)"
        return "the " + key if key in _HOW_TO_FIND else (_RELATIVE[key] + " value" if key in _RELATIVE else key)

    return _ANGLE.sub(sub, _BRACE.sub(sub, text))


def _runs_on_host(command: str) -> bool:
    parts = [p.strip() for p in _PART_SPLIT.split(command.split("  #")[0]) if p.strip()]
    return any(_HOST_LOCAL.match(p) for p in parts) and not command.lstrip().startswith("ssh ")


def _foreign_processes(report: Report, host: str | None) -> list[dict[str, Any]]:
    out = []
    for h, res in sorted((report.probes or {}).items()):
        if host and h != host or not isinstance(res, dict):
            continue
        for r in res.get("results") or []:
            for f in r.get("findings") or []:
                if f.get("code") == "foreign-process" and f.get("pid") is not None:
                    out.append(dict(f, host=h))
    return out


def _foreign_action(report: Report, base: NextAction) -> ConcreteAction | None:
    """The agents named the processes that hold the job's GPUs: the action names them too."""
    host = report.initiating.host if report.initiating else None
    procs = _foreign_processes(report, host)
    if not procs or "--query-compute-apps" not in (base.command or "") and "foreign" not in base.text.lower():
        return None
    host = host or procs[0]["host"]
    procs = [p for p in procs if p["host"] == host]
    pids = list(dict.fromkeys(str(p["pid"]) for p in procs))
    gpus = list(dict.fromkeys(str(p["gpu"]) for p in procs if p.get("gpu") is not None))
    owners = list(dict.fromkeys(str(p["owner"]) for p in procs if p.get("owner")))
    gpu_words = f"GPU{'s' if len(gpus) > 1 else ''} {', '.join(gpus)} " if gpus else "the job's GPUs "
    text = (f"Free {gpu_words}on {host}: pid{'s' if len(pids) > 1 else ''} {', '.join(pids)} "
            f"{'are' if len(pids) > 1 else 'is'} not the job's"
            + (f" ({'; '.join(owners[:3])})" if owners else "") + ". Stop them (or drain the host) and resubmit")
    return ConcreteAction(text, f"ps -o pid,user,etime,args -p {','.join(pids)}", host)


def concrete_action(report: Report) -> ConcreteAction | None:
    """The report's next action with every value the log and the probes gave, and no placeholder."""
    base = report.next_action
    if base is None:
        return None
    special = _foreign_action(report, base)
    if special is not None:
        return special
    known = _known_values(report)
    text = fill_text(base.text, known).rstrip(". ")
    command, hints = fill_command(base.command, known) if base.command else (None, [])
    on = None
    if command and _runs_on_host(command):
        on = known.get("host") or "the failing host (see Started by)"
    return ConcreteAction(text, command, on, hints)


def what_changed(old: Answer | None, new: Answer) -> list[str]:
    """Plain sentences for the thread: what the new evidence changed in the diagnosis."""
    if old is None:
        return []
    out: list[str] = []
    if old.signature != new.signature:
        out.append(f"The cause is now *{new.signature}* ({new.confidence:.0%}); it was {old.signature} "
                   f"({old.confidence:.0%}).")
    elif abs(old.confidence - new.confidence) >= 0.05:
        out.append(f"Confidence in {new.signature} went from {old.confidence:.0%} to {new.confidence:.0%}.")
    if (old.initiating or "") != (new.initiating or "") and new.initiating:
        out.append(f"Started by: {new.initiating}" + (f" (was: {old.initiating})" if old.initiating else "") + ".")
    old_top = old.causes[0].summary if old.causes else None
    new_top = new.causes[0].summary if new.causes else None
    if old.signature == new.signature and new_top and old_top != new_top:
        out.append(f"Most likely cause now: {new_top}.")
    if (old.next_command or old.next_text) != (new.next_command or new.next_text) and new.next_text:
        out.append(f"New next step: {new.next_text}.")
    new_probe_hosts = {p.host for p in new.probes if not p.ok} - {p.host for p in old.probes if not p.ok}
    if new_probe_hosts:
        out.append("Probes found problems on " + ", ".join(sorted(new_probe_hosts)) + ".")
    if old.question and not new.question:
        out.append("The open question is answered.")
    return out


@dataclass
class Headline:
    """The channel message of a /diagnose or scheduler incident; its thread holds the answer."""

    subject: str  # "Job 1234 (train-llama) FAILED, exit 1:0, on gpu01, gpu02" or "Log pasted by <@U1>"
    status: str  # "Diagnosing…", or the top signature line once known
    detail: str | None = None  # "Started by rank 0 on gpu01"
    state: str = "diagnosing"  # diagnosing | diagnosed | unknown (nothing recognised) | ok (healthy hosts)
    requester: str | None = None  # Slack user id, shown as a mention
    lifecycle: list[str] = field(default_factory=list)  # status lines (mrkdwn, escaped already)
    notify: str | None = None  # the job's user as a Slack user id (bot.service.people): mentioned


@dataclass
class HomeIncident:
    id: int
    link: str | None
    signature: str | None
    when: str  # "2h ago"
    job_id: str | None
    hosts: list[str]
    status: str | None = None  # open | acknowledged | snoozed | resolved
    owner: str | None = None


@dataclass
class HomeData:
    recent: list[HomeIncident]
    top_signatures: list[tuple[str, int]]
    top_hosts: list[tuple[str, int]]
    precision: list[tuple[str, int, int]]  # signature, right, wrong
    mine: list[HomeIncident] = field(default_factory=list)  # unresolved incidents the viewer owns
    mutes: list[str] = field(default_factory=list)  # active mutes, one mrkdwn line each
