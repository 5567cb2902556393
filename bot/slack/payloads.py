"""Slack payloads → bot.service.inputs dataclasses (the only place that knows Slack's JSON shapes)."""

from __future__ import annotations

from typing import Any

from bot.service.inputs import (
    ActionIn,
    DrainIn,
    FileRef,
    LifecycleIn,
    MessageIn,
    ResolveIn,
    SlashIn,
    WrongCauseIn,
)

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


def _rich_text(el: Any) -> str:
    """The plain text of a rich_text element tree (what a bot's blocks say)."""
    if isinstance(el, dict):
        if el.get("type") == "text":
            return str(el.get("text") or "")
        if el.get("type") == "rich_text_preformatted" or el.get("type") == "rich_text_section":
            return "".join(_rich_text(e) for e in el.get("elements") or []) + "\n"
        return "".join(_rich_text(e) for e in el.get("elements") or [])
    return ""


def bot_post_text(message: dict[str, Any]) -> str:
    """Everything a bot's post says: its text, its attachments (Alertmanager, CI notifiers) and its
    blocks (Slack apps), each once. People's messages use `text` only: their attachments are unfurls."""
    parts: list[str] = [message.get("text") or ""]
    for att in message.get("attachments") or []:
        if not isinstance(att, dict):
            continue
        own = [att.get(k) or "" for k in ("pretext", "title", "text")]
        own += [f"{f.get('title', '')}: {f.get('value', '')}" for f in att.get("fields") or [] if isinstance(f, dict)]
        if not any(own):
            own = [att.get("fallback") or ""]
        parts += own
    for b in message.get("blocks") or []:
        if not isinstance(b, dict):
            continue
        if b.get("type") in ("section", "header") and isinstance(b.get("text"), dict):
            parts.append(b["text"].get("text") or "")
            parts += [f.get("text") or "" for f in b.get("fields") or [] if isinstance(f, dict)]
        elif b.get("type") == "rich_text":
            parts.append(_rich_text(b))
        elif b.get("type") == "context":
            parts += [e.get("text") or "" for e in b.get("elements") or [] if isinstance(e, dict)]
    seen: set[str] = set()
    out = []
    for part in parts:
        part = part.strip()
        if part and part not in seen and not any(part in s for s in seen):
            seen.add(part)
            out.append(part)
    return "\n".join(out)


def bot_id_of(event: dict[str, Any]) -> str | None:
    return event.get("bot_id") or (event.get("bot_profile") or {}).get("id")


def message_in(event: dict[str, Any], team: str | None = None, *, bot: bool = False) -> MessageIn:
    text = bot_post_text(event) if bot else event.get("text") or ""
    return MessageIn(
        channel=event.get("channel", ""), ts=event.get("ts", ""), user=event.get("user"), text=text,
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


def drain_in(body: dict[str, Any]) -> DrainIn:
    """The drain confirmation modal, submitted (private_metadata: incident:version:channel:message_ts)."""
    view = body["view"]
    inc, ver, channel, ts = (view.get("private_metadata") or "0:0::").split(":", 3)
    values = (view.get("state") or {}).get("values") or {}
    reason = ((values.get(BlockId.DRAIN_REASON.value) or {}).get(InputId.DRAIN_REASON.value) or {}).get("value")
    return DrainIn(incident_id=int(inc), version=int(ver), user=(body.get("user") or {}).get("id", ""),
                   channel=channel, message_ts=ts, reason=reason or "")


def lifecycle_in(body: dict[str, Any], kind: str) -> LifecycleIn:
    """Acknowledge / Resolve / Reopen buttons (value "incident:version"), the Snooze menu (option value
    "incident:seconds") and the Owner picker (no value: the incident is in the block id)."""
    action = body["actions"][0]
    container = body.get("container") or {}
    block = str(action.get("block_id") or "")
    value: str | None = None
    if kind == "snooze":
        raw = (action.get("selected_option") or {}).get("value", "")
        ref, _, value = raw.partition(":")
    elif kind == "owner":
        ref, value = block.partition(":")[2], action.get("selected_user")
    else:
        ref = str(action.get("value", "")).partition(":")[0]
    return LifecycleIn(
        incident_id=int(ref) if ref.isascii() and ref.isdigit() else 0, user=(body.get("user") or {}).get("id", ""),
        channel=(body.get("channel") or {}).get("id") or container.get("channel_id", ""),
        message_ts=(body.get("message") or {}).get("ts") or container.get("message_ts", ""), kind=kind, value=value,
    )


def resolve_in(body: dict[str, Any]) -> ResolveIn:
    view = body["view"]
    inc, channel, ts = ((view.get("private_metadata") or "0::") + "::").split(":")[:3]
    values = (view.get("state") or {}).get("values") or {}
    selected = ((values.get(BlockId.RESOLVE_SELECT.value) or {}).get(InputId.RESOLVE_SELECT.value) or {}).get(
        "selected_option") or {}
    text = ((values.get(BlockId.RESOLVE_TEXT.value) or {}).get(InputId.RESOLVE_TEXT.value) or {}).get("value")
    return ResolveIn(incident_id=int(inc) if inc.isdigit() else 0, user=(body.get("user") or {}).get("id", ""),
                     channel=channel, message_ts=ts, signature=selected.get("value"), text=text)
