"""Block Kit for every message, modal and tab the bot shows: pure functions, data in, blocks out.

Slack rejects a message whose section text passes 3000 characters, that has more than 50 blocks,
a button label past 75 or a header past 150. Every text here goes through `clip` with the limit of
the field it lands in, and user/log text through `esc` (a log line holding `<!channel>` must not
ping a channel). The answer holds one screen; evidence, causes and probes are in "Show details" (a
thread reply) and the full report is a file on demand.
"""

from __future__ import annotations

from collections.abc import Sequence

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    Option,
    OptionGroup,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from bot.service.answer import Answer, Headline, HomeData, esc

from .ids import ActionId, BlockId, CallbackId, InputId

SECTION_MAX = 3000
CONTEXT_MAX = 2000
HEADER_MAX = 150
BUTTON_MAX = 75
OPTION_MAX = 75
MODAL_TITLE_MAX = 24
MAX_BLOCKS = 50
MAX_OPTIONS = 100
LINE_MAX = 400  # one evidence line in a message; the file upload has them whole
FALLBACK_MAX = 3000  # notification text


def clip(text: str, limit: int, marker: str = "…") -> str:
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


def code_block(text: str) -> str:
    # A ``` inside the log would close the block early; a zero-width space splits it.
    return "```" + esc(text).replace("```", "`\u200b``") + "```"


def _md(text: str, limit: int = SECTION_MAX) -> MarkdownTextObject:
    return MarkdownTextObject(text=clip(text, limit))


def _section(text: str) -> SectionBlock:
    # Slack refuses an empty text ("no empty block ever"): say so rather than post nothing.
    return SectionBlock(text=_md(text if text.strip() else "_(nothing to show)_"))


def _context(*texts: str) -> ContextBlock:
    elements = [_md(t, CONTEXT_MAX) for t in texts if t and t.strip()][:10]
    return ContextBlock(elements=elements or [_md("\u2014")])


def _fill(header: str, items: Sequence[str], more: str) -> str:
    """As many items as fit in one section, then a note of how many were left out."""
    out = header
    for i, item in enumerate(items):
        if len(out) + len(item) + 1 > SECTION_MAX - 80:
            return out + "\n" + more.format(n=len(items) - i)
        out += "\n" + item
    return out


def _evidence_section(a: Answer) -> str:
    shown = len(a.evidence)
    header = f"*Evidence* ({shown} of {a.evidence_total} line{'s' if a.evidence_total != 1 else ''})"
    items = []
    for e in a.evidence:
        who = f" ({esc(e.who)})" if e.who else ""
        items.append(f"`{esc(e.where)}`{who}\n{code_block(clip(e.text, LINE_MAX))}")
    text = _fill(header, items, "_…{n} more: use *Full report*_")
    if a.evidence_total > shown and "Full report" not in text:
        text += f"\n_…{a.evidence_total - shown} more: use *Full report*_"
    return text


def _probe_section(a: Answer) -> str:
    items = []
    for p in a.probes:
        mark = ":white_check_mark:" if p.ok else ":x:"
        items.append(f"{mark} *{esc(p.host)}*: " + "\n".join(esc(x) for x in p.lines))
    return _fill("*Host probes*", items, "_…{n} more hosts_")


def _cause_section(a: Answer) -> str:
    items = []
    for i, c in enumerate(a.causes, 1):
        lines = [f"{i}. {esc(c.summary)}"]
        lines += [f"      :heavy_plus_sign: {esc(x)}" for x in c.evidence_for]
        lines += [f"      :heavy_minus_sign: {esc(x)}" for x in c.evidence_against]
        items.append("\n".join(lines))
    return _fill("*Likely causes*", items, "_…{n} more_")


POST_WARNINGS = 2  # warnings shown on the answer itself; the rest are in the details


def _next_step(a: Answer) -> str | None:
    if not a.next_text and not a.next_command:
        return None
    where = f" on `{esc(a.next_on)}`" if a.next_on and " " not in a.next_on else (
        f" on {esc(a.next_on)}" if a.next_on else "")
    nxt = f"*Next step*{where}: {esc(a.next_text or '')}".rstrip(": ")
    if a.next_command:
        hints = "\n".join(f"Set {esc(h)}" for h in a.next_hints[:4])
        nxt += "\n" + code_block(clip(a.next_command, SECTION_MAX - len(nxt) - len(hints) - 40))
        if hints:
            nxt += "\n" + hints
    return nxt


def answer_blocks(a: Answer) -> list[Block]:
    """The answer in the thread, one screen: headline, who started it, the next step with its command,
    the open question, the buttons. Evidence, causes and probes are behind "Show details"."""
    icon = ":rotating_light:" if a.level == "initiating" else ":warning:"
    head = f"{icon} *{esc(a.signature)}*: {esc(a.title)} · confidence *{a.confidence:.0%}*"
    if a.job:
        head += f"\n{esc(a.job)}"
    if a.initiating:
        head += f"\n*Started by* {esc(a.initiating)}"
    blocks: list[Block] = [_section(head)]
    nxt = _next_step(a)
    if nxt:
        blocks.append(_section(nxt))
    if a.question:
        blocks.append(_section(f":question: {esc(a.question)}"))
    if a.warnings:
        blocks.append(_context(*[f":information_source: {esc(clip(w, 300))}" for w in a.warnings[:POST_WARNINGS]]))
    blocks.append(actions_block(a))
    footer = [f"Incident #{a.incident_id} · diagnosis v{a.version}"]
    silent = [p.host for p in a.probes if not p.ok and any("did not answer" in x or "not probed" in x for x in p.lines)]
    if silent:
        footer.append("Probes: " + esc(", ".join(silent[:3])) + " did not answer")
    footer += [f":repeat: {esc(r)}" for r in a.recurrence[:2]]
    footer += a.feedback[-3:]
    blocks.append(_context(*footer))
    return blocks[:MAX_BLOCKS]


def details_blocks(a: Answer) -> list[Block]:
    """"Show details": everything the answer rests on, as a reply in the thread."""
    blocks: list[Block] = [_section(f"*Details of incident #{a.incident_id}* (diagnosis v{a.version}): "
                                    f"*{esc(a.signature)}*\n{esc(a.summary)}")]
    if a.evidence:
        blocks.append(_section(_evidence_section(a)))
    if a.causes:
        blocks.append(_section(_cause_section(a)))
    if a.probes:
        blocks.append(_section(_probe_section(a)))
    notes = []
    if a.also_seen:
        notes.append("Also seen: " + esc(", ".join(a.also_seen)))
    notes += [f":information_source: {esc(w)}" for w in a.warnings[:8]]
    notes += [f":repeat: {esc(r)}" for r in a.recurrence[:5]]
    if notes:
        blocks.append(_context(*notes))
    blocks.append(ActionsBlock(block_id=BlockId.DETAILS_ACTIONS.value, elements=[
        ButtonElement(text="Full report (file)", action_id=ActionId.FULL_REPORT.value,
                      value=f"{a.incident_id}:{a.version}")]))
    return blocks[:MAX_BLOCKS]


def details_text(a: Answer) -> str:
    return clip(esc(f"Details of incident #{a.incident_id}: {a.signature}"), FALLBACK_MAX)


def actions_block(a: Answer) -> ActionsBlock:
    value = f"{a.incident_id}:{a.version}"
    buttons = []
    if a.probes_enabled:
        buttons.append(ButtonElement(text="Re-run probes", action_id=ActionId.RERUN_PROBES.value, value=value))
    buttons += [
        ButtonElement(text="Right", action_id=ActionId.RIGHT.value, value=value, style="primary"),
        ButtonElement(text="Wrong cause", action_id=ActionId.WRONG.value, value=value),
        ButtonElement(text="Show details", action_id=ActionId.SHOW_DETAILS.value, value=value),
    ]
    return ActionsBlock(block_id=BlockId.ACTIONS.value, elements=buttons)


def answer_text(a: Answer) -> str:
    """Notification / screen-reader text for the answer message."""
    text = f"{a.signature} ({a.confidence:.0%}): {a.title}"
    if a.initiating:
        text += f". Started by {a.initiating}"
    return clip(esc(text), FALLBACK_MAX)


def headline_blocks(h: Headline) -> list[Block]:
    icon = {"diagnosed": ":rotating_light:", "unknown": ":grey_question:", "ok": ":white_check_mark:"}.get(
        h.state, ":hourglass_flowing_sand:")
    text = f"{icon} *{esc(h.subject)}*"
    if h.requester:
        text += f" (asked by <@{h.requester}>)"
    text += f"\n{esc(h.status)}"
    blocks: list[Block] = [_section(text)]
    if h.detail:
        blocks.append(_context(esc(h.detail)))
    return blocks


def headline_text(h: Headline) -> str:
    return clip(esc(f"{h.subject}: {h.status}"), FALLBACK_MAX)


def user_mention(user: str) -> str:
    return f"<@{user}>"


def changes_text(changes: list[str], a: Answer) -> str:
    """The one thread reply after a re-diagnosis: what changed (said here only, not on the answer)."""
    if changes:
        return ":arrows_counterclockwise: Updated the answer above: " + " ".join(esc(c) for c in changes)
    return f":arrows_counterclockwise: Re-diagnosed with the new evidence: still *{esc(a.signature)}* ({a.confidence:.0%})."


def changes_blocks(changes: list[str], a: Answer) -> list[Block]:
    return [_section(changes_text(changes, a))]


def notice_blocks(text: str) -> list[Block]:
    return [_section(text)]


def _option(value: str, text: str) -> Option:
    return Option(value=clip(value, 150, ""), text=PlainTextObject(text=clip(text, OPTION_MAX)))


def wrong_cause_modal(*, incident_id: int, version: int, judged: str,
                      choices: Sequence[tuple[str, str, str]], channel: str, message_ts: str) -> View:
    """Pick the real cause from the library (grouped by family) or type it; an optional note.

    `choices`: (family, signature id, title). private_metadata carries where to say thanks.
    """
    groups: dict[str, list[Option]] = {}
    for family, sig, title in choices:
        if sig == judged:
            continue
        groups.setdefault(family, []).append(_option(sig, f"{sig}: {title}"))
    option_groups, total = [], 0
    for family in sorted(groups):
        opts = groups[family][: MAX_OPTIONS - total]
        if not opts:
            break
        option_groups.append(OptionGroup(label=PlainTextObject(text=clip(family, OPTION_MAX)), options=opts))
        total += len(opts)
    blocks: list[Block] = [
        _section(f"The bot said *{esc(judged)}*. What was the real cause?"),
    ]
    if option_groups:
        blocks.append(InputBlock(
            block_id=BlockId.CAUSE_SELECT.value, optional=True,
            label=PlainTextObject(text="Known failure"),
            element=StaticSelectElement(action_id=InputId.CAUSE_SELECT.value, option_groups=option_groups,
                                        placeholder=PlainTextObject(text="Pick a signature")),
        ))
    blocks.append(InputBlock(
        block_id=BlockId.CAUSE_TEXT.value, optional=True,
        label=PlainTextObject(text="Or describe it"),
        element=PlainTextInputElement(action_id=InputId.CAUSE_TEXT.value, max_length=300,
                                      placeholder=PlainTextObject(text="e.g. bad NVSwitch tray on gpu-node-17")),
    ))
    blocks.append(InputBlock(
        block_id=BlockId.NOTE.value, optional=True, label=PlainTextObject(text="How did you find out? (optional)"),
        element=PlainTextInputElement(action_id=InputId.NOTE.value, multiline=True, max_length=1000),
    ))
    return View(
        type="modal", callback_id=CallbackId.WRONG_CAUSE_MODAL.value,
        title=PlainTextObject(text=clip("Wrong cause", MODAL_TITLE_MAX)),
        submit=PlainTextObject(text="Save"), close=PlainTextObject(text="Cancel"),
        private_metadata=f"{incident_id}:{version}:{channel}:{message_ts}", blocks=blocks,
    )


def home_view(data: HomeData) -> View:
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=clip("GPU triage", HEADER_MAX)))]
    if data.recent:
        items = []
        for inc in data.recent:
            name = f"#{inc.id} {inc.signature or 'no signature'}"
            label = f"<{inc.link}|{esc(name)}>" if inc.link else esc(name)
            extra = " · ".join(x for x in (f"job {inc.job_id}" if inc.job_id else "",
                                           ", ".join(inc.hosts[:3]), inc.when) if x)
            items.append(f"• {label} · {esc(extra)}")
        blocks.append(_section(_fill("*Recent incidents*", items, "_…{n} more_")))
    else:
        blocks.append(_section("*Recent incidents*\nNone in the channels and conversations you are in. Paste a "
                               "failed job's log in a channel I am in, or use `/diagnose`."))
    blocks.append(DividerBlock())
    sigs = [f"• `{esc(s)}` × {n}" for s, n in data.top_signatures]
    blocks.append(_section(_fill("*Top signatures this week*", sigs or ["_none_"], "_…{n} more_")))
    hosts = [f"• `{esc(h)}` in {n} incident{'s' if n != 1 else ''}" for h, n in data.top_hosts]
    blocks.append(_section(_fill("*Hosts implicated most often* (30 days)", hosts or ["_none_"], "_…{n} more_")))
    prec = []
    for sig, right, wrong in data.precision:
        total = right + wrong
        prec.append(f"• `{esc(sig)}`: {right}/{total} right ({right / total:.0%})" if total else f"• `{esc(sig)}`")
    blocks.append(_section(_fill("*Feedback precision* (Right vs Wrong cause)", prec or ["_no feedback yet_"],
                                 "_…{n} more_")))
    return View(type="home", blocks=blocks[:100])
