"""`triage completion bash|zsh`: the printed scripts complete the real commands in real shells."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(shell: str) -> str:
    p = subprocess.run([sys.executable, "-m", "bot", "completion", shell], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "triage.bash"
    path.write_text(_script("bash"))
    return path


def _bash_complete(script: Path, line: str, cwd: Path = ROOT) -> list[str]:
    """What bash offers after `line` (the word at the cursor is the last one; a trailing space starts a new one)."""
    words = line.split(" ")
    prog = (f"source {script}; COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
            "_triage; printf '%s\\n' \"${COMPREPLY[@]}\"")
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], cwd=cwd, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return [w for w in p.stdout.splitlines() if w]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_subcommands_options_and_choices(bash_script: Path, tmp_path: Path) -> None:
    assert _bash_complete(bash_script, "triage dia") == ["diagnose"]
    assert sorted(_bash_complete(bash_script, "triage ")) == ["completion", "diagnose", "probe", "serve", "signatures"]
    assert sorted(_bash_complete(bash_script, "triage signatures l")) == ["lint", "list"]
    assert _bash_complete(bash_script, "triage diagnose --j") == ["--json"]
    assert _bash_complete(bash_script, "triage serve --log-format ") == ["text", "json"]
    assert sorted(_bash_complete(bash_script, "triage completion ")) == ["bash", "zsh"]
    # the value of an option is not taken for a subcommand: `--agent-url list` stays in diagnose
    assert "--json" in _bash_complete(bash_script, "triage diagnose --agent-url list --")
    # paths where paths go, nothing where no one can guess the value (a port)
    (tmp_path / "rank-0.log").write_text("x")
    assert _bash_complete(bash_script, "triage diagnose ra", cwd=tmp_path) == ["rank-0.log"]
    assert _bash_complete(bash_script, "triage diagnose --agent-secret-file ra", cwd=tmp_path) == ["rank-0.log"]
    assert _bash_complete(bash_script, "triage serve --port ", cwd=tmp_path) == []


def test_the_script_follows_the_parser() -> None:
    """A new option or subcommand shows up without anyone editing the script."""
    import argparse

    from bot.cli.completion_cmd import script

    parser = argparse.ArgumentParser(prog="triage")
    sub = parser.add_subparsers()
    fresh = sub.add_parser("frobnicate")
    fresh.add_argument("--level", choices=["low", "high"])
    text = script("bash", parser)
    assert "frobnicate" in text and "'frobnicate|--level') echo 'low high'" in text


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh (apt-get install zsh)")
def test_zsh_script_loads_after_compinit_and_offers_the_same_words(tmp_path: Path) -> None:
    path = tmp_path / "_triage"
    path.write_text(_script("zsh"))
    assert path.read_text().startswith("#compdef triage\n")
    prog = (f"autoload -U compinit && compinit -u -d {tmp_path}/zcompdump; eval \"$(<{path})\"; "
            "print -r -- ${_comps[triage]}; _triage_words triage signatures l; _triage_words triage serve --log-format")
    p = subprocess.run(["zsh", "-f", "-c", prog], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "_triage"  # registered for the triage command
    assert lines[1].split()[:3] == ["lint", "test", "list"]
    assert lines[2] == "text json"
