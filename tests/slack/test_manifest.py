"""The app manifest an admin pastes must match what the code listens for and calls."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.slack.ids import SLASH_COMMAND, CallbackId

ROOT = Path(__file__).resolve().parents[2]
SOCKET = yaml.safe_load((ROOT / "deploy/slack/manifest.yaml").read_text())
HTTP = yaml.safe_load((ROOT / "deploy/slack/manifest-http.yaml").read_text())

# Web API methods the bot calls (bot/slack/gateway.py) and the bot scope each needs.
NEEDED_SCOPES = {
    "chat.postMessage / chat.update / chat.postEphemeral": "chat:write",
    "/diagnose in a public channel the bot has not joined": "chat:write.public",
    "conversations.replies (public channels)": "channels:history",
    "conversations.replies (private channels)": "groups:history",
    "files.info + url_private_download": "files:read",
    "files.getUploadURLExternal / files.completeUploadExternal": "files:write",
    "reactions.add / reactions.remove": "reactions:write",
    "slash command and shortcut": "commands",
    "app_mention events": "app_mentions:read",
    "message.im events": "im:history",
    "App Home: conversations.info (public channels)": "channels:read",
    "App Home: conversations.info / .members (private channels)": "groups:read",
    "App Home: conversations.info (DMs)": "im:read",
    "App Home: conversations.members (group DMs)": "mpim:read",
    "App Home: users.info (guests)": "users:read",
    "scheduler posts mention the job's user: users.lookupByEmail": "users:read.email",
    "Drain host: usergroups.users.list (TRIAGE_DRAIN_USERGROUP)": "usergroups:read",
}
# Events with a listener in bot/slack/listeners/events.py.
NEEDED_EVENTS = {"app_home_opened", "app_mention", "message.channels", "message.groups", "message.im"}


def test_socket_mode_manifest_matches_the_code() -> None:
    m = SOCKET
    assert m["settings"]["socket_mode_enabled"] is True
    assert m["settings"]["interactivity"]["is_enabled"] is True
    assert [c["command"] for c in m["features"]["slash_commands"]] == [SLASH_COMMAND]
    (shortcut,) = m["features"]["shortcuts"]
    assert shortcut["type"] == "message" and shortcut["callback_id"] == CallbackId.DIAGNOSE_SHORTCUT
    assert m["features"]["app_home"]["home_tab_enabled"] is True
    scopes = set(m["oauth_config"]["scopes"]["bot"])
    missing = {why: s for why, s in NEEDED_SCOPES.items() if s not in scopes}
    assert not missing, missing
    assert NEEDED_EVENTS <= set(m["settings"]["event_subscriptions"]["bot_events"])
    # No URLs: Socket Mode needs none, and Slack rejects a manifest mixing both.
    assert "request_url" not in m["settings"]["event_subscriptions"]
    assert "url" not in m["features"]["slash_commands"][0]


def test_http_manifest_is_the_same_app_with_request_urls() -> None:
    m = HTTP
    assert m["settings"]["socket_mode_enabled"] is False
    urls = {m["settings"]["event_subscriptions"]["request_url"], m["settings"]["interactivity"]["request_url"],
            m["features"]["slash_commands"][0]["url"]}
    assert urls == {"https://triage.example.com/slack/events"}  # Bolt's one endpoint for all three
    assert m["oauth_config"] == SOCKET["oauth_config"]
    assert m["settings"]["event_subscriptions"]["bot_events"] == SOCKET["settings"]["event_subscriptions"]["bot_events"]
    assert m["features"]["shortcuts"] == SOCKET["features"]["shortcuts"]
