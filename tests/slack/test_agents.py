"""With node agents: real `node-agent serve --simulate` processes answer the bot's signed probes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.slack.ids import ActionId
from node_agent.testing import RunningAgent, running_agent
from tests.slack.test_actions import button_value
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot, run_bot
from tests.support.slack_requests import block_action, message_event
from tests.support.slack_standin import SlackStandIn

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed-nccl-999"


@pytest.fixture(scope="module")
def seed_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningAgent, Path]]:
    with running_agent(tmp_path_factory.mktemp("agents"), "seed-8xh200", "gpu-h200-07",
                       secret="agent-secret-for-slack-tests-42") as started:
        yield started


@pytest.fixture
def probing_bot(slack: SlackStandIn, tmp_path: Path, seed_agent: tuple[RunningAgent, Path]) -> Iterator[RunningBot]:
    agent, secret = seed_agent
    amap = tmp_path / "agents.yaml"
    amap.write_text(f"gpu-h200-07: {agent.url}\n")
    env = {"TRIAGE_AGENT_MAP": str(amap), "TRIAGE_AGENT_SECRET_FILE": str(secret),
           "TRIAGE_AGENT_URL": "http://127.0.0.1:9/{host}"}  # any other host: refused at once
    with run_bot(slack, tmp_path, env=env) as bot:
        yield bot


def test_seed_incident_names_the_foreign_processes(probing_bot: RunningBot, slack: SlackStandIn) -> None:
    bot = probing_bot
    ev = message_event(CHANNEL, (SEED / "rank-0.log").read_text())
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage", timeout=30)[0]
    bot.wait_idle()
    assert len(slack.calls_to("chat.postMessage")) == 1 and post.params["thread_ts"] == ev["ts"]
    text = section_text(post.params["blocks"])
    assert "nccl-cuda-999" in text
    assert "rank 0 on gpu-h200-07" in text
    # The agent named the foreign processes: the next step names them and the command lists them.
    assert "Free GPU 0 on gpu-h200-07: pids 4242, 4243 are not the job's (slurm job 998)" in text
    assert "ps -o pid,user,etime,args -p 4242,4243" in text
    assert ":question:" not in text  # the probes answered the question
    assert "Re-run probes" in str(post.params["blocks"])
    stored = bot.store.get_diagnosis(bot.store.find_incident(CHANNEL, ev["ts"]).id).answer
    assert any("foreign-process" in line for p in stored["probes"] for line in p["lines"])  # in the details
    # Progress was visible while the agents were asked.
    assert [c.params["name"] for c in slack.calls_to("reactions.add")] == ["hourglass_flowing_sand"]
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    (run,) = bot.store.list_probe_runs(inc.id)
    assert run["hosts"] == ["gpu-h200-07"] and run["results"]["gpu-h200-07"]["reachable"]


def test_rerun_probes_button(probing_bot: RunningBot, slack: SlackStandIn) -> None:
    bot = probing_bot
    ev = message_event(CHANNEL, (SEED / "rank-0.log").read_text())
    bot.send_event(ev)
    slack.wait_for("chat.postMessage", timeout=30)
    bot.wait_idle()
    answer = slack.bot_messages(CHANNEL)[0]
    bot.send_interaction(block_action(ActionId.RERUN_PROBES, button_value(answer, ActionId.RERUN_PROBES),
                                      channel=CHANNEL, message=answer))
    said = slack.wait_for("chat.postMessage", n=2, timeout=30)[-1]
    bot.wait_idle()
    assert said.params["thread_ts"] == ev["ts"] and "nccl-cuda-999" in said.params["text"]
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    assert len(bot.store.list_probe_runs(inc.id)) == 2 and inc.version == 2


def test_diagnose_hosts_command(probing_bot: RunningBot, slack: SlackStandIn) -> None:
    bot = probing_bot
    bot.send_command("hosts gpu-h200-07", response_url=slack.response_url())
    headline, details = slack.wait_for("chat.postMessage", n=2, timeout=30)
    assert "Host check: gpu-h200-07" in section_text(headline.params["blocks"])
    assert "1 of 1 host(s) with problems" in headline.params["text"]
    # Without a job there is no "foreign" process; the fabric problems of the seed host show.
    assert details.params["thread_ts"] and "ib-port-down: mlx5_0 port 1 is DOWN" in details.params["text"]


def test_an_unreachable_agent_does_not_lose_the_diagnosis(slack: SlackStandIn, tmp_path: Path,
                                                          seed_agent: tuple[RunningAgent, Path]) -> None:
    _, secret = seed_agent
    # the agent's address is allowed (a loopback port nobody listens on), so it is contacted and silent
    env = {"TRIAGE_AGENT_URL": "http://127.0.0.1:9/{host}", "TRIAGE_AGENT_SECRET_FILE": str(secret),
           "TRIAGE_AGENT_ALLOW": "gpu-*, 127.0.0.0/8"}
    with run_bot(slack, tmp_path, env=env) as bot:
        ev = message_event(CHANNEL, (SEED / "rank-0.log").read_text())
        bot.send_event(ev)
        post = slack.wait_for("chat.postMessage", timeout=30)[0]
        bot.wait_idle()
    text = section_text(post.params["blocks"])
    assert "nccl-cuda-999" in text and "gpu-h200-07" in text and "did not answer" in text
