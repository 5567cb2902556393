"""Block Kit -> HTML close to how Slack draws a bot reply in a 560 px thread pane (Lato 15/22 px,
36 px avatar, grey context lines, buttons in a row), and the plain words a person reads.

Enough of mrkdwn for the bot's own messages: ``` blocks, `code`, *bold*, _italic_, :emoji:,
<@U…> mentions, links and the &lt; &gt; &amp; entities (kept as entities, so they show as < > &)."""

from __future__ import annotations

import html
import re
from typing import Any

_FENCE = re.compile(r"```(.*?)```", re.S)
_CODE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])")
_ITAL = re.compile(r"(?<![\w_])_([^_\n]+)_(?![\w_])")
_EMOJI = re.compile(r":([a-z0-9_+-]+):")
_MENTION = re.compile(r"&lt;@([UW][A-Z0-9]+)&gt;")
_LINK = re.compile(r"&lt;(https?://[^|&]+)(?:\|([^&]*))?&gt;")

CSS = """
body { margin: 0; width: 560px; background: #fff; font: 15px/22px Lato, 'DejaVu Sans', Arial, sans-serif;
       color: #1d1c1d; }
.msg { display: flex; padding: 8px 20px 8px 16px; }
.avatar { width: 36px; height: 36px; border-radius: 4px; background: #4a154b; flex: none; margin-right: 8px; }
.body { min-width: 0; flex: 1; }
.name { font-weight: 900; }
.section { margin: 4px 0; overflow-wrap: anywhere; }
.context { margin: 4px 0; font-size: 12px; line-height: 18px; color: #616061; overflow-wrap: anywhere; }
.context span + span { margin-left: 8px; }
pre { margin: 4px 0; padding: 8px; border: 1px solid #ddd; border-radius: 4px; background: #f8f8f8;
      font: 12px/18px Monaco, Menlo, 'DejaVu Sans Mono', monospace; white-space: pre-wrap; overflow-wrap: anywhere; }
code { font: 12px Monaco, Menlo, 'DejaVu Sans Mono', monospace; color: #e01e5a; background: #f8f8f8;
       border: 1px solid #ddd; border-radius: 3px; padding: 0 2px; overflow-wrap: anywhere; }
.emoji { display: inline-block; width: 18px; height: 18px; vertical-align: -3px; background: #f2c744;
         border-radius: 50%; }
.actions { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.btn { border: 1px solid #bbb; border-radius: 4px; padding: 0 12px; height: 28px; line-height: 28px;
       font-weight: 700; font-size: 13px; }
.btn.primary { background: #007a5a; color: #fff; border-color: #007a5a; }
"""


def mrkdwn_html(text: str, command_id: str | None = None) -> str:
    parts = []
    pos = 0
    for m in _FENCE.finditer(text):
        parts.append(_inline(text[pos:m.start()]))
        attr = f' id="{command_id}"' if command_id and not any('id="' in p for p in parts) else ""
        parts.append(f"<pre{attr}>{m.group(1).strip(chr(10))}</pre>")
        pos = m.end()
    parts.append(_inline(text[pos:]))
    return "".join(parts)


def _inline(text: str) -> str:
    text = text.replace('"', "&quot;")
    text = _CODE.sub(r"<code>\1</code>", text)
    text = _BOLD.sub(r"<b>\1</b>", text)
    text = _ITAL.sub(r"<i>\1</i>", text)
    text = _EMOJI.sub(r'<span class="emoji" title="\1"></span>', text)
    text = _MENTION.sub(r"<b>@\1</b>", text)
    text = _LINK.sub(lambda m: f'<a href="{m.group(1)}">{m.group(2) or m.group(1)}</a>', text)
    return text.replace("\n", "<br>")


def _texts(b: dict[str, Any]) -> list[str]:
    if b["type"] == "section":
        return [b["text"]["text"]] if b.get("text") else [f["text"] for f in b.get("fields", [])]
    if b["type"] == "context":
        return [e.get("text", "") for e in b.get("elements", [])]
    if b["type"] == "actions":
        return [e["text"]["text"] for e in b.get("elements", []) if e.get("text")]
    if b["type"] == "header":
        return [b["text"]["text"]]
    return []


def blocks_html(blocks: list[dict[str, Any]], title: str = "answer") -> str:
    rows = []
    for b in blocks:
        if b["type"] == "section":
            text = b["text"]["text"]
            cid = "next-command" if text.startswith("*Next step*") else None
            rows.append(f'<div class="section">{mrkdwn_html(text, cid)}</div>')
        elif b["type"] == "context":
            rows.append('<div class="context">' + "".join(f"<span>{mrkdwn_html(t)}</span>" for t in _texts(b))
                        + "</div>")
        elif b["type"] == "actions":
            rows.append('<div class="actions">' + "".join(
                f'<span class="btn {e.get("style", "")}">{html.escape(_label(e))}</span>'
                for e in b["elements"]) + "</div>")
        elif b["type"] == "divider":
            rows.append("<hr>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><div class='msg'><div class='avatar'></div><div class='body'>"
            f"<div class='name'>GPU Triage <span class='context'>APP 3:04 AM</span></div>{''.join(rows)}"
            "</div></div></body></html>")


def plain_words(blocks: list[dict[str, Any]]) -> list[str]:
    """The words a person reads, in order (emoji codes and mrkdwn marks are no words)."""
    out: list[str] = []
    for b in blocks:
        for t in _texts(b):
            t = _EMOJI.sub(" ", html.unescape(t)).replace("```", " ")
            out += [w for w in re.split(r"\s+", t.replace("*", "").replace("`", "")) if w.strip("·_—")]
    return out


def command_of(blocks: list[dict[str, Any]]) -> str | None:
    for b in blocks:
        if b["type"] == "section" and b["text"]["text"].startswith("*Next step*"):
            m = _FENCE.search(b["text"]["text"])
            return html.unescape(m.group(1)) if m else None
    return None


def words_before_command(blocks: list[dict[str, Any]]) -> int | None:
    """How many words a person reads before the command's first word (None: no command)."""
    cmd = command_of(blocks)
    if not cmd:
        return None
    words = plain_words(blocks)
    first = [w for w in cmd.replace("*", "").replace("`", "").split() if w]
    for i in range(len(words)):
        if words[i: i + len(first)] == first:
            return i
    raise AssertionError(f"command {cmd!r} not found in the words")


def _label(element: dict[str, Any]) -> str:
    """What Slack draws on an actions element: a button's text, a menu's placeholder, an overflow's dots."""
    for key in ("text", "placeholder"):
        if isinstance(element.get(key), dict):
            return str(element[key].get("text", ""))
    return "\u22ef" if element.get("type") == "overflow" else element.get("type", "?")
