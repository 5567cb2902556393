"""Shared pytest fixtures. Test data lives in tests/ (never ../shared)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # the compiled-library cache must not leak between test runs and the user's home
    os.environ.setdefault("TRIAGE_CACHE_DIR", str(tmp_path_factory.mktemp("triage-cache")))


@pytest.fixture(scope="session")
def fixture_library():
    from bot.engine.library import load_library

    lib = load_library(FIXTURES / "library")
    assert not lib.problems, lib.problems
    return lib
