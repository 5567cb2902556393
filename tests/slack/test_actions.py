"""The answer's buttons, the Wrong-cause modal, and the App Home tab."""

from __future__ import annotations

from bot.slack.ids import ActionId, BlockId, CallbackId, InputId
from bot.store import stats
from tests.slack.logs import NCCL_999, RANK3, WATCHDOG
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import block_action, message_event, view_submission
from tests.support.slack_standin import SlackStandIn


def diagnosed(bot: RunningBot, slack: SlackStandIn, text: str = NCCL_999) -> tuple[dict, dict]:
    """Paste a failure; return (the pasted event, the bot's answer message as Slack holds it)."""
    ev = message_event(CHANNEL, text)
    before = len(slack.calls_to("chat.postMessage"))
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage", n=before + 1)[-1]
    bot.wait_idle()
    answer = slack.message(CHANNEL, slack.bot_messages(CHANNEL)[-1]["ts"])
    assert answer["thread_ts"] == ev["ts"] and post.params["thread_ts"] == ev["ts"]
    return ev, answer


def button_value(answer: dict, action_id: str) -> str:
    for b in answer["blocks"]:
        for e in b.get("elements", []):
            if e.get("action_id") == action_id:
                return e["value"]
    raise AssertionError(f"no {action_id} button")


def test_right_is_stored_and_shown_on_the_answer(bot: RunningBot, slack: SlackStandIn) -> None:
    ev, answer = diagnosed(bot, slack)
    value = button_value(answer, ActionId.RIGHT)
    assert bot.send_interaction(block_action(ActionId.RIGHT, value, channel=CHANNEL, message=answer,
                                             user="UCAROL"))[0] == 200
    update = slack.wait_for("chat.update")[0]
    bot.wait_idle()
    assert update.params["ts"] == answer["ts"]
    assert "<@UCAROL> confirmed *nccl-cuda-999*" in section_text(update.params["blocks"])
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    (fb,) = bot.store.list_feedback(inc.id)
    assert (fb.user, fb.verdict, fb.signature, fb.version) == ("UCAROL", "right", "nccl-cuda-999", 1)


def test_wrong_cause_opens_a_modal_and_stores_the_real_cause(bot: RunningBot, slack: SlackStandIn) -> None:
    ev, answer = diagnosed(bot, slack)
    value = button_value(answer, ActionId.WRONG)
    bot.send_interaction(block_action(ActionId.WRONG, value, channel=CHANNEL, message=answer, user="UDAVE"))
    opened = slack.wait_for("views.open")[0]
    view = slack.views[0]["view"]
    assert opened.params["trigger_id"] and view["callback_id"] == CallbackId.WRONG_CAUSE_MODAL
    select = next(b for b in view["blocks"] if b.get("block_id") == BlockId.CAUSE_SELECT)
    offered = [o["value"] for g in select["element"]["option_groups"] for o in g["options"]]
    assert "nccl-watchdog-timeout" in offered and "nccl-cuda-999" not in offered  # not the judged one

    # Submitting with nothing filled in is refused in the modal itself.
    status, body = bot.send_interaction(view_submission(CallbackId.WRONG_CAUSE_MODAL, view["private_metadata"], {}))
    assert status == 200 and b"response_action" in body and b"errors" in body

    values = {
        BlockId.CAUSE_SELECT: {InputId.CAUSE_SELECT: {"type": "static_select",
                                                      "selected_option": {"value": "nccl-watchdog-timeout"}}},
        BlockId.CAUSE_TEXT: {InputId.CAUSE_TEXT: {"type": "plain_text_input", "value": "rank 5 hung in data loading"}},
        BlockId.NOTE: {InputId.NOTE: {"type": "plain_text_input", "value": "py-spy dump showed the DataLoader"}},
    }
    assert bot.send_interaction(view_submission(CallbackId.WRONG_CAUSE_MODAL, view["private_metadata"], values,
                                                user="UDAVE"))[0] == 200
    thanks = slack.wait_for("chat.postMessage", n=2)[-1]
    bot.wait_idle()
    assert thanks.params["thread_ts"] == ev["ts"] and "not *nccl-cuda-999*" in thanks.params["text"]
    update = slack.calls_to("chat.update")[-1]
    assert "<@UDAVE> says the cause was *nccl-watchdog-timeout*" in section_text(update.params["blocks"])
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    (fb,) = bot.store.list_feedback(inc.id)
    assert (fb.verdict, fb.signature, fb.correct_signature) == ("wrong", "nccl-cuda-999", "nccl-watchdog-timeout")
    assert fb.correct_text == "rank 5 hung in data loading" and "DataLoader" in fb.note
    assert [(p.signature, p.right, p.wrong) for p in stats.feedback_precision(bot.store)] == [("nccl-cuda-999", 0, 1)]


def test_show_details_posts_evidence_causes_in_the_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    ev, answer = diagnosed(bot, slack)
    bot.send_interaction(block_action(ActionId.SHOW_DETAILS, button_value(answer, ActionId.SHOW_DETAILS),
                                      channel=CHANNEL, message=answer))
    post = slack.wait_for("chat.postMessage", n=2)[-1]
    bot.wait_idle()
    assert post.params["thread_ts"] == ev["ts"]
    text = section_text(post.params["blocks"])
    assert "*Evidence*" in text and "`message:9`" in text and "*Likely causes*" in text
    # The full report, on demand: short ones inline in the thread.
    details = slack.thread(CHANNEL, ev["ts"])[-1]
    bot.send_interaction(block_action(ActionId.FULL_REPORT, button_value(details, ActionId.FULL_REPORT),
                                      channel=CHANNEL, message=details))
    full = slack.wait_for("chat.postMessage", n=3)[-1]
    assert full.params["thread_ts"] == ev["ts"]
    assert "message:9" in full.params["text"] and "== nccl-cuda-999" in full.params["text"]


def test_an_old_show_all_evidence_button_still_works(bot: RunningBot, slack: SlackStandIn) -> None:
    ev, answer = diagnosed(bot, slack)
    bot.send_interaction(block_action(ActionId.SHOW_EVIDENCE, button_value(answer, ActionId.SHOW_DETAILS),
                                      channel=CHANNEL, message=answer))
    post = slack.wait_for("chat.postMessage", n=2)[-1]
    assert post.params["thread_ts"] == ev["ts"] and "*Evidence*" in section_text(post.params["blocks"])


def test_full_report_uploads_long_evidence_as_a_file(bot: RunningBot, slack: SlackStandIn) -> None:
    many = "".join(RANK3.replace("rank3", f"rank{r}") for r in range(64))
    ev, answer = diagnosed(bot, slack, WATCHDOG + many)
    bot.send_interaction(block_action(ActionId.FULL_REPORT, button_value(answer, ActionId.SHOW_DETAILS),
                                      channel=CHANNEL, message=answer))
    slack.wait_for("files.completeUploadExternal")
    bot.wait_idle()
    assert slack.calls_to("files.getUploadURLExternal")
    (up,) = slack.uploads
    assert up["channel_id"] == CHANNEL and up["thread_ts"] == ev["ts"]
    content = up["content"].decode()
    assert content.count("Cuda failure 999 'unknown error'") >= 64 and "rank 63" in content


def test_rerun_probes_without_agents_says_why(bot: RunningBot, slack: SlackStandIn) -> None:
    ev, answer = diagnosed(bot, slack)
    assert not any(e.get("action_id") == ActionId.RERUN_PROBES for b in answer["blocks"]
                   for e in b.get("elements", []))
    # An old message (or a crafted click) still gets a clear answer.
    bot.send_interaction(block_action(ActionId.RERUN_PROBES, button_value(answer, ActionId.RIGHT), channel=CHANNEL,
                                      message=answer))
    post = slack.wait_for("chat.postMessage", n=2)[-1]
    assert post.params["thread_ts"] == ev["ts"] and "no node agents are configured" in post.params["text"]


def test_button_on_a_forgotten_incident_explains(bot: RunningBot, slack: SlackStandIn) -> None:
    ev, answer = diagnosed(bot, slack)
    bot.send_interaction(block_action(ActionId.RIGHT, "999:1", channel=CHANNEL, message=answer))
    post = slack.wait_for("chat.postMessage", n=2)[-1]
    assert "Incident #999 is no longer stored" in post.params["text"]


def test_app_home_shows_incidents_signatures_hosts_and_precision(bot: RunningBot, slack: SlackStandIn) -> None:
    ev, answer = diagnosed(bot, slack)
    rank3 = RANK3.replace("[rank3]: ", "gpu-node-17:4242:4290 [3] NCCL WARN ", 1)
    ev2, answer2 = diagnosed(bot, slack, rank3)
    bot.send_interaction(block_action(ActionId.RIGHT, button_value(answer, ActionId.RIGHT), channel=CHANNEL,
                                      message=answer, user="UCAROL"))
    bot.wait_idle()
    bot.send_event({"type": "app_home_opened", "user": "UCAROL", "channel": "D0HOME", "tab": "home"})
    pub = slack.wait_for("views.publish")[0]
    assert pub.params["user_id"] == "UCAROL"
    view = slack.views[-1]["view"]
    text = section_text(view["blocks"])
    assert view["type"] == "home"
    assert f"{slack.base_url}/workspace/archives/{CHANNEL}/p{ev['ts'].replace('.', '')}" in text
    assert "`nccl-cuda-999` × 2" in text
    assert "`gpu-node-17` in 1 incident" in text
    assert "`nccl-cuda-999`: 1/1 right (100%)" in text
