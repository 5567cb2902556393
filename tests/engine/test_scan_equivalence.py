"""Both scan backends, any chunk size and the parallel range split give identical reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import diagnose_paths, diagnose_texts, get_matcher
from bot.engine.library import default_library
from bot.engine.scanner import hyperscan_available

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


@pytest.mark.skipif(not hyperscan_available(), reason="hyperscan has no wheel for this platform")
def test_hyperscan_and_python_backends_agree_on_the_whole_suite() -> None:
    files = _corpus()
    assert len(files) >= 5
    for f in files:
        a = diagnose_paths([str(f)], backend="hyperscan", workers=1)
        b = diagnose_paths([str(f)], backend="python", workers=1)
        assert _comparable(a) == _comparable(b), f
    items = _signature_test_items()
    assert len(items) > 10
    for text in items:
        a = diagnose_texts([("t", text)], backend="hyperscan", workers=1)
        b = diagnose_texts([("t", text)], backend="python", workers=1)
        assert _comparable(a) == _comparable(b), text


def test_backend_is_chosen_automatically() -> None:
    expected = "hyperscan" if hyperscan_available() else "python"
    assert get_matcher().backend_name == expected


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
