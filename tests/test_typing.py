"""mypy reports 0 errors on bot/ and node_agent/ (configuration: [tool.mypy] in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (it comes with `pip install -e '.[test]'`)")
    p = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
