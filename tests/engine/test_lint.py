"""`triage signatures lint` reports every problem of a broken library, each with its file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from bot.engine.library import load_library
from bot.engine.lint import lint, run_tests

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "library"


def _broken(tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    shutil.copytree(FIXTURE, root)
    (root / "cuda" / "bad-yaml.yaml").write_text("id: bad-yaml\ntitle: [unclosed\n")
    good = (root / "cuda" / "fx-kernel.yaml").read_text()
    (root / "cuda" / "wrong-name.yaml").write_text(good)  # id differs from the file stem
    (root / "application" / "fx-misfiled.yaml").write_text(
        good.replace("id: fx-kernel", "id: fx-misfiled"))  # family cuda in folder application
    (root / "cuda" / "unknown-key.yaml").write_text(
        good.replace("id: fx-kernel", "id: unknown-key").replace("priority: 90", "priority: 90\ncolour: red"))
    (root / "cuda" / "bad-regex.yaml").write_text(
        good.replace("id: fx-kernel", "id: bad-regex").replace('regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"',
                                                               'regex: "NVRM: (unclosed"'))
    (root / "cuda" / "no-literal.yaml").write_text(
        good.replace("id: fx-kernel", "id: no-literal").replace('regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"',
                                                                'regex: "\\\\d+ x \\\\w+"'))
    (root / "cuda" / "bad-condition.yaml").write_text(
        good.replace("id: fx-kernel", "id: bad-condition")
        .replace("    summary: GPU hardware\n", "    summary: GPU hardware\n    confirmed_by:\n      - text: '(unclosed'\n")
        .replace('regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"', 'regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)(?<=(?P<x>a|bc))"\n    literal: "FIXTUREXID"'))
    (root / "cuda" / "few-tests.yaml").write_text(
        good.replace("id: fx-kernel", "id: few-tests")
        .replace('match: ["NVRM: FIXTUREXID 79", "[123.4] NVRM: FIXTUREXID 48", "Nov 26 02:44:03 h kernel: NVRM: FIXTUREXID 1"]',
                 'match: ["NVRM: FIXTUREXID 79", "NVRM: FIXTUREXID x7"]')
        .replace("priority: 90", "priority: 90\nsecondary_to: [no-such-signature]\necho_after: [few-tests]")
        .replace('regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"',
                 'regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"\n    echo_after: [no-such-kill]'))
    return root


def test_every_problem_is_reported_with_its_file(tmp_path: Path) -> None:
    root = _broken(tmp_path)
    lib = load_library(root)
    problems = [str(p) for p in lint(lib, taxonomy={"fx-kernel": {"family": "cuda"}, "missing-one": {"family": "cuda"}})]
    expect = {
        "cuda/bad-yaml.yaml": "not valid YAML",
        "cuda/wrong-name.yaml": "differs from the file name",
        "application/fx-misfiled.yaml": "differs from its folder",
        "cuda/unknown-key.yaml": "colour",
        "cuda/bad-regex.yaml": "does not compile",
        "cuda/no-literal.yaml": "no required literal",
        # conditions compile lazily when loading, so lint compiles them
        "cuda/bad-condition.yaml": "condition regex '(unclosed' does not compile",
        "taxonomy.yaml": "'missing-one' has no signature file",
    }
    for file, words in expect.items():
        assert any(p.startswith(file + ":") and words in p for p in problems), (file, words, problems)
    # a pattern the stdlib parser rejects but `regex` compiles (variable-width lookbehind) is fine
    assert not [p for p in problems if p.startswith("cuda/bad-condition.yaml:") and "pattern" in p]
    few = [p for p in problems if p.startswith("cuda/few-tests.yaml:")]
    assert any("at least 3 tests.match" in p for p in few)
    assert any("secondary_to 'no-such-signature'" in p for p in few)
    assert any("echo_after 'few-tests' is not another signature" in p for p in few)
    assert any("pattern 'xid': echo_after 'no-such-kill' is not another signature" in p for p in few)
    # the failing test line of few-tests is found by running the signature's own tests
    _, failures = run_tests(lib, {"few-tests"})
    assert [f.text for f in failures] == ["NVRM: FIXTUREXID x7"]


def test_cli_lint_exit_status(tmp_path: Path) -> None:
    root = _broken(tmp_path)
    p = subprocess.run([sys.executable, "-m", "bot.cli.main", "signatures", "lint", "--dir", str(root)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "cuda/bad-regex.yaml:" in p.stdout and "cuda/no-literal.yaml:" in p.stdout
    ok = subprocess.run([sys.executable, "-m", "bot.cli.main", "signatures", "test", "--dir", str(FIXTURE)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_fixture_library_tests_pass(fixture_library) -> None:  # noqa: ANN001
    count, failures = run_tests(fixture_library)
    assert count >= 20 and failures == []


def test_rated_code_must_name_a_capture(tmp_path: Path) -> None:
    root = tmp_path / "lib"
    shutil.copytree(FIXTURE, root)
    good = (root / "cuda" / "fx-kernel.yaml").read_text()
    (root / "cuda" / "fx-kernel.yaml").write_text(
        good.replace('regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"', 'regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"\n    rated_code: sxid'))
    problems = [str(p) for p in lint(load_library(root), taxonomy={})]
    assert any("cuda/fx-kernel.yaml:" in p and "rated_code 'sxid'" in p for p in problems), problems
    (root / "cuda" / "fx-kernel.yaml").write_text(good.replace("    rated_code: sxid", "").replace(
        'regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"', 'regex: "NVRM: FIXTUREXID (?P<xid>\\\\d+)"\n    rated_code: xid'))
    assert not [p for p in map(str, lint(load_library(root), taxonomy={})) if "rated_code" in p]
