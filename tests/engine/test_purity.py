"""The engine stays pure: no Slack, HTTP, SQLite or network import anywhere under bot/engine."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "bot" / "engine"
FORBIDDEN = ("slack_bolt", "slack_sdk", "sqlite_utils", "sqlite3", "http", "urllib", "requests", "httpx",
             "socket", "aiohttp", "bot.slack", "bot.store", "bot.probes", "bot.service", "node_agent.server")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def test_engine_imports_nothing_impure() -> None:
    files = sorted(ENGINE.rglob("*.py"))
    assert len(files) > 5
    bad = [(f.name, mod) for f in files for mod in _imports(f)
           if any(mod == x or mod.startswith(x + ".") for x in FORBIDDEN)]
    assert bad == []


def test_the_check_catches_an_impure_import(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("import json\nfrom slack_sdk import WebClient\nfrom http.server import HTTPServer\n")
    assert [m for m in _imports(f) if any(m == x or m.startswith(x + ".") for x in FORBIDDEN)] == [
        "slack_sdk", "http.server"]
