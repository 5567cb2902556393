"""Every payload the bot sends must be one real Slack accepts: Block Kit that `slack_sdk.models`
parses and validates, no empty text, and mrkdwn in which every `<`, `>`, `&` is escaped (only
Slack's own `<@U…>`, `<#C…>`, `<!date…>` and `<https://…|label>` forms are left)."""

from __future__ import annotations

import json
import re
from typing import Any

from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

# Slack's control sequences the bot writes on purpose: user / channel mentions and links.
_ALLOWED_ANGLE = re.compile(r"<(?:@[UW][A-Z0-9]+|#[CG][A-Z0-9]+(?:\|[^<>]*)?|(?:https?|mailto):[^<>|\s]+(?:\|[^<>]*)?)>")
_BARE_AMP = re.compile(r"&(?!amp;|lt;|gt;)")


def _text_problems(text: str, where: str) -> list[str]:
    out = []
    if not text.strip():
        out.append(f"{where}: empty text")
    rest = _ALLOWED_ANGLE.sub("", text)
    if "<" in rest or ">" in rest:
        i = max(rest.find("<"), rest.find(">"))
        out.append(f"{where}: unescaped < or > near {rest[max(0, i - 40): i + 40]!r}")
    if _BARE_AMP.search(text):
        i = _BARE_AMP.search(text).start()  # type: ignore[union-attr]
        out.append(f"{where}: unescaped & near {text[max(0, i - 40): i + 40]!r}")
    return out


def _walk_texts(obj: Any, where: str) -> list[str]:
    """Every mrkdwn text object inside a block tree (plain_text is shown as typed: no escaping)."""
    out: list[str] = []
    if isinstance(obj, dict):
        if obj.get("type") == "mrkdwn":
            out += _text_problems(str(obj.get("text", "")), where)
        elif obj.get("type") == "plain_text" and not str(obj.get("text", "")).strip():
            out.append(f"{where}: empty plain_text")
        for k, v in obj.items():
            out += _walk_texts(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _walk_texts(v, f"{where}[{i}]")
    return out


def block_problems(blocks: list[dict[str, Any]], where: str) -> list[str]:
    out: list[str] = []
    if not isinstance(blocks, list) or not blocks:
        return [f"{where}: no blocks"]
    for i, b in enumerate(blocks):
        parsed = Block.parse(b)
        if parsed is None or type(parsed) is Block:
            out.append(f"{where}[{i}]: unknown block {b.get('type')!r}")
            continue
        try:
            parsed.validate_json()
            again = parsed.to_dict()
        except Exception as exc:  # slack_sdk's own validation: lengths, required fields
            out.append(f"{where}[{i}]: {exc}")
            continue
        if b.get("type") == "section" and not (b.get("text") or b.get("fields")):
            out.append(f"{where}[{i}]: a section with neither text nor fields")
        if b.get("type") == "context" and not b.get("elements"):
            out.append(f"{where}[{i}]: a context without elements")
        if again.get("type") != b.get("type"):
            out.append(f"{where}[{i}]: does not round-trip")
    return out + _walk_texts(blocks, where)


def call_problems(method: str, params: dict[str, Any]) -> list[str]:
    """What Slack would refuse (or render wrongly) in one recorded Web API call."""
    out: list[str] = []
    if method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
        blocks = params.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if blocks is not None:
            out += block_problems(blocks, f"{method}.blocks")
        meta = params.get("metadata")
        if isinstance(meta, str):
            meta = json.loads(meta)
        if meta is not None and not (isinstance(meta, dict) and isinstance(meta.get("event_type"), str)
                                     and isinstance(meta.get("event_payload"), dict)):
            out.append(f"{method}.metadata: needs event_type (a string) and event_payload (an object)")
        text = params.get("text")
        if text is None or not str(text).strip():
            out.append(f"{method}: no fallback text")
        else:
            out += _text_problems(str(text), f"{method}.text")
    elif method in ("views.open", "views.publish", "views.update"):
        view = params.get("view")
        if isinstance(view, str):
            view = json.loads(view)
        try:
            View(**view).validate_json()
        except Exception as exc:
            out.append(f"{method}: {exc}")
        out += block_problems(view.get("blocks") or [], f"{method}.view.blocks")
    return out
