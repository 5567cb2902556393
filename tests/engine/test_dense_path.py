"""The dense path (a slice of repeated lines verified once per distinct line) gives the report the
line-by-line path gives: the same diagnoses, evidence lines, context, counts and facts.

Each test scans the same input twice: with the dense path off, and forced on every slice that
has a candidate (tiny slices, no density or repetition threshold), so that the rare shapes
(printers past the per-pattern cap, lines that must be read one by one, facts muted mid-slice,
patterns whose opening fills inside a slice) meet the dense path at every slice boundary."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import bot.engine.scanner as scanner
from bot.engine import diagnose_paths
from bot.engine.library import default_library
from bot.engine.sample import FIRST, LAST, PER_KEY

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "tests" / "data" / "healthy"


def _count_dense_slices(m: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the slices the dense path takes (not those it hands back to the line path)."""
    calls = {"n": 0}
    real = scanner._dense_slice

    def counted(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        got = real(*args, **kw)
        calls["n"] += got is not None
        return got

    m.setattr(scanner, "_dense_slice", counted)
    return calls


def _report(path: Path, monkeypatch: pytest.MonkeyPatch, dense: bool, slice_bytes: int = 4096) -> dict:
    with monkeypatch.context() as m:
        m.setattr(scanner, "SCAN_SLICE", slice_bytes)
        m.setattr(scanner, "SCAN_FIRST", 997)
        if dense:
            m.setattr(scanner, "DENSE_MIN_HITS", 1)
            m.setattr(scanner, "DENSE_SHARE", 10**9)
            m.setattr(scanner, "DENSE_REPEAT", 1)
        else:
            m.setattr(scanner, "DENSE_MIN_HITS", 10**12)
        calls = _count_dense_slices(m)
        report = diagnose_paths([str(path)], workers=1)
    d = report.to_dict()
    for k in ("load_s", "scan_s", "diagnose_s"):
        d["stats"].pop(k, None)
    d["dense_slices"] = calls["n"]
    d["evidence_context"] = [(e.source, e.line, e.text, e.before, e.after, e.pattern)
                             for dg in report.diagnoses for e in dg.evidence]
    return d


def _assert_same(path: Path, monkeypatch: pytest.MonkeyPatch, slice_bytes: int = 4096, min_dense: int = 1) -> dict:
    line = _report(path, monkeypatch, dense=False, slice_bytes=slice_bytes)
    dense = _report(path, monkeypatch, dense=True, slice_bytes=slice_bytes)
    assert line.pop("dense_slices") == 0
    taken = dense.pop("dense_slices")
    assert taken >= min_dense, f"the dense path took {taken} slices of {path.name}"
    assert dense == line
    return dense


def _match_lines() -> list[str]:
    out = []
    for sig in default_library().signatures.values():
        out += [t for t in sig.tests.get("match", []) if "\n" not in t]
    return out


def _dense_log(path: Path, seed: int, n: int = 6000) -> None:
    """Real failure lines (every signature's own match lines) repeated by a few printers, among
    healthy chatter, NCCL init lines that hold facts, and unprefixed or wrapped lines."""
    rnd = random.Random(seed)
    failures = rnd.sample(_match_lines(), 40)
    chatter = [ln for f in sorted(HEALTHY.glob("*.log")) for ln in f.read_text(errors="replace").splitlines()][:400]
    prefixes = ["", "[rank{r}]: ", "{h}:{p}:{p2} [{d}] ", "{r}: ", "[default{d}]:"]
    lines = []
    for _ in range(n):
        k = rnd.random()
        r = rnd.randrange(8)
        pre = rnd.choice(prefixes).format(r=r, h=f"node{r // 4}", p=4000 + r, p2=4100 + r, d=r % 4)
        if k < 0.55:
            lines.append(pre + failures[rnd.randrange(6 if k < 0.4 else 40)])
        elif k < 0.65:
            lines.append(f"node{r // 4}:{4000 + r}:{4100 + r} [{r % 4}] NCCL INFO comm 0x{r:x} rank {r} nranks 8 "
                         f"cudaDev {r % 4} busId {r}000 - Init COMPLETE")
        elif k < 0.7:
            lines.append("\x1b[31m" + pre + failures[0] + "\x1b[0m")
        elif k < 0.72:
            lines.append(pre + failures[1] + "\r" + pre + failures[2])
        else:
            lines.append(rnd.choice(chatter))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_dense_logs_of_real_failure_lines(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / f"dense-{seed}.log"
    _dense_log(f, seed)
    got = _assert_same(f, monkeypatch, min_dense=10)
    assert got["diagnoses"], "the generated log holds failures"


def test_more_printers_than_the_sample_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the first line of each printer is kept up to a cap: past it, repeats only count
    f = tmp_path / "many.log"
    printers = FIRST + PER_KEY + 40
    rows = [f"gpu-{i % printers:04d}:{9000 + i % printers}:1 [{i % 8}] misc/cudawrap.cc:188 NCCL WARN Cuda failure "
            "'unknown error'" for i in range(12 * printers)]
    rows.append("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    f.write_text("\n".join(rows) + "\n")
    got = _assert_same(f, monkeypatch, slice_bytes=16384, min_dense=5)
    assert got["stats"]["candidate_lines"] == len(rows)
    shown = {text.split(":")[0] for _, _, text, _, _, pattern in got["evidence_context"] if "NCCL WARN" in text}
    # the cap and the closing lines, whichever path counted the rest
    assert FIRST + PER_KEY < len(shown) <= FIRST + PER_KEY + LAST < printers
    assert [d["signature"] for d in got["diagnoses"]] == ["nccl-cuda-999", "cuda-oom"]


def test_the_bench_profile_that_motivated_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every line an NCCL WARN, the failures in the last tenth (bench/scan_bench.py --mix all-matches)
    import importlib.util

    spec = importlib.util.spec_from_file_location("scan_bench", ROOT / "bench" / "scan_bench.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    f = tmp_path / "all-matches.log"
    bench.generate_mix(f, 400_000, "all-matches")
    got = _assert_same(f, monkeypatch, slice_bytes=8192, min_dense=20)
    found = {d["signature"] for d in got["diagnoses"]}
    assert {"nccl-cuda-999", "xid-79-fallen-off-bus"} <= found  # the flood and the failure in it


def test_default_thresholds_take_the_dense_path_on_a_dense_log(tmp_path: Path) -> None:
    # no monkeypatching: a log of repeated NCCL WARN lines is verified by distinct line
    rows = [f"gpu-{i % 16:02d}:{7000 + i % 16}:{7100 + i % 16} [{i % 8}] misc/cudawrap.cc:188 "
            f"NCCL WARN Cuda failure 'unknown error'" for i in range(60000)]
    f = tmp_path / "warn.log"
    f.write_text("\n".join(rows) + "\n")
    with pytest.MonkeyPatch.context() as m:
        taken = _count_dense_slices(m)
        report = diagnose_paths([str(f)], workers=1)
    assert taken["n"] >= 3
    assert report.stats["candidate_lines"] == 60000
    top = report.diagnoses[0]
    assert len(top.hosts) == 16 and top.evidence[-1].line == 60000


def test_the_real_case_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # every real log we hold, with slices small enough that the dense path meets them
    files = sorted(p for p in (ROOT / "tests" / "data" / "realcases").rglob("*")
                   if p.is_file() and p.name != "meta.yaml" and p.stat().st_size > 1024)
    assert len(files) > 100
    taken = 0
    for f in files:
        line = _report(f, monkeypatch, dense=False, slice_bytes=2048)
        dense = _report(f, monkeypatch, dense=True, slice_bytes=2048)
        line.pop("dense_slices")
        taken += dense.pop("dense_slices")
        assert dense == line, f
    assert taken > 20
