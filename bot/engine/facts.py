"""Facts a log states about its run: versions, world size, NCCL_* settings, job id, rank -> host.

Each fact is a literal (found by the same scan as the signatures) and a regex run on candidate
lines only, so collecting facts costs nothing on lines that hold none.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .model import LineContext

# Settings we report when a log prints them (an env dump, NCCL's "set by environment to", c10d options).
_ENV_KEYS = r"(?:TORCH_)?NCCL_[A-Z0-9_]+|TORCH_DISTRIBUTED_DEBUG|CUDA_VISIBLE_DEVICES|CUDA_LAUNCH_BLOCKING|PYTORCH_CUDA_ALLOC_CONF|CUDA_DEVICE_MAX_CONNECTIONS|MASTER_ADDR|MASTER_PORT|WORLD_SIZE"


@dataclass(frozen=True, slots=True)
class FactPattern:
    name: str
    literals: tuple[str, ...]
    regex: re.Pattern[str]
    ignorecase: bool = False


FACT_PATTERNS: list[FactPattern] = [
    # "NCCL version 2.26.2+cuda12.8" (NCCL INFO banner), "NCCL version: (2, 18, 1)" / "nccl version 21.0.3"
    FactPattern("nccl_version", ("NCCL version",),
                re.compile(r"NCCL version:? ?\(?(?P<v>\d+(?:[.,] ?\d+){1,2})\)?(?:\+cuda(?P<cuda>\d+\.\d+))?")),
    FactPattern("nccl_version", ("nccl_version", "torch.cuda.nccl.version"),
                re.compile(r"nccl[._]version\(?\)?\s*[:=]\s*\(?(?P<v>\d+(?:[.,] ?\d+){1,2})")),
    # nvidia-smi banner: "| NVIDIA-SMI 570.172.08   Driver Version: 570.172.08   CUDA Version: 12.8 |"
    FactPattern("driver_version", ("Driver Version",), re.compile(r"Driver Version: ?(?P<v>\d+\.\d+(?:\.\d+)?)")),
    FactPattern("cuda_version", ("CUDA Version",), re.compile(r"CUDA Version: ?(?P<v>\d+\.\d+)")),
    # kernel: "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.172.08  ..."
    FactPattern("driver_version", ("Kernel Module",), re.compile(r"NVIDIA UNIX .*Kernel Module +(?P<v>\d+\.\d+(?:\.\d+)?)")),
    # torch.utils.collect_env: "PyTorch version: 2.3.0+cu121", "CUDA used to build PyTorch: 12.1"
    FactPattern("torch_version", ("PyTorch version",), re.compile(r"PyTorch version: ?(?P<v>\d+\.\d+(?:\.\d+)?\S*)")),
    FactPattern("torch_version", ("torch==",), re.compile(r"\btorch==(?P<v>\d+\.\d+(?:\.\d+)?\S*)")),
    FactPattern("torch_version", ("torch version",), re.compile(r"torch version:? ?(?P<v>\d+\.\d+(?:\.\d+)?\S*)", re.I),
                ignorecase=True),
    FactPattern("cuda_version", ("CUDA used to build PyTorch",),
                re.compile(r"CUDA used to build PyTorch: ?(?P<v>\d+\.\d+)")),
    FactPattern("driver_version", ("driver version:",),
                re.compile(r"(?:Nvidia )?driver version: ?(?P<v>\d{3}\.\d+(?:\.\d+)?)", re.I), ignorecase=True),
    # world size: c10d options "size: 64, global rank: 3", "world_size=8", NCCL "nranks 64"
    FactPattern("pg_options", ("global rank:",),
                re.compile(r"size: (?P<size>\d+), global rank: (?P<rank>\d+)(?:.*?TIMEOUT\(ms\): (?P<timeout>\d+))?")),
    FactPattern("world_size", ("world_size", "world size", "world-size"),
                re.compile(r"world[_ -]size\W{0,3}?[=: ]\s*(?P<v>\d+)", re.I), ignorecase=True),
    # the Swin Transformer family's launcher check (Swin, InternImage, VMamba, ...): "RANK and WORLD_SIZE in environ: 0/1"
    FactPattern("world_size", ("WORLD_SIZE in environ",),
                re.compile(r"RANK and WORLD_SIZE in environ: \d+/(?P<v>\d+)")),
    # "gpu-node-1:1234:1300 [3] NCCL INFO comm 0x... rank 3 nranks 64 cudaDev 3 busId 1b000 - Init COMPLETE"
    # NCCL >= 2.19: "comm 0x... rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0". The
    # header (host:pid) is read apart: one optional prefix before a lazy `.*?` made this quadratic.
    FactPattern("nccl_rank", ("nranks", "nRanks"),
                re.compile(r"\brank (?P<rank>\d+) n[Rr]anks (?P<n>\d+)(?: cudaDev (?P<cdev>\d+))?"
                           r"(?:.{0,40}?\blocalRank (?P<local>\d+))?")),
    # nccl-tests' device table (src/common.cu): "#   Rank  0 on     paiws7 device  0 [0x04] Tesla V100-SXM2-16GB",
    # 2.x: "#  Rank  0 Group  0 Pid  12345 on    node1 device  0 [0x1b] NVIDIA A100-SXM4-80GB". The world
    # size is not on the line: kept under size 0, which any NCCL "nranks" table outranks
    FactPattern("nccl_tests_rank", ("Rank ",),
                re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+(?P<pid>\d+)\s+)?on\s+"
                           r"(?P<host>[\w.\-]+)\s+device\s+(?P<dev>\d+)\s+\[")),
    FactPattern("env", ("NCCL_", "TORCH_DISTRIBUTED_DEBUG", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING",
                        "PYTORCH_CUDA_ALLOC_CONF", "CUDA_DEVICE_MAX_CONNECTIONS", "MASTER_ADDR"),
                re.compile(rf"\b(?P<k>{_ENV_KEYS})(?:\s*[=:]\s*| set by environment to | set to )(?P<v>[^\s,;'\"\]\)]+(?:,[^\s,;'\"\]\)]+)*)")),
    FactPattern("timeout_ms", ("Timeout(ms)", "TIMEOUT(ms)"), re.compile(r"(?i:timeout)\(ms\)[=:] ?(?P<v>\d+)")),
    FactPattern("job_id", ("SLURM_JOB_ID", "SLURM_JOBID"), re.compile(r"SLURM_JOB_?ID\s*[=:]\s*(?P<v>\d+)")),
    FactPattern("job_id", ("*** JOB ", "*** STEP "), re.compile(r"\*\*\* (?:JOB|STEP) (?P<v>\d+)")),
    FactPattern("job_id", ("StepId=",), re.compile(r"StepId=(?P<v>\d+)")),
]

# Launchers' and libraries' own bookkeeping of who failed first or who went away: kept as clues
# with the line's context, for attribution (bot/engine/attribution.py). Templates from the code
# that prints them: torch/distributed/elastic/multiprocessing/api.py, Slurm src/srun, Open MPI's
# errmgr help texts, c10d ProcessGroupNCCL.cpp, NCCL src/misc/socket.cc and bootstrap.cc.
CLUE_PATTERNS: list[FactPattern] = [
    # "failed (exitcode: -9) local_rank: 1 (pid: 1168) of binary: /opt/conda/bin/python" — the
    # agent logs the earliest failure after closing the others
    FactPattern("clue:elastic_failed", ("failed (exitcode",),
                re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")),
    # "Sending process 1167 closing signal SIGTERM" — these pids are the teardown's victims
    FactPattern("clue:elastic_closing", ("Sending process ",),
                re.compile(r"Sending process (?P<pid>\d+) closing(?: signal (?P<sig>SIG\w+))?")),
    # "srun: error: node12: task 3: Killed", "srun: error: gra1177: task 0: Exited with exit code 1",
    # "srun: error: node1: tasks 0-3: Terminated" — srun reports tasks as they end
    FactPattern("clue:srun_task", ("srun: error: ",),
                re.compile(r"srun: error: (?P<host>[\w.\-]+): tasks? (?P<tasks>\d[\d,\-]*): (?P<what>[^\r\n]{1,80})")),
    # Open MPI: "mpirun noticed that process rank 3 with PID 4242 on node gpu-2 exited on signal 9 (Killed)."
    FactPattern("clue:mpi_signal", ("exited on signal",),
                re.compile(r"process rank (?P<rank>\d+) with PID (?P<pid>\d+) on node (?P<host>[\w.\-]+) exited on signal (?P<sig>\d+)")),
    # Open MPI: "The first process to do so was:\n\n  Process name: [[47736,1],3]\n  Exit code: 1";
    # Open MPI 5 / PRRTE: "Process name: [prterun-node1-4242@1,3]"
    FactPattern("clue:mpi_first", ("Process name: [",),
                re.compile(r"Process name: \[(?:\[\d+,\d+\],|[\w.\-]+@\d+,)(?P<rank>\d+)\]")),
    # MPICH / Intel MPI (Hydra): "=   RANK 3 PID 4242 RUNNING AT node12" (MPICH 3.x: "=   PID 4242 RUNNING AT node12")
    FactPattern("clue:mpi_hydra", ("RUNNING AT ",),
                re.compile(r"=\s+(?:RANK (?P<rank>\d+) )?PID (?P<pid>\d+) RUNNING AT (?P<host>[\w.\-]+)")),
    # the process that called MPI_Abort: Open MPI "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD",
    # MPICH "Abort(1) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 1"
    FactPattern("clue:mpi_abort", ("MPI_ABORT was invoked on rank ", "application called MPI_Abort"),
                re.compile(r"MPI_ABORT was invoked on rank (?P<rank>\d+) in communicator"
                           r"|\(rank (?P<rank2>\d+) in comm \d+\): application called MPI_Abort")),
    # DeepSpeed's launcher, one per node (pdsh puts "host: " first): a child of this node exited non-zero.
    # Its "--local_rank=N" is the last child it spawned, not the failed one, so only the host counts.
    FactPattern("clue:ds_exit", ("exits with return code",),
                re.compile(r"\bexits with return code = (?P<code>-?\d+)")),
    # c10d store: "... store->get('0') got error: Connection reset by peer. This may indicate a
    # possible application crash on rank 0 or a network set up issue."
    FactPattern("clue:peer_rank", ("possible application crash on rank",),
                re.compile(r"possible application crash on rank (?P<rank>\d+)")),
    # NCCL: "socketProgress: Connection closed by remote peer gpu-node-2<45678>", "Call to recv from
    # 10.0.0.2<40034> failed : Connection reset by peer"; gloo / TCPStore: "Connection closed by peer [10.0.0.2]:29500"
    FactPattern("clue:peer_host", ("closed by remote peer", "Call to recv from", "closed by peer [", "reset by peer ["),
                re.compile(r"(?:Connection closed by remote peer |Call to recv from )(?P<peer>[\w.\-:\[\]%]{1,128}?)<\d+>"
                           r"|Connection (?:closed|reset) by peer \[(?P<peer2>[\w.\-:%]{1,128})\]:\d+")),
    # NCCL IB: "Got completion from peer 172.36.143.59<44206> with status=12" — the other end of the link
    FactPattern("clue:link_peer", ("Got completion from peer",),
                re.compile(r"Got completion from peer (?P<peer>[\w.\-:]{1,128}?)<\d+>"
                           r"(?:.{0,120}?localGid (?:::ffff:)?(?P<local>\d{1,3}(?:\.\d{1,3}){3})\b)?")),
    # c10d watchdog: "Timeout at NCCL work: 20, last enqueued NCCL work: 20, last completed NCCL work: 19."
    # (2.4+: "PG status: last enqueued work: 315, last completed work: 183")
    FactPattern("clue:work_counter", ("last enqueued",),
                re.compile(r"last enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)")),
    # c10d desync report (TORCH_NCCL_DESYNC_DEBUG): "[7] finished collective #182, but didn't join
    # collective #183", "[47] joined but didn't finish collective #N" — the rank that held the others up
    FactPattern("clue:desync_rank", ("but didn't join collective", "joined but didn't finish collective"),
                re.compile(r"\[(?P<rank>\d+)\] (?:finished collective #\d+, but didn't join|joined but didn't finish) collective")),
    # NCCL proxy client: "ncclProxyClientGetFd call to tpRank 4 handle 0x... failed : 6" — rank 4's proxy is gone
    FactPattern("clue:proxy_rank", ("call to tpRank",),
                re.compile(r"call to tpRank (?P<rank>\d+) .{0,40}?failed")),
    # NCCL's own interface line maps an address to the host that printed it:
    # "gpu-2:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>", "Bootstrap : Using eth0:10.0.0.2<0>"
    FactPattern("clue:host_address", (" : Using ",),
                re.compile(r"(?:Bootstrap|NET/Socket|NET/IB) ?: Using (?:\[\d+\])?[\w.\-]+:(?P<addr>[\d.]+|[\da-fA-F:]+)<\d+>")),
    # Horovod's stall inspector: "HorovodBroadcast_conv1_0 [missing ranks: 0]" — the rank that never submitted;
    # 0.21+ lists them under "Missing ranks:" one a line, "0: [cond_1/.../HorovodAllreduce_grads_0]"
    FactPattern("clue:hvd_missing", ("[missing ranks: ", "/Horovod", ": [Horovod"),
                re.compile(r"\[missing ranks: (?P<ranks>\d+(?:, ?\d+)*)\]"
                           r"|^(?P<ranks2>\d+): \[[^\]\n]*\bHorovod(?:Allreduce|Allgather|Broadcast|Alltoall|Reducescatter)")),
    # slurmstepd's kill notice, "*** JOB 6398 ON node12 CANCELLED AT ... ***": the node the job's batch step ran on
    # (read for its context's host, so that a one-node job's failure is put on its node)
    FactPattern("clue:slurm_job", ("*** JOB ", "*** STEP "), re.compile(r"\*\*\* (?:JOB|STEP) (?P<job>\d+)")),
    # TGI's launcher: "ERROR text_generation_launcher: Shard 0 failed to start"
    FactPattern("clue:shard_failed", ("failed to start",),
                re.compile(r"\bShard (?P<rank>\d+) failed to start")),
    # Ray Train's executor: "Worker 7 has failed." (the worker index is its world rank)
    FactPattern("clue:ray_worker_failed", ("has failed.",),
                re.compile(r"\bWorker (?P<rank>\d+) has failed\.")),
    # torch.multiprocessing.spawn: "ProcessExitedException: process 1 terminated with signal SIGABRT",
    # "process 0 terminated with exit code 1", "-- Process 1 terminated with the following error:"
    FactPattern("clue:spawn_exit", ("terminated with signal", "terminated with exit code", "terminated with the following error"),
                re.compile(r"(?:ProcessExitedException: process|^-- Process) (?P<local>\d+) terminated with "
                           r"(?P<what>signal \w+|exit code -?\d+|the following error)")),
    # NCCL's [Service thread] on a host sees a local rank's process go: "Connection closed by localRank 2"
    FactPattern("clue:closed_by_local", ("Connection closed by localRank",),
                re.compile(r"Connection closed by localRank (?P<local>\d+)")),
    # lines NCCL prints a bounded number of times per process at start-up: they tie a pid to its host
    FactPattern("clue:proc_header", ("Setting affinity for GPU", "NCCL version", "NCCL WARN"),
                re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\] ")),
    # a shell prompt pasted with the output: "[root@gpu-node-3 ~]# nvidia-smi", "alice@dgx01:~$ dmesg"; not one
    # whose command runs elsewhere ("alice@login1:~$ srun -p gpu ...": the output comes from the compute node)
    FactPattern("clue:prompt", ("~]#", "~]$", ":~$", ":~#"),
                re.compile(r"^\s*(?:\[[\w.\-]+@(?P<host>[\w.\-]+) ~\][#$]|[\w.\-]+@(?P<host2>[\w.\-]+):~[#$])"
                           r"(?!\s*(?:sudo\s+)?(?:srun|salloc|sbatch|ssh|mpirun|mpiexec|pdsh|clush|kubectl)\b)")),
    # a command run on another host through ssh, its output pasted below: "$ ssh -o BatchMode=yes gpu-node-3 'dmesg'",
    # "alice@login1:~$ ssh root@dgx01 nvidia-smi" (the host is the argument after ssh's options)
    FactPattern("clue:prompt", ("ssh ",),
                re.compile(r"^\s*(?:[\w.\-]+@[\w.\-]+:\S*|\[[\w.\-]+@[\w.\-]+ [^\]]*\])?[$#] +(?:sudo +)?ssh +"
                           r"(?:-[46AaCfGgKkMNnqsTtVvXxYy]+ +|-[bcDEeFIiJLlmOopQRSWw] *[^\s-]\S* +)*"
                           r"(?:[\w.\-]+@)?(?P<host>[A-Za-z][\w.\-]*) +['\"]?[\w./-]")),
    # torch elastic, newer wording of the teardown: "Closing process 1234 via signal SIGTERM"
    FactPattern("clue:elastic_closing", ("via signal SIG",),
                re.compile(r"Closing process (?P<pid>\d+) via signal (?P<sig>SIG\w+)")),
]
MAX_CLUES = 500  # per kind: teardown lists and per-rank reports repeat (full: muted like facts)

# Hints that a line mentions a setting without it being set ("run with NCCL_DEBUG=INFO for details").
_ADVICE = re.compile(r"\b(?:run with|set(?:ting)? the environment variable|consider setting|try setting|you can set|e\.g\.|please set)\b", re.I)
_NCCL_HEADER = re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[\d+\] (?:NCCL )?INFO ")
# per fact kind and source: start-up chatter repeats a fact per rank and communicator; a kind that
# is full stops reading, and its literals stop making scan candidates (Matcher.verify's `muted`)
MAX_FACT_HITS = 5000


@dataclass(slots=True)
class Clue:
    """One launcher or library line that tells who failed first or who went away."""

    kind: str  # the part after "clue:" (elastic_failed, srun_task, peer_rank, ...)
    values: dict[str, str]
    source: str
    line: int
    order: int
    context: LineContext


@dataclass
class Facts:
    versions: dict[str, Counter[str]] = field(default_factory=dict)
    env: dict[str, Counter[str]] = field(default_factory=dict)
    world_sizes: Counter[int] = field(default_factory=Counter)
    # communicator size -> {rank: host}; only the largest communicator's ranks are global ranks
    rank_hosts_by_size: dict[int, dict[int, str]] = field(default_factory=dict)
    rank_gpus_by_size: dict[int, dict[int, int]] = field(default_factory=dict)  # rank -> NCCL cudaDev
    rank_pids_by_size: dict[int, dict[int, int]] = field(default_factory=dict)
    rank_local_by_size: dict[int, dict[int, int]] = field(default_factory=dict)  # rank -> NCCL localRank
    timeouts_ms: Counter[int] = field(default_factory=Counter)
    job_ids: Counter[str] = field(default_factory=Counter)
    hits: Counter[str] = field(default_factory=Counter)
    clues: list[Clue] = field(default_factory=list)

    def add_version(self, kind: str, value: str) -> None:
        value = value.replace(", ", ".").replace(",", ".")
        self.versions.setdefault(kind, Counter())[value] += 1

    def merge(self, other: Facts) -> None:
        for k, c in other.versions.items():
            self.versions.setdefault(k, Counter()).update(c)
        for k, c in other.env.items():
            self.env.setdefault(k, Counter()).update(c)
        self.world_sizes.update(other.world_sizes)
        for mine_all, theirs_all in ((self.rank_gpus_by_size, other.rank_gpus_by_size),
                                     (self.rank_pids_by_size, other.rank_pids_by_size),
                                     (self.rank_local_by_size, other.rank_local_by_size)):
            for n, table in theirs_all.items():
                mine_all.setdefault(n, {}).update({r: v for r, v in table.items() if r not in mine_all.get(n, {})})
        for n, hosts in other.rank_hosts_by_size.items():
            mine = self.rank_hosts_by_size.setdefault(n, {})
            for r, h in hosts.items():
                mine.setdefault(r, h)
        self.timeouts_ms.update(other.timeouts_ms)
        self.job_ids.update(other.job_ids)
        self.hits.update(other.hits)
        self.clues.extend(other.clues)

    @property
    def rank_hosts(self) -> dict[int, str]:
        if not self.rank_hosts_by_size:
            return {}
        return self.rank_hosts_by_size[max(self.rank_hosts_by_size)]

    @property
    def rank_gpus(self) -> dict[int, int]:
        return self.rank_gpus_by_size[max(self.rank_gpus_by_size)] if self.rank_gpus_by_size else {}

    @property
    def rank_pids(self) -> dict[int, int]:
        return self.rank_pids_by_size[max(self.rank_pids_by_size)] if self.rank_pids_by_size else {}

    @property
    def rank_local(self) -> dict[int, int]:
        return self.rank_local_by_size[max(self.rank_local_by_size)] if self.rank_local_by_size else {}

    @property
    def proc_ranks(self) -> dict[tuple[str, int], int]:
        """(host, pid) -> global rank, from NCCL's init lines of the largest communicator."""
        if not self.rank_pids_by_size:
            return {}
        n = max(self.rank_pids_by_size)
        hosts = self.rank_hosts_by_size.get(n, {})
        return {(hosts[r], pid): r for r, pid in self.rank_pids_by_size[n].items() if r in hosts}

    @property
    def world_size(self) -> int | None:
        # sub-communicators (tensor/pipeline groups) are smaller than the world: take the largest
        return max(self.world_sizes) if self.world_sizes else None

    def to_dict(self, hosts: list[str], ranks: list[int]) -> dict[str, Any]:
        def first(c: Counter[str]) -> str:
            return c.most_common(1)[0][0]

        out: dict[str, Any] = {
            "versions": {k: first(c) for k, c in sorted(self.versions.items())},
            "world_size": self.world_size,
            "hosts": hosts,
            "ranks": ranks,
            "env": {k: first(c) for k, c in sorted(self.env.items())},
            "job_id": first(self.job_ids) if self.job_ids else None,
            "timeout_ms": self.timeouts_ms.most_common(1)[0][0] if self.timeouts_ms else None,
            "rank_hosts": {str(r): h for r, h in sorted(self.rank_hosts.items())},
            "rank_gpus": {str(r): g for r, g in sorted(self.rank_gpus.items())},
        }
        conflicts = {k: sorted(c) for k, c in self.versions.items() if len(c) > 1}
        if conflicts:
            out["version_conflicts"] = conflicts
        return out

    def lookup(self, name: str) -> str | None:
        """A fact by dotted name, for signature conditions: versions.nccl, env.NCCL_P2P_DISABLE, world_size."""
        if name.startswith("versions."):
            c = self.versions.get(name.split(".", 1)[1])
            return c.most_common(1)[0][0] if c else None
        if name.startswith("env."):
            c = self.env.get(name.split(".", 1)[1])
            return c.most_common(1)[0][0] if c else None
        if name == "world_size":
            return str(self.world_size) if self.world_size else None
        if name == "job_id":
            return self.job_ids.most_common(1)[0][0] if self.job_ids else None
        if name == "timeout_ms":
            return str(self.timeouts_ms.most_common(1)[0][0]) if self.timeouts_ms else None
        return None


def apply_clue(facts: Facts, fp: FactPattern, text: str, source: str, line: int, order: int,
               context: LineContext) -> None:
    m = fp.regex.search(text[:4096])  # every template sits near the start of its line
    if not m:
        return
    facts.hits[fp.name] += 1
    values = {k: v for k, v in m.groupdict().items() if v is not None}
    facts.clues.append(Clue(fp.name.split(":", 1)[1], values, source, line, order, context))


def apply_fact(facts: Facts, fp: FactPattern, text: str) -> None:
    if facts.hits[fp.name] >= MAX_FACT_HITS:
        return
    m = fp.regex.search(text)
    if not m:
        return
    facts.hits[fp.name] += 1
    g = m.groupdict()
    if fp.name.endswith("_version"):
        kind = fp.name[: -len("_version")]
        facts.add_version(kind, g["v"])
        if g.get("cuda"):
            facts.add_version("cuda", g["cuda"])
    elif fp.name == "pg_options":
        facts.world_sizes[int(g["size"])] += 1
        if g.get("timeout"):
            facts.timeouts_ms[int(g["timeout"])] += 1
    elif fp.name == "world_size":
        facts.world_sizes[int(g["v"])] += 1
    elif fp.name == "nccl_rank":
        head = _NCCL_HEADER.search(text, 0, max(0, m.start()))
        if head:
            g.update(host=head.group("host"), pid=head.group("pid"))
        facts.world_sizes[int(g["n"])] += 1
        if g.get("host") and int(g["n"]) > 1:
            facts.rank_hosts_by_size.setdefault(int(g["n"]), {}).setdefault(int(g["rank"]), g["host"])
        if g.get("cdev") is not None:
            facts.rank_gpus_by_size.setdefault(int(g["n"]), {}).setdefault(int(g["rank"]), int(g["cdev"]))
        if g.get("local") is not None:
            facts.rank_local_by_size.setdefault(int(g["n"]), {}).setdefault(int(g["rank"]), int(g["local"]))
        if g.get("pid"):
            facts.rank_pids_by_size.setdefault(int(g["n"]), {}).setdefault(int(g["rank"]), int(g["pid"]))
    elif fp.name == "nccl_tests_rank":
        facts.rank_hosts_by_size.setdefault(0, {}).setdefault(int(g["rank"]), g["host"])
    elif fp.name == "env":
        if _ADVICE.search(text):
            return
        for em in fp.regex.finditer(text):  # c10d prints every setting on one line
            facts.env.setdefault(em.group("k"), Counter())[em.group("v")] += 1
    elif fp.name == "timeout_ms":
        facts.timeouts_ms[int(g["v"])] += 1
    elif fp.name == "job_id":
        facts.job_ids[g["v"]] += 1
