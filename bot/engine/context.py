"""Recover host, pid, rank, local rank, GPU and time from the prefixes launchers put on lines.

Prefixes nest (`0: [rank0]:[E626 05:06:30.929 ProcessGroupNCCL.cpp:632] [Rank 0] ...`), so they are
peeled from the left one at a time; markers that live inside the message (`[Rank 3]`, the NCCL
`host:pid:tid [dev]` header, Ray's `pid=, ip=`) are searched anywhere.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import PurePath

from .model import NO_YEAR, LineContext

HEAD = 1024  # characters of a line that prefixes and context markers are looked for in

_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}

# --- prefixes peeled from the left ------------------------------------------------------------
# systemd journal / syslog: "Jun 26 05:06:30 gpu-node-17 kernel: NVRM: Xid ..."
_SYSLOG = re.compile(
    r"(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"(?P<host>[\w.\-]+) (?P<proc>[\w.\-/@]+)(?:\[(?P<pid>\d+)\])?: "
)
# the same in a zh/ja locale: "11月 15 14:15:47 leon-NF5468M6 nv-fabricmanager[4177]: ..."
_SYSLOG_CJK = re.compile(
    r"(?P<mon>1[0-2]|0?[1-9])月 +(?P<day>\d{1,2})日? (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"(?P<host>[\w.\-]+) (?P<proc>[\w.\-/@]+)(?:\[(?P<pid>\d+)\])?: "
)
# a log level word where a syslog line has its host or program (tracing's "<time> ERROR shard-manager: ...")
_LEVEL = r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL|NOTICE|TRACE)\b"
# journalctl -o short-iso: "2024-06-26T05:06:30+0000 gpu-node-17 kernel: ..." (not Python logging's
# "%(asctime)s %(name)s %(levelname)s:", "2020-05-10 08:34:41,021 maskrcnn_benchmark INFO: ...": a logger, no host;
# nor Rust tracing's "2023-08-11T06:42:43.498333Z ERROR shard-manager: ...": a level and a span)
_ISO_SYSLOG = re.compile(
    r"(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) "
    rf"(?!{_LEVEL})(?P<host>[\w.\-]+) (?!{_LEVEL})(?P<proc>kernel|[\w.\-/@]+(?:\[\d+\])?): "
)
# a bare timestamp some launchers and log shippers put first: "2019-06-02T16:13:44.884Z: [1,12]<stdout>:...",
# "[2026-04-18 12:45:41] gpu002:704798:704908 [0] ..."; SGLang's processes add their parallel ranks inside the
# bracket: "[2025-02-21 22:59:28 TP0] ...", "[... DP1 TP3]", "[... TP2 PP1]", "[... TP5 EP5]"
_TS_PREFIX = re.compile(
    r"(?P<open>\[)?(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r"(?(open)(?P<par>(?: (?:DP|TP|PP|EP|CP)\d{1,5}){1,4})?\]):? "
)
# the TP rank is the process's global rank only with one data-parallel replica and one pipeline stage
_SGLANG_TP = re.compile(r"^ TP(?P<tp>\d+)(?!.* PP[1-9])")
# dmesg: "[12345.678901] NVRM: ..." and dmesg -T: "[Wed Jun 26 05:06:30 2024] NVRM: ..."
_DMESG = re.compile(r"\[\s*(?P<uptime>\d+\.\d+)\] ")
_DMESG_T = re.compile(
    r"\[(?:[A-Z][a-z]{2} )?(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d) (?P<year>\d{4})\] "
)
# srun -l / mpirun --tag-output style: "3: ..." or "[1,3]<stderr>:"
_SRUN = re.compile(r"(?P<rank>\d{1,5}): ")
# horovodrun tags "[3]<stderr>:", with --timestamp-output "Fri Sep 25 16:52:36 2020[3]<stderr>:"
_MPI_TAG = re.compile(
    r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4})?"
    r"\[(?:(?P<job>\d+),)?(?P<rank>\d+)\]<(?:stdout|stderr)>: ?"
)
# torchrun --tee / local_ranks_filter: "[rank3]:" ; "[default3]:" is role "default", local rank 3
# (and "[rank391] NCCL error: ..." where a paste or a program's own print drops the colon)
_TORCHRUN = re.compile(r"\[(?P<kind>rank|default)(?P<n>\d+)\](?:: ?| )")
# Lightning's rank_prefixed_message: "[rank: 1] Child process with PID 2977 terminated with code 4. ..."
_LIGHTNING = re.compile(r"\[rank: (?P<rank>\d+)\] ")
_IPV4 = r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4_RE = re.compile(_IPV4)
# a host name as launchers and key=value fields print it: dotted labels, one of them holding a digit
# (so that "RuntimeError" or "host=main" is never read as a host)
_HOSTNAME = r"(?=[\w.\-]*\d)[A-Za-z][\w\-]*(?:\.[\w\-]+)*"
# pdsh / DeepSpeed launcher: "gpu-node-17: ..." (or "192.168.13.81: ..." with an IP hostfile) (a host name must hold a digit, or be localhost,
# so that "RuntimeError: ..." is never read as a host)
# Kernel device names ("nvidia-nvswitch0: SXid ...", "nvidia0: ...", "mlx5_0: ...") take the same
# place and are never hosts.
# A module-qualified exception ("sqlite3.OperationalError: ...", "h5py.Error: ...") holds a digit
# and dots like a host name, and is never one either.
_HOST_PREFIX = re.compile(
    r"(?!(?:nvidia-nvswitch|nvswitch|nvidia|mlx\d|ib|eth|enp|ens|nvme|sd[a-z])\d*[\w\-]*: )"
    r"(?![\w.\-]*(?:Error|Exception|Warning|Exit|Interrupt): )"
    r"(?P<host>" + _HOSTNAME + r"|localhost|" + _IPV4 + r"): "
)
# Kubernetes CRI container logs (/var/log/pods, what log shippers forward):
# "2025-07-25T07:53:08.217488644+08:00 stdout F KeyError: 'labels'"
_CRI = re.compile(
    r"(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) (?:stdout|stderr) [FP] "
)
# docker compose up / logs: "vllm-1  | KeyError: 'labels'" (a service name, padding, "| "; nvidia-smi
# and markdown table rows start with "|" and are left alone)
_COMPOSE = re.compile(r"(?P<svc>[A-Za-z][\w.\-]*) +\| ")
# stream tags glued to each line by Azure ML and some launchers: "[stderr]ModuleNotFoundError: ..."
_STREAM_TAG = re.compile(r"\[(?:stderr|stdout)\] ?")
# docker build (BuildKit) output: each line of a RUN step behind the seconds since the step began, with the
# step number in plain progress mode: "#8 129.5 ModuleNotFoundError: ...", "129.5     ModuleNotFoundError: ..."
_BUILDKIT = re.compile(r"(?:#\d{1,4} )?\d{1,6}\.\d (?=\s*\S)")
# a log quoted in markdown: "> node201:127799:127863 [0] ... NCCL WARN ..."
_QUOTE = re.compile(r">+ ?")
# a log viewer's line-number gutter ("  12\tTraceback ...", "  12  RuntimeError: ..."): a number alone, then a tab
# or two spaces and text that is not another number (nccl-tests' result rows are columns of numbers)
_GUTTER = re.compile(r"\s{0,6}\d{1,6}(?:\t| {2,}(?=[^\d\s]))")
# Docker's json-file and log shippers write each line as a JSON object: {"log":"...\n","stream":"stderr",...}
_JSON_LINE = re.compile(r'\{.{0,200}?"(?:log|message|msg|MESSAGE)"\s*:\s*"')
# Open MPI's own messages: "[note8:86717] *** Process received signal ***"; UCX's signal handler:
# "[worker-0:2121 :0:7025] Caught signal 7 (Bus error: nonexistent physical address)"
# A container's host name is its id ("[09677202c889:5283 :0:5704]"): a host may start with a digit
# when it holds a letter.
_OMPI = re.compile(r"\[(?P<host>(?=[\w.\-]*[A-Za-z])[\w.\-]+):(?P<pid>\d+)(?: *:\d+:\d+)?\] ")
# Ray: "(RayWorkerWrapper pid=1234, ip=10.0.0.1) ..." or "(pid=1234) ..."
# vLLM's workers: "(VllmWorker rank=3 pid=1090) ...", "(VllmWorker TP1 pid=77) ...", "(Worker_TP1 pid=77) ..."
# SkyPilot's tasks (on Ray): "(task, pid=13917) ...", "(worker1, rank=1, pid=2563, ip=10.128.0.3) ..."
_RAY = re.compile(
    r"\((?:[\w.]*?(?:_TP(?P<tp>\d+))?[\w.]*,? )?(?:(?:rank=|TP)(?P<rank>\d+),? )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\d.]+))?\) "
)

# --- markers found anywhere ---------------------------------------------------------------------
# NCCL's header, as debug.cc prints it: "host:pid:tid [dev] NCCL INFO", WARN with the source
# location ("[4] ib_plugin.c:1615 NCCL WARN", NCCL 2.0-2.3 "include/socket.h 398 NCCL WARN"),
# TRACE with a time ("[0] 12.345 misc.cc:20 NCCL TRACE"). A redacted host ("<hostname>", "xxx")
# still gives pid and device; a header with no host at all ("[3] include/shm.h:28 NCCL WARN") the device.
# The location is any token: issue trackers turn "net_ib.cc:101" into "[net_ib.cc:101](http://...)".
# NCCL 2.2 and older print no "NCCL" word: "host:pid:tid [0] include/socket.h:360 WARN Call to connect failed".
_NCCL_SRC = r"(?:\d+\.\d+ )?(?:\S{1,200}?(?: \d+)? )?(?:\(\w{1,64}\) )?"
_NCCL_WORD = r"(?:NCCL |(?=(?:WARN|INFO|TRACE) ))"
_NCCL = re.compile(
    r"(?P<host>[\w.\-]+|<[^<>\s]{1,64}>|\*+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] " + _NCCL_SRC + _NCCL_WORD
)
_NCCL_NO_HOST = re.compile(
    r"(?:^|\s)(?:(?P<host>(?=[\w.\-]*\d)[A-Za-z][\w.\-]{0,127}) )?\[(?P<dev>\d+)\] " + _NCCL_SRC + r"NCCL (?:WARN|INFO|TRACE)"
)
# placeholders people put where a host name was: "<cluster_name>", "xxx", "hostname"
_PLACEHOLDER_HOST = re.compile(r"<.*>|\*+|x{3,}|X{3,}|hostname|host|node|localhost\.localdomain|your[-_]?host\w*", re.I)
# "[Rank 3]", "[PG ID 0 PG GUID 0(default_pg) Rank 3]"; c10d's uniqueId exchange: "[1] is setting up NCCL communicator"
# c10d's reducer checks: "RuntimeError: [2]: params[4] in this process ..."
_RANK_BRACKET = re.compile(
    r"\[(?:PG[^\]]*?)?Rank (?P<rank>\d+)\]|\[(?P<rank2>\d+)\] is setting up NCCL communicator"
    r"|\w(?:Error|Exception): \[(?P<rank3>\d+)\]: "
    # TensorRT-LLM's logger on a multi-rank run: "[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] ..."
    r"|\[TRT-LLM\] ?\[RANK (?P<rank4>\d+)\]"
)
# glog and c10 logging: "E0626 05:06:30.929" (glog) or "[E626 05:06:30.929096625 File.cpp:632]" (c10)
_GLOG = re.compile(r"(?<![\w.])[IWEF](?P<mm>1[0-2]|0?[1-9])(?P<dd>[0-3]\d) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?)\b")
_ISO = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[T _](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?"
)
# Ray's memory monitor and raylet name the node by address: "Memory on the node (IP: 10.0.0.5, ID: ...)",
# "... killed due to memory pressure (OOM), ... at node (ID: 4f..., IP: 10.0.167.26)"
_RAY_NODE = re.compile(r"\bnode \((?:ID: \w+, )?IP: (?P<ip>\d{1,3}(?:\.\d{1,3}){3})")
# PyTorch's OOM names the device: "(GPU 0; 14.58 GiB total capacity; ...)" (<= 2.0), "GPU 1 has a total
# capacity of 22.20 GiB" (2.1+, "capacty" in 2.1)
_TORCH_OOM_GPU = re.compile(r"\bGPU (?P<gpu>\d+)(?:; [\d.]+ [KMGT]iB total capacity| has a total capac)")
# rdma-core's mlx5 provider names the host: "mlx5: gpu-node-3: got completion with error:"
_LIBMLX5 = re.compile(r"\bmlx5: (?P<ip>[\w.\-]+): got completion with error")
# key=value fields that name the machine: CNTK's "CUBLAS failure 13: ... ; GPU=1 ; hostname=rg404.bbn.com ;",
# logfmt's "host=gpu-node-7"
_HOST_FIELD = re.compile(r"\bhost(?:name)?=(?P<host>" + _HOSTNAME + r")(?![\w.\-])")
# slurmstepd's kill notice names the node: "*** JOB 6398 ON node12 CANCELLED AT 2024-... ***"; Slurm 14 and older
# put it last: "*** JOB 6398 CANCELLED AT 2015-09-04T16:40:47 *** on a1a-u2-c10-b1"
_SLURM_JOB = re.compile(
    r"\*\*\* (?:JOB|STEP) (?P<job>\d+)(?:\.\w+)? (?:ON (?P<host>[\w.\-]+) "
    r"|(?=[A-Z][A-Z ]{1,40} AT \S+(?: DUE TO [A-Z ]{1,40})? \*\*\* on (?P<host2>[\w.\-]+)))"
)

_NAME_RANK = re.compile(r"(?:^|[^a-z])(?:rank|proc|worker|process)[-_.]?(?P<rank>\d{1,5})(?:\D|$)", re.I)
_NAME_HOST = re.compile(r"^(?P<host>(?=[\w\-]*\d)[A-Za-z][\w\-]*?)(?:[._-](?:out|err|log|stdout|stderr))*$")
_NAME_JOB = re.compile(r"(?:slurm|job)[-_](?P<job>\d+)(?:[_.](?P<task>\d+))?", re.I)


def _time(date: tuple[int, int, int], clock: str, frac: str | None = None) -> datetime | None:
    try:
        h, m, s = (int(x) for x in clock.split(":"))
        micro = int((frac or "0")[:6].ljust(6, "0"))
        return datetime(date[0], date[1], date[2], h, m, s, micro)
    except ValueError:
        return None


def _json_log_text(line: str) -> str | None:
    """The message a JSON log line carries ({"log": "...\\n", ...}), on one line; None if it is no such object."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    text = next((obj[k] for k in ("log", "message", "msg", "MESSAGE") if isinstance(obj.get(k), str)), None)
    return None if text is None else text.rstrip("\r\n").replace("\n", " ")


def _peel(body: str, ctx: LineContext) -> str:
    """Remove the launcher prefixes at the start of `body`, recording what they tell."""
    for _ in range(6):  # prefixes nest a few deep at most
        m = _SYSLOG.match(body)
        if m and m.group("mon").lower() in _MONTHS:
            ctx.host = ctx.host or m.group("host")
            ctx.timestamp = ctx.timestamp or _time(
                (NO_YEAR, _MONTHS[m.group("mon").lower()], int(m.group("day"))), m.group("time")
            )
            body = body[m.end():]
            continue
        m = _SYSLOG_CJK.match(body)
        if m:
            ctx.host = ctx.host or m.group("host")
            ctx.timestamp = ctx.timestamp or _time((NO_YEAR, int(m.group("mon")), int(m.group("day"))), m.group("time"))
            body = body[m.end():]
            continue
        # journal short-iso and CRI lines, or a bare ISO timestamp: one place reads the ISO time
        m = _ISO_SYSLOG.match(body) or _CRI.match(body) or _TS_PREFIX.match(body)
        if m:
            if "host" in m.groupdict():
                ctx.host = ctx.host or m.group("host")
            tp = _SGLANG_TP.match(m.group("par") or "") if "par" in m.groupdict() else None
            if tp and ctx.rank is None:
                ctx.rank = int(tp.group("tp"))
            iso = _ISO.match(m.group("iso"))
            if iso and ctx.timestamp is None:
                y, mo, d = (int(x) for x in iso.group("date").split("-"))
                ctx.timestamp = _time((y, mo, d), iso.group("time"), iso.group("frac"))
            body = body[m.end():]
            continue
        m = _DMESG.match(body)
        if m:
            ctx.uptime = float(m.group("uptime"))
            body = body[m.end():]
            continue
        m = _DMESG_T.match(body)
        if m and m.group("mon").lower() in _MONTHS:
            ctx.timestamp = ctx.timestamp or _time(
                (int(m.group("year")), _MONTHS[m.group("mon").lower()], int(m.group("day"))), m.group("time")
            )
            body = body[m.end():]
            continue
        m = _MPI_TAG.match(body)
        if m:
            ctx.rank = int(m.group("rank")) if ctx.rank is None else ctx.rank
            body = body[m.end():]
            continue
        m = _TORCHRUN.match(body)
        if m:
            if m.group("kind") == "rank":
                ctx.rank = int(m.group("n"))
            else:
                ctx.local_rank = int(m.group("n"))
            body = body[m.end():]
            continue
        m = _LIGHTNING.match(body)
        if m:
            ctx.rank = int(m.group("rank")) if ctx.rank is None else ctx.rank
            body = body[m.end():]
            continue
        m = _SRUN.match(body)
        if m:
            if ctx.rank is None:
                ctx.rank = int(m.group("rank"))
            body = body[m.end():]
            continue
        m = _COMPOSE.match(body)
        if m:
            body = body[m.end():]
            continue
        m = _STREAM_TAG.match(body)
        if m:
            body = body[m.end():]
            continue
        m = _BUILDKIT.match(body)
        if m:
            body = body[m.end():].lstrip()
            continue
        m = _QUOTE.match(body)
        if m:
            body = body[m.end():]
            continue
        if body.startswith("{") and _JSON_LINE.match(body):
            text = _json_log_text(body)
            if text is not None:
                body = text
                continue
        m = _GUTTER.match(body)
        if m:
            body = body[m.end():]
            continue
        if body.startswith("**") and len(body) > 4 and body.rstrip().endswith("**"):
            # the line a reporter bolded in a GitHub issue: "**RuntimeError: Connection reset by peer**"
            body = body.rstrip()[2:-2]
            continue
        m = _OMPI.match(body)
        if m:
            ctx.host = ctx.host or m.group("host")
            ctx.pid = ctx.pid or int(m.group("pid"))
            body = body[m.end():]
            continue
        m = _RAY.match(body)
        if m:
            ctx.pid = int(m.group("pid"))
            ctx.host = ctx.host or m.group("ip")
            rank = m.group("rank") or m.group("tp")
            if rank is not None and ctx.rank is None:
                ctx.rank = int(rank)
            body = body[m.end():]
            continue
        m = _HOST_PREFIX.match(body)
        if m and not _NCCL.match(body):
            # slurmstepd logs as "slurmstepd-<node>: error: ..."
            ctx.host = ctx.host or m.group("host").removeprefix("slurmstepd-")
            body = body[m.end():]
            continue
        break
    return body


WRAP_MIN = 78  # a terminal narrower than this is rare; shorter lines ended where their writer ended them
_ENDS_RECORD = tuple(".!?;:)]}>\"'")


def continues(prev: str, line: str, line_ctx: LineContext | None = None) -> bool:
    """`line` is the rest of `prev`, which a terminal or a log viewer hard-wrapped: `prev` is long
    and stops mid-word ("... exception: CUDA erro" + "r: unspecified launch failure") or after a
    trailing space ("... last enqueued " + "NCCL work: 2082, ..."), and `line` carries no prefix."""
    prev = prev.rstrip("\r\n")
    if len(prev) < WRAP_MIN or not line or prev.endswith(_ENDS_RECORD) or line[0] in " \t[(<>|#*-":
        return False
    # cut inside a word ("erro" + "r: ..."), or after a space no writer leaves at a line's end
    if not (prev[-1].isalnum() and line[0].islower() or prev[-1] == " " and line[0].isalnum()):
        return False
    ctx = line_ctx if line_ctx is not None else parse_line(line)
    return ctx.rank is None and ctx.host is None and ctx.timestamp is None and ctx.body == line


def parse_line(line: str) -> LineContext:
    """Everything the line itself tells (not its source's name)."""
    ctx = LineContext()
    body = _peel(line[:HEAD].lstrip(), ctx)
    # markers sit near the start; searching a bounded head keeps 10 MB lines linear
    head = body[:HEAD]
    body = body + line[HEAD:] if len(line) > HEAD else body
    m = _NCCL.search(head)
    if m:
        host = m.group("host")
        if not _PLACEHOLDER_HOST.fullmatch(host) and (ctx.host is None or _IPV4_RE.fullmatch(ctx.host)):
            ctx.host = host  # NCCL's own header names the machine; a launcher's IP prefix is the same one
        ctx.pid = ctx.pid or int(m.group("pid"))
        ctx.gpu = int(m.group("dev"))
    else:
        m = _NCCL_NO_HOST.search(head)
        if m:
            ctx.gpu = int(m.group("dev"))
            if m.group("host") and not _PLACEHOLDER_HOST.fullmatch(m.group("host")):
                ctx.host = ctx.host or m.group("host")
    m = _RANK_BRACKET.search(head)
    if m and ctx.rank is None:
        ctx.rank = int(m.group("rank") or m.group("rank2") or m.group("rank3") or m.group("rank4"))
    if ctx.timestamp is None:
        m = _ISO.search(head, 0, 160)
        if m:
            try:
                y, mo, d = (int(x) for x in m.group("date").split("-"))
                ctx.timestamp = _time((y, mo, d), m.group("time"), m.group("frac"))
            except ValueError:
                pass
    if ctx.timestamp is None:
        m = _GLOG.search(head, 0, 200)
        if m:
            parts = m.group("time").split(".")
            ctx.timestamp = _time((NO_YEAR, int(m.group("mm")), int(m.group("dd"))), parts[0],
                                  parts[1] if len(parts) > 1 else None)
    if ctx.gpu is None:
        m = _TORCH_OOM_GPU.search(head)
        if m:
            ctx.gpu = int(m.group("gpu"))
    if ctx.host is None:
        m = _HOST_FIELD.search(head)
        if m and not _PLACEHOLDER_HOST.fullmatch(m.group("host")):
            ctx.host = m.group("host")
    if ctx.host is None:
        # a kernel log line quoted by a monitor or alert after its own words ("Xid errors on instance: h1,
        # Error: May 19 07:08:57 h1 kernel: [680111.6] NVRM: Xid ...")
        m = _SYSLOG_KERNEL.search(head, 0, 240)
        if m and m.group("mon").lower() in _MONTHS and not _PLACEHOLDER_HOST.fullmatch(m.group("host")):
            ctx.host = m.group("host")
    if ctx.host is None:
        m = _NCCL_TESTS.match(head)
        host = m and (m.group("host") or m.group("host2"))
        if m and host and not _PLACEHOLDER_HOST.fullmatch(host):
            ctx.host = host
            ctx.pid = ctx.pid or (int(m.group("pid")) if m.group("pid") else None)
    if ctx.host is None:
        m = _RAY_NODE.search(head) or _LIBMLX5.search(head)
        if m and m.group("ip") != "host_unknown":
            ctx.host = m.group("ip")
    m = _SLURM_JOB.search(head)
    if m:
        ctx.job_id = m.group("job")
        ctx.host = ctx.host or m.group("host") or m.group("host2")
    ctx.body = body
    return ctx


_SYSLOG_KERNEL = re.compile(r"\b(?P<mon>[A-Z][a-z]{2}) +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)? (?P<host>[\w.\-]+) kernel: ")
# nccl-tests (src/common.h CUDACHECK / NCCLCHECK, common.cu) print the host name before their failures, with no
# digit needed: "gpu: Test CUDA failure common.cu:1030 'system not yet initialized'", "node-a: Test NCCL failure
# all_reduce.cu:44 'unhandled cuda error ...'", " .. gpu pid 3018: Test failure common.cu:937"
_NCCL_TESTS = re.compile(
    r"(?:(?P<host>[A-Za-z][\w.\-]*): Test (?:CUDA|NCCL) failure |\.\. (?P<host2>[A-Za-z][\w.\-]*) pid (?P<pid>\d+): "
    r"Test failure )"
)


_NOT_HOSTS = re.compile(
    r"(?:log|logs|out|err|output|stdout|stderr|rank|case|run|test|job|slurm|trace|debug|train|worker|"
    r"part|file|gpu|step|attempt|v|r)\d*",
    re.I,
)


# Slurm's output files named "%x-%j.out" / "%x_%j.err" (job name, job id; "%A_%a" for array tasks):
# "train-llm-1234.out" holds a job, not a host
_SLURM_OUTPUT = re.compile(r"^[A-Za-z][\w.\-]*?[-_](?P<job>\d{4,})(?:_\d+)?\.(?:out|err)$")


# what a log is, written next to the host in a file name: dmesg-gpu-node-02.txt, gpu-node-02.kern.log
_LOG_KIND = re.compile(
    r"(?:^|[-_.])(?:dmesg|kern|kernel|journal|journalctl|syslog|messages|nvidia-smi|smi|sacct|slurmd|"
    r"slurmctld|fabricmanager|nvidia-bug-report|stdout|stderr)(?=$|[-_.])",
    re.I,
)


def parse_source_name(name: str) -> LineContext:
    """What a file name tells: `rank-3.log`, `node17.err`, `slurm-1234.out`, `gpu-node-01/rank3.txt`.

    `name` is relative to what the user gave: a file's own name, or the path inside a directory
    argument (so `incident-42/` itself is never mistaken for a host).
    """
    ctx = LineContext()
    path = PurePath(name)
    parts = [path.name] + [p for p in reversed(path.parts[:-1])][:2]
    for part in parts:
        stem = _LOG_KIND.sub("", part).strip("-_.")
        stem = stem.split(".")[0] if "." in stem else stem
        m = _NAME_JOB.search(part)
        if m and ctx.job_id is None:
            ctx.job_id = m.group("job")
            continue
        m = _NAME_RANK.search(part)
        if m and ctx.rank is None:
            ctx.rank = int(m.group("rank"))
            continue
        m = _SLURM_OUTPUT.match(part)
        if m and ctx.job_id is None:  # "%x-%j.out": the job's name and id, no host
            ctx.job_id = m.group("job")
            continue
        m = _NAME_HOST.match(stem)
        # "t1.log", "a2.txt" are scratch names, not hosts
        if m and ctx.host is None and len(m.group("host")) >= 3 and not _NOT_HOSTS.fullmatch(m.group("host")):
            ctx.host = m.group("host")
    return ctx
