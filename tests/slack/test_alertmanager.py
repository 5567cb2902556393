"""Alertmanager as a trigger: a real-format webhook (version 4, dcgm-exporter Xid labels) over real
HTTP on loopback becomes one host answer in the routed channel: the alert, the node agent's probe
(a real `node-agent serve --simulate xid79-gpu-lost`, through the probe allow-list), the host's
recent incidents; a repeat is not posted twice and the resolution is one reply in the thread."""

from __future__ import annotations

import base64
import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node_agent.auth import signed_headers
from node_agent.testing import RunningAgent, running_agent
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot, run_bot
from tests.support.slack_requests import message_event, post
from tests.support.slack_standin import SlackStandIn

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = json.loads((ROOT / "tests/data/alertmanager/dcgm-xid79.json").read_text())
ALERT_SECRET = b"alertmanager-bearer-secret-for-tests-0123"
GPU_ALERTS = "C0GPUALERTS"
HOST = "gpu-b200-03"
# The kernel's own words for the same GPU, pasted earlier: an incident on the host before the alert.
XID_LOG = (f"Nov 26 13:40:02 {HOST} kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=48213, name=python, "
           "GPU has fallen off the bus.\n"
           f"Nov 26 13:40:02 {HOST} kernel: NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.\n")


@pytest.fixture(scope="module")
def xid_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningAgent, Path]]:
    with running_agent(tmp_path_factory.mktemp("agents"), "xid79-gpu-lost", HOST,
                       secret="agent-secret-for-alert-tests-42") as started:
        yield started


@pytest.fixture
def alert_bot(slack: SlackStandIn, tmp_path: Path, xid_agent: tuple[RunningAgent, Path]) -> Iterator[RunningBot]:
    agent, agent_secret = xid_agent
    amap = tmp_path / "agents.yaml"
    amap.write_text(f"{HOST}: {agent.url}\n")
    secret = tmp_path / "alertmanager.secret"
    secret.write_bytes(ALERT_SECRET + b"\n")
    os.chmod(secret, 0o600)
    routes = "routes:\n  - match: {alertname: 'GPU*', severity: critical}\n    channel: " + GPU_ALERTS + "\n"
    env = {"TRIAGE_AGENT_MAP": str(amap), "TRIAGE_AGENT_SECRET_FILE": str(agent_secret),
           "TRIAGE_AGENT_URL": "http://127.0.0.1:9/{host}",  # hosts outside the map are refused
           "TRIAGE_ALERTMANAGER_SECRET_FILE": str(secret), "TRIAGE_ROUTES": routes}
    with run_bot(slack, tmp_path, env=env) as bot:
        yield bot


def send_alert(bot: RunningBot, payload: dict[str, Any] | bytes, headers: dict[str, str] | None = None,
               ) -> tuple[int, dict[str, Any]]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    hdrs = {"Content-Type": "application/json", "User-Agent": "Alertmanager/0.27.0"}
    hdrs.update({"Authorization": "Bearer " + ALERT_SECRET.decode()} if headers is None else headers)
    status, raw = post(bot.url + "/hooks/alertmanager", body, hdrs)
    return status, json.loads(raw or b"{}")


def posts(slack: SlackStandIn, channel: str) -> list[dict[str, Any]]:
    return slack.bot_messages(channel)


def text_of(m: dict[str, Any]) -> str:
    return m.get("text", "") + "\n" + section_text(m.get("blocks") or [])


def test_alert_becomes_one_host_answer_in_the_routed_channel(alert_bot: RunningBot, slack: SlackStandIn) -> None:
    bot = alert_bot
    bot.send_event(message_event(CHANNEL, XID_LOG))  # an earlier incident on the same host
    slack.wait_for("chat.postMessage", timeout=30)
    bot.wait_idle()
    earlier = bot.store.query("SELECT incident_id FROM incident_hosts WHERE host = ?", [HOST])
    assert len(earlier) == 1

    status, body = send_alert(bot, PAYLOAD)
    assert status == 202, body
    bot.wait_idle()
    [head] = [m for m in posts(slack, GPU_ALERTS) if "thread_ts" not in m]
    assert f"GPUXidError on {HOST}" in text_of(head) and "Xid 79" in text_of(head)
    assert posts(slack, CHANNEL) and all("GPUXidError" not in text_of(m) for m in posts(slack, CHANNEL))
    [answer] = [m for m in slack.thread(GPU_ALERTS, head["ts"]) if m["ts"] != head["ts"]]
    said = text_of(answer)
    # the alert, with what dcgm-exporter's labels say
    assert "GPUXidError firing since 2024-11-26 14:05 UTC" in said and "GPU has fallen off the bus" in said
    assert "GPU 3" in said and "NVIDIA H100 80GB HBM3" in said
    # the node agent's probe of that host (GPU 3 is lost in the simulated NVML)
    assert ":x: *gpu-b200-03*" in said and "GPU 3" in said.split("Host probe", 1)[1]
    # its recent incidents, linked, and the jobs (no job source here: it says how to get them)
    assert f"#{earlier[0]['incident_id']} xid-79-fallen-off-bus" in said
    assert "TRIAGE_JOB_SOURCE=slurm" in said
    inc = bot.store.get_incident(body["incidents"][HOST])
    assert inc.origin == "alert" and inc.hosts == [HOST] and inc.channel == GPU_ALERTS
    (run,) = bot.store.list_probe_runs(inc.id)
    assert run["hosts"] == [HOST] and run["results"][HOST]["reachable"]

    # Alertmanager re-sends a firing group every repeat_interval: nothing new, nothing posted.
    before = len(slack.calls_to("chat.postMessage"))
    status, body = send_alert(bot, PAYLOAD)
    assert status == 200 and body["status"] == "nothing new"
    bot.wait_idle()
    assert len(slack.calls_to("chat.postMessage")) == before

    # Resolved: one reply in the same thread, once.
    done = copy.deepcopy(PAYLOAD)
    done["status"] = done["alerts"][0]["status"] = "resolved"
    done["alerts"][0]["endsAt"] = "2024-11-26T15:10:00Z"
    for _ in range(2):
        assert send_alert(bot, done)[0] in (200, 202)
        bot.wait_idle()
    replies = [m for m in slack.thread(GPU_ALERTS, head["ts"]) if "resolved" in m.get("text", "")]
    assert len(replies) == 1 and "GPUXidError" in replies[0]["text"] and "15:10 UTC" in replies[0]["text"]
    assert len([m for m in posts(slack, GPU_ALERTS) if "thread_ts" not in m]) == 1


def test_two_hosts_two_answers_and_the_allow_list_decides_who_is_probed(alert_bot: RunningBot,
                                                                        slack: SlackStandIn) -> None:
    payload = copy.deepcopy(PAYLOAD)
    other = copy.deepcopy(payload["alerts"][0])
    other["labels"].pop("Hostname")
    other["labels"]["instance"] = "gpu-b200-09:9400"  # only the scrape target names it
    other["fingerprint"] = "77aa0c9e5b7d2e42"
    payload["alerts"].append(other)
    status, body = send_alert(alert_bot, payload)
    assert status == 202 and set(body["incidents"]) == {HOST, "gpu-b200-09"}
    alert_bot.wait_idle()
    heads = [m for m in posts(slack, GPU_ALERTS) if "thread_ts" not in m]
    assert len(heads) == 2
    nine = next(h for h in heads if "gpu-b200-09" in text_of(h))
    [answer] = [m for m in slack.thread(GPU_ALERTS, nine["ts"]) if m["ts"] != nine["ts"]]
    assert "not probed: gpu-b200-09 is not in the agent map" in text_of(answer)


@pytest.mark.parametrize(("headers", "why"), [
    ({}, "no credentials"),
    ({"Authorization": "Bearer not-the-secret"}, "wrong bearer token"),
    ({"Authorization": "Basic " + base64.b64encode(b"alertmanager:nope").decode()}, "wrong basic password"),
])
def test_alerts_without_the_secret_are_refused(alert_bot: RunningBot, slack: SlackStandIn,
                                                headers: dict[str, str], why: str) -> None:
    status, body = send_alert(alert_bot, PAYLOAD, headers)
    assert status == 401 and why in body["error"]
    alert_bot.wait_idle()
    assert slack.calls_to("chat.postMessage") == []


def test_basic_auth_and_a_signed_relay_are_accepted(alert_bot: RunningBot) -> None:
    basic = {"Authorization": "Basic " + base64.b64encode(b"am:" + ALERT_SECRET).decode()}
    assert send_alert(alert_bot, PAYLOAD, basic)[0] == 202
    again = copy.deepcopy(PAYLOAD)
    again["alerts"][0]["startsAt"] = "2024-11-26T16:00:00Z"  # the same alert firing anew
    body = json.dumps(again).encode()
    assert send_alert(alert_bot, body, {"Content-Type": "application/json", **signed_headers(ALERT_SECRET, body)})[0] == 202


@pytest.mark.parametrize(("mutate", "why"), [
    (lambda p: b"{not json", "not JSON"),
    (lambda p: {**p, "version": "3"}, "version 4"),
    (lambda p: {**p, "alerts": []}, "non-empty list"),
    (lambda p: {**p, "alerts": [{**p["alerts"][0], "labels": {"alertname": "GPUXidError", "gpu": "3"}}]},
     "no alert names its host"),
    (lambda p: {**p, "alerts": [{**p["alerts"][0], "startsAt": "yesterday"}]}, "RFC 3339"),
    (lambda p: {**p, "alerts": [{**p["alerts"][0], "labels": {"Hostname": "gpu01; rm -rf /"}}]},
     "no alert names its host"),
])
def test_bad_payloads_get_a_clear_400(alert_bot: RunningBot, slack: SlackStandIn, mutate: Any, why: str) -> None:
    status, body = send_alert(alert_bot, mutate(copy.deepcopy(PAYLOAD)))
    assert status == 400 and why in body["error"], body
    assert slack.calls_to("chat.postMessage") == []


def test_alert_webhook_is_off_without_its_secret(bot: RunningBot) -> None:
    status, body = send_alert(bot, PAYLOAD)
    assert status == 503 and "TRIAGE_ALERTMANAGER_SECRET_FILE" in body["error"]
