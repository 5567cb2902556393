"""The two distributions and the zipapp, built from this tree and used the way a GPU host would.

gpu-triage (bot, CLI, library) installs the signature library as `gpu_triage_signatures` (no
top-level `signatures`, a name another PyPI distribution owns); gpu-triage-agent and the zipapp hold
the node agent alone and run on the stock Python 3.8/3.9 of GPU hosts, where a signed probe round
against `--simulate` must answer. Pythons 3.8/3.9 come from pyenv (skipped without it; under CI a
missing one fails, since a skip there would hide that the agent was never run on them).
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent import __version__

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "agent" / "build.py"
SECRET = "dist-test-secret-0123456789abcdef"
LISTEN_RE = re.compile(r"listening on (http://[\d.]+:\d+)")

pytestmark = pytest.mark.slow


def _pyenv_python(minor: str) -> Path:
    found = sorted(Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")).glob(f"versions/{minor}.*/bin/python{minor}"))
    if not found:
        why = f"no Python {minor} under pyenv"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the agent on Python {minor}, but: {why}", pytrace=False)
        pytest.skip(why)
    return found[-1]


def _run(cmd: list[str | Path], timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:  # noqa: ANN003
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert p.returncode == 0, f"{cmd}: rc={p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def agent_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("agent-dist")
    t0 = time.monotonic()
    p = _run([sys.executable, BUILD, "wheel", "zipapp", "--out", out])
    print(f"[dist] agent wheel + zipapp built in {time.monotonic() - t0:.1f}s")
    made = [Path(line) for line in p.stdout.split()]
    return {"wheel": next(m for m in made if m.suffix == ".whl"), "zipapp": next(m for m in made if m.suffix == ".pyz")}


def _metadata(whl: Path) -> email.message.Message:
    with zipfile.ZipFile(whl) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def test_agent_wheel_is_the_node_agent_alone_on_python_3_8(agent_builds: dict[str, Path]) -> None:
    whl = agent_builds["wheel"]
    assert whl.name == f"gpu_triage_agent-{__version__}-py3-none-any.whl"
    meta = _metadata(whl)
    assert meta["Name"] == "gpu-triage-agent" and meta["Version"] == __version__
    assert meta["Requires-Python"] == ">=3.8"
    assert meta.get_all("Requires-Dist") == ["nvidia-ml-py>=13.580.65"]
    assert meta["License-Expression"] == "Apache-2.0"
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"node_agent", f"gpu_triage_agent-{__version__}.dist-info"}
    for want in ("node_agent/cli.py", "node_agent/nvml/worker.py", "node_agent/data/xid-catalog.json",
                 "node_agent/scenarios/xid79-gpu-lost.json", f"gpu_triage_agent-{__version__}.dist-info/licenses/LICENSE"):
        assert want in names, want
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # The agent's own requirement and the bot's must not drift apart (the bot runs the same agent code).
    bot = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"nvidia-ml-py>=13.580.65"' in bot


def _serve(cmd: list[str], tmp: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str, Path]:
    secret = tmp / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    log = tmp / "agent.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*cmd, "serve", "--simulate", "xid79-gpu-lost", "--listen", "127.0.0.1:0",
                                 "--secret-file", str(secret)], stdout=fh, stderr=subprocess.STDOUT, cwd=tmp,
                                env={**os.environ, **(env or {})})
    end = time.monotonic() + 30
    while time.monotonic() < end:
        m = LISTEN_RE.search(log.read_text(errors="replace"))
        if m:
            return proc, m.group(1), log
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"agent did not start: {log.read_text(errors='replace')}")


def _signed_probe_round(url: str) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "node_agent"))
    try:
        import agent_http
    finally:
        sys.path.pop(0)

    class Agent:
        pass

    agent = Agent()
    agent.url = url  # type: ignore[attr-defined]
    body = json.dumps({"probes": ["inventory", "xid"], "nonce": os.urandom(8).hex()}).encode()
    status, answer = agent_http.request(url, "POST", "/v1/probe", body, agent_http.signed(body, secret=SECRET))
    assert status == 200, answer
    unsigned_status, _ = agent_http.request(url, "POST", "/v1/probe", body, {"Content-Type": "application/json"})
    assert unsigned_status == 401
    return answer


def _assert_xid79(answer: dict) -> None:
    by = {r["probe"]: r for r in answer["results"]}
    assert by["inventory"]["health"] == "failed"
    assert [f["gpu"] for f in by["inventory"]["findings"] if f["code"] == "gpu-lost"] == [3]
    f79 = next(f for f in by["xid"]["findings"] if f.get("xid") == 79)
    assert f79["gpu"] == 3 and "fell off the PCIe bus" in f79["meaning"]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def agent_venv_39(agent_builds: dict[str, Path], tmp_path: Path) -> Iterator[Path]:
    py = _pyenv_python("3.9")
    venv = tmp_path / "venv39"
    _run([py, "-m", "venv", venv])
    t0 = time.monotonic()
    _run([venv / "bin" / "pip", "install", "--quiet", agent_builds["wheel"]])
    print(f"[dist] gpu-triage-agent installed into a fresh 3.9 venv in {time.monotonic() - t0:.1f}s")
    yield venv


def test_agent_wheel_installs_on_python_3_9_with_only_nvidia_ml_py_and_answers(agent_venv_39: Path,
                                                                              tmp_path: Path) -> None:
    listed = _run([agent_venv_39 / "bin" / "python", "-m", "pip", "list", "--format=json"]).stdout
    names = {d["name"].lower() for d in json.loads(listed)} - {"pip", "setuptools", "wheel"}
    assert names == {"gpu-triage-agent", "nvidia-ml-py"}
    v = _run([agent_venv_39 / "bin" / "node-agent", "--version"]).stdout.strip()
    assert v == f"node-agent {__version__}"
    proc, url, log = _serve([str(agent_venv_39 / "bin" / "node-agent")], tmp_path)
    try:
        _assert_xid79(_signed_probe_round(url))
    finally:
        _stop(proc)


def test_zipapp_runs_on_python_3_8_with_nothing_installed(agent_builds: dict[str, Path], tmp_path: Path) -> None:
    pyz = agent_builds["zipapp"]
    with zipfile.ZipFile(pyz) as zf:
        names = set(zf.namelist())
    assert {"__main__.py", "pynvml.py", "node_agent/cli.py", "node_agent/scenarios/xid79-gpu-lost.json"} <= names
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    py = _pyenv_python("3.8")
    # -I: no site-packages, no PYTHONPATH, no cwd: the zipapp must bring everything it imports.
    assert _run([py, "-I", pyz, "--version"]).stdout.strip() == f"node-agent {__version__}"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc, url, log = _serve([str(py), "-I", str(pyz)], tmp_path, env={"TMPDIR": str(tmpdir)})
    try:
        _assert_xid79(_signed_probe_round(url))
        unpacked = list(tmpdir.glob("node-agent-data-*"))
        assert len(unpacked) == 1, "the agent and its NVML worker share one unpacked copy of the data"
    finally:
        _stop(proc)
    assert proc.returncode == 0, log.read_text(errors="replace")
    assert not list(tmpdir.glob("node-agent-data-*")), "the unpacked data outlived the agent"


def test_bot_wheel_installs_the_signatures_under_a_name_nobody_else_uses(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("bot", "node_agent", "signatures"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / "out"
    t0 = time.monotonic()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", out, src], timeout=600)
    print(f"[dist] gpu-triage wheel built in {time.monotonic() - t0:.1f}s")
    whl = next(out.glob("gpu_triage-*.whl"))
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        top_level = zf.read(next(n for n in names if n.endswith("top_level.txt"))).decode().split()
    assert sorted(top_level) == ["bot", "gpu_triage_signatures", "node_agent"]
    assert not [n for n in names if n.startswith("signatures/")]
    # every module, namespace packages included (bot/slack has no __init__.py)
    missing = [str(p.relative_to(ROOT)) for d in ("bot", "node_agent") for p in (ROOT / d).rglob("*.py")
               if "__pycache__" not in p.parts and str(p.relative_to(ROOT)) not in names]
    assert missing == []
    assert "gpu_triage_signatures/schema.json" in names
    assert sum(n.endswith(".yaml") for n in names if n.startswith("gpu_triage_signatures/")) == \
        sum(1 for _ in (ROOT / "signatures").rglob("*.yaml"))
    # Installed without the checkout, the bundled library is found by its new name and diagnoses.
    site = tmp_path / "site"
    with zipfile.ZipFile(whl) as zf:
        zf.extractall(site)
    code = ("from bot.engine.library import default_root, load_library; r = default_root(); "
            "lib = load_library(r); print(r); print(len(lib.signatures), len(lib.problems))")
    p = _run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    root, counts = p.stdout.split("\n")[:2]
    assert Path(root) == site / "gpu_triage_signatures"
    n, problems = map(int, counts.split())
    assert n > 50 and problems == 0
