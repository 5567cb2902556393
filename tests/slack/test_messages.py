"""Pasted messages, thread follow-ups, @mentions and DMs, over real signed HTTP into the Bolt app."""

from __future__ import annotations

import json

from bot.slack.ids import ActionId
from tests.slack.logs import CHATTER, NCCL_999, RANK3, WATCHDOG
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import mention_event, message_event, new_ts
from tests.support.slack_standin import SlackStandIn


def section_text(blocks: list[dict]) -> str:
    out = []
    for b in blocks or []:
        if b.get("text"):
            out.append(b["text"]["text"])
        for e in b.get("elements", []):
            if isinstance(e.get("text"), str):
                out.append(e["text"])
    return "\n".join(out)


def action_ids(blocks: list[dict]) -> list[str]:
    return [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_pasted_failure_gets_one_threaded_answer(bot: RunningBot, slack: SlackStandIn) -> None:
    ev = message_event(CHANNEL, NCCL_999)
    status, _ = bot.send_event(ev)
    assert status == 200
    post = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert post.params["channel"] == CHANNEL and post.params["thread_ts"] == ev["ts"]
    text = section_text(post.params["blocks"])
    assert "nccl-cuda-999" in text and "confidence" in text
    assert "*Started by* rank 0" in text
    assert "nvidia-smi --query-compute-apps" in text  # the next action, as a copyable command
    assert ":question:" in text  # the missing-fact question (no probes here)
    assert "`message:9`" not in text  # evidence is behind "Show details"
    assert action_ids(post.params["blocks"]) == [ActionId.RIGHT, ActionId.WRONG, ActionId.SHOW_DETAILS,
                                                 ActionId.ACK, ActionId.RESOLVE, ActionId.SNOOZE, ActionId.OWNER]
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    assert inc.signature == "nccl-cuda-999" and inc.summary_ts and inc.version == 1
    assert [e.name for e in bot.store.list_evidence(inc.id)] == ["message"]


def test_chatter_bots_and_edits_get_no_reply(bot: RunningBot, slack: SlackStandIn) -> None:
    for text in CHATTER:
        assert bot.send_event(message_event(CHANNEL, text))[0] == 200
    # A failure posted by another bot, by the bot itself, or as an edit/join is not a paste to answer.
    assert bot.send_event(message_event(CHANNEL, NCCL_999, bot_id="B0OTHERBOT", user="U0OTHERBOT"))[0] == 200
    assert bot.send_event(message_event(CHANNEL, NCCL_999, user=slack.bot_user_id))[0] == 200
    assert bot.send_event(message_event(CHANNEL, NCCL_999, subtype="message_changed"))[0] == 200
    assert bot.send_event(message_event(CHANNEL, NCCL_999, subtype="channel_join"))[0] == 200
    bot.wait_idle()
    slack.expect_no("chat.postMessage", within=0.3)
    assert not slack.calls_to("reactions.add")
    assert bot.store.query("SELECT COUNT(*) AS n FROM incidents")[0]["n"] == 0


def test_retried_event_is_processed_once(bot: RunningBot, slack: SlackStandIn) -> None:
    ev = message_event(CHANNEL, NCCL_999)
    assert bot.send_event(ev, event_id="Ev0RETRY01")[0] == 200
    # Slack did not see our 200 in time and delivers the same event again, twice.
    assert bot.send_event(ev, event_id="Ev0RETRY01", retry_num=1)[0] == 200
    assert bot.send_event(ev, event_id="Ev0RETRY01", retry_num=2)[0] == 200
    # The same message under another event id (a re-delivery after a reconnect) is still one message.
    assert bot.send_event(ev, event_id="Ev0OTHER02")[0] == 200
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    slack.expect_no("chat.postMessage", within=0.3, where=lambda c: len(slack.calls_to("chat.postMessage")) > 1)
    assert len(slack.calls_to("chat.postMessage")) == 1


def test_forged_and_stale_requests_are_rejected(bot: RunningBot, slack: SlackStandIn) -> None:
    import time

    from tests.support.slack_requests import event_body, post_signed

    body = event_body(message_event(CHANNEL, NCCL_999))
    # Signed with another secret.
    assert post_signed(bot.events_url, body, "not-the-signing-secret")[0] == 401
    # Correctly signed, but six minutes old (replay of a captured request).
    assert post_signed(bot.events_url, body, bot.signing_secret, timestamp=int(time.time()) - 360)[0] == 401
    # Signature header that is not even hex.
    assert post_signed(bot.events_url, body, bot.signing_secret, signature="v0=nothex")[0] == 401
    # The body altered after signing.
    from tests.support.slack_requests import post, slack_signature

    ts = str(int(time.time()))
    sig = slack_signature(bot.signing_secret, ts, body)
    tampered = body.replace(b"Cuda failure 999", b"Cuda failure 998")
    assert post(bot.events_url, tampered, {"Content-Type": "application/json", "X-Slack-Request-Timestamp": ts,
                                           "X-Slack-Signature": sig})[0] == 401
    bot.wait_idle()
    slack.expect_no("chat.postMessage", within=0.3)


def test_thread_follow_up_changes_the_diagnosis(bot: RunningBot, slack: SlackStandIn) -> None:
    root = message_event(CHANNEL, WATCHDOG)
    bot.send_event(root)
    first = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    first_text = section_text(first.params["blocks"])
    assert "nccl-watchdog-timeout" in first_text
    assert "Only downstream reports were found" in first_text
    summary_ts = bot.store.find_incident(CHANNEL, root["ts"]).summary_ts

    # Someone pastes rank 3's own log in the thread: the error that started it.
    bot.send_event(message_event(CHANNEL, RANK3, thread_ts=root["ts"], user="UBOB"))
    update = slack.wait_for("chat.update")[0]
    bot.wait_idle()
    assert update.params["ts"] == summary_ts  # the summary message is edited, not re-posted
    updated = section_text(update.params["blocks"])
    assert "nccl-cuda-999" in updated and "rank 3" in updated and "diagnosis v2" in updated
    said = slack.calls_to("chat.postMessage")[-1]
    assert said.params["thread_ts"] == root["ts"]
    said_text = section_text(said.params["blocks"])
    assert "The cause is now *nccl-cuda-999*" in said_text and "it was nccl-watchdog-timeout" in said_text
    inc = bot.store.find_incident(CHANNEL, root["ts"])
    assert inc.version == 2 and inc.signature == "nccl-cuda-999"
    assert [e.name for e in bot.store.list_evidence(inc.id)] == ["message", "reply 1"]
    assert bot.store.get_diagnosis(inc.id, 1).signature == "nccl-watchdog-timeout"


def test_thread_chatter_is_kept_quietly(bot: RunningBot, slack: SlackStandIn) -> None:
    root = message_event(CHANNEL, NCCL_999)
    bot.send_event(root)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    reply = message_event(CHANNEL, "thanks, draining the node now", thread_ts=root["ts"], user="UBOB")
    bot.send_event(reply)
    bot.wait_idle()
    assert len(slack.calls_to("chat.postMessage")) == 1 and not slack.calls_to("chat.update")
    assert "memo" in slack.reactions.get((CHANNEL, reply["ts"]), set())  # added to the evidence, said so quietly
    inc = bot.store.find_incident(CHANNEL, root["ts"])
    assert len(bot.store.list_evidence(inc.id)) == 2


def test_mention_with_a_log_answers_in_its_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    ev = mention_event(CHANNEL, "why did this die?\n" + NCCL_999, slack.bot_user_id)
    bot.send_event(ev)
    # The same message also arrives as a plain message event: it must not be answered twice.
    msg = dict(ev, type="message", channel_type="channel")
    bot.send_event(msg)
    post = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert post.params["thread_ts"] == ev["ts"] and "nccl-cuda-999" in post.params["text"]


def test_mention_in_a_thread_reads_the_whole_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    root = slack.add_message(CHANNEL, "job 88123 died overnight, logs below", user="UALICE")
    slack.add_message(CHANNEL, WATCHDOG, user="UALICE", thread_ts=root["ts"])
    slack.add_message(CHANNEL, RANK3, user="UBOB", thread_ts=root["ts"])
    bot.send_event(mention_event(CHANNEL, "can you take a look?", slack.bot_user_id, thread_ts=root["ts"]))
    post = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    assert slack.calls_to("conversations.replies")
    assert post.params["thread_ts"] == root["ts"]
    text = section_text(post.params["blocks"])
    assert "nccl-cuda-999" in text and "rank 3" in text
    inc = bot.store.find_incident(CHANNEL, root["ts"])
    assert inc.origin == "mention" and len(bot.store.list_evidence(inc.id)) == 3


def test_mention_without_anything_to_read_explains_how(bot: RunningBot, slack: SlackStandIn) -> None:
    ev = mention_event(CHANNEL, "", slack.bot_user_id)
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage")[0]
    assert post.params["thread_ts"] == ev["ts"] and "/diagnose" in post.params["text"]


def test_mention_on_chatter_says_nothing_was_found(bot: RunningBot, slack: SlackStandIn) -> None:
    ev = mention_event(CHANNEL, "loss went to nan at step 4000, ideas?", slack.bot_user_id)
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage")[0]
    assert "no known failure signature" in post.params["text"]


def test_direct_message_chatter_gets_an_answer(bot: RunningBot, slack: SlackStandIn) -> None:
    bot.send_event(message_event("D0ALICE", "hello, what can you do?", channel_type="im"))
    post = slack.wait_for("chat.postMessage")[0]
    assert post.params["channel"] == "D0ALICE" and "no known failure signature" in post.params["text"]


def test_slack_escapes_and_code_fences_are_undone(bot: RunningBot, slack: SlackStandIn) -> None:
    # Slack sends the paste with &lt;/&gt; escapes inside a ``` block; the engine must see the real lines.
    pasted = "```" + NCCL_999.replace("<module>", "&lt;module&gt;") + "```"
    ev = message_event(CHANNEL, pasted)
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage")[0]
    assert "nccl-cuda-999" in post.params["text"]
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    stored = bot.store.list_evidence(inc.id)[0].text
    assert "<module>" in stored and "```" not in stored


def test_a_log_that_would_ping_the_channel_is_escaped(bot: RunningBot, slack: SlackStandIn) -> None:
    line = "[rank0]: Cuda failure 999 'unknown error' <!channel> <@U0EVERYONE>"
    ev = message_event(CHANNEL, NCCL_999 + line + "\n")
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    answer = slack.bot_messages(CHANNEL)[0]
    value = next(e["value"] for b in answer["blocks"] if b["type"] == "actions" for e in b["elements"])
    from tests.support.slack_requests import block_action

    bot.send_interaction(block_action(ActionId.SHOW_DETAILS, value, channel=CHANNEL, message=answer))
    details = slack.wait_for("chat.postMessage", n=2)[-1]
    raw = json.dumps(post.params["blocks"]) + json.dumps(details.params["blocks"])
    assert "<!channel>" not in raw and "&lt;!channel&gt;" in raw


def test_unknown_thread_reply_with_a_failure_opens_an_incident_there(bot: RunningBot, slack: SlackStandIn) -> None:
    parent = new_ts()
    ev = message_event(CHANNEL, NCCL_999, thread_ts=parent)
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage")[0]
    assert post.params["thread_ts"] == parent
    assert bot.store.find_incident(CHANNEL, parent) is not None


def test_answer_tells_how_often_the_host_failed_lately(bot: RunningBot, slack: SlackStandIn) -> None:
    on_host = RANK3.replace("[rank3]: Cuda failure", "gpu-node-17:4242:4290 [3] NCCL WARN Cuda failure")
    first = message_event(CHANNEL, on_host)
    bot.send_event(first)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    assert ":repeat:" not in str(slack.calls_to("chat.postMessage")[0].params["blocks"])  # first time: nothing to say
    later = bot.store.clock() + 3600  # an hour on: no longer the same paste incident (TRIAGE_GROUP_PASTE_WINDOW_S)
    bot.bot.service.wf.clock = lambda: later
    bot.send_event(message_event(CHANNEL, on_host))
    second = slack.wait_for("chat.postMessage", n=2)[1]
    assert ":repeat: gpu-node-17: 2nd incident in 7 days: nccl-cuda-999" in section_text(second.params["blocks"])
