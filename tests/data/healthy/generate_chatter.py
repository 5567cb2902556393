"""Write the start-up-chatter logs of the healthy corpus (see SOURCES.md for where each line comes from).

    python tests/data/healthy/generate_chatter.py     # rewrites the *-chatter-*.log files, byte for byte

Every line is a template copied from the code that prints it (NCCL, PyTorch c10d, DeepSpeed, vLLM),
filled the way a healthy run of that shape fills it: one line per rank where the library prints one
per rank, rank 0 only where it guards with `rank == 0`. Seeded, so a rerun gives the same files.
The tests read the .log files only; this script is how they were made, kept so they can be checked.
"""

from __future__ import annotations

import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUS = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]  # HGX H100 GPU bus ids
AFFINITY = ["ffffffff,00000000,ffffffff", "ffffffff,00000000,ffffffff", "ffffffff,00000000,ffffffff",
            "ffffffff,00000000,ffffffff", "ffffffff,00000000,ffffffff,00000000", "ffffffff,00000000,ffffffff,00000000",
            "ffffffff,00000000,ffffffff,00000000", "ffffffff,00000000,ffffffff,00000000"]


class Clock:
    """Wall time that moves forward a little per line (ms), for the timestamps."""

    def __init__(self, rnd: random.Random, h: int, m: int, s: float) -> None:
        self.rnd, self.t = rnd, h * 3600 + m * 60 + s

    def tick(self, ms: float = 3.0) -> float:
        self.t += self.rnd.uniform(0.2, 1.0) * ms / 1000
        return self.t

    def hms(self) -> str:
        t = self.t
        return f"{int(t // 3600) % 24:02d}:{int(t // 60) % 60:02d}:{t % 60:09.6f}"

    def glog(self, level: str, month_day: str = "1126") -> str:
        # c10 logging: "[I1126 02:00:21.123456789 "; nanoseconds from torch 2.4
        t = self.t
        ns = int((t % 1) * 1e9)
        return f"{level}{month_day} {int(t // 3600) % 24:02d}:{int(t // 60) % 60:02d}:{int(t % 60):02d}.{ns:09d}"

    def pylog(self, level: str) -> str:
        # torch.distributed's Python logging: "W1126 03:12:04.123000 " (microseconds)
        return self.glog(level)[:-3]

    def py(self) -> str:  # "2025-11-26 02:00:21,123"
        t = self.t
        return f"2025-11-26 {int(t // 3600) % 24:02d}:{int(t // 60) % 60:02d}:{int(t % 60):02d},{int((t % 1) * 1000):03d}"


def _ring(nranks: int, nrings: int, prefix: str) -> list[str]:
    # NCCL src/graph/rings.cc dumpLine: a 128-byte line, " %*d" per rank; rank 0 prints it
    width = len(str(nranks - 1))
    out = []
    for r in range(nrings):
        line = f"Channel {r:02d}/{nrings:02d} :"
        for v in range(nranks):
            line += f" {v:>{width}}"
        if len(line) >= 127:
            line = line[:124] + "..."
        out.append(prefix + line)
    return out


def nccl_init(nranks: int, per_node: int, hosts: list[str], pids: list[int], version: str, nchannels: int,
              rnd: random.Random, comm_ids: dict[int, str], net: str = "IB", split_of: str | None = None,
              members: list[int] | None = None, color: int = 0) -> dict[int, list[str]]:
    """One communicator's NCCL_DEBUG=INFO init, per global rank (lines without the launcher prefix)."""
    members = members or list(range(nranks))
    n = len(members)
    major, minor = (int(x) for x in version.split(".")[:2])
    new = minor >= 23  # "%s comm %p" with the function name, "Init timings", "Could not find:"
    commid = f"{rnd.getrandbits(63):x}"
    nnodes = len({m // per_node for m in members})
    out: dict[int, list[str]] = {}
    for idx, g in enumerate(members):
        host, pid, dev = hosts[g // per_node], pids[g], g % per_node
        head = f"{host}:{pid}:{pid} [{dev}] NCCL INFO "
        comm = comm_ids.setdefault(g * 1000 + color + (7 if split_of else 0), f"0x{rnd.getrandbits(44) | (0x55 << 40):x}")
        parent = comm_ids.get(g * 1000)  # a split names its parent: this rank's world communicator
        lines: list[str] = []
        if split_of is None:
            lines += [head + "cudaDriverVersion 12040",
                      head + "NCCL_SOCKET_IFNAME set by environment to ib0" if net == "IB" else head + "NCCL_SOCKET_IFNAME set by environment to eth0",
                      head + (f"Bootstrap : Using ib0:10.10.{g // per_node}.{11 + g // per_node}<0>" if net == "IB"
                              else f"Bootstrap : Using eth0:172.16.{g // per_node}.{21 + g // per_node}<0>")]
            if g == 0:
                lines.append(head + f"NCCL version {version}+cuda12.4")
            if new:
                lines.append(head + "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
            else:
                lines += [head + "NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: "
                                 "No such file or directory : when loading libnccl-net.so",
                          head + "NET/Plugin: Using internal network plugin."]
            if net == "IB":
                lines += [head + "NCCL_IB_HCA set to mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
                          head + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [4]mlx5_4:1/IB "
                                 f"[5]mlx5_5:1/IB [6]mlx5_6:1/IB [7]mlx5_7:1/IB [RO]; OOB ib0:10.10.{g // per_node}.{11 + g // per_node}<0>"]
            else:
                lines += [head + "NET/IB : No device found.",
                          head + f"NET/Socket : Using [0]eth0:172.16.{g // per_node}.{21 + g // per_node}<0>"]
            lines += [head + "Using non-device net plugin version 0", head + f"Using network {net if net == 'IB' else 'Socket'}"]
            fn = "ncclCommInitRank " if new else ("ncclCommInitRank " if minor >= 19 else "")
            lines.append(head + f"{fn}comm {comm} rank {idx} nranks {n} cudaDev {dev} nvmlDev {dev} busId {BUS[dev]} "
                                f"commId 0x{commid} - Init START")
        else:
            lines.append(head + f"ncclCommSplit comm {comm} rank {idx} nranks {n} cudaDev {dev} nvmlDev {dev} busId {BUS[dev]} "
                                f"parent {parent} color {color} key {idx}- Init START" if new else
                         head + f"ncclCommSplit comm {comm} rank {idx} nranks {n} cudaDev {dev} nvmlDev {dev} busId {BUS[dev]} "
                                f"parent {parent} color {color} key {idx} commId 0x{commid} - Init START")
            lines.append(head + f"bootstrapSplit: comm {comm} parent {parent} rank {idx} nranks {n} color {color} key {idx} "
                                f"prev {members[(idx - 1) % n] % n} next {members[(idx + 1) % n] % n} - DONE")
        lines.append(head + f"Setting affinity for GPU {dev} to {AFFINITY[dev]}")
        if new:
            lines.append(head + "CC Off, Multi-GPU CC Off, workFifoBytes 1048576")
        nvls = net == "IB" and per_node == 8
        if nvls:
            lines.append(head + f"NVLS multicast support is available on dev {dev}")
        if minor >= 19:
            lines.append(head + f"comm {comm} rank {idx} nRanks {n} nNodes {nnodes} localRanks {min(per_node, n)} "
                                f"localRank {dev} MNNVL 0")
        if nvls and nnodes > 1 and g // per_node == members[0] // per_node:
            for hd in range(per_node):
                lines.append(head + "NVLS Head " + f"{hd:2d}:" + "".join(f" {hd + k * per_node:2d}" for k in range(nnodes)))
        if idx == 0:
            lines += _ring(n, nchannels, head)
        down = idx + 1 if idx + 1 < n else -1
        lines.append(head + "Trees" + "".join(f" [{c}] {down}/-1/-1->{idx}->{idx - 1 if idx else -1}" for c in range(nchannels)))
        lines.append(head + "P2P Chunksize set to 524288" if nnodes > 1 else head + "P2P Chunksize set to 131072")
        nxt, prv = (idx + 1) % n, (idx - 1) % n
        for c in range(nchannels):
            a, b = members[idx], members[nxt]
            if a // per_node == b // per_node:
                lines.append(head + f"Channel {c:02d}/0 : {idx}[{dev}] -> {nxt}[{b % per_node}] via P2P/CUMEM/read")
            else:
                lines.append(head + f"Channel {c:02d}/0 : {idx}[{dev}] -> {nxt}[{b % per_node}] [send] via NET/{net if net == 'IB' else 'Socket'}/{c % 8}"
                                    + ("/GDRDMA" if net == "IB" else ""))
            pa = members[prv]
            if pa // per_node != a // per_node:
                lines.append(head + f"Channel {c:02d}/0 : {prv}[{pa % per_node}] -> {idx}[{dev}] [receive] via NET/{net if net == 'IB' else 'Socket'}/{c % 8}"
                                    + ("/GDRDMA" if net == "IB" else ""))
        lines.append(head + "Connected all rings")
        for c in range(nchannels):
            if idx + 1 < n and members[idx + 1] // per_node == members[idx] // per_node:
                lines.append(head + f"Channel {c:02d}/0 : {idx}[{dev}] -> {idx + 1}[{members[idx + 1] % per_node}] via P2P/CUMEM/read")
        if minor >= 23:
            lines.append(head + "Connected all trees")
        else:
            lines.append(head + "Connected all trees")
        if nvls and split_of is None:
            lines.append(head + f"NVLS comm {comm} headRank {dev} nHeads {per_node} buffSize 1048576 memSize 2097152 "
                                f"nvlsPerRankSize 201326592 nvlsTotalSize 1610612736")
            lines.append(head + "Connected NVLS")
        lines.append(head + "threadThresholds 8/8/64 | 512/8/64 | 512 | 512" if nnodes > 1 or n > per_node else
                     head + f"threadThresholds 8/8/64 | {8 * n}/8/64 | 512 | 512")
        lines.append(head + f"{nchannels} coll channels, {nchannels} collnet channels, {16 if nvls else 0} nvls channels, "
                            f"{nchannels} p2p channels, {max(1, nchannels // 2)} p2p channels per peer")
        if split_of is None:
            lines.append(head + ("TUNER/Plugin: Could not find: libnccl-tuner.so libnccl-net.so. Using internal tuner plugin." if new
                                 else "TUNER/Plugin: Plugin load returned 2 : libnccl-tuner.so: cannot open shared object file: "
                                      "No such file or directory : when loading libnccl-tuner.so"))
            if not new:
                lines.append(head + "TUNER/Plugin: Using internal tuner plugin.")
        fn = "ncclCommSplit" if split_of else "ncclCommInitRank"
        if split_of:
            end = f"{fn} comm {comm} rank {idx} nranks {n} cudaDev {dev} nvmlDev {dev} busId {BUS[dev]} parent {parent} color {color} key {idx} - Init COMPLETE"
        elif minor >= 19:
            end = f"{fn} comm {comm} rank {idx} nranks {n} cudaDev {dev} nvmlDev {dev} busId {BUS[dev]} commId 0x{commid} - Init COMPLETE"
        else:
            end = f"comm {comm} rank {idx} nranks {n} cudaDev {dev} nvmlDev {dev} busId {BUS[dev]} commId 0x{commid} - Init COMPLETE"
        lines.append(head + end)
        if new:
            tot = rnd.uniform(0.6, 2.4)
            lines.append(head + f"Init timings - {fn}: rank {idx} nranks {n} total {tot:.2f} (kernels {tot * 0.12:.2f}, alloc "
                                f"{tot * 0.04:.2f}, bootstrap {tot * 0.45:.2f}, allgathers {tot * 0.02:.2f}, topo {tot * 0.2:.2f}, "
                                f"graphs {tot * 0.01:.2f}, connections {tot * 0.12:.2f}, rest {tot * 0.04:.2f})")
        out[g] = lines
    return out


def interleave(per_rank: dict[int, list[str]], rnd: random.Random) -> list[tuple[int, str]]:
    """Ranks print concurrently: merge their line streams in a plausible order."""
    queues = {r: list(ls) for r, ls in per_rank.items()}
    out: list[tuple[int, str]] = []
    while queues:
        r = rnd.choice(list(queues))
        take = rnd.randint(1, 4)
        q = queues[r]
        out += [(r, q.pop(0)) for _ in range(min(take, len(q)))]
        if not q:
            del queues[r]
    return out


def nccl_shutdown(members: list[int], hosts: list[str], pids: list[int], per_node: int, comms: dict[int, str],
                  abort: bool, nranks: int) -> dict[int, list[str]]:
    out = {}
    for idx, g in enumerate(members):
        dev = g % per_node
        head = f"{hosts[g // per_node]}:{pids[g]}:{pids[g] + 77} [{dev}] NCCL INFO "
        main = f"{hosts[g // per_node]}:{pids[g]}:{pids[g]} [{dev}] NCCL INFO "
        out[g] = [head + f"[Service thread] Connection closed by localRank {dev}",
                  main + f"comm {comms[g * 1000]} rank {idx} nranks {nranks} cudaDev {dev} busId {BUS[dev]} - "
                         f"{'Abort' if abort else 'Destroy'} COMPLETE"]
    return out


# --------------------------------------------------------------------------------------------------
# 1. 64 ranks on 8 HGX H100 nodes, NCCL 2.23.4 over IB, torchrun under `srun -l`, TP=8 sub-communicators


def torchrun_64() -> list[str]:
    rnd = random.Random(64)
    nodes = [f"gpu-node-{i:02d}" for i in range(1, 9)]
    pids = [213400 + 1000 * (r // 8) + 37 * (r % 8) for r in range(64)]
    clock = Clock(rnd, 3, 12, 4.0)
    out: list[str] = ["+ export NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=ib0 NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
                      "+ srun -l --ntasks-per-node=1 torchrun --nnodes=8 --nproc_per_node=8 --rdzv_id=7719204 "
                      "--rdzv_backend=c10d --rdzv_endpoint=gpu-node-01:29500 pretrain.py --tp 8 --config configs/llama-70b.yaml"]
    for n in range(8):
        clock.tick(40)
        ts = clock.pylog("W")
        out += [f"{n}: {ts} {213300 + 1000 * n} torch/distributed/run.py:793] ",
                f"{n}: {ts} {213300 + 1000 * n} torch/distributed/run.py:793] *****************************************",
                f"{n}: {ts} {213300 + 1000 * n} torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable "
                "for each process to be 1 in default, to avoid your system being overloaded, please further tune the "
                "variable for optimal performance in your application as needed. ",
                f"{n}: {ts} {213300 + 1000 * n} torch/distributed/run.py:793] *****************************************"]
    for n in range(8):
        clock.tick(200)
        out.append(f"{n}: {clock.pylog('I')} {213300 + 1000 * n} torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1131] "
                   f"The node '{nodes[n]}_{213300 + 1000 * n}_0' has joined round 0 of the c10d rendezvous '7719204' as rank {n} "
                   "in a world of size 8.")
    comms: dict[int, str] = {}
    world = nccl_init(64, 8, nodes, pids, "2.23.4", 32, rnd, comms)
    for r, line in interleave(world, rnd):
        clock.tick(1.5)
        out.append(f"{r // 8}: {line}")
    # tensor-parallel groups (one per node): ncclCommSplit of the world communicator
    for n in range(8):
        members = list(range(8 * n, 8 * n + 8))
        tp = nccl_init(64, 8, nodes, pids, "2.23.4", 24, rnd, comms, split_of="parent",
                       members=members, color=n)
        for r, line in interleave(tp, rnd):
            clock.tick(1.0)
            out.append(f"{r // 8}: {line}")
    # training: rank 0 logs, the others stay quiet (a common pretrain.py)
    for it in range(1, 2401):
        clock.tick(4100)
        loss = 11.0 * (0.9985 ** it) + 1.7 + rnd.uniform(-0.03, 0.03)
        out.append(f"0: [rank0]: iter {it:6d}/ 250000 | loss {loss:.4f} | lr {min(3e-4, 3e-4 * it / 2000):.3e} | "
                   f"grad_norm {rnd.uniform(0.6, 1.4):.3f} | tokens/s {rnd.randint(985000, 1012000)} | "
                   f"step_ms {rnd.uniform(4020, 4190):.1f} | mem_gb {rnd.uniform(61.2, 61.9):.1f}")
        if it % 500 == 0:
            out.append(f"0: [rank0]: saving checkpoint to /lustre/ckpt/llama-70b/iter_{it:07d} ... done in "
                       f"{rnd.uniform(38, 52):.1f}s")
    # clean exit: destroy_process_group aborts the communicators (torch >= 2.4), proxies close
    shut = nccl_shutdown(list(range(64)), nodes, pids, 8, comms, abort=True, nranks=64)
    for r, line in interleave(shut, rnd):
        clock.tick(2)
        out.append(f"{r // 8}: {line}")
    for n in range(8):
        clock.tick(300)
        out += [f"{n}: {clock.pylog('I')} {213300 + 1000 * n} torch/distributed/elastic/agent/server/api.py:879] [default] "
                "worker group successfully finished. Waiting 300 seconds for other agents to finish.",
                f"{n}: {clock.pylog('I')} {213300 + 1000 * n} torch/distributed/elastic/agent/server/api.py:932] "
                f"Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish",
                f"{n}: {clock.pylog('I')} {213300 + 1000 * n} torch/distributed/elastic/agent/server/api.py:946] "
                f"Done waiting for other agents. Elapsed: {rnd.uniform(0.5, 3.5):.10f} seconds"]
    return out


# --------------------------------------------------------------------------------------------------
# 2. TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_CPP_LOG_LEVEL=INFO, 16 ranks on 2 nodes, torch 2.5.1 DDP


def _pg_prefix(pg: int, rank: int, name: str | None) -> str:
    return f"[PG ID {pg} PG GUID {pg}{'(' + name + ')' if name else ''} Rank {rank}]"


def torch_detail_16() -> list[str]:
    rnd = random.Random(16)
    nodes = ["dgx-a100-017", "dgx-a100-018"]
    clock = Clock(rnd, 9, 41, 10.0)
    out = ["export TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_CPP_LOG_LEVEL=INFO NCCL_DEBUG=WARN",
           "torchrun --nnodes 2 --nproc-per-node 8 --node-rank $SLURM_NODEID --master-addr dgx-a100-017 "
           "--master-port 29400 --tee 3 train_ddp.py --epochs 3 --batch-size 64"]
    per_rank: dict[int, list[str]] = {}
    for r in range(16):
        n = r // 8
        p = f"[default{r % 8}]:[rank{r}]:"
        pg = _pg_prefix(0, r, None)
        pgn = _pg_prefix(0, r, "default_pg")
        lines = []
        if r == 0:
            lines += [p + "{I} socket.cpp:508] [c10d - debug] The server socket has started to listen on [::]:29400.",
                      p + "{I} TCPStore.cpp:295] [c10d - debug] The server has started on port = 29400.",
                      p + "{I} TCPStoreLibUvBackend.cpp:1119] [c10d - debug] Uv main loop running"]
        lines += [p + "{I} socket.cpp:720] [c10d - debug] The client socket will attempt to connect to an IPv6 address "
                      "of (dgx-a100-017, 29400).",
                  p + "{W} socket.cpp:697] [c10d] The client socket cannot be initialized to connect to "
                      "[dgx-a100-017]:29400 (errno: 97 - Address family not supported by protocol).",
                  p + "{I} socket.cpp:720] [c10d - debug] The client socket will attempt to connect to an IPv4 address "
                      "of (dgx-a100-017, 29400).",
                  p + f"{{I}} socket.cpp:891] [c10d] The client socket has connected to [dgx-a100-017]:29400 on "
                      f"[{nodes[n]}]:{40000 + 211 * r}.",
                  p + "{I} TCPStore.cpp:334] [c10d - debug] TCP client connected to host dgx-a100-017:29400",
                  p + f"{{I}} ProcessGroupNCCL.cpp:905] {pg} ProcessGroupNCCL initialization options: size: 16, global rank: {r}, "
                      "TIMEOUT(ms): 1800000, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0",
                  p + f"{{I}} ProcessGroupNCCL.cpp:914] {pg} ProcessGroupNCCL environments: NCCL version: 2.21.5, "
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING: 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 0, TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 60000, "
                      "TORCH_NCCL_DESYNC_DEBUG: 0, TORCH_NCCL_ENABLE_TIMING: 0, TORCH_NCCL_BLOCKING_WAIT: 0, "
                      "TORCH_DISTRIBUTED_DEBUG: DETAIL, TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK: 0, "
                      "TORCH_NCCL_ENABLE_MONITORING: 1, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, TORCH_NCCL_TRACE_BUFFER_SIZE: 0, "
                      "TORCH_NCCL_COORD_CHECK_MILSEC: 1000, TORCH_NCCL_NAN_CHECK: 0, TORCH_NCCL_CUDA_EVENT_CACHE: 0, "
                      "TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN: 1",
                  p + f"{{I}} ProcessGroupNCCL.cpp:2262] {pgn} ProcessGroupNCCL broadcast unique ID through store took "
                      f"{rnd.uniform(0.05, 0.3) if r == 0 else rnd.uniform(200, 1400):.6g} ms",
                  p + f"{{I}} ProcessGroupNCCL.cpp:2301] {pgn} ProcessGroupNCCL created ncclComm_ "
                      f"0x{rnd.getrandbits(44) | (0x55 << 40):x} on CUDA device: {r % 8}",
                  p + f"{{I}} ProcessGroupNCCL.cpp:2306] {pgn} NCCL_DEBUG: WARN"]
        # DDP under DETAIL: the constructor's logging data, one LOG(INFO) with embedded newlines
        lines.append(p + f"{{I}} logger.cpp:113] [Rank {r}]: DDP Initialized with: ")
        for k, v in [("broadcast_buffers", 1), ("bucket_cap_bytes", 26214400), ("find_unused_parameters", 0),
                     ("gradient_as_bucket_view", 0), ("has_sync_bn", 0), ("is_multi_device_module", 0),
                     ("num_parameter_tensors", 161), ("output_device", r % 8), ("rank", r),
                     ("total_parameter_size_bytes", 102228128), ("world_size", 16), ("backend_name", "nccl"),
                     ("bucket_sizes", "26234880, 25986048, 26349568, 23657632"), ("cuda_visible_devices", "N/A"),
                     ("device_ids", r % 8), ("dtypes", "float"), ("master_addr", "dgx-a100-017"), ("master_port", 29400),
                     ("module_name", "ResNet"), ("nccl_async_error_handling", "N/A"), ("nccl_blocking_wait", "N/A"),
                     ("nccl_debug", "WARN"), ("nccl_ib_timeout", "N/A"), ("nccl_nthreads", "N/A"),
                     ("nccl_socket_ifname", "N/A"), ("torch_distributed_debug", "DETAIL")]:
            lines.append(f"{k}: {v}")
        lines.append("")
        # torch/nn/parallel/distributed.py logger.info, through the script's logging.basicConfig(level=INFO)
        lines.append(p + "INFO:torch.nn.parallel.distributed:Reducer buckets have been rebuilt in this iteration.")
        per_rank[r] = lines
    for _r, line in interleave(per_rank, rnd):
        clock.tick(2)
        if "{I}" in line or "{W}" in line:
            line = line.replace("{I}", "[" + clock.glog("I")).replace("{W}", "[" + clock.glog("W"))
        out.append(line)
    # the runtime stats DDP's logger prints at sampled iterations when the debug level is not OFF
    step = 0
    for epoch in range(3):
        for b in range(1, 313):
            step += 1
            clock.tick(210)
            if b % 20 == 0:
                out.append(f"[default0]:[rank0]:epoch {epoch} batch {b:4d}/312 loss {1.9 * 0.999 ** step + 0.3 + rnd.uniform(-0.02, 0.02):.4f} "
                           f"acc@1 {min(0.93, 0.2 + step / 1200):.3f} img/s {rnd.randint(21800, 22600)}")
            if step in (10, 20, 50, 100, 500, 800):
                for r in range(16):
                    clock.tick(1)
                    p = f"[default{r % 8}]:[rank{r}]:[{clock.glog('I')} logger.cpp:391] "
                    out += [p + f"[Rank {r} / 16] [before iteration {step}] Training ResNet unused_parameter_size=0 ",
                            f" Avg forward compute time: {rnd.randint(41000000, 43000000)} ",
                            f" Avg backward compute time: {rnd.randint(82000000, 86000000)} ",
                            f"Avg backward comm. time: {rnd.randint(9000000, 12000000)} ",
                            f" Avg backward comm/comp overlap time: {rnd.randint(7000000, 9000000)}"]
        out.append(f"[default0]:[rank0]:epoch {epoch} done: val acc@1 {0.70 + 0.08 * epoch:.3f} in {rnd.uniform(21, 24):.1f}s")
    # destroy_process_group(): abort launched asynchronously, threads joined
    shut: dict[int, list[str]] = {}
    for r in range(16):
        p = f"[default{r % 8}]:[rank{r}]:"
        pgn = _pg_prefix(0, r, "default_pg")
        shut[r] = [p + "{I} ProcessGroupNCCL.cpp:1168] " + pgn + " Launching ProcessGroupNCCL abort asynchrounously.",
                   p + "{I} ProcessGroupNCCL.cpp:1090] " + pgn + " future is successfully executed for: ProcessGroup abort",
                   p + "{I} ProcessGroupNCCL.cpp:1182] " + pgn + " ProcessGroupNCCL aborts successfully.",
                   p + "{I} ProcessGroupNCCL.cpp:1214] " + pgn + " ProcessGroupNCCL destructor entered.",
                   p + "{I} ProcessGroupNCCL.cpp:1229] " + pgn + " ProcessGroupNCCL watchdog thread joined.",
                   p + "{I} ProcessGroupNCCL.cpp:1233] " + pgn + " ProcessGroupNCCL heart beat monitor thread joined."]
    for _r, line in interleave(shut, rnd):
        clock.tick(3)
        out.append(line.replace("{I}", "[" + clock.glog("I")))
    return out


# --------------------------------------------------------------------------------------------------
# 3. DeepSpeed ZeRO-3, 32 ranks on 4 nodes via pdsh, NCCL 2.18.5 (older init wording) over sockets


def deepspeed_32() -> list[str]:
    rnd = random.Random(32)
    nodes = [f"trn-{i:03d}" for i in (11, 12, 13, 14)]
    pids = [58600 + 1000 * (r // 8) + 3 * (r % 8) for r in range(32)]
    clock = Clock(rnd, 15, 16, 20.0)

    def ds(level: str, where: str, msg: str) -> str:
        clock.tick(3)
        return f"[{clock.py()}] [{level}] [{where}] {msg}"

    out = [ds("INFO", "runner.py:568:main", "cmd = pdsh -S -f 1024 -w trn-011,trn-012,trn-013,trn-014 export "
              "NCCL_DEBUG=INFO; export NCCL_SOCKET_IFNAME=eth0; export PYTHONPATH=/workspace; cd /workspace; "
              "/usr/bin/python -u -m deepspeed.launcher.launch --world_info=<world_info> --node_rank=%n "
              "--master_addr=trn-011 --master_port=29500 finetune.py --deepspeed ds_zero3.json")]
    for n, host in enumerate(nodes):
        wi = ", ".join(f"'{h}': [0, 1, 2, 3, 4, 5, 6, 7]" for h in nodes)
        out += [f"{host}: " + ds("INFO", "launch.py:146:main", f"WORLD INFO DICT: {{{wi}}}"),
                f"{host}: " + ds("INFO", "launch.py:152:main", f"nnodes=4, num_local_procs=8, node_rank={n}"),
                f"{host}: " + ds("INFO", "launch.py:164:main", "dist_world_size=32"),
                f"{host}: " + ds("INFO", "launch.py:168:main", "Setting CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"),
                f"{host}: " + ds("INFO", "launch.py:256:main", f"process {pids[8 * n]} spawned with command: "
                                 "['/usr/bin/python', '-u', 'finetune.py', '--local_rank=0', '--deepspeed', 'ds_zero3.json']")]
        for k in range(1, 8):
            out.append(f"{host}: " + ds("INFO", "launch.py:256:main", f"process {pids[8 * n + k]} spawned with command: "
                                        f"['/usr/bin/python', '-u', 'finetune.py', '--local_rank={k}', '--deepspeed', 'ds_zero3.json']"))
    for r in range(32):
        out.append(f"{nodes[r // 8]}: " + ds("INFO", "real_accelerator.py:203:get_accelerator", "Setting ds_accelerator to cuda (auto detect)"))
    for r in range(32):
        out.append(f"{nodes[r // 8]}: " + ds("INFO", "comm.py:637:init_distributed", "cdb=None"))
    out.append(f"{nodes[0]}: " + ds("INFO", "comm.py:668:init_distributed", "Initializing TorchBackend in DeepSpeed with backend nccl"))
    comms: dict[int, str] = {}
    world = nccl_init(32, 8, nodes, pids, "2.18.5", 4, rnd, comms, net="Socket")
    for r, line in interleave(world, rnd):
        clock.tick(2)
        out.append(f"{nodes[r // 8]}: {line}")
    out += [f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", "[Rank 0] DeepSpeed info: version=0.14.4, git-hash=unknown, git-branch=unknown"),
            f"{nodes[0]}: " + ds("INFO", "config.py:733:__init__", "Config mesh_device None world_size = 32"),
            f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", "[Rank 0] DeepSpeed Flops Profiler Enabled: False"),
            f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", "[Rank 0] Using client Optimizer as basic optimizer"),
            f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", "[Rank 0] Removing param_group that has no 'params' in the basic Optimizer"),
            f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", "[Rank 0] DeepSpeed Basic Optimizer = FusedAdam"),
            f"{nodes[0]}: " + ds("INFO", "utils.py:56:is_zero_supported_optimizer", "Checking ZeRO support for optimizer=FusedAdam type=<class 'deepspeed.ops.adam.fused_adam.FusedAdam'>"),
            f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", "[Rank 0] Creating fp16 ZeRO stage 3 optimizer, MiCS is enabled False, Hierarchical params gather False"),
            f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", "[Rank 0] Creating torch.bfloat16 ZeRO stage 3 optimizer"),
            f"{nodes[0]}: " + ds("INFO", "utils.py:781:see_memory_usage", "Stage 3 initialize beginning"),
            f"{nodes[0]}: " + ds("INFO", "utils.py:782:see_memory_usage", "MA 3.61 GB         Max_MA 4.32 GB         CA 4.57 GB         Max_CA 5 GB "),
            f"{nodes[0]}: " + ds("INFO", "utils.py:789:see_memory_usage", "CPU Virtual Memory:  used = 118.42 GB, percent = 5.9%"),
            f"{nodes[0]}: " + ds("INFO", "stage3.py:130:__init__", "Reduce bucket size 500000000"),
            f"{nodes[0]}: " + ds("INFO", "stage3.py:131:__init__", "Prefetch bucket size 50000000")]
    for what in ("DeepSpeedZeRoOffload initialize [begin]", "DeepSpeedZeRoOffload initialize [end]",
                 "Before creating fp16 partitions", "After creating fp16 partitions: 2",
                 "Before creating fp32 partitions", "After creating fp32 partitions",
                 "Before initializing optimizer states", "After initializing optimizer states", "After initializing ZeRO optimizer"):
        out += [f"{nodes[0]}: " + ds("INFO", "utils.py:781:see_memory_usage", what),
                f"{nodes[0]}: " + ds("INFO", "utils.py:782:see_memory_usage",
                                     f"MA {rnd.uniform(3.6, 9.8):.2f} GB         Max_MA {rnd.uniform(9.8, 11):.2f} GB         "
                                     f"CA {rnd.uniform(10, 12):.2f} GB         Max_CA 12 GB "),
                f"{nodes[0]}: " + ds("INFO", "utils.py:789:see_memory_usage", f"CPU Virtual Memory:  used = {rnd.uniform(118, 131):.2f} GB, percent = 6.2%")]
    out.append(f"{nodes[0]}: " + ds("INFO", "stage3.py:525:_setup_for_real_optimizer", "optimizer state initialized"))
    out.append(f"{nodes[0]}: " + ds("INFO", "config.py:997:print", "DeepSpeedEngine configuration:"))
    for k, v in [("activation_checkpointing_config", '{"partition_activations": false, "contiguous_memory_optimization": false, "cpu_checkpointing": false, "number_checkpoints": null, "synchronize_checkpoint_boundary": false, "profile": false}'),
                 ("amp_enabled", "False"), ("amp_params", "False"), ("bfloat16_enabled", "True"), ("checkpoint_parallel_write_pipeline", "False"),
                 ("checkpoint_tag_validation_enabled", "True"), ("checkpoint_tag_validation_fail", "False"), ("communication_data_type", "None"),
                 ("curriculum_enabled_legacy", "False"), ("dataloader_drop_last", "False"), ("disable_allgather", "False"), ("dump_state", "False"),
                 ("dynamic_loss_scale_args", "None"), ("eigenvalue_enabled", "False"), ("elasticity_enabled", "False"),
                 ("fp16_auto_cast", "None"), ("fp16_enabled", "False"), ("global_rank", "0"), ("grad_accum_dtype", "None"),
                 ("gradient_accumulation_steps", "4"), ("gradient_clipping", "1.0"), ("gradient_predivide_factor", "1.0"),
                 ("initial_dynamic_scale", "1"), ("load_universal_checkpoint", "False"), ("loss_scale", "1.0"),
                 ("memory_breakdown", "False"), ("optimizer_legacy_fusion", "False"), ("optimizer_name", "None"),
                 ("pipeline", "{'stages': 'auto', 'partition': 'best', 'seed_layers': False, 'activation_checkpoint_interval': 0, 'pipe_partitioned': True, 'grad_partitioned': True}"),
                 ("prescale_gradients", "False"), ("scheduler_name", "None"), ("seq_parallel_communication_data_type", "torch.float32"),
                 ("sparse_attention", "None"), ("steps_per_print", "10"), ("train_batch_size", "512"), ("train_micro_batch_size_per_gpu", "4"),
                 ("use_node_local_storage", "False"), ("wall_clock_breakdown", "False"), ("weight_quantization_config", "None"),
                 ("world_size", "32"), ("zero_allow_untested_optimizer", "True"), ("zero_enabled", "True"),
                 ("zero_force_ds_cpu_optimizer", "True"), ("zero_optimization_stage", "3")]:
        out.append(f"{nodes[0]}: " + ds("INFO", "config.py:1001:print", f"  {k:<34} {v}"))
    for step in range(10, 3010, 10):
        clock.tick(38000)
        lr = 2e-5 * min(1, step / 300)
        out.append(f"{nodes[0]}: " + ds("INFO", "logging.py:96:log_dist", f"[Rank 0] step={step}, skipped=0, lr=[{lr:.6g}], mom=[(0.9, 0.999)]"))
        out.append(f"{nodes[0]}: " + ds("INFO", "timer.py:259:stop", f"epoch=0/micro_step={4 * step}/global_step={step}, "
                                        f"RunningAvgSamplesPerSec={rnd.uniform(131, 136):.10f}, CurrSamplesPerSec={rnd.uniform(128, 139):.10f}, "
                                        f"MemAllocated={rnd.uniform(11.2, 11.6):.2f}GB, MaxMemAllocated={rnd.uniform(27.1, 27.9):.2f}GB"))
        out.append(f"{nodes[0]}: {{'loss': {1.2 * 0.9995 ** step + 0.4 + rnd.uniform(-0.03, 0.03):.4f}, 'grad_norm': "
                   f"{rnd.uniform(0.3, 0.9):.16f}, 'learning_rate': {lr:.6g}, 'epoch': {step / 3000:.2f}}}")
    shut = nccl_shutdown(list(range(32)), nodes, pids, 8, comms, abort=False, nranks=32)
    for r, line in interleave(shut, rnd):
        clock.tick(2)
        out.append(f"{nodes[r // 8]}: {line}")
    for r in range(32):
        out.append(f"{nodes[r // 8]}: " + ds("INFO", "launch.py:351:main", f"Process {pids[r]} exits successfully."))
    return out


# --------------------------------------------------------------------------------------------------
# 4. vLLM 0.6.6 serving with tensor-parallel 8 and NCCL_DEBUG=INFO, then traffic


def vllm_tp8() -> list[str]:
    rnd = random.Random(8)
    host = "infer-h100-03"
    pids = [3311 + 97 * r for r in range(8)]
    clock = Clock(rnd, 11, 2, 5.0)

    def v(level: str, where: str, msg: str, worker: int | None = None) -> str:
        clock.tick(4)
        t = clock.t
        stamp = f"11-26 {int(t // 3600) % 24:02d}:{int(t // 60) % 60:02d}:{int(t % 60):02d}"
        pre = f"(VllmWorkerProcess pid={pids[worker]}) " if worker else ""
        return f"{pre}{level} {stamp} {where}] {msg}"

    out = [v("INFO", "api_server.py:712", "vLLM API server version 0.6.6.post1"),
           v("INFO", "api_server.py:713", "args: Namespace(host='0.0.0.0', port=8000, model='/models/Llama-3.1-70B-Instruct', "
             "tensor_parallel_size=8, max_model_len=32768, gpu_memory_utilization=0.92, enable_prefix_caching=True)"),
           v("INFO", "config.py:510", "This model supports multiple tasks: {'generate', 'embed', 'reward', 'score', 'classify'}. Defaulting to 'generate'."),
           v("INFO", "config.py:1310", "Defaulting to use mp for distributed inference"),
           v("INFO", "llm_engine.py:234", "Initializing an LLM engine (v0.6.6.post1) with config: model='/models/Llama-3.1-70B-Instruct', "
             "tokenizer='/models/Llama-3.1-70B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
             "trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=LoadFormat.AUTO, "
             "tensor_parallel_size=8, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
             "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, enable_prefix_caching=True"),
           v("WARNING", "multiproc_worker_utils.py:312", "Reducing Torch parallelism from 112 threads to 1 to avoid unnecessary CPU "
             "contention. Set OMP_NUM_THREADS in the external environment to tune this value as needed."),
           v("INFO", "custom_cache_manager.py:17", "Setting Triton cache manager to: vllm.triton_utils.custom_cache_manager:CustomCacheManager")]
    for w in range(1, 8):
        out.append(v("INFO", "multiproc_worker_utils.py:222", "Worker ready; awaiting tasks", w))
    for w in range(8):
        out.append(v("INFO", "selector.py:120", "Using Flash Attention backend.", w))
    for w in range(8):
        out.append(v("INFO", "utils.py:918", "Found nccl from library libnccl.so.2", w))
        out.append(v("INFO", "pynccl.py:69", "vLLM is using nccl==2.21.5", w))
    comms: dict[int, str] = {}
    world = nccl_init(8, 8, [host], pids, "2.21.5", 24, rnd, comms)
    for _r, line in interleave(world, rnd):
        clock.tick(1)
        out.append(line)
    for w in range(8):
        out.append(v("INFO", "custom_all_reduce_utils.py:242", "reading GPU P2P access cache from "
                     "/root/.cache/vllm/gpu_p2p_access_cache_for_0,1,2,3,4,5,6,7.json", w))
        out.append(v("INFO", "shm_broadcast.py:255", "vLLM message queue communication handle: Handle(connect_ip='127.0.0.1', "
                     "local_reader_ranks=[1, 2, 3, 4, 5, 6, 7], buffer_handle=(7, 4194304, 6, 'psm_b1c0a3f2'), "
                     "local_subscribe_port=43117, remote_subscribe_port=None)", w) if w == 0 else
                   v("INFO", "parallel_state.py:959", f"rank {w} in world size 8 is assigned as DP rank 0, PP rank 0, TP rank {w}", w))
    for w in range(8):
        out.append(v("INFO", "model_runner.py:1094", "Starting to load model /models/Llama-3.1-70B-Instruct...", w))
    for pct, k in ((0, 0), (13, 4), (27, 8), (43, 13), (57, 17), (73, 22), (87, 26), (100, 30)):
        clock.tick(1900)
        out.append(f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {k}/30 [00:{k * 2:02d}<00:{max(0, 60 - k * 2):02d},  "
                   f"{rnd.uniform(1.7, 2.3):.2f}s/it]")
    for w in range(8):
        out.append(v("INFO", "model_runner.py:1099", f"Loading model weights took 16.4{w} GB", w))
    for w in range(8):
        out.append(v("INFO", "worker.py:241", f"Memory profiling takes {rnd.uniform(6, 8):.2f} seconds\n"
                     "the current vLLM instance can use total_gpu_memory (79.10GiB) x gpu_memory_utilization (0.92) = 72.78GiB\n"
                     f"model weights take 16.4{w}GiB; non_torch_memory takes 2.11GiB; PyTorch activation peak memory takes "
                     f"4.23GiB; the rest of the memory reserved for KV Cache is 49.9{w}GiB.", w))
    out += [v("INFO", "distributed_gpu_executor.py:57", "# GPU blocks: 81760, # CPU blocks: 6553"),
            v("INFO", "distributed_gpu_executor.py:61", "Maximum concurrency for 32768 tokens per request: 39.92x")]
    for w in range(8):
        out.append(v("INFO", "model_runner.py:1415", "Capturing cudagraphs for decoding. This may lead to unexpected consequences "
                     "if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use "
                     "'--enforce-eager' in the CLI. If out-of-memory error occurs during cudagraph capture, consider decreasing "
                     "`gpu_memory_utilization` or switching to eager mode. You can also reduce the `max_num_seqs` as needed to "
                     "decrease memory usage.", w))
    for w in range(8):
        out.append(v("INFO", "custom_all_reduce.py:224", "Registering 5635 cuda graph addresses", w))
    for w in range(8):
        out.append(v("INFO", "model_runner.py:1535", f"Graph capturing finished in {rnd.randint(18, 24)} secs, took 0.{rnd.randint(40, 69)} GiB", w))
    out += [v("INFO", "llm_engine.py:431", "init engine (profile, create kv cache, warmup model) took 47.31 seconds"),
            v("INFO", "api_server.py:640", "Using supplied chat template:"),
            v("INFO", "launcher.py:19", "Available routes are:"),
            v("INFO", "launcher.py:27", "Route: /v1/chat/completions, Methods: POST"),
            v("INFO", "launcher.py:27", "Route: /v1/completions, Methods: POST"),
            v("INFO", "launcher.py:27", "Route: /health, Methods: GET"),
            "INFO:     Started server process [3214]",
            "INFO:     Waiting for application startup.",
            "INFO:     Application startup complete.",
            "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)"]
    for i in range(3000):
        clock.tick(900)
        if i % 10 == 0:
            run = rnd.randint(4, 60)
            out.append(v("INFO", "metrics.py:467", f"Avg prompt throughput: {rnd.uniform(300, 9000):.1f} tokens/s, Avg generation "
                         f"throughput: {rnd.uniform(400, 2100):.1f} tokens/s, Running: {run} reqs, Swapped: 0 reqs, Pending: 0 reqs, "
                         f"GPU KV cache usage: {rnd.uniform(1, 38):.1f}%, CPU KV cache usage: 0.0%."))
            out.append(v("INFO", "metrics.py:483", f"Prefix cache hit rate: GPU: {rnd.uniform(20, 80):.2f}%, CPU: 0.00%"))
        rid = f"chatcmpl-{rnd.getrandbits(128):032x}"
        out.append(v("INFO", "logger.py:37", f"Received request {rid}: prompt: '<|begin_of_text|><|start_header_id|>user"
                     f"<|end_header_id|>\\n\\nSummarise ticket #{rnd.randint(1000, 99999)}', params: SamplingParams(n=1, "
                     f"temperature=0.2, top_p=0.95, max_tokens={rnd.choice([256, 512, 1024])}), lora_request: None"))
        out.append(v("INFO", "engine.py:267", f"Added request {rid}."))
        out.append(f"INFO:     10.42.{rnd.randint(0, 9)}.{rnd.randint(2, 250)}:{rnd.randint(30000, 60000)} - "
                   f"\"POST /v1/chat/completions HTTP/1.1\" 200 OK")
        if i % 97 == 0:
            out.append(f"INFO:     10.42.0.1:{rnd.randint(30000, 60000)} - \"GET /health HTTP/1.1\" 200 OK")
    return out


FILES = {
    "nccl-chatter-64rank-torchrun-ib-tp8.log": torchrun_64,
    "torch-chatter-distributed-debug-detail-16rank.log": torch_detail_16,
    "deepspeed-chatter-zero3-32rank-nccl-socket.log": deepspeed_32,
    "vllm-chatter-tp8-nccl-info-serving.log": vllm_tp8,
}


def main() -> None:
    for name, make in FILES.items():
        lines = make()
        (HERE / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{name}: {len(lines)} lines")


if __name__ == "__main__":
    main()
