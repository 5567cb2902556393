"""The bot's probe client against agents serving TLS: it verifies them with TRIAGE_AGENT_CA_FILE and
presents TRIAGE_AGENT_CLIENT_CERT where the agent requires a client certificate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.probes.client import AgentDirectory, AgentTLS, DirectoryError, probe_hosts
from node_agent.testing import RunningAgent, start_agent, write_secret
from tests.node_agent.pki import PKI, make_pki

SECRET = "tls-fleet-secret-0a1b2c3d4e"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_agent(tmp_path_factory: pytest.TempPathFactory, pki: PKI) -> Iterator[RunningAgent]:
    base = tmp_path_factory.mktemp("tls-agent")
    secret = write_secret(base / "agent.secret", SECRET)
    agent = start_agent(secret, base, "seed-8xh200", name="gpu-h200-07",
                        extra=["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                               "--tls-client-ca", str(pki.ca)])
    try:
        yield agent
    finally:
        agent.stop()


def _probe(agent: RunningAgent, tls: AgentTLS) -> dict[str, object]:
    directory = AgentDirectory("https://{host}:1", {"gpu-h200-07": agent.url}, tls=tls)
    (report,) = probe_hosts(directory, ["gpu-h200-07"], SECRET, probes=["processes"], deadline_s=5).values()
    return report.to_dict()


def test_verified_and_client_authenticated(tls_agent: RunningAgent, pki: PKI) -> None:
    out = _probe(tls_agent, AgentTLS(str(pki.ca), str(pki.client_cert), str(pki.client_key)))
    assert out["reachable"] is True, out["error"]
    assert out["host"] == "gpu-h200-07" and out["results"][0]["probe"] == "processes"


def test_an_agent_the_ca_did_not_issue_is_not_trusted(tls_agent: RunningAgent, pki: PKI) -> None:
    out = _probe(tls_agent, AgentTLS(str(pki.other_ca), str(pki.client_cert), str(pki.client_key)))
    assert out["reachable"] is False and not out.get("results")
    assert "TLS certificate was not accepted" in out["error"] and "TRIAGE_AGENT_CA_FILE" in out["error"]


def test_without_the_client_certificate_the_agent_refuses(tls_agent: RunningAgent, pki: PKI) -> None:
    out = _probe(tls_agent, AgentTLS(str(pki.ca)))
    assert out["reachable"] is False and not out.get("results")
    # the agent's "certificate required" alert, or (when the request crossed it) the reset that follows
    assert "needs TRIAGE_AGENT_CLIENT_CERT" in out["error"] or "reset" in out["error"].lower(), out["error"]


def test_unusable_tls_files_are_named_at_start(tmp_path: Path, pki: PKI) -> None:
    with pytest.raises(DirectoryError, match="cannot load the agent CA file .*nope.pem"):
        AgentDirectory("https://{host}:9477", tls=AgentTLS(str(tmp_path / "nope.pem")))
    with pytest.raises(DirectoryError, match="cannot load the agent client certificate"):
        AgentDirectory("https://{host}:9477", tls=AgentTLS(str(pki.ca), str(pki.ca)))  # a CA is not a key pair
    with pytest.raises(DirectoryError, match="TRIAGE_AGENT_CLIENT_KEY needs TRIAGE_AGENT_CLIENT_CERT"):
        AgentDirectory("https://{host}:9477", tls=AgentTLS(client_key=str(pki.client_key)))
    env = {"TRIAGE_AGENT_CA_FILE": str(pki.ca), "TRIAGE_AGENT_CLIENT_CERT": " "}
    assert AgentTLS.from_env(env) == AgentTLS(str(pki.ca))
