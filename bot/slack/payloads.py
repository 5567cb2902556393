"""Slack payloads → bot.service.inputs dataclasses (the only place that knows Slack's JSON shapes)."""

from __future__ import annotations

from typing import Any

from bot.service.inputs import ActionIn, FileRef, MessageIn, SlashIn, WrongCauseIn

from .ids import BlockId, InputId


def files_of(message: dict[str, Any]) -> list[FileRef]:
    out = []
    for f in message.get("files") or []:
        if not isinstance(f, dict) or not f.get("id"):
            continue
        # Files shared into a channel the app cannot yet see arrive as {"id":..., "file_access":
        # "check_file_info"}: url and size then come from files.info.
        out.append(FileRef(id=f["id"], name=f.get("name") or f.get("title") or f["id"], size=f.get("size"),
                           mimetype=f.get("mimetype"), filetype=f.get("filetype"),
                           url=f.get("url_private_download")))
    return out


def message_in(event: dict[str, Any], team: str | None = None) -> MessageIn:
    return MessageIn(
        channel=event.get("channel", ""), ts=event.get("ts", ""), user=event.get("user"), text=event.get("text") or "",
        thread_ts=event.get("thread_ts"), files=files_of(event), channel_type=event.get("channel_type"),
        team=team or event.get("team"),
    )


def shortcut_message(body: dict[str, Any]) -> MessageIn:
    msg = body.get("message") or {}
    return MessageIn(
        channel=(body.get("channel") or {}).get("id", ""), ts=msg.get("ts", ""), user=msg.get("user"),
        text=msg.get("text") or "", thread_ts=msg.get("thread_ts"), files=files_of(msg),
        team=(body.get("team") or {}).get("id"),
    )


def slash_in(body: dict[str, Any]) -> SlashIn:
    return SlashIn(channel=body.get("channel_id", ""), user=body.get("user_id", ""), text=body.get("text") or "",
                   response_url=body.get("response_url"), team=body.get("team_id"))


def _incident_ref(value: str) -> tuple[int, int]:
    """Button values are "<incident id>:<diagnosis version>"."""
    inc, _, ver = value.partition(":")
    return int(inc), int(ver or 0)


def action_in(body: dict[str, Any]) -> ActionIn:
    action = body["actions"][0]
    incident_id, version = _incident_ref(action.get("value", ""))
    container = body.get("container") or {}
    return ActionIn(
        incident_id=incident_id, version=version, user=(body.get("user") or {}).get("id", ""),
        channel=(body.get("channel") or {}).get("id") or container.get("channel_id", ""),
        message_ts=(body.get("message") or {}).get("ts") or container.get("message_ts", ""),
        response_url=body.get("response_url"),
    )


def wrong_cause_in(body: dict[str, Any]) -> WrongCauseIn:
    view = body["view"]
    inc, ver, channel, ts = (view.get("private_metadata") or "0:0::").split(":", 3)
    values = (view.get("state") or {}).get("values") or {}
    selected = ((values.get(BlockId.CAUSE_SELECT.value) or {}).get(InputId.CAUSE_SELECT.value) or {}).get(
        "selected_option") or {}
    text = ((values.get(BlockId.CAUSE_TEXT.value) or {}).get(InputId.CAUSE_TEXT.value) or {}).get("value")
    note = ((values.get(BlockId.NOTE.value) or {}).get(InputId.NOTE.value) or {}).get("value")
    return WrongCauseIn(incident_id=int(inc), version=int(ver), user=(body.get("user") or {}).get("id", ""),
                        channel=channel, message_ts=ts, signature=selected.get("value"), text=text, note=note)
