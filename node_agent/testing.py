"""Start real simulated agents on loopback, for tests and benchmarks (127.0.0.x act as separate hosts)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

_PKG_PARENT = str(Path(__file__).resolve().parents[1])
_LISTEN_RE = re.compile(r"listening on (https?://[\d.]+:\d+)")


def write_secret(path: Path, secret: str = "test-secret-0123456789abcdef", mode: int = 0o600) -> Path:
    path.write_text(secret + "\n", encoding="utf-8")
    os.chmod(path, mode)
    return path


def free_port(addresses: list[str]) -> int:
    """A port that is free on every one of the addresses (so one URL template fits all agents)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        try:
            for addr in addresses[1:]:
                with socket.socket() as t:
                    t.bind((addr, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on all addresses")


@dataclass
class RunningAgent:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # in case a test stopped it
            except ProcessLookupError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def agent_command(secret_file: Path | None, listen: str | None, scenario: str | None = None, name: str | None = None,
                  extra: list[str] | None = None) -> list[str]:
    """The serve command line; None leaves a setting to the config file or environment."""
    cmd = [sys.executable, "-m", "node_agent", "serve"]
    if listen is not None:
        cmd += ["--listen", listen]
    if secret_file is not None:
        cmd += ["--secret-file", str(secret_file)]
    if scenario:
        cmd += ["--simulate", scenario]
    if name:
        cmd += ["--name", name]
    return cmd + list(extra or [])


def start_agent(secret_file: Path | None, log_dir: Path, scenario: str | None = "healthy-8xh100",
                address: str | None = "127.0.0.1", port: int = 0, name: str | None = None,
                extra: list[str] | None = None, env: dict[str, str] | None = None,
                wait_s: float = 20.0) -> RunningAgent:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"agent-{address}-{port}-{time.monotonic_ns()}.log"
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_PARENT, full_env.get("PYTHONPATH", "")) if p)
    with open(log_path, "wb") as log:
        listen = None if address is None else f"{address}:{port}"
        proc = subprocess.Popen(agent_command(secret_file, listen, scenario, name, extra),
                                stdout=log, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        m = _LISTEN_RE.search(log_path.read_text(errors="replace"))
        if m:
            return RunningAgent(proc, m.group(1), log_path)
        if proc.poll() is not None:
            raise RuntimeError(f"agent exited with {proc.returncode}: {log_path.read_text(errors='replace')}")
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"agent did not start in {wait_s} s: {log_path.read_text(errors='replace')}")


@contextmanager
def running_agent(base: Path, scenario: str, name: str, *, address: str = "127.0.0.1", port: int = 0,
                  secret: str = "test-secret-0123456789abcdef",
                  extra: list[str] | None = None) -> Iterator[tuple[RunningAgent, Path]]:
    """A simulated agent for `name` with its own secret file under `base`: (agent, secret file); stopped after."""
    secret_file = write_secret(base / "agent.secret", secret)
    agent = start_agent(secret_file, base, scenario, address=address, port=port, name=name, extra=extra)
    try:
        yield agent, secret_file
    finally:
        agent.stop()


def write_agent_map(path: Path, hosts: dict[str, str]) -> Path:
    """The bot's agent map (`host: url` lines)."""
    path.write_text("".join(f"{host}: {url}\n" for host, url in hosts.items()), encoding="utf-8")
    return path
