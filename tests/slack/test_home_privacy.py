"""App Home shows a user only incidents from public channels and from conversations they are in.

Through the real bot (Bolt app, HTTP, worker pool) and the Web API stand-in, which answers
conversations.info / conversations.members / users.info like Slack.
"""

from __future__ import annotations

from typing import Any

from slack_sdk import WebClient

from bot.slack.visibility import ConversationAccess
from tests.slack.logs import NCCL_999, RANK3
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import message_event
from tests.support.slack_standin import SlackStandIn

PRIVATE = "C0SECRET"  # private channels have C ids too: the id says nothing about privacy
DM = "D0ALICE"
SECRET_LOG = RANK3.replace("[rank3]: ", "secret-node-9:4242:4290 [3] NCCL WARN ", 1)
PUBLIC_LOG = RANK3.replace("[rank3]: ", "gpu-node-17:4242:4290 [3] NCCL WARN ", 1)


def paste(bot: RunningBot, slack: SlackStandIn, channel: str, text: str, **kw: Any) -> dict[str, Any]:
    ev = message_event(channel, text, **kw)
    before = len(slack.calls_to("chat.postMessage"))
    bot.send_event(ev)
    slack.wait_for("chat.postMessage", n=before + 1)
    bot.wait_idle()
    return ev


def home_of(bot: RunningBot, slack: SlackStandIn, user: str) -> str:
    before = len(slack.calls_to("views.publish"))
    bot.send_event({"type": "app_home_opened", "user": user, "channel": "D0HOME" + user, "tab": "home"})
    slack.wait_for("views.publish", n=before + 1)
    bot.wait_idle()
    pub = [v for v in slack.views if v["kind"] == "publish"][-1]
    assert pub["user_id"] == user and pub["view"]["type"] == "home"
    return section_text(pub["view"]["blocks"])


def link(slack: SlackStandIn, channel: str, ev: dict[str, Any]) -> str:
    return f"{slack.base_url}/workspace/archives/{channel}/p{ev['ts'].replace('.', '')}"


def scene(bot: RunningBot, slack: SlackStandIn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    slack.add_conversation(CHANNEL, members=["UALICE", "UBOB", "UTRIAGEBOT"])
    slack.add_conversation(PRIVATE, private=True, members=["UALICE", "UTRIAGEBOT"])
    slack.add_im(DM, "UALICE")
    public = paste(bot, slack, CHANNEL, PUBLIC_LOG, user="UBOB")
    secret = paste(bot, slack, PRIVATE, SECRET_LOG, channel_type="group")
    dm = paste(bot, slack, DM, NCCL_999, channel_type="im")
    assert {i.channel for i in (bot.store.find_incident(c, e["ts"]) for c, e in
                                ((CHANNEL, public), (PRIVATE, secret), (DM, dm))) if i} == {CHANNEL, PRIVATE, DM}
    return public, secret, dm


def test_a_user_outside_a_private_channel_sees_none_of_its_incidents(bot: RunningBot, slack: SlackStandIn) -> None:
    public, secret, dm = scene(bot, slack)

    bob = home_of(bot, slack, "UBOB")
    assert link(slack, CHANNEL, public) in bob
    assert PRIVATE not in bob and link(slack, PRIVATE, secret) not in bob
    assert DM not in bob and link(slack, DM, dm) not in bob
    assert "secret-node-9" not in bob  # not in the hosts either
    assert "`gpu-node-17` in 1 incident" in bob
    assert "`nccl-cuda-999` × 1" in bob  # the week's signatures count only what Bob may see

    alice = home_of(bot, slack, "UALICE")
    for ch, ev in ((CHANNEL, public), (PRIVATE, secret), (DM, dm)):
        assert link(slack, ch, ev) in alice
    assert "`secret-node-9` in 1 incident" in alice
    assert "`nccl-cuda-999` × 3" in alice


def test_guests_see_public_channels_only_as_members_and_lookups_fail_closed(bot: RunningBot,
                                                                             slack: SlackStandIn) -> None:
    public, secret, dm = scene(bot, slack)
    slack.add_user("UGUEST", guest=True)
    slack.add_user("UGUEST2", guest=True)
    slack.add_conversation(CHANNEL, members=["UALICE", "UBOB", "UTRIAGEBOT", "UGUEST2"])

    guest = home_of(bot, slack, "UGUEST")
    assert "None in the channels and conversations you are in" in guest
    assert "gpu-node-17" not in guest and "secret-node-9" not in guest
    assert link(slack, CHANNEL, public) in home_of(bot, slack, "UGUEST2")

    # users.info cannot say who Carol is (users:read missing, say): she is treated as a guest, and
    # she is in no conversation, so she sees nothing.
    slack.fail("users.info", status=200, retry_after=None, error="missing_scope", times=100)
    carol = home_of(bot, slack, "UCAROL")
    assert "None in the channels and conversations you are in" in carol
    assert "gpu-node-17" not in carol and "secret-node-9" not in carol


def test_access_answers_are_cached_briefly(slack: SlackStandIn) -> None:
    slack.add_conversation(PRIVATE, private=True, members=["UALICE"] + [f"U{i:05d}" for i in range(2500)])
    slack.add_im(DM, "UALICE")
    now = [1000.0]
    client = WebClient(token=slack.bot_token, base_url=slack.api_url)
    access = ConversationAccess(client, ttl_s=60, clock=lambda: now[0])
    chans = [CHANNEL, PRIVATE, DM, "D0NOSUCH"]

    assert access.visible_channels("UALICE", chans) == {CHANNEL, PRIVATE, DM}
    assert access.visible_channels("U02499", chans) == {CHANNEL, PRIVATE}  # on the third page of members
    assert access.visible_channels("UBOB", chans) == {CHANNEL}
    calls = len(slack.calls)
    assert len(slack.calls_to("conversations.members")) == 3  # 2,501 members: 3 pages, once
    assert access.visible_channels("UALICE", chans) == {CHANNEL, PRIVATE, DM}
    assert len(slack.calls) == calls  # all from the cache

    # Bob is added; within the TTL the cached member list still holds, after it he sees the channel.
    slack.add_conversation(PRIVATE, private=True, members=["UALICE", "UBOB"])
    now[0] += 30
    assert access.visible_channels("UBOB", chans) == {CHANNEL}
    now[0] += 31
    assert access.visible_channels("UBOB", chans) == {CHANNEL, PRIVATE}
    # Alice leaves; once the TTL has passed she no longer sees it.
    slack.add_conversation(PRIVATE, private=True, members=["UBOB"])
    now[0] += 61
    assert access.visible_channels("UALICE", chans) == {CHANNEL, DM}
    assert access.visible_channels("", chans) == set()

    # Slack cannot describe a conversation (a scope missing, rate limited): it is hidden, and the
    # failure is cached only briefly.
    fresh = ConversationAccess(client, ttl_s=60, failed_ttl_s=5, clock=lambda: now[0])
    slack.fail("conversations.info", status=200, retry_after=None, error="missing_scope", times=3)
    assert fresh.visible_channels("UBOB", [CHANNEL, PRIVATE, DM]) == set()
    now[0] += 6
    assert fresh.visible_channels("UBOB", [CHANNEL, PRIVATE, DM]) == {CHANNEL, PRIVATE}
