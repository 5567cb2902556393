"""Packaging: the licence, one version, the commands that print it, and what the sdist carries."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _version() -> str:
    from node_agent import __version__

    return __version__


def test_licence_is_the_apache_2_0_text_pyproject_names() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text and "END OF TERMS AND CONDITIONS" in text
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]


def test_the_version_lives_in_one_place() -> None:
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "node_agent.__version__"}
    literal = re.compile(r"""^__version__\s*=\s*["']""", re.M)
    holders = [str(p.relative_to(ROOT)) for d in ("bot", "node_agent") for p in (ROOT / d).rglob("*.py")
               if literal.search(p.read_text(encoding="utf-8"))]
    assert holders == ["node_agent/__init__.py"]
    import bot

    assert bot.__version__ == _version()
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc)?\d*", _version())


def test_deploy_images_are_tagged_with_the_version() -> None:
    for f in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        for tag in re.findall(r"image:\s*\S+:(\S+)", f.read_text(encoding="utf-8")):
            assert tag == _version(), f"{f.name}: image tag {tag} is not the version {_version()}"


@pytest.mark.parametrize("argv, prog", [
    (["-m", "bot", "--version"], "triage"),
    (["-m", "bot.cli.main", "--version"], "triage"),
    (["-m", "node_agent", "--version"], "node-agent"),
])
def test_commands_print_the_version(argv: list[str], prog: str) -> None:
    p = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"{prog} {_version()}"


def test_python_m_bot_is_the_triage_command() -> None:
    p = subprocess.run([sys.executable, "-m", "bot", "diagnose", "--json", "examples/seed-nccl-999"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert '"nccl-cuda-999"' in p.stdout
    p = subprocess.run([sys.executable, "-m", "bot"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "usage: triage" in p.stderr


def test_manifest_carries_deploy_docs_and_examples() -> None:
    lines = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
    for d in ("deploy", "docs", "examples"):
        assert f"graft {d}" in lines
    assert any(line.startswith("include LICENSE") for line in lines)


def _setuptools_new_enough() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


@pytest.mark.slow
@pytest.mark.skipif(not _setuptools_new_enough(), reason="needs setuptools >= 77 here (the build requirement)")
def test_sdist_holds_licence_deploy_docs_and_examples(tmp_path: Path) -> None:
    code = ("import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    name = p.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for want in ("LICENSE", "README.md", "deploy/systemd/triage-bot.service", "deploy/systemd/node-agent.service",
                 "deploy/slurm/triage_notify.py", "docs/node-agent.md", "examples/seed-nccl-999/rank-0.log",
                 "node_agent/data/xid-catalog.json", "signatures/schema.json"):
        assert want in names, want
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
