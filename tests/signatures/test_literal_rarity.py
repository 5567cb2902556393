"""Every pattern's literal must be rare in healthy logs: a literal found on common start-up or
training lines makes every such line a candidate, which costs time on multi-GB logs (a bare
"TIMEOUT" matched each c10d options line and tripled the scan time of NCCL-heavy logs)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bot.engine import get_matcher
from bot.engine.scanner import scan_chunks

HEALTHY = Path(__file__).resolve().parents[1] / "data" / "healthy"
MAX_SHARE = 0.01  # of healthy lines a single pattern literal may hit

# chatter every multi-rank job prints, many times per rank (the same shapes dev-eval buries logs in)
CHATTER = [
    "gpu-node-03:40017:40117 [1] NCCL INFO Channel 07/0 : 17[1] -> 18[2] via P2P/CUMEM/read",
    "[rank17]: step 1200 loss 2.3141 lr 3.0e-04 grad_norm 0.812 tokens/s 104211",
    "gpu-node-03:40017:40117 [1] NCCL INFO comm 0x7f3a2c000 rank 17 nranks 64 cudaDev 1 busId 3b000 - Init COMPLETE",
    "[default1]:[I ProcessGroupNCCL.cpp:712] [Rank 17] ProcessGroupNCCL initialization options: size: 64, global rank: 17, TIMEOUT(ms): 600000",
    "[default1]:[2025-11-26 02:11:07,551] [INFO] [logging.py:128:log_dist] [Rank 17] step=1200, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
]


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


def test_pattern_literals_are_rare_in_the_healthy_corpus() -> None:
    files = sorted(p for p in HEALTHY.iterdir() if p.is_file())
    assert files
    data = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in files)
    counts, lines = _candidate_counts(data)
    common = {lit: n for lit, n in counts.items() if n > max(3, MAX_SHARE * lines)}
    assert common == {}, f"literals hitting more than {MAX_SHARE:.0%} of {lines} healthy lines"
