"""The shipped library: lint clean, every taxonomy id present, every signature's own tests pass
(one pytest id per signature, like semgrep's per-rule tests)."""

from __future__ import annotations

import pytest

from bot.engine.library import default_library
from bot.engine.lint import lint, run_tests, taxonomy_ids

LIB = default_library()


def test_lint_is_clean() -> None:
    problems = lint(LIB, taxonomy_ids())
    assert [str(p) for p in problems] == []


def test_every_taxonomy_id_has_a_signature() -> None:
    tax = taxonomy_ids()
    assert len(tax) >= 79
    assert sorted(set(tax) - set(LIB.signatures)) == []


@pytest.mark.parametrize("sig_id", sorted(LIB.signatures))
def test_signature_own_tests(sig_id: str) -> None:
    count, failures = run_tests(LIB, {sig_id})
    assert count >= 5
    assert [str(f) for f in failures] == []


@pytest.mark.parametrize("sig_id", sorted(LIB.signatures))
def test_signature_is_actionable(sig_id: str) -> None:
    sig = LIB.signatures[sig_id]
    assert sig.causes and all(c.action_text for c in sig.causes)
    assert sig.references
    assert len(sig.tests.get("match", [])) >= 3 and len(sig.tests.get("no_match", [])) >= 2
