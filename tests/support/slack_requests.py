"""Slack-signed requests for the bot's HTTP endpoint, and realistic payloads to put in them.

    status, body = post_signed(url, event_body(message_event("C1", "…log…")), SIGNING_SECRET)

Signing follows Slack's v0 scheme: X-Slack-Signature = v0=HMAC-SHA256(secret, "v0:{ts}:{body}").
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

_seq = itertools.count(1)


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def post(url: str, body: bytes, headers: dict[str, str], timeout: float = 30) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post_signed(url: str, body: bytes | str, secret: str, *, content_type: str = "application/json",
                timestamp: int | None = None, retry_num: int | None = None, signature: str | None = None,
                timeout: float = 30) -> tuple[int, bytes]:
    """POST as Slack does; `timestamp`/`signature` override to forge old or bad requests."""
    data = body.encode() if isinstance(body, str) else body
    ts = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature or slack_signature(secret, ts, data),
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return post(url, data, headers, timeout)


# -- payloads ------------------------------------------------------------------------------------------


def new_ts() -> str:
    return f"{1_710_000_000 + next(_seq)}.{next(_seq):06d}"


def message_event(channel: str, text: str, *, user: str = "UALICE", ts: str | None = None,
                  thread_ts: str | None = None, files: list[dict[str, Any]] | None = None,
                  subtype: str | None = None, channel_type: str = "channel", bot_id: str | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"type": "message", "channel": channel, "user": user, "text": text,
                          "ts": ts or new_ts(), "channel_type": channel_type, "team": "T0STANDIN"}
    if thread_ts:
        ev["thread_ts"] = thread_ts
    if files:
        ev["files"] = files
        ev["subtype"] = subtype or "file_share"
    elif subtype:
        ev["subtype"] = subtype
    if bot_id:
        ev["bot_id"] = bot_id
    return ev


def mention_event(channel: str, text: str, bot_user_id: str, **kw: Any) -> dict[str, Any]:
    ev = message_event(channel, f"<@{bot_user_id}> {text}".strip(), **kw)
    ev["type"] = "app_mention"
    ev.pop("channel_type", None)
    return ev


def event_body(event: dict[str, Any], *, event_id: str | None = None, team_id: str = "T0STANDIN",
               api_app_id: str = "A0TRIAGE") -> bytes:
    return json.dumps({
        "token": "legacy-verification-token-unused", "team_id": team_id, "api_app_id": api_app_id,
        "event": event, "type": "event_callback", "event_id": event_id or f"Ev{next(_seq):010d}",
        "event_time": int(time.time()), "authorizations": [{"team_id": team_id, "user_id": "UTRIAGEBOT",
                                                            "is_bot": True}],
    }).encode()


def slash_body(text: str, *, channel: str = "C0ONCALL", user: str = "UALICE", response_url: str = "",
               command: str = "/diagnose") -> bytes:
    return urlencode({
        "token": "unused", "team_id": "T0STANDIN", "team_domain": "standin", "channel_id": channel,
        "channel_name": "gpu-oncall", "user_id": user, "user_name": "alice", "command": command, "text": text,
        "api_app_id": "A0TRIAGE", "response_url": response_url, "trigger_id": f"{next(_seq)}.trigger",
    }).encode()


def interaction_body(payload: dict[str, Any]) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


def block_action(action_id: str, value: str, *, channel: str, message: dict[str, Any], user: str = "UALICE",
                 response_url: str = "") -> dict[str, Any]:
    return {
        "type": "block_actions", "team": {"id": "T0STANDIN"}, "user": {"id": user, "name": "alice"},
        "api_app_id": "A0TRIAGE", "trigger_id": f"{next(_seq)}.trigger", "response_url": response_url,
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel, "is_ephemeral": False},
        "channel": {"id": channel, "name": "gpu-oncall"}, "message": message,
        "actions": [{"action_id": action_id, "block_id": "triage_actions", "type": "button", "value": value,
                     "action_ts": str(time.time())}],
    }


def view_submission(callback_id: str, private_metadata: str, values: dict[str, Any], *,
                    user: str = "UALICE") -> dict[str, Any]:
    return {
        "type": "view_submission", "team": {"id": "T0STANDIN"}, "user": {"id": user, "name": "alice"},
        "api_app_id": "A0TRIAGE", "trigger_id": f"{next(_seq)}.trigger",
        "view": {"id": "V0MODAL", "type": "modal", "callback_id": callback_id, "private_metadata": private_metadata,
                 "state": {"values": values}},
    }


def message_shortcut(callback_id: str, channel: str, message: dict[str, Any], *, user: str = "UBOB",
                     response_url: str = "") -> dict[str, Any]:
    return {
        "type": "message_action", "callback_id": callback_id, "team": {"id": "T0STANDIN"},
        "user": {"id": user, "name": "bob"}, "channel": {"id": channel, "name": "gpu-oncall"},
        "message": message, "message_ts": message["ts"], "response_url": response_url,
        "trigger_id": f"{next(_seq)}.trigger",
    }
