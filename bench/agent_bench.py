"""Node-agent benchmark: prints figures, asserts nothing.

  1. one probe round on a simulated 8-GPU host (all probes), p50/p99 over --rounds rounds;
  2. agent idle RSS (agent process and its NVML worker, from /proc/<pid>/status VmRSS);
  3. fan-out with probe_hosts to --agents agents on 127.0.0.1..N (one process each), p50/p99 per round.

Targets (issue 4): idle RSS <= 60 MB, probe round p50 <= 300 ms, fan-out to 64 <= 2 s.
Run: .venv/bin/python bench/agent_bench.py [--rounds 50] [--agents 64] [--json bench/out/agent.json]
All agents here share this machine's CPUs; on a fleet each agent has a host to itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.probes.client import AgentDirectory, probe_hosts  # noqa: E402
from node_agent.testing import RunningAgent, free_port, start_agent, write_secret  # noqa: E402

DIAGNOSIS_PROBES = ["inventory", "processes", "ecc", "xid"]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def line(name: str, values_ms: list[float], target: str = "") -> str:
    return (f"{name:<44} p50 {pct(values_ms, 50):7.1f} ms   p99 {pct(values_ms, 99):7.1f} ms   "
            f"max {max(values_ms):7.1f} ms  (n={len(values_ms)}){'   target ' + target if target else ''}")


def bench_single(secret_file: Path, logs: Path, scenario: str, rounds: int, out: dict) -> None:
    agent = start_agent(secret_file, logs, scenario, address="127.0.0.1", port=0)
    try:
        time.sleep(1.5)  # let the NVML worker start and settle: this is the idle figure
        main_kib = rss_kib(agent.pid)
        worker_kib = sum(rss_kib(c) for c in children(agent.pid))
        directory = AgentDirectory(agent.url)
        secret = (secret_file.read_text().strip()).encode()
        for _ in range(3):
            probe_hosts(directory, ["h"], secret, deadline_s=10)
        client_ms, agent_ms = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            rep = probe_hosts(directory, ["h"], secret, deadline_s=10)["h"]
            client_ms.append((time.perf_counter() - t0) * 1000)
            assert rep.reachable, rep.error
            agent_ms.append(rep.answer["duration_ms"])
        after_kib = rss_kib(agent.pid) + sum(rss_kib(c) for c in children(agent.pid))
    finally:
        agent.stop()
    print(f"\n[1] probe round, all 10 probes, simulated {scenario} (8 GPUs)")
    print(line("client round trip (sign + HTTP + all probes)", client_ms, "p50 <= 300 ms"))
    print(line("agent-reported duration_ms", agent_ms))
    print("\n[2] idle RSS")
    print(f"    agent process        {main_kib / 1024:6.1f} MB")
    print(f"    NVML worker process  {worker_kib / 1024:6.1f} MB")
    print(f"    total                {(main_kib + worker_kib) / 1024:6.1f} MB   target <= 60 MB")
    print(f"    total after {rounds} rounds {after_kib / 1024:6.1f} MB")
    out["single"] = {"client_p50_ms": pct(client_ms, 50), "client_p99_ms": pct(client_ms, 99),
                     "agent_p50_ms": pct(agent_ms, 50), "agent_p99_ms": pct(agent_ms, 99)}
    out["rss_mb"] = {"agent": main_kib / 1024, "worker": worker_kib / 1024, "total": (main_kib + worker_kib) / 1024,
                     "total_after_rounds": after_kib / 1024}


def bench_fanout(secret_file: Path, logs: Path, scenario: str, n: int, rounds: int, out: dict) -> None:
    hosts = [f"127.0.0.{i}" for i in range(1, n + 1)]
    port = free_port(hosts)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        agents: list[RunningAgent] = list(pool.map(
            lambda h: start_agent(secret_file, logs, scenario, address=h, port=port, wait_s=120), hosts))
    started_s = time.perf_counter() - t0
    try:
        time.sleep(2.0)
        directory = AgentDirectory(f"http://{{host}}:{port}", allow="127.0.0.0/8")  # agents on loopback
        secret = (secret_file.read_text().strip()).encode()
        results = {}
        for label, probes in (("diagnosis probes " + ",".join(DIAGNOSIS_PROBES), DIAGNOSIS_PROBES),
                              ("all 10 probes", None)):
            probe_hosts(directory, hosts, secret, probes=probes, deadline_s=10)  # warm-up
            walls, unreachable = [], 0
            for _ in range(rounds):
                t1 = time.perf_counter()
                reps = probe_hosts(directory, hosts, secret, probes=probes, deadline_s=10)
                walls.append((time.perf_counter() - t1) * 1000)
                unreachable += sum(not r.reachable for r in reps.values())
            results[label] = (walls, unreachable)
        total_rss = sum(rss_kib(a.pid) + sum(rss_kib(c) for c in children(a.pid)) for a in agents) / 1024
    finally:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda a: a.stop(), agents))
    print(f"\n[3] fan-out to {n} agents on 127.0.0.1..{n} (this machine: {os.cpu_count()} CPUs shared by all "
          f"{n} agents and the client; started in {started_s:.1f} s, {total_rss:.0f} MB RSS together)")
    out["fanout"] = {"agents": n, "cpus": os.cpu_count()}
    for label, (walls, unreachable) in results.items():
        print(line(label, walls, "<= 2 s") + f"   unreachable answers: {unreachable}")
        out["fanout"][label] = {"p50_ms": pct(walls, 50), "p99_ms": pct(walls, 99), "unreachable": unreachable}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--fanout-rounds", type=int, default=10)
    ap.add_argument("--scenario", default="seed-8xh200")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    out: dict = {"scenario": args.scenario, "python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        base = Path(tmp)
        secret = write_secret(base / "secret", "bench-secret-0123456789")
        bench_single(secret, base / "logs", args.scenario, args.rounds, out)
        if args.agents:
            bench_fanout(secret, base / "logs", args.scenario, args.agents, args.fanout_rounds, out)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
