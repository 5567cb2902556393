"""Kubernetes pod names in logs reach the agent of the pod's node: the map writer and the bot re-reading it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bot.service.probing import Prober
from node_agent.testing import start_agent, write_secret

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "sa-token-for-tests"


def _pod(name: str, node: str, host_ip: str, ns: str = "train") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"nodeName": node},
            "status": {"phase": "Running", "hostIP": host_ip}}


@pytest.fixture
def api() -> Iterator[dict[str, Any]]:
    """A loopback HTTP server answering GET /api/v1/pods the way the API server does (list of pods)."""
    state: dict[str, Any] = {"pods": [], "requests": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            state["requests"].append((self.path, self.headers.get("Authorization")))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps({"kind": "PodList", "apiVersion": "v1", "items": state["pods"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield state
    finally:
        srv.shutdown()
        srv.server_close()


def _write_map(api: dict[str, Any], tmp_path: Path, token: str = TOKEN) -> subprocess.CompletedProcess[str]:
    (tmp_path / "token").write_text(token + "\n")
    return subprocess.run([sys.executable, "-m", "bot.probes.k8s_map", "--once", "--api", api["url"],
                           "--out", str(tmp_path / "agents.yaml")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "K8S_MAP_TOKEN_FILE": str(tmp_path / "token"),
                                           "PYTHONPATH": str(ROOT)})


def test_map_names_each_running_pod_and_node_with_its_nodes_agent(api: dict[str, Any], tmp_path: Path) -> None:
    api["pods"] = [_pod("llama-pytorchjob-worker-3", "gpu-node-07", "10.20.0.7"),
                   _pod("trainer-7d9f8b6c5d-x2k4p", "gpu-node-17", "10.20.0.17"),
                   _pod("same-name-worker-0", "gpu-node-07", "10.20.0.7", ns="a"),
                   _pod("same-name-worker-0", "gpu-node-17", "10.20.0.17", ns="b"),  # ambiguous: left out
                   _pod("pending-worker-1", "", "")]
    p = _write_map(api, tmp_path)
    assert p.returncode == 0, p.stderr
    assert api["requests"][0][0] == "/api/v1/pods?fieldSelector=status.phase%3DRunning"
    import yaml

    assert yaml.safe_load((tmp_path / "agents.yaml").read_text()) == {
        "llama-pytorchjob-worker-3": "http://10.20.0.7:9477", "gpu-node-07": "http://10.20.0.7:9477",
        "trainer-7d9f8b6c5d-x2k4p": "http://10.20.0.17:9477", "gpu-node-17": "http://10.20.0.17:9477"}


def test_a_refused_token_keeps_the_last_map_and_says_why(api: dict[str, Any], tmp_path: Path) -> None:
    api["pods"] = [_pod("llama-pytorchjob-worker-3", "gpu-node-07", "10.20.0.7")]
    assert _write_map(api, tmp_path).returncode == 0
    before = (tmp_path / "agents.yaml").read_text()
    p = _write_map(api, tmp_path, token="wrong")
    assert p.returncode == 1 and "agent map not refreshed" in p.stderr and "401" in p.stderr
    assert (tmp_path / "agents.yaml").read_text() == before


def test_the_bot_probes_a_pod_through_the_map_once_the_writer_names_it(api: dict[str, Any], tmp_path: Path) -> None:
    secret = write_secret(tmp_path / "agent.secret")
    agent = start_agent(secret, tmp_path / "logs", scenario="xid79-gpu-lost", address="127.0.0.1")
    try:
        port = int(agent.url.rsplit(":", 1)[1])
        api["pods"] = [_pod("other-worker-0", "gpu-node-01", "127.0.0.1")]
        assert _write_map(api, tmp_path).returncode == 0
        prober = Prober(None, str(tmp_path / "agents.yaml"), str(secret))
        pod = "llama-pytorchjob-worker-3"
        first = prober.probe([pod], probes=["xid"])[pod]
        assert not first.get("reachable"), first  # not in the map yet: not probed
        # The pod starts on the node; the sidecar rewrites the map (the agent's port stands in for 9477).
        api["pods"].append(_pod(pod, "gpu-node-07", "127.0.0.1"))
        time.sleep(0.01)  # a new mtime even on coarse clocks
        p = subprocess.run([sys.executable, "-m", "bot.probes.k8s_map", "--once", "--api", api["url"], "--port",
                            str(port), "--out", str(tmp_path / "agents.yaml")], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                                       "K8S_MAP_TOKEN_FILE": str(tmp_path / "token")})
        assert p.returncode == 0, p.stderr
        second = prober.probe([pod], probes=["xid"])[pod]
        assert second.get("reachable"), second
        xid = next(r for r in second["results"] if r["probe"] == "xid")
        assert any(f.get("xid") == 79 for f in xid["findings"])
    finally:
        agent.stop()
