"""Who started it: the rank, host, GPU and process where the failure began, and who only reported it.

Evidence comes in this order of trust:
1. the launcher naming the first failure (torchrun's "Root Cause (first observed failure)" block,
   unless that entry is itself a teardown victim);
2. the initiating signature's own lines (the one rank that printed it, or the earliest by clock);
3. the launchers' exit bookkeeping (torch elastic's `failed (exitcode: …) local_rank: N (pid: P)`,
   srun's first `task N:` line that is not a teardown kill, Open MPI's first process);
4. for downstream-only logs: the peer the reporters name as gone (`possible application crash on
   rank 0`, `Connection closed by remote peer X`), the rank whose NCCL work counters lag, the rank
   that never reported.
When none of these tells, the rank and host stay empty: a guess would send the probes to the wrong host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .context import parse_line
from .facts import Clue, Facts
from .model import Evidence, Initiating, Level, Report, SourceInfo, comparable_times


class Group(Protocol):
    """What attribution reads of a matched signature (diagnose._Group)."""

    evidence: list[Evidence]
    level: Level

    @property
    def sig(self) -> Any: ...


# srun's words for tasks it ended itself (teardown after the first failure), not a failure of their own
_TEARDOWN = re.compile(r"^(?:Killed|Terminated|Hangup|Interrupt)\b|Exited with exit code 143\b|signal 15\b", re.I)
# reports whose whole point is to name the rank the others wait for
_SRUN_TASK = re.compile(r"srun: error: \S+: tasks? \d")
_NAMES_THE_STRAGGLER = {"desync_rank", "hvd_missing"}
_FLUSHED = re.compile(r"status=5 |\bWR_FLUSH_ERR|\(Flush\)|status=11 .*\bFlush\b")
# a torchrun root-cause entry that was itself stopped by a signal from outside (the job was cancelled)
_VICTIM_EXIT = {"-15", "-1", "-2"}


@dataclass
class _Who:
    rank: int | None = None
    host: str | None = None
    local_rank: int | None = None
    gpu: int | None = None
    pid: int | None = None
    source: str | None = None
    line: int | None = None
    timestamp: datetime | None = None

    def known(self) -> bool:
        return self.rank is not None or self.host is not None or self.local_rank is not None


def _from_evidence(ev: Evidence, facts: Facts, sources: dict[str, SourceInfo]) -> _Who:
    ctx = ev.context
    who = _Who(ctx.rank, ctx.host, ctx.local_rank, ctx.gpu, ctx.pid, ev.source, ev.line, ctx.timestamp)
    if "culprit_rank" in ev.captures:
        who.rank = int(ev.captures["culprit_rank"])
        who.host = ev.captures.get("culprit_host", who.host)
        if "culprit_local_rank" in ev.captures:
            who.local_rank = int(ev.captures["culprit_local_rank"])
        if "culprit_pid" in ev.captures:
            who.pid = int(ev.captures["culprit_pid"])
        if "culprit_time" in ev.captures:
            try:
                who.timestamp = datetime.fromisoformat(ev.captures["culprit_time"])
            except ValueError:
                pass
    elif "culprit_host" in ev.captures:
        who.host = ev.captures["culprit_host"]
    _complete(who, facts, sources)
    return who


def _complete(who: _Who, facts: Facts, sources: dict[str, SourceInfo]) -> None:
    """Fill what other lines of the log tell: the file's own rank/host, NCCL's rank tables."""
    src = sources.get(who.source or "")
    if src is not None:
        who.rank = who.rank if who.rank is not None else src.rank
        who.host = who.host or src.host
    if who.rank is None and who.host and who.pid is not None:
        who.rank = facts.proc_ranks.get((who.host, who.pid))
    if who.host is None and who.rank is not None:
        who.host = facts.rank_hosts.get(who.rank)
    if who.host is None and who.pid is not None:
        who.host = next((c.context.host for c in facts.clues if c.context.pid == who.pid and c.context.host), None)
    if who.host is None and (who.local_rank is not None or who.rank is not None):
        # NCCL's service threads on one host saw this local rank's process go
        seen = {c.context.host for c in facts.clues if c.kind == "closed_by_local" and c.context.host
                and int(c.values["local"]) in (who.local_rank, who.rank)}
        if len(seen) == 1:
            who.host = seen.pop()
    if who.host is None and who.source is not None and who.line is not None:
        # output pasted after a shell prompt ran on the prompt's host
        prompts = [c for c in facts.clues if c.kind == "prompt" and c.source == who.source and c.line <= who.line]
        if prompts:
            c = max(prompts, key=lambda c: c.line)
            who.host = c.values.get("host") or c.values.get("host2")
    if who.rank is None and who.local_rank is None and facts.world_size == 1:
        who.rank = 0  # a world of one process: whatever failed, it was rank 0
    if who.gpu is None and who.rank is not None:
        who.gpu = facts.rank_gpus.get(who.rank)
    if who.pid is None and who.rank is not None:
        who.pid = facts.rank_pids.get(who.rank)
    if who.local_rank is None and who.rank is not None and who.rank in facts.rank_local:
        who.local_rank = facts.rank_local[who.rank]


def _clues(facts: Facts, kind: str) -> list[Clue]:
    return sorted((c for c in facts.clues if c.kind == kind), key=lambda c: c.order)


def _first_exit(facts: Facts) -> tuple[_Who, str] | None:
    """The process the launcher saw fail first, and how we know."""
    failed = _clues(facts, "elastic_failed")
    closing = sorted({int(x.values["pid"]) for x in _clues(facts, "elastic_closing")})
    if not failed and len(closing) >= 2:
        # the failed line was cut: the one pid missing inside a run of consecutive worker pids
        # is the worker that died (torchrun starts them in local-rank order)
        gaps = [p for p in range(closing[0], closing[-1] + 1) if p not in closing]
        if len(gaps) == 1 and closing[-1] - closing[0] == len(closing):
            pid = gaps[0]
            c = _clues(facts, "elastic_closing")[0]
            return _Who(local_rank=pid - closing[0], pid=pid, source=c.source, line=c.line), \
                (f"pid {pid} is the one worker torchrun's agent did not send SIGTERM; by start order "
                 f"it is local rank {pid - closing[0]}")
    if failed:
        c = failed[0]
        closed = {x.values["pid"] for x in _clues(facts, "elastic_closing")}
        why = f"torchrun's agent reports local rank {c.values['local']} (pid {c.values['pid']}) as the first failure"
        if closed and c.values["pid"] not in closed:
            why += ", the one process it did not have to send SIGTERM"
        return _Who(local_rank=int(c.values["local"]), pid=int(c.values["pid"]), host=c.context.host,
                    source=c.source, line=c.line, timestamp=c.context.timestamp), why
    tasks = _clues(facts, "srun_task")
    if tasks:
        own = [c for c in tasks if not _TEARDOWN.search(c.values["what"])]
        c = (own or tasks)[0]
        single = c.values["tasks"].isdigit()
        why = f"srun's first report of an ending task: {c.values['host']}: task {c.values['tasks']}: {c.values['what'].strip()}"
        if own and own[0] is not tasks[0]:
            why += " (the tasks reported before it were killed by the teardown)"
        return _Who(rank=int(c.values["tasks"]) if single else None, host=c.values["host"],
                    source=c.source, line=c.line, timestamp=c.context.timestamp), why
    ray = _clues(facts, "ray_worker_failed")
    if ray:
        c = ray[0]
        return _Who(rank=int(c.values["rank"]), host=c.context.host, source=c.source, line=c.line,
                    timestamp=c.context.timestamp), f"Ray Train reports worker {c.values['rank']} as the one that failed"
    spawn = _clues(facts, "spawn_exit")
    if spawn:
        c = spawn[0]
        return _Who(local_rank=int(c.values["local"]), host=c.context.host, source=c.source, line=c.line), \
            f"torch.multiprocessing.spawn reports process {c.values['local']} as terminated with {c.values['what']}"
    shard = _clues(facts, "shard_failed")
    if shard:
        c = shard[0]
        return _Who(rank=int(c.values["rank"]), source=c.source, line=c.line, timestamp=c.context.timestamp), \
            f"the launcher reports shard {c.values['rank']} as the one that failed to start"
    first = _clues(facts, "mpi_first")
    if first:
        c = first[0]
        return _Who(rank=int(c.values["rank"]), source=c.source, line=c.line), \
            f"mpirun names process rank {c.values['rank']} as the first to exit non-zero"
    aborts = _clues(facts, "mpi_abort")
    if aborts:
        c = aborts[0]
        rank = int(c.values.get("rank") or c.values["rank2"])
        return _Who(rank=rank, source=c.source, line=c.line, timestamp=c.context.timestamp), \
            f"rank {rank} is the first process that called MPI_Abort"
    hydra = _clues(facts, "mpi_hydra")
    if hydra:
        c = hydra[0]
        rank_s = c.values.get("rank")
        who = f"rank {rank_s} on {c.values['host']}" if rank_s else f"pid {c.values['pid']} on {c.values['host']}"
        return _Who(rank=int(rank_s) if rank_s else None, host=c.values["host"], pid=int(c.values["pid"]),
                    source=c.source, line=c.line), \
            f"mpiexec (Hydra) names {who} as the process that ended badly"
    ds = [c for c in _clues(facts, "ds_exit") if c.context.host and c.values["code"] != "0"]
    if ds:
        c = min(ds, key=lambda c: (c.context.timestamp or datetime.max, c.order))
        return _Who(host=c.context.host, source=c.source, line=c.line, timestamp=c.context.timestamp), \
            f"DeepSpeed's launcher on {c.context.host} was the first to report a child exiting with {c.values['code']}"
    sig = _clues(facts, "mpi_signal")
    if sig:
        c = sig[0]
        return _Who(rank=int(c.values["rank"]), host=c.values["host"], pid=int(c.values["pid"]) or None,
                    source=c.source, line=c.line), \
            f"mpirun: process rank {c.values['rank']} on {c.values['host']} exited on signal {c.values['sig']}"
    return None


def suspects(facts: Facts, evidence_hosts: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Ranks and hosts that other processes name as the peer that went away (or the far end of a failing link)."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()

    def add(key: str, value: str | int, why: str, reporter: Clue, went_away: bool, **more: Any) -> None:
        if (key, str(value)) in seen:
            for s in out:
                if s.get(key) == value:
                    s["reports"] += 1
            return
        seen.add((key, str(value)))
        who = reporter.context
        by = " on ".join(x for x in (f"rank {who.rank}" if who.rank is not None else None, who.host) if x)
        out.append({key: value, "reason": why + (f", reported by {by}" if by else ""), "went_away": went_away,
                    "kind": reporter.kind, **more,
                    "reports": 1, "source": reporter.source, "line": reporter.line})

    for c in _clues(facts, "hvd_missing"):
        ranks = (c.values.get("ranks") or c.values["ranks2"]).replace(" ", "").split(",")
        if len(ranks) == 1:
            add("rank", int(ranks[0]), "named by Horovod's stall report as the rank that never submitted the tensor",
                c, True)
    for c in _clues(facts, "desync_rank"):
        add("rank", int(c.values["rank"]), "named by c10d's desync report as the rank that did not join the collective", c, True)
    for c in _clues(facts, "peer_rank"):
        add("rank", int(c.values["rank"]), "named by the c10d store error as the rank that may have crashed", c, True)
    for c in _clues(facts, "closed_by_local"):
        if c.context.host:
            add("local_rank", int(c.values["local"]), f"NCCL's service thread on {c.context.host} saw this local rank's "
                "process close its connection", c, True, host=c.context.host)
    for c in _clues(facts, "proxy_rank"):
        add("rank", int(c.values["rank"]), "its NCCL proxy stopped answering a peer", c, True)
    names = known_hosts(facts)
    for h in evidence_hosts:  # once each: a host with several evidence lines is still one other host
        if not _IP.match(h) and short(h) not in {short(n) for n in names}:
            names.append(h)
    for c in _clues(facts, "peer_host"):
        peer = _host_of(c.values.get("peer") or c.values.get("peer2") or "", c.context.host, names, facts)
        if peer:  # the reporter's own host too: another process there went away
            add("host", peer, "the peer that closed the connection", c, True)
    for c in _clues(facts, "link_peer"):
        peer = _host_of(c.values["peer"], c.context.host, names, facts, guess=False)
        if peer and not same_host(peer, c.context.host):
            add("host", peer, "the far end of the failing network link", c, False)
    return out


_IP = re.compile(r"^(?:\d{1,3}(?:\.\d{1,3}){3}|[\da-fA-F]*:[\da-fA-F:.]+)$")
_REDACTED = re.compile(r"^(?:(?P<name>[A-Za-z][\w-]*?)[_-])?(?:IP|ADDR|IP_ADDR(?:ESS)?|HOST_?IP)$|^(?:[xX*#]{1,3}\.){3}[xX*#]{1,3}$")


def short(host: str) -> str:
    return host if _IP.match(host) else host.split(".", 1)[0].lower()


def same_host(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and short(a) == short(b)


def known_hosts(facts: Facts) -> list[str]:
    """Host names the log's own lines carry (NCCL headers, launcher reports), in first-seen order."""
    seen: dict[str, str] = {}
    for c in sorted(facts.clues, key=lambda c: c.order):
        for h in (c.context.host, c.values.get("host")):
            if h and not _IP.match(h):
                seen.setdefault(short(h), h)
    for h in facts.rank_hosts.values():
        seen.setdefault(short(h), h)
    return list(seen.values())


def _host_of(peer: str, reporter: str | None, names: list[str], facts: Facts, guess: bool = True) -> str | None:
    """A peer as the log names it elsewhere: its short name as srun or a header prints it, the host
    whose NCCL interface line shows that address, or (for a bare address with one other host in
    the log) that host."""
    peer = peer.strip("[]")
    if not peer:
        return None
    m = _REDACTED.match(peer)
    if m:
        # an address the poster blanked out ("NODE2_IP", "xxx.xxx.xxx.xxx") names no host, unless the
        # placeholder keeps the host's name and the log names that host
        who = (m.group("name") or "").lower()
        return next((h for h in names if who and short(h).lower() == who), None)
    if not _IP.match(peer):
        return next((h for h in names if short(h) == short(peer)), peer)
    for c in facts.clues:
        # NCCL's "Using eth0:10.0.0.2<0>", or a RoCE line's own "localGid ::ffff:10.0.0.2"
        addr = c.values.get("addr") if c.kind == "host_address" else c.values.get("local") if c.kind == "link_peer" else None
        if addr == peer and c.context.host:
            return c.context.host
    others = [h for h in names if not same_host(h, reporter)]
    if guess and len(others) == 1:
        return others[0]
    return peer


def _lagging_rank(facts: Facts) -> tuple[int, str] | None:
    """The rank whose watchdog counters show it never enqueued the collective the others time out in."""
    enq: dict[int, int] = {}
    for c in _clues(facts, "work_counter"):
        if c.context.rank is not None:
            enq[c.context.rank] = max(enq.get(c.context.rank, -1), int(c.values["enq"]))
    if len(enq) < 2:
        return None
    low = min(enq.values())
    behind = [r for r, n in enq.items() if n == low]
    if len(behind) != 1 or low == max(enq.values()):
        return None
    r = behind[0]
    return r, (f"rank {r} had enqueued NCCL work up to {low} while the others were at {max(enq.values())}: "
               "it never entered the collective the others timed out in")


def _near(suspect: dict[str, Any], own_lines: set[tuple[str, int]]) -> bool:
    """The clue sits on one of the failure's own lines or just after one (a message the paste wrapped)."""
    return any((suspect["source"], suspect["line"] - k) in own_lines for k in range(4))


def _only_host(ev_hosts: list[str], facts: Facts, sources: dict[str, SourceInfo]) -> str | None:
    """The one host a single-node log names (in any line we read), if it names exactly one."""
    names = {short(h): h for h in ev_hosts}
    for c in facts.clues:
        for h in (c.context.host, c.values.get("host")):
            if h:
                names.setdefault(short(h), h)
    for h in [*facts.rank_hosts.values(), *(s.host for s in sources.values() if s.host)]:
        names.setdefault(short(h), h)
    return next(iter(names.values())) if len(names) == 1 else None


def _make(sig: str, who: _Who, reason: str, sus: list[dict[str, Any]], only_host: str | None = None,
          multi: bool = True) -> Initiating:
    if who.host is None and only_host is not None:
        who.host = only_host
        reason += f"; {only_host} is the only host the log names"
    local = who.local_rank
    if local is None and who.gpu is not None and who.rank is None and multi:
        # NCCL's [dev] is the process's CUDA device: the local rank under the common one-GPU-per-process layout
        local = who.gpu
    return Initiating(sig, who.rank, who.host, who.source, who.line, who.timestamp, reason,
                      local_rank=local, gpu=who.gpu, pid=who.pid, suspects=sus)


def _merge_launcher(who: _Who, launcher: _Who | None) -> None:
    """Add what the launcher knows of the same process (its local rank, pid, host)."""
    if launcher is None:
        return
    if who.host and launcher.host and not same_host(who.host, launcher.host):
        return
    same = (who.rank is not None and who.rank == launcher.rank) or \
        (who.pid is not None and who.pid == launcher.pid) or \
        (who.rank is None and who.local_rank is not None and who.local_rank == launcher.local_rank) or \
        (who.rank is None and who.local_rank is None and who.pid is None)
    if not same:
        return
    who.rank = who.rank if who.rank is not None else launcher.rank
    who.local_rank = who.local_rank if who.local_rank is not None else launcher.local_rank
    who.pid = who.pid if who.pid is not None else launcher.pid
    who.host = who.host or launcher.host


def attribute(groups: list[Any], facts: Facts, sources: dict[str, SourceInfo]) -> tuple[Initiating | None, list[str]]:
    """Who started it, and (for downstream-only logs) what to ask for."""
    if not groups:
        return None, []
    top = groups[0]
    sig = top.sig.id
    asks: list[str] = []
    evs: list[Evidence] = top.evidence
    ev_hosts = [e.context.host for g in groups for e in g.evidence if e.context.host]
    sus = suspects(facts, ev_hosts)
    lone = _only_host(ev_hosts, facts, sources)
    # a GPU index stands for the local rank only in a job of several processes (one GPU each)
    multi = len({(e.context.rank, e.context.pid, e.context.host) for g in groups for e in g.evidence}) > 1 or \
        any(e.context.gpu is not None and "NCCL" in e.text for g in groups for e in g.evidence)
    exit_info = _first_exit(facts)
    launcher, launcher_why = (exit_info[0], exit_info[1]) if exit_info else (None, "")
    if launcher is not None:
        _complete(launcher, facts, sources)

    # 1. torchrun's root-cause block beats inference, unless it was a victim itself; with one agent
    # per node there is one block per agent, and the earliest names the job's first failure
    blocks = [e for g in groups for e in g.evidence if "culprit_root_cause" in e.captures
              and e.captures.get("culprit_exitcode") not in _VICTIM_EXIT]
    if blocks:
        e = min(blocks, key=lambda e: (e.captures.get("culprit_time", "9999"), e.order))
        who = _from_evidence(e, facts, sources)
        _merge_launcher(who, launcher)
        reason = "named as the first observed failure by torchrun's error summary"
        if len({b.captures.get("culprit_rank") for b in blocks}) > 1:
            reason += " (the earliest of the agents' summaries)"
        return _make(sig, who, reason, sus, lone, multi), asks
    # ... or the failure's own line names the process (mpirun's "process rank N ... on node X",
    # NCCL's "check your collective calls at and around rank N"); srun's lines go through the
    # launcher's bookkeeping below, which knows a teardown kill from a failure
    named = [e for e in evs if ("culprit_rank" in e.captures or "culprit_host" in e.captures)
             and e.captures.get("culprit_exitcode") not in _VICTIM_EXIT and not _SRUN_TASK.search(e.text)]
    if named:
        e = min(named, key=lambda e: e.order)
        who = _from_evidence(e, facts, sources)
        _merge_launcher(who, launcher)
        return _make(sig, who, "named by the failure report itself", sus, lone, multi), asks

    # 2. the top failure's own lines name the peer that went away: that peer started it
    reporters = {e.context.rank for g in groups for e in g.evidence if e.context.rank is not None}
    own_lines = {(e.source, e.line) for e in evs}
    own_sources = {e.source for e in evs}
    gone = [s for s in sus if s["went_away"] and s.get("rank") not in reporters
            and (top.level != Level.INITIATING or _near(s, own_lines)
                 or (s["kind"] in _NAMES_THE_STRAGGLER and s["source"] in own_sources)
                 # a connection failure whose own message goes on to name the peer (c10d's store error)
                 or (s["kind"] == "peer_rank" and s["source"] in own_sources
                     and top.sig.family in ("distributed", "communication")))]
    if top.level == Level.INITIATING and not gone:
        who, reason = _from_own_lines(evs, facts, sources, launcher)
        all_evs = [e for g in groups for e in g.evidence]
        # a known local rank is only bettered by the traceback of the same (lone) process: _following_rank checks
        if who.rank is None and (who.local_rank is None or who.pid is not None):
            borrowed = _following_rank(who, evs, all_evs, launcher, facts)
            if borrowed is not None:
                who.rank, local, why = borrowed
                who.local_rank = local if local is not None else who.local_rank
                _complete(who, facts, sources)
                reason = why
        if who.rank is None and top.sig.family == "gpu-hardware":
            app = _app_side_rank(who, groups)
            if app is not None:
                who.rank = app
                _complete(who, facts, sources)
                reason += f"; rank {app} is the one process that reported the GPU's failure as a CUDA error"
        if not who.known() and launcher is not None and launcher.known():
            who, reason = launcher, launcher_why
        else:
            if launcher is not None and (who.source, who.line) == (launcher.source, launcher.line):
                reason = launcher_why
            _merge_launcher(who, launcher)
        gone_ranks = {s_["rank"] for s_ in sus if s_["went_away"] and "rank" in s_} - reporters
        if who.rank is None and who.known() and len(gone_ranks) == 1:
            # the failing process printed no global rank, and its peers name one rank as gone
            who.rank = gone_ranks.pop()
            reason += f"; its peers found rank {who.rank} gone"
        return _make(sig, who, reason, sus, lone, multi), asks

    # 3. only downstream reports (or reports of a peer): the peer they name, the rank behind, the
    # one that never reported
    if gone:
        # a peer the log names by host name beats a bare address (which may be any interface)
        s = max(gone, key=lambda s: ("rank" in s or "local_rank" in s or not _IP.match(str(s.get("host", ""))),
                                     s["reports"]))
        who = _Who(rank=s.get("rank"), host=s.get("host"), local_rank=s.get("local_rank"), source=s["source"],
                   line=s["line"])
        _complete(who, facts, sources)
        _merge_launcher(who, launcher)
        return _make(sig, who, s["reason"], sus, lone, multi), asks
    if launcher is not None and launcher.known():
        return _make(sig, launcher, launcher_why, sus, lone, multi), asks
    lag = _lagging_rank(facts)
    if lag is not None:
        who = _Who(rank=lag[0])
        _complete(who, facts, sources)
        return _make(sig, who, lag[1], sus, lone, multi), asks
    ws = facts.world_size
    if ws is None and len(reporters) >= 2 and min(reporters) == 1 and max(reporters) == len(reporters):
        ws = len(reporters) + 1  # ranks 1..n reported: the world is at least n + 1, and rank 0 is silent
    missing = sorted(set(range(ws)) - reporters) if ws and reporters else []
    if missing and len(missing) <= max(1, ws // 4):  # type: ignore[operator]
        names = ", ".join(
            f"rank {r}" + (f" ({facts.rank_hosts[r]})" if r in facts.rank_hosts else "") for r in missing[:8]
        )
        asks.append(
            f"Only downstream reports are in the log, from {len(reporters)} of {ws} ranks. "
            f"Please attach the log of {names}: {'it' if len(missing) == 1 else 'they'} never reported, "
            "so the failure most likely started there."
        )
        if len(missing) == 1:
            who = _Who(rank=missing[0])
            _complete(who, facts, sources)
            return _make(sig, who, f"the only rank of {ws} that did not report {sig}", sus, lone, multi), asks
    timed = [e for e in evs if e.context.timestamp is not None]
    first = min(timed, key=lambda e: (e.context.timestamp, e.order)) if timed else min(evs, key=lambda e: e.order)
    who = _from_evidence(first, facts, sources)
    if not missing:
        asks.append(
            f"The log shows only {sig}, which reports another rank's failure. Please attach the logs "
            "of the other ranks (or the kernel log of their hosts): the first rank to fail holds the cause."
        )
    return _make(sig, who, "first to report it (a downstream report: the cause may be elsewhere)", sus, lone, multi), asks


def _app_side_rank(who: _Who, groups: list[Any]) -> int | None:
    """The rank whose process met the kernel-logged GPU fault: the driver's Xid line names a GPU and a
    pid, never a rank, while the process on that GPU reports the same fault as a CUDA error. Only when
    those reports (the cuda family's lines) name exactly one rank, on the fault's host or none."""
    ranks = {e.context.rank for g in groups if g.sig.family == "cuda" for e in g.evidence
             if e.context.rank is not None and (who.host is None or e.context.host is None
                                                or same_host(e.context.host, who.host))}
    return ranks.pop() if len(ranks) == 1 else None


def _from_own_lines(evs: list[Evidence], facts: Facts, sources: dict[str, SourceInfo],
                    launcher: _Who | None) -> tuple[_Who, str]:
    """The process among those that printed the initiating failure where it happened first."""
    # an IB work request flushed because its queue pair had already failed is that failure's echo
    own = [e for e in evs if not _FLUSHED.search(e.text)] or evs
    whos = [(e, _from_evidence(e, facts, sources)) for e in own]
    if len(own) < len(evs):
        w, why = _pick(whos, launcher)
        if why == "the only process that printed it":
            return w, "the only process whose error is not a flushed work request, which only follows an earlier error"
        return w, why + ", leaving out flushed work requests, which only follow an earlier error"
    return _pick(whos, launcher)


# how far after the failure's last unprefixed line the one rank's traceback may start, and how far it may run
_BORROW_WINDOW = 200
# torchrun's per-process prefix (--tee, --local-ranks-filter): "[rank3]:", "[default3]:" (local rank 3),
# also behind a launcher's own prefix ("gpu-node-07: [rank3]: ...", "0: [rank0]:[E626 ...")
_RANK_PREFIX = re.compile(r"^.{0,80}?(?<![^\s:|\]])\[(?:rank|default)\d+\]:")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
# a line of a Python traceback printed without any prefix: the unprefixed line ends a traceback of its own
_BARE_FRAME = re.compile(r"^(?:Traceback \(most recent call last\)|\s+File \".*\", line \d+|\s+\^+\s*$)")


@dataclass
class _Mark:
    """What one line after the failure's unprefixed line tells of the process that printed it."""

    rank: int | None
    local_rank: int | None
    host: str | None
    prefixed: bool = False  # torchrun's "[rankN]:" / "[defaultN]:" prefix
    same_failure: bool = False  # a line of the failure itself
    traceback: bool = False  # a traceback header


def _following_rank(who: _Who, evs: list[Evidence], all_evs: list[Evidence],
                    launcher: _Who | None, facts: Facts) -> tuple[int | None, int | None, str] | None:
    """The rank of the one process whose prefixed traceback follows the failure's unprefixed line.

    A CUDA kernel's printf (`IndexKernel.cu:92: ... Assertion ... failed.`) goes straight to the
    process's stdout, past torchrun's `[rank3]:` prefix; the traceback that the same process prints
    next carries it. Borrowed only when the line names no process at all (a host at most), the
    lines that follow (the run of unprefixed lines of the same failure, then up to _BORROW_WINDOW
    lines) name exactly one rank, and that rank's lines there are torchrun-prefixed and hold a
    traceback or the same failure. An unprefixed line that closes a traceback of its own is another
    process's report; two ranks there leave it unknown."""
    if who.source is None or who.line is None:
        return None
    if (who.pid is not None or who.gpu is not None) and not _lone_process(who, all_evs, facts):
        return None
    start = who.line
    marks: dict[int, _Mark] = {}
    own = {(e.source, e.line) for e in evs}

    def mark(line: int, text: str, ctx: Any, same: bool) -> None:
        if line <= start or (ctx.rank is None and ctx.local_rank is None):
            return
        m = marks.setdefault(line, _Mark(ctx.rank, ctx.local_rank, ctx.host))
        m.prefixed = m.prefixed or bool(_RANK_PREFIX.match(text))
        m.same_failure = m.same_failure or same
        m.traceback = m.traceback or bool(_TRACEBACK.search(text))

    later = [e for e in all_evs if e.source == who.source and e.line + len(e.after) > start]
    if any(e.line == start and any(_BARE_FRAME.match(b) for b in e.before) for e in later):
        return None
    for e in later:
        mark(e.line, e.text, e.context, (e.source, e.line) in own)

    def run_end(first: float) -> int:
        """The last of the failure's unprefixed lines before the first line that names a process."""
        return max((e.line for e in evs if e.source == who.source and start <= e.line < first
                    and e.context.rank is None and e.context.local_rank is None), default=start)

    # the lines printed after the matched ones (a traceback's head), read near the run and its block only
    near = run_end(min(marks, default=float("inf"))) + _BORROW_WINDOW
    for e in later:
        if e.line <= near:
            for k, text in enumerate(e.after):
                if e.line + 1 + k > start and ("[" in text or ":" in text):
                    mark(e.line + 1 + k, text, parse_line(text), False)
    if not marks:
        return None
    first = min(marks)
    end = run_end(first)
    if first - end > _BORROW_WINDOW:
        return None
    block = [m for line, m in marks.items() if line <= first + _BORROW_WINDOW]
    keys = {("rank", m.rank) if m.rank is not None else ("local", m.local_rank) for m in block}
    if len(keys) != 1 or not any(m.prefixed for m in block) or not any(m.same_failure or m.traceback for m in block):
        return None
    if who.host and any(m.host and not same_host(m.host, who.host) for m in block):
        return None
    rank = next((m.rank for m in block if m.rank is not None), None)
    local = next((m.local_rank for m in block if m.local_rank is not None), None)
    dev = who.local_rank if who.local_rank is not None else who.gpu
    if dev is not None and (rank is None or (local is not None and local != dev) or rank < dev):
        return None  # the NCCL header's device and the traceback's rank must fit one process
    if launcher is not None and launcher.known():
        # the launcher's own account of who failed first stands unless it is the same process
        if launcher.rank is not None:
            agrees = launcher.rank == rank
        elif launcher.local_rank is not None:
            agrees = launcher.local_rank in {local, facts.rank_local.get(rank, rank) if rank is not None else None}
        else:
            agrees = True
        if not agrees:
            return None
    name = f"rank {rank}" if rank is not None else f"local rank {local}"
    return rank, local, (f"the failure's first line carries no rank prefix; {name} is the one process "
                         "whose prefixed lines (its traceback) follow it")


def _lone_process(who: _Who, all_evs: list[Evidence], facts: Facts) -> bool:
    """The failure's NCCL header names a process, no rank, and no other process prints in its file (evidence,
    or the NCCL headers the facts keep): NCCL's WARN goes out unprefixed while torchrun prefixes the same
    process's traceback (`[rank9]: Traceback`)."""
    if who.pid is None or who.rank is not None:
        return False
    procs = {(e.context.host, e.context.pid) for e in all_evs if e.source == who.source and e.context.pid is not None}
    procs |= {(c.values.get("host"), int(c.values["pid"])) for c in facts.clues
              if c.kind == "proc_header" and c.source == who.source}
    return procs == {(who.host, who.pid)}


def _pick(whos: list[tuple[Evidence, _Who]], launcher: _Who | None) -> tuple[_Who, str]:
    w, why = _pick_line(whos, launcher)
    # a bare line (libmlx5's "mlx5: host: got completion with error") gets the process details from
    # the same host's other lines, when they name one process
    if w.host and (w.pid is None or w.gpu is None):
        same = {(o.pid, o.gpu, o.rank, o.local_rank) for _, o in whos
                if same_host(o.host, w.host) and (o.pid is not None or o.gpu is not None)}
        if len(same) == 1:
            pid, gpu, rank, local = same.pop()
            w.pid = w.pid if w.pid is not None else pid
            w.gpu = w.gpu if w.gpu is not None else gpu
            w.rank = w.rank if w.rank is not None else rank
            w.local_rank = w.local_rank if w.local_rank is not None else local
    return w, why


def _pick_line(whos: list[tuple[Evidence, _Who]], launcher: _Who | None) -> tuple[_Who, str]:
    ranks = {w.rank for _, w in whos if w.rank is not None}
    procs = {(w.host, w.pid, w.rank, w.local_rank) for _, w in whos if w.known() or w.pid is not None}
    if len(procs) == 1:
        e, w = next((e, w) for e, w in whos if w.known() or w.pid is not None)
        return w, "the only process that printed it"
    if launcher is not None and launcher.rank is not None and launcher.rank in ranks:
        w = next(w for _, w in whos if w.rank == launcher.rank)
        return w, "of the ranks that reported it, the first the launcher saw exit"
    timed = [(e, w) for e, w in whos if e.context.timestamp is not None]
    if timed and len({comparable_times(timed[0][0].context.timestamp, e.context.timestamp) for e, _ in timed}) == 1:
        e, w = min(timed, key=lambda t: (t[0].context.timestamp, t[0].order))
        if len(procs) > 1:
            return w, "earliest timestamp among the processes that reported it"
        return w, "first line that reported it"
    e, w = min(whos, key=lambda t: t[0].order)
    if len(procs) > 1:
        return w, "first of the processes that reported it, in log order (no common clock)"
    return w, "first line that reported it"


def started_by(report: Report) -> str | None:
    """The one "Started by" line the CLI and Slack both show; None when the log cannot tell."""
    init = report.initiating
    if init is None or not report.diagnoses:
        return None
    parts = []
    if init.rank is not None:
        parts.append(f"rank {init.rank}")
    elif init.local_rank is not None:
        parts.append(f"local rank {init.local_rank}")
    if init.host:
        parts.append(f"on {init.host}" if parts else init.host)
    if not parts:
        return None
    if init.gpu is not None:
        parts.append(f"GPU {init.gpu}")
    if init.pid is not None:
        parts.append(f"pid {init.pid}")
    line = parts[0] + "".join(f" {p}" if p.startswith("on ") else f", {p}" for p in parts[1:])
    if init.reason:
        line += f" ({init.reason})"
    top = report.diagnoses[0]
    same = set(top.ranks) - {init.rank}
    effects = {r for d in report.diagnoses[1:] if d.level != Level.INITIATING for r in d.ranks} - same - {init.rank}
    if same:
        line += f"; {len(same)} other rank{'s' if len(same) != 1 else ''} reported it too"
    if effects:
        line += f"; {len(effects)} other rank{'s' if len(effects) != 1 else ''} reported only its effects"
    return line
