"""signatures/handled.yaml: lines that report an error the software handled stay silent in every signature,
and each entry earns its place (without it, its examples would fire a diagnosis)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bot.engine import diagnose_texts
from bot.engine.library import HANDLED_FILE, default_library, default_root, load_library

LIB = default_library()
ENTRIES = __import__("yaml").safe_load((default_root() / HANDLED_FILE).read_text())["handled"]


@pytest.fixture(scope="module")
def library_without_handled(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("lib") / "signatures"
    shutil.copytree(default_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / HANDLED_FILE).unlink()
    return load_library(root)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_handled_lines_are_silent_and_needed(entry: dict, library_without_handled) -> None:  # noqa: ANN001
    for line in entry["examples"]:
        assert diagnose_texts([("serve.log", line)], library=LIB).diagnoses == [], line
        fired = diagnose_texts([("serve.log", line)], library=library_without_handled).diagnoses
        assert fired, f"{entry['name']}: nothing fires on {line!r} even without the entry"


def test_a_handled_line_does_not_hide_the_real_failure_after_it() -> None:
    log = ("[2025-11-01 16:50:36 TP1] Setup Custom allreduce failed with CUDART error: peer access is not supported "
           "between these two devices. To silence this warning, specify --disable-custom-all-reduce explicitly.\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of "
           "23.52 GiB of which 20.06 MiB is free.\n")
    assert [d.signature for d in diagnose_texts([("serve.log", log)], library=LIB).diagnoses] == ["cuda-oom"]


def test_a_broken_entry_is_reported_with_its_file(tmp_path: Path) -> None:
    root = tmp_path / "signatures"
    shutil.copytree(default_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / HANDLED_FILE).write_text(
        "handled:\n  - name: bad\n    regex: '(unclosed'\n    note: x\n    examples: ['a']\n"
        "  - name: misses\n    regex: 'never'\n    note: x\n    examples: ['some line']\n  - name: bare\n")
    problems = [str(p) for p in load_library(root).problems]
    assert any(HANDLED_FILE in p and "bad" in p and "compile" in p for p in problems), problems
    assert any("misses" in p and "misses its example" in p for p in problems), problems
    assert any("handled[2]" in p for p in problems), problems
