"""The incident lifecycle: acknowledge, owner, snooze, resolve with the confirmed cause, reopen; mutes
by signature, host and job pattern that stop posts and expire on time; `/diagnose status | list |
search | mute`; status on the card and in App Home.

Real bot, real HTTP, the Web API stand-in; time moves through the workflow's clock (no sleeps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.service.lifecycle import mute_patterns, parse_duration
from bot.slack.ids import ActionId, BlockId, CallbackId, InputId
from tests.slack.logs import RANK3
from tests.slack.test_actions import diagnosed
from tests.slack.test_grouping import ArraySource, hook_event, top_level
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import block_action, view_submission
from tests.support.slack_standin import SlackStandIn

HOST_LOG = RANK3.replace("[rank3]: ", "gpu-h200-07:4242:4290 [3] NCCL WARN ", 1)  # names the host


def fake_clock(bot: RunningBot) -> list[float]:
    now = [bot.store.clock()]
    bot.bot.service.wf.clock = lambda: now[0]
    return now


def command(bot: RunningBot, slack: SlackStandIn, text: str, user: str = "UCAROL") -> dict:
    """/diagnose <text>; returns what came back through the response_url (to the asker, or in channel).
    (The same text from the same person within 30 s is one command: repeats use another person.)"""
    before = len(slack.responses)
    bot.send_command(text, response_url=slack.response_url(), user=user)
    slack.wait_for("response_url", n=before + 1)
    bot.wait_idle()
    return slack.responses[before]


def lifecycle_element(message: dict, action_id: str) -> tuple[str, dict]:
    for b in message["blocks"]:
        for e in b.get("elements", []):
            if e.get("action_id") == action_id:
                return b["block_id"], e
    raise AssertionError(f"no {action_id} on the card")


def click(bot: RunningBot, slack: SlackStandIn, message: dict, action_id: str, user: str = "UCAROL",
          **action: object) -> None:
    block_id, el = lifecycle_element(message, action_id)
    payload = block_action(action_id, str(el.get("value", "")), channel=CHANNEL, message=message, user=user)
    payload["actions"][0].update({"block_id": block_id, "type": el["type"], **action})
    before = len(slack.calls_to("chat.update"))
    assert bot.send_interaction(payload)[0] == 200
    slack.wait_for("chat.update", n=before + 1)
    bot.wait_idle()


def card(slack: SlackStandIn, answer: dict) -> dict:
    return slack.message(CHANNEL, answer["ts"])


def test_durations_and_patterns_are_checked() -> None:
    assert parse_duration("90m") == 5400 and parse_duration("2h") == 7200 and parse_duration("1d") == 86400
    assert parse_duration("45") == 2700  # minutes when no unit is given
    for bad in ("soon", "0m", "31d", "-2h"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert mute_patterns("host", "gpu[01-03]") == ["gpu01", "gpu02", "gpu03"]  # a Slurm host list, not a glob
    assert mute_patterns("host", "gpu-h200-*") == ["gpu-h200-*"]
    assert mute_patterns("signature", "nccl-cuda-999") == ["nccl-cuda-999"]
    with pytest.raises(ValueError, match="no signature"):
        mute_patterns("signature", "nccl-cuda-998")
    with pytest.raises(ValueError):
        mute_patterns("host", "gpu01; rm -rf /")
    with pytest.raises(ValueError):
        mute_patterns("everything", "*")


def test_a_host_mute_stops_posts_for_that_host_and_expires_on_time(bot: RunningBot, slack: SlackStandIn) -> None:
    now = fake_clock(bot)
    said = command(bot, slack, "mute host gpu-h200-[07-08] for 2h draining for RMA")
    assert said["response_type"] == "in_channel"  # a mute changes what everybody sees: said to the channel
    assert "muted host `gpu-h200-[07-08]` for 2 h" in said["text"] and "mute #1" in said["text"]
    status, body = bot.send_hook(hook_event("5001", nodes="gpu-h200-08"))
    assert status == 200 and body["status"] == "muted" and body["mute"] == 1
    status, other = bot.send_hook(hook_event("5002", nodes="gpu-h200-09", n=1))
    bot.wait_idle()
    assert status == 202 and len(top_level(slack)) == 1  # only the unmuted host's failure was posted
    listed = command(bot, slack, "mute list")
    assert "host `gpu-h200-[07-08]`" in listed["text"] and "1 post held back" in listed["text"]
    assert listed["response_type"] == "ephemeral"

    now[0] += 2 * 3600 - 5  # still muted a moment before it ends ...
    assert bot.send_hook(hook_event("5003", nodes="gpu-h200-07", n=2))[1]["status"] == "muted"
    now[0] += 10  # ... and not after
    status, body = bot.send_hook(hook_event("5004", nodes="gpu-h200-07", n=3))
    bot.wait_idle()
    assert status == 202 and body["status"] == "accepted" and len(top_level(slack)) == 2
    assert "No active mutes" in command(bot, slack, "mute list", user="UDAVE")["text"]


def test_a_signature_mute_posts_nothing_for_that_failure(bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:
    now = fake_clock(bot)
    bot.bot.service.wf.job_source = ArraySource(tmp_path)
    command(bot, slack, "mute signature nccl-cuda-999 30m known driver bug, fix rolling out")
    status, body = bot.send_hook(hook_event("1234"))
    bot.wait_idle()
    assert status == 202  # diagnosed (the mute can only tell once the logs are read) ...
    assert not slack.bot_messages(CHANNEL)  # ... and nothing at all was posted
    inc = bot.store.get_incident(body["incident"])
    assert inc.state == "muted" and inc.signature == "nccl-cuda-999"  # kept: /diagnose search finds it
    now[0] += 31 * 60  # expired: the next task of the job is posted, with its verdict
    status, body = bot.send_hook(hook_event("1234_1", n=1))
    bot.wait_idle()
    (head,) = top_level(slack)
    assert "nccl-cuda-999" in section_text(head["blocks"]) and "2 tasks of job 1234 failed" in section_text(
        head["blocks"])


def test_a_job_mute_covers_every_task_of_the_array_and_unmute_ends_it(bot: RunningBot, slack: SlackStandIn) -> None:
    command(bot, slack, "mute job 1234 1h")
    assert bot.send_hook(hook_event("1234_3"))[1]["status"] == "muted"
    assert bot.send_hook(hook_event("1299", nodes="gpu-h200-01", n=1))[0] == 202
    said = command(bot, slack, "unmute 1")
    assert "ended mute #1" in said["text"]
    assert bot.send_hook(hook_event("1234_4", n=2))[0] == 202
    bot.wait_idle()
    assert len(top_level(slack)) == 2
    assert "No active mute #1" in command(bot, slack, "unmute 1", user="UDAVE")["text"]


def test_bad_mutes_say_what_is_wrong(bot: RunningBot, slack: SlackStandIn) -> None:
    assert "Say what to mute" in command(bot, slack, "mute host")["text"]
    assert "no signature" in command(bot, slack, "mute signature nccl-cuda-998 1h")["text"]
    assert "not a duration" in command(bot, slack, "mute host gpu01 99x")["text"]
    assert "at most 30 days" in command(bot, slack, "mute host gpu01 for 60d")["text"]
    assert not bot.bot.service.lifecycle.active_mutes()


def test_acknowledge_owner_snooze_resolve_and_reopen_on_the_card(bot: RunningBot, slack: SlackStandIn) -> None:
    now = fake_clock(bot)
    ev, answer = diagnosed(bot, slack)
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    click(bot, slack, answer, ActionId.ACK, user="UCAROL")
    text = section_text(card(slack, answer)["blocks"])
    assert "Acknowledged by <@UCAROL>" in text and "Owner <@UCAROL>" in text
    assert ActionId.ACK not in str(card(slack, answer)["blocks"])  # acknowledged once

    click(bot, slack, card(slack, answer), ActionId.OWNER, selected_user="UBOB")
    assert "Owner <@UBOB>" in section_text(card(slack, answer)["blocks"])
    notes = [section_text(m["blocks"]) for m in slack.thread(CHANNEL, ev["ts"])]
    assert any("<@UCAROL> made <@UBOB> the owner" in n for n in notes)

    click(bot, slack, card(slack, answer), ActionId.SNOOZE, selected_option={"value": f"{inc.id}:3600"})
    assert "Snoozed until" in section_text(card(slack, answer)["blocks"])
    assert bot.store.get_incident(inc.id).snoozed_until == pytest.approx(now[0] + 3600)

    # Resolve opens a modal with the diagnosed signature preselected ...
    block_id, el = lifecycle_element(card(slack, answer), ActionId.RESOLVE)
    payload = block_action(ActionId.RESOLVE, el["value"], channel=CHANNEL, message=card(slack, answer), user="UBOB")
    payload["actions"][0]["block_id"] = block_id
    bot.send_interaction(payload)
    slack.wait_for("views.open")
    view = slack.views[-1]["view"]
    select = next(b for b in view["blocks"] if b.get("block_id") == BlockId.RESOLVE_SELECT)
    assert view["callback_id"] == CallbackId.RESOLVE_MODAL and select["element"]["initial_option"]["value"] == \
        "nccl-cuda-999"
    # ... and submitting it keeps that cause, counts as Right, and shows on the card.
    values = {BlockId.RESOLVE_SELECT: {InputId.RESOLVE_SELECT: {"selected_option": {"value": "nccl-cuda-999"}}},
              BlockId.RESOLVE_TEXT: {InputId.RESOLVE_TEXT: {"value": "killed the stray process on GPU 3"}}}
    before = len(slack.calls_to("chat.update"))
    bot.send_interaction(view_submission(CallbackId.RESOLVE_MODAL, view["private_metadata"], values, user="UBOB"))
    slack.wait_for("chat.update", n=before + 1)
    bot.wait_idle()
    text = section_text(card(slack, answer)["blocks"])
    assert "Resolved by <@UBOB>: nccl-cuda-999 · killed the stray process on GPU 3" in text
    assert [(f.user, f.verdict) for f in bot.store.list_feedback(inc.id)] == [("UBOB", "right")]
    assert ActionId.REOPEN in str(card(slack, answer)["blocks"])

    click(bot, slack, card(slack, answer), ActionId.REOPEN, user="UBOB")
    assert "Resolved" not in section_text(card(slack, answer)["blocks"])
    assert bot.store.get_incident(inc.id).resolved_at is None


def test_status_list_search_and_app_home_show_the_lifecycle(bot: RunningBot, slack: SlackStandIn) -> None:
    slack.add_conversation(CHANNEL, members=["UCAROL", "UTRIAGEBOT"])
    ev, answer = diagnosed(bot, slack, HOST_LOG)
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    assert inc.hosts == ["gpu-h200-07"]
    command(bot, slack, f"ack {inc.id}")
    listed = command(bot, slack, "list")["text"]
    assert f"#{inc.id} nccl-cuda-999" in listed and "Acknowledged by <@UCAROL>" in listed
    found = command(bot, slack, "search gpu-h200-0[0-9]")["text"]
    assert f"#{inc.id} nccl-cuda-999" in found
    assert "No incidents on gpu99" in command(bot, slack, "search gpu99")["text"]
    status = command(bot, slack, "status")["text"]
    assert "1 acknowledged" in status and "No active mutes" in status
    assert "State: *acknowledged*" in command(bot, slack, f"status {inc.id}")["text"]
    assert "No incident #999" in command(bot, slack, "status 999")["text"]

    before = len(slack.calls_to("views.publish"))
    bot.send_event({"type": "app_home_opened", "user": "UCAROL", "channel": "D0HOME", "tab": "home"})
    slack.wait_for("views.publish", n=before + 1)
    bot.wait_idle()
    home = section_text(slack.views[-1]["view"]["blocks"])
    assert "*acknowledged* · owner <@UCAROL>" in home and "*Yours*" in home

    command(bot, slack, f"resolve {inc.id} nccl-cuda-999 replaced the GPU")
    assert "No unresolved incidents" in command(bot, slack, "list", user="UDAVE")["text"]
    found = command(bot, slack, "search gpu-h200-*")["text"]
    assert f"#{inc.id}" in found and "Resolved by <@UCAROL>: nccl-cuda-999 · replaced the GPU" in found
