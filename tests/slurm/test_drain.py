"""Drain with a human in the loop, on the real single-node Slurm: a failed job's answer carries
"Drain host"; someone outside the allow-list is refused; an allowed user drains the node (sinfo
shows it drained with the reason); "Host repaired" resumes it, resolves its incidents and its
recurrence count starts again. And an Alertmanager alert for the node lists the job running there.

The real bot (HTTP, TRIAGE_JOB_SOURCE=slurm) gets the job through the installed EpilogSlurmctld
hook and talks to the stand-in Slack API; clicks and modal submissions are Slack-signed requests.
The node is resumed whatever happens, so the other Slurm tests keep their node.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SlurmEnv
from slurm_cluster import BIN
from test_bot_chain import headlines, text_of, wait_answer

from bot.slack.ids import ActionId, BlockId, CallbackId, InputId
from bot.store import stats
from bot.store.host_actions import actions_for
from tests.support.bot_server import CHANNEL, SIGNING_SECRET, RunningBot, bot_env
from tests.support.slack_requests import block_action, post, view_submission
from tests.support.slack_standin import SlackStandIn

pytestmark = pytest.mark.slurm

OPS = "U0OPSLEAD"  # in TRIAGE_DRAIN_USERS
GRACE = "U0GRACE"  # in the Slack user group TRIAGE_DRAIN_USERGROUP names
EVE = "U0EVE"  # neither
GROUP = "S0GPUONCALL"
ALERT_SECRET = b"alertmanager-secret-for-the-slurm-tests"

# PyTorch's words for an uncorrectable ECC error: the library's next step is to drain the host.
ECC_JOB = """#!/bin/bash
#SBATCH --job-name={name}
echo "epoch 3 step 4100 loss 1.9021"
cat >&2 <<'EOF'
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 301, in <module>
[rank0]:     loss.backward()
[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered
[rank0]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
EOF
exit 1
"""


@pytest.fixture(scope="module")
def drain_bot(slurm: SlurmEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBot]:
    from bot.slack.runtime import TriageBot
    from bot.slack.settings import Settings

    slurm.configure_hook()
    tmp = tmp_path_factory.mktemp("drain-bot")
    secret = tmp / "alertmanager.secret"
    secret.write_bytes(ALERT_SECRET)
    os.chmod(secret, 0o600)
    with SlackStandIn() as slack:
        slack.usergroups[GROUP] = [GRACE, "U0SOMEONE"]
        env = bot_env(slack, tmp, webhook_secret=slurm.secret, env={
            "TRIAGE_JOB_SOURCE": "slurm", "TRIAGE_DRAIN_USERS": OPS, "TRIAGE_DRAIN_USERGROUP": GROUP,
            "TRIAGE_ALERTMANAGER_SECRET_FILE": str(secret),
            # each failure its own incident and thread: the recurrence count is what is checked here
            "TRIAGE_GROUP_HOST_WINDOW_S": "0", "TRIAGE_STORM_THRESHOLD": "0"})
        bot = TriageBot(Settings.from_env(env))
        server = bot.serve_http(slurm.port, "127.0.0.1")
        running = RunningBot(bot, server, slack, SIGNING_SECRET, slurm.secret)
        try:
            yield running
        finally:
            bot.close(drain_s=30)
            if "drain" in sinfo(slurm)[0]:  # never leave the session's only node drained
                slurm.cluster.scontrol("update", "nodename=localhost", "state=resume")


def sinfo(slurm: SlurmEnv) -> tuple[str, str]:
    """(state, reason) of the node as `sinfo` shows it."""
    r = subprocess.run([str(BIN / "sinfo"), "-h", "-N", "-n", "localhost", "-o", "%T|%E"], env=slurm.cluster.env,
                       capture_output=True, text=True, timeout=10)
    state, _, reason = r.stdout.strip().partition("|")
    return state, reason


def button(message: dict[str, Any], action_id: str) -> str | None:
    for b in message.get("blocks") or []:
        for e in b.get("elements", []):
            if e.get("action_id") == action_id:
                return e["value"]
    return None


def failed_job_answer(slurm: SlurmEnv, bot: RunningBot, name: str) -> tuple[str, dict[str, Any]]:
    job = slurm.submit(ECC_JOB.format(name=name))
    try:
        answer, _ = wait_answer(bot.slack, job, "cuda-ecc-error", 40)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nnotifier log:\n" + "\n".join(slurm.log_lines(job))) from None
    bot.wait_idle()
    return job, bot.slack.message(CHANNEL, answer["ts"])


def click(bot: RunningBot, action_id: str, value: str, message: dict[str, Any], user: str) -> None:
    status, _ = bot.send_interaction(block_action(action_id, value, channel=CHANNEL, message=message, user=user))
    assert status == 200
    bot.wait_idle()


def thread_says(bot: RunningBot, thread: str, needle: str, timeout: float = 20) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for m in bot.slack.thread(CHANNEL, thread):
            if needle in m.get("text", ""):
                return m
        time.sleep(0.05)
    raise AssertionError(f"no {needle!r} in the thread: " + "\n".join(m.get("text", "")[:200]
                                                                       for m in bot.slack.thread(CHANNEL, thread)))


def test_drain_refused_then_approved_then_host_repaired(slurm: SlurmEnv, drain_bot: RunningBot) -> None:
    bot, slack = drain_bot, drain_bot.slack
    assert sinfo(slurm)[0] in ("idle", "mixed", "allocated")
    first_job, first = failed_job_answer(slurm, bot, "ecc-a")
    second_job, answer = failed_job_answer(slurm, bot, "ecc-b")
    # The answer carries Drain, and the host has a history now.
    value = button(answer, ActionId.DRAIN_HOST)
    assert value and button(first, ActionId.DRAIN_HOST)
    assert "localhost: 2nd incident in 7 days: cuda-ecc-error" in text_of(answer)
    [head] = headlines(slack, second_job)
    thread = head["ts"]

    # Someone outside the allow-list: told privately, no modal, the node untouched.
    click(bot, ActionId.DRAIN_HOST, value, answer, EVE)
    refusal = slack.wait_for("chat.postEphemeral", where=lambda c: c.params.get("user") == EVE)[-1]
    assert f"<@{OPS}>" in refusal.params["text"] and GROUP in refusal.params["text"]
    assert "nothing was done" in refusal.params["text"]
    assert slack.views == []
    # ... and a submission in their name (a forged or stale modal) is refused in the modal itself.
    meta = f"{value}:{CHANNEL}:{answer['ts']}"
    reason_of = lambda text: {BlockId.DRAIN_REASON: {InputId.DRAIN_REASON: {"type": "plain_text_input",  # noqa: E731
                                                                          "value": text}}}
    status, body = bot.send_interaction(view_submission(CallbackId.DRAIN_MODAL, meta, reason_of("x"), user=EVE))
    assert status == 200 and json.loads(body)["response_action"] == "errors"
    bot.wait_idle()
    assert "drain" not in sinfo(slurm)[0]

    # An allowed user: the modal opens with the reason prefilled; confirming drains the node.
    click(bot, ActionId.DRAIN_HOST, value, answer, OPS)
    opened = slack.views[-1]["view"]
    assert opened["callback_id"] == CallbackId.DRAIN_MODAL
    field = next(b for b in opened["blocks"] if b.get("block_id") == BlockId.DRAIN_REASON)
    assert field["element"]["initial_value"] == "uncorrectable ECC error"
    assert "localhost" in json.dumps(opened["blocks"])
    status, _ = bot.send_interaction(view_submission(CallbackId.DRAIN_MODAL, opened["private_metadata"],
                                                     reason_of("uncorrectable ECC error, GPU 0"), user=OPS))
    assert status == 200
    said = thread_says(bot, thread, "drained")
    bot.wait_idle()
    state, reason = sinfo(slurm)
    print(f"\n[drain] sinfo after the approved drain: {state} | {reason}")
    assert state.startswith("drain") and reason.startswith("uncorrectable ECC error, GPU 0 (triage #")
    assert f"<@{OPS}> drained *localhost*" in said["text"] and button(said, ActionId.HOST_REPAIRED)
    (audit,) = actions_for(bot.store, "localhost")
    assert (audit.action, audit.user, audit.ok) == ("drain", OPS, True)
    assert audit.command[1:4] == ["update", "NodeName=localhost", "State=DRAIN"] and "DRAIN" in audit.node_state
    card = slack.message(CHANNEL, answer["ts"])
    assert button(card, ActionId.HOST_REPAIRED) and not button(card, ActionId.DRAIN_HOST)

    # "Host repaired": refused for Eve, done for a member of the user group.
    repaired = button(said, ActionId.HOST_REPAIRED)
    thread_msg = slack.message(CHANNEL, said["ts"])
    click(bot, ActionId.HOST_REPAIRED, repaired, thread_msg, EVE)
    slack.wait_for("chat.postEphemeral", n=2, where=lambda c: c.params.get("user") == EVE)
    assert sinfo(slurm)[0].startswith("drain")
    click(bot, ActionId.HOST_REPAIRED, repaired, thread_msg, GRACE)
    done = thread_says(bot, thread, f"<@{GRACE}> marked *localhost* repaired")
    bot.wait_idle()
    assert sinfo(slurm)[0].rstrip("*") in ("idle", "mixed", "allocated")  # '*': slurmd's next ping is due
    assert "resumed it in Slurm" in done["text"] and "Closed 2 open incidents" in done["text"]
    for job in (first_job, second_job):
        inc = bot.store.query("SELECT resolved_by, resolution FROM incidents WHERE job_id = ?", [job])[0]
        assert inc["resolved_by"] == GRACE and "localhost repaired" in inc["resolution"]
    assert [a.action for a in actions_for(bot.store, "localhost")] == ["repaired", "drain"]
    assert stats.host_recurrence(bot.store, ["localhost"])[0].incidents == 0
    card = slack.message(CHANNEL, answer["ts"])
    assert not button(card, ActionId.HOST_REPAIRED) and not button(card, ActionId.DRAIN_HOST)

    # The next failure there is the host's first since the repair: no recurrence line.
    _, third = failed_job_answer(slurm, bot, "ecc-c")
    assert "incident in 7 days" not in text_of(third) and button(third, ActionId.DRAIN_HOST)


def test_alertmanager_alert_lists_the_job_running_on_the_node(slurm: SlurmEnv, drain_bot: RunningBot) -> None:
    bot = drain_bot
    job = slurm.submit("#!/bin/bash\n#SBATCH --job-name=llm-pretrain\n#SBATCH --output=%x-%j.out\nsleep 120\n")
    try:
        assert slurm.cluster.wait_state(job, {"RUNNING"}, 30) == "RUNNING"
        payload = json.loads((Path(__file__).resolve().parents[1] / "data/alertmanager/dcgm-xid79.json").read_text())
        labels = payload["alerts"][0]["labels"]
        labels["Hostname"], labels["instance"] = "localhost", "localhost:9400"
        payload["alerts"][0]["fingerprint"] = "51d0c9e5b7d2e4aa"
        status, raw = post(bot.url + "/hooks/alertmanager", json.dumps(payload).encode(),
                           {"Content-Type": "application/json", "Authorization": "Bearer " + ALERT_SECRET.decode()})
        assert status == 202, raw
        bot.wait_idle()
        [head] = [m for m in bot.slack.bot_messages(CHANNEL) if "GPUXidError on localhost" in m.get("text", "")]
        [answer] = [m for m in bot.slack.thread(CHANNEL, head["ts"]) if m["ts"] != head["ts"]]
        said = json.dumps(answer["blocks"], ensure_ascii=False)
        assert f"job {job} (llm-pretrain) · root · RUNNING" in said and "on localhost" in said
        assert "not probed: no node agents are configured" in said
        assert button(answer, ActionId.DRAIN_HOST)  # drain is on: the alert offers it too
    finally:
        subprocess.run([str(BIN / "scancel"), job], env=slurm.cluster.env, capture_output=True, timeout=30)
