"""The node agent runs on the stock Python of GPU hosts: 3.8 and later (Ubuntu 20.04 has 3.8, RHEL 9
3.9, Ubuntu 22.04 3.10), while the bot needs 3.11.

Two checks run on every interpreter:
* every module under node_agent/ parses with Python 3.8's grammar (`ast.parse(feature_version=(3, 8))`);
* an AST walk refuses what a parse cannot see: 3.9+ standard-library names (str.removeprefix,
  functools.cache, enum.StrEnum, datetime.UTC, zip(strict=), dataclass(slots=/kw_only=) ...), and
  PEP 604/585 forms evaluated at run time (`isinstance(x, int | str)`, `X = list[int]`, annotations
  without `from __future__ import annotations`). The checker is tested on bad snippets below.

And where an old interpreter is on the machine (NODE_AGENT_OLD_PYTHON, or pyenv's 3.8/3.9/3.10), the
agent is really run with it: every module imported, then `node-agent probe --simulate` end to end,
with nothing but the standard library and pynvml on the path.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_http import SECRET, probe

from node_agent.testing import RunningAgent, write_secret

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "node_agent"
MODULES = sorted(p for p in AGENT.rglob("*.py") if "__pycache__" not in p.parts)

# attribute / function names that only exist on newer Pythons (name -> version)
NEW_ATTRS = {
    "removeprefix": "3.9", "removesuffix": "3.9", "is_relative_to": "3.9", "with_stem": "3.9",
    "randbytes": "3.9", "waitstatus_to_exitcode": "3.9", "pidfd_open": "3.9", "pidfd_send_signal": "3.9",
    "BooleanOptionalAction": "3.9", "bit_count": "3.10", "pairwise": "3.10", "hardlink_to": "3.10",
    "get_annotations": "3.10", "stdlib_module_names": "3.10", "orig_argv": "3.10", "aiter": "3.10",
    "anext": "3.10", "UnionType": "3.10", "NoneType": "3.10", "EllipsisType": "3.10", "KW_ONLY": "3.10",
    "StrEnum": "3.11", "ReprEnum": "3.11", "verify": None, "file_digest": "3.11", "chdir": None,
    "TaskGroup": "3.11", "getLevelNamesMapping": "3.11", "ExceptionGroup": "3.11", "add_note": "3.11",
    "Self": "3.11", "LiteralString": "3.11", "Never": "3.11", "assert_never": "3.11", "reveal_type": "3.11",
    "Required": "3.11", "NotRequired": "3.11", "TypeAlias": "3.10", "ParamSpec": "3.10",
    "Concatenate": "3.10", "TypeGuard": "3.10", "Annotated": "3.9", "override": "3.12",
    "batched": "3.12", "walk": None, "UTC": "3.11", "lcm": "3.9", "nextafter": "3.9", "ulp": "3.9",
    "correlation": "3.10", "covariance": "3.10", "linear_regression": "3.10", "exception": None,
}
# names whose meaning depends on the module they come from: (module, name) -> version
NEW_MODULE_ATTRS = {
    ("functools", "cache"): "3.9", ("contextlib", "chdir"): "3.11", ("enum", "verify"): "3.11",
    ("pathlib", "walk"): "3.12", ("sys", "exception"): "3.11", ("asyncio", "timeout"): "3.11",
    ("asyncio", "to_thread"): "3.9", ("typing", "get_type_hints"): "evaluates PEP 604 strings: 3.10",
    ("importlib.resources", "files"): "3.9", ("math", "lcm"): "3.9", ("datetime", "UTC"): "3.11",
}
NEW_MODULES = {"tomllib": "3.11", "zoneinfo": "3.9", "graphlib": "3.9", "importlib.resources.abc": "3.11"}
# keyword arguments that are newer than 3.8: (function name, keyword) -> version
NEW_KEYWORDS = {
    ("zip", "strict"): "3.10", ("dataclass", "slots"): "3.10", ("dataclass", "kw_only"): "3.10",
    ("dataclass", "match_args"): "3.10", ("field", "kw_only"): "3.10", ("bisect", "key"): "3.10",
    ("bisect_left", "key"): "3.10", ("bisect_right", "key"): "3.10", ("insort", "key"): "3.10",
    ("run", "process_group"): "3.11", ("Popen", "process_group"): "3.11", ("Popen", "pipesize"): "3.10",
    ("run", "user"): "3.9", ("Popen", "user"): "3.9", ("Popen", "extra_groups"): "3.9",
    ("basicConfig", "encoding"): "3.9", ("ArgumentParser", "exit_on_error"): "3.9",
    ("sha256", "usedforsecurity"): "3.9", ("new", "usedforsecurity"): "3.9",
}
RUNTIME_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}
ABC_GENERICS = {"Callable", "Iterable", "Iterator", "Mapping", "MutableMapping", "Sequence", "Generator",
                "Awaitable", "Coroutine", "AsyncIterator", "Collection", "Container", "Set", "Hashable"}


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (arguments, returns, annotated assignments)."""
    inside: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            inside.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    mark(arg.annotation)
            mark(node.returns)
        elif isinstance(node, ast.AnnAssign):
            mark(node.annotation)
    return inside


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return node.id if isinstance(node, ast.Name) else ""


def _is_union(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)


def problems(src: str, filename: str = "<src>") -> list[str]:
    """Every construct in `src` that Python 3.8 cannot run, as 'file:line: what (needs 3.x)'."""
    out: list[str] = []
    try:
        tree = ast.parse(src, filename, feature_version=(3, 8))
    except SyntaxError as exc:
        return [f"{filename}:{exc.lineno}: not Python 3.8 syntax: {exc.msg}"]
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    in_ann = _annotation_nodes(tree)

    def bad(node: ast.AST, what: str) -> None:
        out.append(f"{filename}:{getattr(node, 'lineno', '?')}: {what}")

    match_node = getattr(ast, "Match", None)
    trystar = getattr(ast, "TryStar", None)
    for node in ast.walk(tree):
        if match_node is not None and isinstance(node, match_node):
            bad(node, "match statement (needs 3.10)")
        if trystar is not None and isinstance(node, trystar):
            bad(node, "except* (needs 3.11)")
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in NEW_MODULES:
                    bad(node, f"import {a.name} (needs {NEW_MODULES[a.name]})")
        elif (isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__"
              and not node.module.startswith("node_agent")):
            if node.module in NEW_MODULES:
                bad(node, f"from {node.module} (needs {NEW_MODULES[node.module]})")
            for a in node.names:
                key = (node.module, a.name)
                if key in NEW_MODULE_ATTRS:
                    bad(node, f"from {node.module} import {a.name} (needs {NEW_MODULE_ATTRS[key]})")
                elif NEW_ATTRS.get(a.name):
                    bad(node, f"from {node.module} import {a.name} (needs {NEW_ATTRS[a.name]})")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node.value)
            key = (dotted, node.attr)
            if key in NEW_MODULE_ATTRS:
                bad(node, f"{dotted}.{node.attr} (needs {NEW_MODULE_ATTRS[key]})")
            elif NEW_ATTRS.get(node.attr):
                bad(node, f".{node.attr} (needs {NEW_ATTRS[node.attr]})")
        elif isinstance(node, ast.Name) and NEW_ATTRS.get(node.id) and isinstance(node.ctx, ast.Load):
            if node.id in ("aiter", "anext", "ExceptionGroup"):
                bad(node, f"{node.id} (needs {NEW_ATTRS[node.id]})")
        elif isinstance(node, ast.Call):
            fname = _name(node.func)
            for kw in node.keywords:
                if kw.arg and (fname, kw.arg) in NEW_KEYWORDS:
                    bad(node, f"{fname}({kw.arg}=...) (needs {NEW_KEYWORDS[(fname, kw.arg)]})")
            if fname in ("isinstance", "issubclass") and len(node.args) == 2 and _is_union(node.args[1]):
                bad(node, f"{fname}(x, A | B) (needs 3.10): use a tuple")
        elif isinstance(node, ast.With) and len(node.items) > 1:
            pass  # parenthesized form is refused by the 3.8 grammar above
        if id(node) in in_ann:
            if not future and _is_union(node):
                bad(node, "X | Y annotation without `from __future__ import annotations` (needs 3.10)")
            if not future and isinstance(node, ast.Subscript) and _name(node.value) in RUNTIME_GENERICS:
                bad(node, f"{_name(node.value)}[...] annotation without `from __future__ import annotations` "
                          "(needs 3.9)")
            continue
        # evaluated at run time: PEP 585 subscripts of builtins / collections.abc, PEP 604 unions of types
        if isinstance(node, ast.Subscript):
            base = node.value
            if isinstance(base, ast.Name) and base.id in RUNTIME_GENERICS:
                bad(node, f"{base.id}[...] evaluated at run time (needs 3.9): quote it or use typing")
            elif _name(base) in ABC_GENERICS and (isinstance(base, ast.Attribute) or _abc_import(tree, base)):
                bad(node, f"collections.abc.{_name(base)}[...] evaluated at run time (needs 3.9)")
        if _is_union(node) and any(isinstance(side, ast.Constant) and side.value is None
                                   for side in (node.left, node.right)):
            bad(node, "X | None evaluated at run time (needs 3.10)")
    return out


def _abc_import(tree: ast.AST, base: ast.AST) -> bool:
    return isinstance(base, ast.Name) and any(
        isinstance(n, ast.ImportFrom) and n.module == "collections.abc" and any(a.name == base.id for a in n.names)
        for n in ast.walk(tree))


def test_every_agent_module_runs_on_python_3_8() -> None:
    assert len(MODULES) > 20
    found = [p for m in MODULES for p in problems(m.read_text(encoding="utf-8"), str(m.relative_to(ROOT)))]
    assert not found, "node_agent/ must run on Python 3.8:\n" + "\n".join(found)


@pytest.mark.parametrize("src, needle", [
    ("match x:\n    case 1:\n        pass\n", "3.8 syntax"),
    # the 3.9 and 3.10 parsers accept this form whatever feature_version says; 3.8 and 3.11+ refuse it
    pytest.param("with (open('a') as f, open('b') as g):\n    pass\n", "3.8 syntax",
                 marks=pytest.mark.skipif((3, 9) <= sys.version_info[:2] < (3, 11), reason="parser of 3.9/3.10")),
    ("x = 'abc'.removeprefix('a')\n", "removeprefix"),
    ("x = s.removesuffix('a')\n", "removesuffix"),
    ("import enum\nclass E(enum.StrEnum):\n    A = 'a'\n", "StrEnum"),
    ("from enum import StrEnum\n", "StrEnum"),
    ("from functools import cache\n", "cache"),
    ("import functools\n@functools.cache\ndef f(): pass\n", "functools.cache"),
    ("from datetime import UTC\n", "UTC"),
    ("import datetime\nx = datetime.UTC\n", "UTC"),
    ("import math\nx = math.lcm(2, 3)\n", "lcm"),
    ("import tomllib\n", "tomllib"),
    ("for a, b in zip(x, y, strict=True): pass\n", "zip(strict"),
    ("from dataclasses import dataclass\n@dataclass(slots=True)\nclass A: pass\n", "slots"),
    ("from dataclasses import dataclass\n@dataclass(frozen=True, kw_only=True)\nclass A: pass\n", "kw_only"),
    ("isinstance(x, int | float)\n", "isinstance"),
    ("def f(x: int | None) -> None: pass\n", "annotation without"),
    ("def f(x: list[int]) -> None: pass\n", "annotation without"),
    ("from __future__ import annotations\nAlias = dict[str, int]\n", "run time"),
    ("from __future__ import annotations\nfrom collections.abc import Callable\nF = Callable[[int], int]\n",
     "run time"),
    ("from __future__ import annotations\nOpt = int | None\n", "run time"),
    ("import typing\nh = typing.get_type_hints(object)\n", "get_type_hints"),
    ("x = (1).bit_count()\n", "bit_count"),
    ("from itertools import pairwise\n", "pairwise"),
])
def test_the_checker_sees_each_newer_construct(src: str, needle: str) -> None:
    found = problems(src)
    assert any(needle in p for p in found), (src, found)


@pytest.mark.parametrize("src", [
    "from __future__ import annotations\ndef f(x: int | None, y: list[int]) -> dict[str, int]: ...\n",
    "from __future__ import annotations\nfrom dataclasses import dataclass\n@dataclass(frozen=True)\n"
    "class A:\n    x: int | None = None\n",
    "import enum\nclass E(str, enum.Enum):\n    A = 'a'\n",
    "isinstance(x, (int, float))\nfrom functools import lru_cache\nimport hmac\nhmac.compare_digest(a, b)\n",
    "if (n := len(x)) > 3: pass\n",
    "x = {'a': 1}.get('a')\nwith open('a') as f, open('b') as g: pass\n",
])
def test_the_checker_accepts_what_3_8_runs(src: str) -> None:
    assert problems(src) == []


def _old_pythons() -> list[str]:
    env = os.environ.get("NODE_AGENT_OLD_PYTHON")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    found = []
    for minor in ("3.8", "3.9", "3.10"):
        exe = shutil.which(f"python{minor}")
        if exe is None or "pyenv/shims" in exe:  # a shim for a version that is not selected cannot run
            hits = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{minor}.*/bin/python{minor}")))
            exe = hits[-1] if hits else None
        if exe:
            found.append(exe)
    return found


OLD_PYTHONS = _old_pythons()


@pytest.fixture(scope="module")
def stdlib_plus_pynvml(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A path entry that holds only pynvml (a single pure-Python module) and the agent's package."""
    pynvml = pytest.importorskip("pynvml")
    d = tmp_path_factory.mktemp("stdlib-plus-pynvml")
    shutil.copy(pynvml.__file__, d / "pynvml.py")
    return os.pathsep.join([str(d), str(ROOT)])


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python 3.8-3.10 here (set NODE_AGENT_OLD_PYTHON=/path/to/python3.8)")
@pytest.mark.parametrize("python", OLD_PYTHONS)
def test_the_agent_runs_on_an_old_interpreter(python: str, stdlib_plus_pynvml: str, tmp_path: Path) -> None:
    # -s: no user site; PYTHONPATH: pynvml and the agent, nothing of the bot's stack
    env = {**os.environ, "PYTHONPATH": stdlib_plus_pynvml, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("NODE_AGENT_CONFIG", None)
    mods = [".".join(m.relative_to(ROOT).with_suffix("").parts) for m in MODULES]
    mods = [m[:-len(".__init__")] if m.endswith(".__init__") else m for m in mods if not m.endswith("__main__")]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\nprint(sys.version_info[:2])"
    p = subprocess.run([python, "-s", "-c", code, *mods], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    version = p.stdout.strip()
    p = subprocess.run([python, "-s", "-m", "node_agent", "--version"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("node-agent "), p.stdout + p.stderr
    p = subprocess.run([python, "-s", "-m", "node_agent", "probe", "--json", "--simulate", "seed-8xh200",
                        "--job-id", "1234", "--job-gpus", "0,1,2,3"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    answer = json.loads(p.stdout)
    by_probe = {r["probe"]: r for r in answer["results"]}
    assert by_probe["processes"]["health"] == "degraded", (version, by_probe["processes"])
    assert any(f["code"] == "foreign-process" for f in by_probe["processes"]["findings"])
    assert {r["health"] for r in answer["results"]} <= {"ok", "degraded", "failed", "unknown"}
    # and the same answer as this interpreter gives (timings aside)
    here = subprocess.run([sys.executable, "-m", "node_agent", "probe", "--json", "--simulate", "seed-8xh200",
                           "--job-id", "1234", "--job-gpus", "0,1,2,3"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    mine = json.loads(here.stdout)

    def gist(a: dict) -> list:
        return [(r["probe"], r["health"], r["reason"], [f["code"] for f in r["findings"]]) for r in a["results"]]

    assert gist(answer) == gist(mine), version

    # a signed probe round against `node-agent serve --simulate` started with that interpreter
    secret = write_secret(tmp_path / "secret", SECRET)
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([python, "-s", "-m", "node_agent", "serve", "--listen", "127.0.0.1:0",
                                 "--secret-file", str(secret), "--simulate", "seed-8xh200"],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    agent = RunningAgent(proc, "", log_path)
    try:
        deadline = time.monotonic() + 30
        while not (m := re.search(r"listening on (http://[\d.]+:\d+)", agent.log())):
            assert proc.poll() is None and time.monotonic() < deadline, agent.log()
            time.sleep(0.05)
        agent.url = m.group(1)
        served = probe(agent, job_id="1234", job_gpus=[0, 1, 2, 3], window={"start": 1, "end": time.time()})
        assert gist(served) == gist(mine), (version, agent.log())
    finally:
        agent.stop()
