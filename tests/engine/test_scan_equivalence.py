"""All three scan backends, any chunk size and the parallel range split give identical reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import diagnose_paths, diagnose_texts, get_matcher
from bot.engine.backends import (
    BACKENDS,
    ahocorasick_available,
    available_backends,
    hyperscan_available,
    make_backend,
)
from bot.engine.library import default_library

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIRS = [ROOT / "examples", ROOT / "tests" / "data"]


def _comparable(report) -> dict:  # noqa: ANN001
    d = report.to_dict()
    d.pop("stats")
    return d


def _corpus() -> list[Path]:
    files = []
    for base in CORPUS_DIRS:
        if base.exists():
            files += sorted(p for p in base.rglob("*") if p.is_file())
    return files


def _signature_test_items() -> list[str]:
    lib = default_library()
    items = []
    for sig in lib.signatures.values():
        for key in ("match", "no_match", "todo_match", "todo_no_match"):
            items += sig.tests.get(key, [])
    return items


_INSTALLED = {"hyperscan": hyperscan_available(), "ahocorasick": ahocorasick_available(), "python": True}


@pytest.mark.slow  # ~55 s each on 2,000+ real logs; the main run has it, the floors run keeps the small checks
@pytest.mark.parametrize("backend", ["hyperscan", "ahocorasick"])
def test_compiled_backends_agree_with_pure_python_on_the_whole_suite(backend: str) -> None:
    # real failure cases, the healthy corpus, the examples and every signature's own test lines
    if not _INSTALLED[backend]:
        pytest.skip(f"{backend} has no wheel for this platform")
    files = _corpus()
    assert len(files) >= 5
    assert any("healthy" in f.parts for f in files) and any("realcases" in f.parts for f in files)
    for f in files:
        a = diagnose_paths([str(f)], backend=backend, workers=1)
        b = diagnose_paths([str(f)], backend="python", workers=1)
        assert a.stats["matcher"] == backend and b.stats["matcher"] == "python"
        assert _comparable(a) == _comparable(b), f
    items = _signature_test_items()
    assert len(items) > 10
    for text in items:
        a = diagnose_texts([("t", text)], backend=backend, workers=1)
        b = diagnose_texts([("t", text)], backend="python", workers=1)
        assert _comparable(a) == _comparable(b), text


@pytest.mark.parametrize("backend", ["hyperscan", "ahocorasick"])
def test_compiled_backends_find_the_same_literal_hits(backend: str) -> None:
    # below the reports: the exact (end, literal) hits, on text made to trip an automaton — literals
    # inside literals, one literal across another's key, case variants of case-sensitive literals
    if not _INSTALLED[backend]:
        pytest.skip(f"{backend} has no wheel for this platform")
    m = get_matcher()
    lits = m.plan.literals
    lines = [" ".join(lits[i:i + 5]) for i in range(0, len(lits), 5)]
    lines += [lit.upper() + lit.swapcase() + lit[1:] + lit for lit in lits]
    buf = ("\n".join(lines) + "\n").encode()
    ref = sorted(set(make_backend(m.plan, "python").find(buf)))
    got = sorted(make_backend(m.plan, backend).find(buf))
    assert len(ref) > len(lits)
    # the compiled backends also report overlapping repeats of one literal; pure Python finds them
    # left to right without overlap, and either way the same lines are candidates
    assert set(ref) <= set(got)
    extra = [(end, i) for end, i in set(got) - set(ref)]
    assert all(buf[end - len(lits[i]):end].lower() == lits[i].lower().encode() for end, i in extra)


def test_backend_is_chosen_automatically(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRIAGE_MATCHER", raising=False)
    expected = "hyperscan" if hyperscan_available() else "ahocorasick" if ahocorasick_available() else "python"
    assert available_backends()[0] == expected
    assert get_matcher().backend_name == expected
    assert make_backend(get_matcher().plan).name == expected


def test_backend_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = get_matcher().plan
    monkeypatch.setenv("TRIAGE_MATCHER", "python")
    assert make_backend(plan).name == "python"
    monkeypatch.setenv("TRIAGE_MATCHER", "aho")
    with pytest.raises(ValueError, match="unknown matcher 'aho'.*hyperscan, ahocorasick, python"):
        make_backend(plan)
    assert BACKENDS == ("hyperscan", "ahocorasick", "python")


def test_small_chunks_give_the_same_lines_and_context(monkeypatch: pytest.MonkeyPatch) -> None:
    target = ROOT / "examples"
    big = diagnose_paths([str(target)], workers=1)
    import bot.engine.reader as reader

    monkeypatch.setattr(reader, "CHUNK", 997)  # boundaries fall inside lines and inside literals
    small = diagnose_paths([str(target)], workers=1)
    assert _comparable(big) == _comparable(small)
    ev_big = [(e.source, e.line, e.before, e.after) for d in big.diagnoses for e in d.evidence]
    ev_small = [(e.source, e.line, e.before, e.after) for d in small.diagnoses for e in d.evidence]
    assert ev_big == ev_small


def test_parallel_range_split_matches_a_single_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import bot.engine.run as run

    seed = (ROOT / "examples" / "seed-nccl-999" / "rank-2.log").read_text()
    filler = "".join(f"[rank{i % 8}]: step {i} loss 2.{i % 97:02d} lr 3e-4\n" for i in range(20000))
    f = tmp_path / "big.log"
    f.write_text(filler + seed + filler + seed.replace("rank2", "rank6").replace("[2]", "[6]") + filler)
    single = diagnose_paths([str(f)], workers=1)
    monkeypatch.setattr(run, "PARALLEL_MIN_BYTES", 1)
    split = diagnose_paths([str(f)], workers=2)
    assert split.stats["workers"] == 2
    assert _comparable(single) == _comparable(split)
    lines = [e.line for e in split.diagnoses[0].evidence]
    text = f.read_text().splitlines()
    for e in split.diagnoses[0].evidence:
        assert e.text.strip() in text[e.line - 1], (e.line, e.text)
    assert max(lines) > 40000


def test_cli_matcher_flag_and_env_force_a_backend() -> None:
    import json
    import os
    import subprocess
    import sys

    target = str(ROOT / "examples" / "seed-nccl-999")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRIAGE_MATCHER", None)

    def run(*args: str, **extra: str) -> dict:
        p = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "--json", *args, target],
                           capture_output=True, text=True, env={**env, **extra}, timeout=120, check=False)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    default = run()
    forced = run("--matcher", "python")
    by_env = run(TRIAGE_MATCHER="ahocorasick") if ahocorasick_available() else None
    assert default["stats"]["matcher"] == available_backends()[0]
    assert forced["stats"]["matcher"] == "python"
    assert [d["signature"] for d in forced["diagnoses"]] == [d["signature"] for d in default["diagnoses"]]
    if by_env is not None:
        assert by_env["stats"]["matcher"] == "ahocorasick"
        assert by_env["diagnoses"] == default["diagnoses"]
    bad = subprocess.run([sys.executable, "-m", "bot.cli.main", "diagnose", "--matcher", "grep", target],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert bad.returncode == 2 and "invalid choice: 'grep'" in bad.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_on_a_tiny_plan(backend: str) -> None:
    # an empty library, a case-insensitive literal, a literal shorter than the automaton's keys
    from bot.engine.backends import ScanPlan

    if not _INSTALLED[backend]:
        pytest.skip(f"{backend} has no wheel for this platform")
    assert make_backend(ScanPlan.build([]), backend).find(b"Xid 79 fallen off the bus") == []
    plan = ScanPlan.build([(["Xid "], False), (["fallen off the bus"], True), (["~]#"], False)])
    got = sorted(make_backend(plan, backend).find(b"NVRM: Xid 79, GPU has FALLEN OFF THE BUS\n[root@gpu ~]# xid "))
    assert got == [(10, 0), (40, 1), (54, 2)]


def test_a_long_line_searched_in_pieces_gives_the_same_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # literals cut by every piece boundary, and a long line's hits spread over many pieces
    import bot.engine.scanner as scanner

    items = [t for t in _signature_test_items() if "\n" not in t][:60]
    long_line = " | ".join(items * 40)  # ~0.5 MB on one line: many pieces, hits everywhere
    f = tmp_path / "long.log"
    f.write_text("[rank0]: start\n" + long_line + "\n" + "\n".join(items[:10]) + "\n" + long_line[::-1] + "\n")
    whole = diagnose_paths([str(f)], workers=1)
    monkeypatch.setattr(scanner, "HIT_PIECE", 997)
    pieces = diagnose_paths([str(f)], workers=1)
    assert whole.diagnoses and _comparable(pieces) == _comparable(whole)


def test_a_15mb_line_of_matches_is_read_without_giving_up(tmp_path: Path) -> None:
    # every few bytes a literal: the regexes see a bounded window, none times out
    f = tmp_path / "one-line.log"
    f.write_bytes((b"NCCL WARN Cuda failure 'unknown error' rank 3 nranks 8 " * 300000)[:15 << 20] + b"\n")
    report = diagnose_paths([str(f)], workers=1)
    assert [d.signature for d in report.diagnoses][:1] == ["nccl-cuda-999"]
    assert report.to_dict()["warnings"] == []
