"""Every pattern's literal must be rare in healthy logs: a literal found on common start-up or
training lines makes every such line a candidate, which costs time on multi-GB logs (a bare
"TIMEOUT" matched each c10d options line and tripled the scan time of NCCL-heavy logs).

The healthy corpus (tests/data/healthy/*.log) holds real start-up chatter: NCCL_DEBUG=INFO init of
8-64 ranks (NCCL 2.18, 2.21, 2.23), TORCH_DISTRIBUTED_DEBUG=DETAIL with TORCH_CPP_LOG_LEVEL=INFO,
DeepSpeed, Megatron, vLLM; see its SOURCES.md. Facts and clues read such lines on purpose, so they
are bounded another way: once a kind has all it keeps, its literals stop making candidates.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bot.engine import diagnose_texts, get_matcher
from bot.engine.facts import MAX_FACT_HITS
from bot.engine.scanner import scan_chunks

HEALTHY = Path(__file__).resolve().parents[1] / "data" / "healthy"
# Candidate lines per million healthy lines that one pattern literal may cause. A candidate costs a
# regex run (~10 us) where a plain line costs ~0.3 us to scan: 300 per million is ~1% more scan time.
MAX_PER_MILLION = 300

# Literals above the rate for a reason no literal can remove, each said. An entry that falls under
# the rate fails the test too, so this list can only shrink.
INHERENT = {
    " - Abort COMPLETE": "nccl-comm-aborted's supporting line is NCCL's own line, which torch >= 2.4 prints "
                         "on every clean exit (destroy_process_group aborts): once per communicator and rank",
    "cannot be initialized to connect to": "dist-connect-refused: c10d prints it per rank for the IPv6 attempt "
                                           "(errno 97) before it connects over IPv4; only the errno tells a "
                                           "refusal, and no literal can say 'not 97'",
    "Error": "python-exception names any `...Error` class, a message or none after it; its hits here are "
             "nvidia-smi -q's per-GPU 'Uncorrectable Error : 0' rows, a short output",
    "DRAM Uncorrectable": "xid-48-dbe reads nvidia-smi -q's counter row, printed (0) for every GPU: a "
                          "short output, never a long log",
}

# chatter every multi-rank job prints, many times per rank (the same shapes dev-eval buries logs in)
CHATTER = [
    "gpu-node-03:40017:40117 [1] NCCL INFO Channel 07/0 : 17[1] -> 18[2] via P2P/CUMEM/read",
    "[rank17]: step 1200 loss 2.3141 lr 3.0e-04 grad_norm 0.812 tokens/s 104211",
    "gpu-node-03:40017:40117 [1] NCCL INFO comm 0x7f3a2c000 rank 17 nranks 64 cudaDev 1 busId 3b000 - Init COMPLETE",
    "[default1]:[I ProcessGroupNCCL.cpp:712] [Rank 17] ProcessGroupNCCL initialization options: size: 64, global rank: 17, TIMEOUT(ms): 600000",
    "[default1]:[2025-11-26 02:11:07,551] [INFO] [logging.py:128:log_dist] [Rank 17] step=1200, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
]


def _corpus() -> bytes:
    files = sorted(HEALTHY.glob("*.log"))
    assert len(files) >= 15
    return b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in files)


def _candidate_counts(data: bytes) -> tuple[Counter, int]:
    m = get_matcher()
    scan = scan_chunks(iter([data]), m.backend, needs_context=m.plan.needs_context)
    per_literal: Counter = Counter()
    for hit in scan.hits:
        for lit in hit.literal_ids:
            if any(i < m.n_patterns for i in m.plan.items_of[lit]):
                per_literal[m.plan.literals[lit]] += 1
    return per_literal, scan.lines


def test_no_pattern_literal_hits_common_chatter() -> None:
    data = ("\n".join(CHATTER * 200) + "\n").encode()
    counts, _ = _candidate_counts(data)
    assert dict(counts) == {}


def test_pattern_literals_are_rare_per_million_healthy_lines() -> None:
    counts, lines = _candidate_counts(_corpus())
    assert lines > 30000  # enough chatter for a rate per million to mean something
    rate = {lit: round(n * 1e6 / lines) for lit, n in counts.items()}
    common = {lit: r for lit, r in rate.items() if r > MAX_PER_MILLION and lit not in INHERENT}
    assert common == {}, f"pattern literals over {MAX_PER_MILLION} candidate lines per million healthy lines " \
                         f"({lines} lines): {common}"
    stale = sorted(lit for lit in INHERENT if rate.get(lit, 0) <= MAX_PER_MILLION)
    assert stale == [], f"no longer common, take them out of INHERENT: {stale}"


def test_facts_stop_making_candidates_once_they_have_all_they_keep() -> None:
    # 64 ranks' NCCL init repeated (an elastic job that re-inits, a log of many jobs): the nccl_rank
    # fact reads the first MAX_FACT_HITS lines, then its literal no longer makes lines candidates
    lines = [f"gpu-node-{r // 8:02d}:{4000 + r}:{4000 + r} [{r % 8}] NCCL INFO comm 0x55{r:04x} rank {r} nranks 64 "
             f"cudaDev {r % 8} busId 1b000 - Init COMPLETE" for r in range(64)]
    lines += [f"[rank{r}]: ProcessGroupNCCL initialization options: size: 64, global rank: {r}, TIMEOUT(ms): 600000"
              for r in range(64)]
    n = 3 * MAX_FACT_HITS // len(lines) + 1
    text = "\n".join(lines * n) + "\n[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    report = diagnose_texts([("init.log", text)], workers=1)
    assert report.stats["lines"] == n * len(lines) + 1
    # each kind reads up to its cap, then stops: far fewer candidates than init lines
    assert report.stats["candidate_lines"] <= 2 * MAX_FACT_HITS + 10 < n * len(lines)
    d = report.to_dict()
    assert d["facts"]["world_size"] == 64 and d["facts"]["timeout_ms"] == 600000
    assert d["facts"]["rank_hosts"]["63"] == "gpu-node-07"
    # a pattern's line after the facts are full is still found
    assert [x.signature for x in report.diagnoses][:1] == ["cuda-oom"]
