"""Nothing outside the allow-list is contacted; a captured signed request cannot be replayed."""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path

import pytest

from bot.probes.client import AgentDirectory, DirectoryError, fetch_catalogue, probe_hosts
from bot.probes.targets import host_name_problem
from node_agent.auth import load_secret, request_headers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "node_agent"))
from agent_http import request  # noqa: E402


class Listener:
    """A TCP port that counts every connection made to it (the target an attacker would pick)."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.sock = socket.socket()
        self.sock.bind((address, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("bad", ["127.0.0.1:9/evil#", "gpu01:9477", "user@gpu01", "gpu01/x", "gpu 01", "gpu01#",
                                 "-gpu01", "gpu_01", "", "a" * 64, "gpu01?x", "gpü01", "[::1]"])
def test_host_name_validator_refuses_anything_but_rfc1123(bad):
    assert host_name_problem(bad) is not None


@pytest.mark.parametrize("good", ["gpu01", "gpu-node-07.cluster.internal", "a", "r1-gpu001"])
def test_host_name_validator_accepts_host_names(good):
    assert host_name_problem(good) is None


def test_no_request_reaches_targets_outside_the_allow_list(monkeypatch, fleet):
    monkeypatch.delenv("TRIAGE_AGENT_ALLOW", raising=False)
    trap = Listener()
    try:
        secret = load_secret(fleet.secret_file)
        hostile = [f"127.0.0.1:{trap.port}/evil#", "127.0.0.1", "localhost", "169.254.169.254", "0.0.0.0",
                   "metadata.google.internal", f"x@127.0.0.1:{trap.port}", "::1", "fe80::1",
                   "app.localhost"]
        directory = AgentDirectory(f"http://{{host}}:{trap.port}")
        reports = probe_hosts(directory, hostile, secret, deadline_s=1)
        assert trap.connections == 0
        for host in hostile:
            d = reports[host].to_dict()
            assert d["probed"] is False and d["reachable"] is False and d["results"] == []
            assert d["error"].startswith("not probed: ")
        assert "is an IP address" in reports["169.254.169.254"].error
        assert "not a host name" in reports[f"127.0.0.1:{trap.port}/evil#"].error
        # a map present: only its hosts are contacted
        amap = AgentDirectory(f"http://{{host}}:{trap.port}", {"gpu-a": f"http://127.0.0.3:{fleet.port}"})
        reports = probe_hosts(amap, ["gpu-a", "gpu-b", "127.0.0.1"], secret, probes=["host"], deadline_s=2)
        assert trap.connections == 0
        assert reports["gpu-b"].error == "not probed: gpu-b is not in the agent map (TRIAGE_AGENT_MAP / --agent-map)"
        # an explicit allow-list: globs for names, CIDRs for addresses (loopback only when listed)
        glob = AgentDirectory(f"http://{{host}}:{trap.port}", allow="gpu-*, 10.0.0.0/8")
        reports = probe_hosts(glob, ["other", "127.0.0.1", "gpu-x"], secret, deadline_s=1)
        assert "matches nothing in TRIAGE_AGENT_ALLOW" in reports["other"].error
        assert reports["127.0.0.1"].probed is False
        assert trap.connections == 0
        assert fetch_catalogue(directory, "169.254.169.254", secret).probed is False
        assert trap.connections == 0
    finally:
        trap.close()


def test_a_name_resolving_to_loopback_is_not_contacted(monkeypatch, fleet):
    monkeypatch.delenv("TRIAGE_AGENT_ALLOW", raising=False)
    name = socket.gethostname()
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(name, 1, type=socket.SOCK_STREAM)}
    except OSError:
        pytest.skip("this machine's name does not resolve")
    if not any(a.startswith("127.") or a == "::1" for a in addrs) or host_name_problem(name):
        pytest.skip(f"{name} does not resolve to loopback here ({addrs})")
    trap = Listener("0.0.0.0")
    try:
        (report,) = probe_hosts(AgentDirectory(f"http://{{host}}:{trap.port}"), [name],
                                load_secret(fleet.secret_file), deadline_s=1).values()
        assert report.probed is False and "loopback" in report.error
        assert trap.connections == 0
    finally:
        trap.close()


def test_fan_out_is_capped_and_the_rest_named(fleet):
    hosts = [f"gpu{i:04d}" for i in range(300)]
    directory = AgentDirectory(f"http://127.0.0.9:{fleet.port}", allow="gpu*")  # fixed URL, nobody there
    reports = probe_hosts(directory, hosts, load_secret(fleet.secret_file), deadline_s=1, max_hosts=64)
    assert list(reports) == hosts
    assert sum(r.probed for r in reports.values()) == 64
    assert reports["gpu0299"].error == "not probed: only the first 64 hosts of one request are probed"


def test_bad_allow_list_entry_is_a_configuration_error():
    with pytest.raises(DirectoryError, match="CIDR"):
        AgentDirectory("http://{host}:9477", allow="10.0.0.0/33")


def test_captured_request_cannot_be_replayed_twice_or_to_another_agent(fleet):
    secret = load_secret(fleet.secret_file)
    body = json.dumps({"probes": ["processes"]}).encode()
    headers = {"Content-Type": "application/json",
               **request_headers(secret, "POST", "/v1/probe", "127.0.0.2", body)}
    a, b = f"http://127.0.0.2:{fleet.port}", f"http://127.0.0.3:{fleet.port}"
    assert request(a, "POST", "/v1/probe", body, headers)[0] == 200
    status, answer = request(a, "POST", "/v1/probe", body, headers)
    assert status == 401 and "replayed" in answer["detail"] and "results" not in answer
    status, answer = request(b, "POST", "/v1/probe", body, headers)  # same secret, other agent
    assert status == 401 and "not this agent" in answer["detail"] and "results" not in answer
    # and the signature does not carry over to another path, method or host header
    fresh = request_headers(secret, "POST", "/v1/probe", "127.0.0.3", body)
    status, answer = request(b, "GET", "/v1/probes", b"", {**fresh})
    assert status == 401 and "signature mismatch" in answer["detail"]
    forged = {**request_headers(secret, "POST", "/v1/probe", "127.0.0.2", body), "X-Triage-Host": "127.0.0.3"}
    status, answer = request(b, "POST", "/v1/probe", body, forged)
    assert status == 401 and "signature mismatch" in answer["detail"]


def test_old_v1_signature_is_refused_with_a_clear_reason(fleet):
    from node_agent.auth import signed_headers

    body = b'{"probes":["host"]}'
    status, answer = request(f"http://127.0.0.3:{fleet.port}", "POST", "/v1/probe", body,
                             signed_headers(load_secret(fleet.secret_file), body))
    assert status == 401 and "needs v2" in answer["detail"]


def test_cli_agent_allow_flag_opens_exactly_what_it_names(monkeypatch, fleet, capsys):
    """`triage probe`: an address the refusal message tells the operator to list with --agent-allow
    is probed once listed there, and only then."""
    from bot.cli.main import main

    monkeypatch.delenv("TRIAGE_AGENT_ALLOW", raising=False)
    base = ["probe", "127.0.0.3", "--agent-url", fleet.template, "--agent-secret-file", str(fleet.secret_file),
            "--probes", "host", "--json"]
    assert main(base) == 0
    refused = json.loads(capsys.readouterr().out)["probes"]["127.0.0.3"]
    assert refused["probed"] is False and "--agent-allow" in refused["error"]
    assert main([*base, "--agent-allow", "127.0.0.3/32"]) == 0
    allowed = json.loads(capsys.readouterr().out)["probes"]["127.0.0.3"]
    assert allowed["reachable"] is True and allowed["results"], allowed
