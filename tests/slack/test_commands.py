"""`/diagnose` (text, job id, hosts, help) and the "Diagnose this message" shortcut."""

from __future__ import annotations

from bot.slack.ids import CallbackId
from tests.slack.logs import CHATTER, NCCL_999
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import message_shortcut, new_ts
from tests.support.slack_standin import SlackStandIn


def test_help_is_in_the_ack(bot: RunningBot, slack: SlackStandIn) -> None:
    status, body = bot.send_command("")
    # Bolt answers a text-only ack as plain text, which Slack shows to the asker only.
    assert status == 200 and "/diagnose 1234" in body.decode()
    bot.wait_idle()
    assert not slack.calls_to("chat.postMessage")


def test_pasted_text_gets_a_channel_message_and_a_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    status, body = bot.send_command(NCCL_999, response_url=slack.response_url())
    assert status == 200 and body in (b"", b"{}")  # acked at once, empty
    headline, answer = slack.wait_for("chat.postMessage", n=2)
    bot.wait_idle()
    assert headline.params["channel"] == CHANNEL and "thread_ts" not in headline.params
    assert answer.params["thread_ts"] == slack.bot_messages(CHANNEL)[0]["ts"]
    assert "nccl-cuda-999" in answer.params["text"]
    # The channel message is replaced by the verdict once the diagnosis is there.
    update = slack.wait_for("chat.update")[0]
    assert update.params["ts"] == answer.params["thread_ts"]
    head = section_text(update.params["blocks"])
    assert "nccl-cuda-999" in head and "asked by <@UALICE>" in head and "Started by rank 0" in head
    inc = bot.store.find_incident(CHANNEL, answer.params["thread_ts"])
    assert inc.origin == "slash" and inc.headline_ts == inc.thread_ts


def test_text_without_a_failure_is_answered_only_to_the_asker(bot: RunningBot, slack: SlackStandIn) -> None:
    bot.send_command(CHATTER[0], response_url=slack.response_url())
    call = slack.wait_for("response_url")[0]
    bot.wait_idle()
    assert call.params["response_type"] == "ephemeral" and "no known failure signature" in call.params["text"]
    assert not slack.calls_to("chat.postMessage")


def test_job_id_without_a_job_source_says_so(bot: RunningBot, slack: SlackStandIn) -> None:
    bot.send_command("1234", response_url=slack.response_url())
    call = slack.wait_for("response_url")[0]
    assert "No job source is configured" in call.params["text"] and "TRIAGE_JOB_SOURCE=slurm" in call.params["text"]
    bot.wait_idle()
    assert not slack.calls_to("chat.postMessage")


def test_hosts_without_agents_says_what_to_configure(bot: RunningBot, slack: SlackStandIn) -> None:
    bot.send_command("hosts gpu-node-[01-02]", response_url=slack.response_url())
    call = slack.wait_for("response_url")[0]
    assert "cannot probe" in call.params["text"] and "TRIAGE_AGENT_URL" in call.params["text"]


def test_bot_not_in_a_private_channel_tells_the_asker(bot: RunningBot, slack: SlackStandIn) -> None:
    slack.not_in_channel.add("G0PRIVATE")
    bot.send_command(NCCL_999, channel="G0PRIVATE", response_url=slack.response_url())
    call = slack.wait_for("response_url")[0]
    assert "not a member of this channel" in call.params["text"] and "/invite" in call.params["text"]


def test_message_shortcut_answers_in_the_messages_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    msg = {"type": "message", "user": "UALICE", "text": NCCL_999, "ts": new_ts()}
    status, _ = bot.send_interaction(message_shortcut(CallbackId.DIAGNOSE_SHORTCUT.value, CHANNEL, msg,
                                                      response_url=slack.response_url()))
    assert status == 200
    post = slack.wait_for("chat.postMessage")[0]
    assert post.params["thread_ts"] == msg["ts"] and "nccl-cuda-999" in post.params["text"]
    assert bot.store.find_incident(CHANNEL, msg["ts"]).origin == "shortcut"


def test_message_shortcut_on_chatter_tells_only_the_asker(bot: RunningBot, slack: SlackStandIn) -> None:
    msg = {"type": "message", "user": "UALICE", "text": CHATTER[1], "ts": new_ts()}
    bot.send_interaction(message_shortcut(CallbackId.DIAGNOSE_SHORTCUT.value, CHANNEL, msg,
                                          response_url=slack.response_url()))
    call = slack.wait_for("response_url")[0]
    bot.wait_idle()
    assert "no known failure signature" in call.params["text"]
    assert not slack.calls_to("chat.postMessage")


def test_job_id_is_looked_up_and_diagnosed(bot: RunningBot, slack: SlackStandIn, tmp_path) -> None:
    from tests.slack.test_webhook import DirJobSource

    log = tmp_path / "slurm-1234.out"
    log.write_text(NCCL_999)
    bot.bot.service.wf.job_source = DirJobSource({"slurm-1234.out": log})
    bot.send_command("job 1234", response_url=slack.response_url())
    headline, answer = slack.wait_for("chat.postMessage", n=2)
    bot.wait_idle()
    assert "Looking up job 1234" in slack.calls_to("response_url")[0].params["text"]
    assert headline.params["channel"] == CHANNEL and "Job 1234 (llama-70b-pretrain) FAILED" in headline.params["text"]
    assert answer.params["thread_ts"] == slack.bot_messages(CHANNEL)[0]["ts"]
    assert "nccl-cuda-999" in answer.params["text"]
    update = slack.calls_to("chat.update")[-1]
    assert "asked by <@UALICE>" in section_text(update.params["blocks"])


def test_unknown_job_is_told_to_the_asker_only(bot: RunningBot, slack: SlackStandIn, tmp_path) -> None:
    from tests.slack.test_webhook import DirJobSource

    bot.bot.service.wf.job_source = DirJobSource({})
    bot.send_command("#4321", response_url=slack.response_url())
    slack.wait_for("response_url", n=2)
    bot.wait_idle()
    assert "job 4321 is not known to the scheduler" in slack.calls_to("response_url")[1].params["text"]
    assert not slack.calls_to("chat.postMessage")


def test_hostile_job_id_gets_a_clear_refusal_not_a_log_answer(bot: RunningBot, slack: SlackStandIn) -> None:
    # Without a job source the refusal says so; the text is never treated as a log to diagnose.
    for text in ("1234; rm -rf /", "$(id)", "`id`"):
        seen = len(slack.calls_to("response_url"))
        bot.send_command(text, response_url=slack.response_url())
        calls = slack.wait_for("response_url", n=seen + 1)
        said = calls[-1].params["text"]
        assert "No job source is configured" in said and "no known failure" not in said
        assert text not in said
    bot.wait_idle()
    assert not slack.calls_to("chat.postMessage")
