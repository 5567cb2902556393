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
    OverflowMenuElement,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
    UserSelectElement,
)
from slack_sdk.models.views import View

from bot.service.alertmanager import HostAnswer
from bot.service.answer import Answer, Headline, HomeData, HostProbe, esc
from bot.service.grouping import StormSummary
from bot.service.lifecycle import SNOOZE_CHOICES

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
    blocks.append(lifecycle_block(a))
    footer = [f"Incident #{a.incident_id} · diagnosis v{a.version}"]
    silent = [p.host for p in a.probes if not p.ok and any("did not answer" in x for x in p.lines)]
    refused = [p.host for p in a.probes if not p.ok and any(x.startswith("not probed") for x in p.lines)]
    if silent:
        footer.append("Probes: " + esc(", ".join(silent[:3])) + " did not answer")
    if refused:  # the bot's own rules (allow-list, IP literal, a container id), not a silent agent
        footer.append("Not probed: " + esc(", ".join(refused[:3])))
    footer += [f":repeat: {esc(r)}" for r in a.recurrence[:2]]
    footer += a.status[:3]
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
    buttons += drain_buttons(a.incident_id, a.version, a.drain_host, a.drain_state)
    return ActionsBlock(block_id=BlockId.ACTIONS.value, elements=buttons)


def drain_buttons(incident_id: int, version: int, host: str | None, state: str | None) -> list[ButtonElement]:
    """"Drain host" while the drain is only offered, "Host repaired" once it is drained, none after."""
    if not host or state == "repaired":
        return []
    value = f"{incident_id}:{version}"
    if state == "drained":
        return [ButtonElement(text="Host repaired", action_id=ActionId.HOST_REPAIRED.value, value=value,
                              style="primary")]
    return [ButtonElement(text="Drain host", action_id=ActionId.DRAIN_HOST.value, value=value, style="danger")]


def drain_modal(*, incident_id: int, version: int, host: str, reason: str, channel: str, message_ts: str) -> View:
    """The confirmation: what will run, the reason prefilled (editable). private_metadata says where."""
    blocks: list[Block] = [
        _section(f"Drain *{esc(host)}* in Slurm? Jobs running there carry on; no new job starts there until "
                 "someone presses *Host repaired* (or resumes it by hand).\n"
                 + code_block(f"scontrol update nodename={host} state=drain reason=\"{reason}\"")),
        InputBlock(
            block_id=BlockId.DRAIN_REASON.value, label=PlainTextObject(text="Reason (what sinfo -R shows)"),
            element=PlainTextInputElement(action_id=InputId.DRAIN_REASON.value, initial_value=clip(reason, 200, ""),
                                          max_length=200),
        ),
        _context(f"Incident #{incident_id}. The drain is recorded with your name and posted in the thread."),
    ]
    return View(
        type="modal", callback_id=CallbackId.DRAIN_MODAL.value,
        title=PlainTextObject(text=clip("Drain host", MODAL_TITLE_MAX)),
        submit=PlainTextObject(text="Drain"), close=PlainTextObject(text="Cancel"),
        private_metadata=f"{incident_id}:{version}:{channel}:{message_ts}", blocks=blocks,
    )


def host_action_blocks(text: str, repaired_value: str | None = None) -> list[Block]:
    """A drain or repair said in the thread (text is mrkdwn escaped by the caller); after a drain it
    carries the "Host repaired" button."""
    blocks: list[Block] = [_section(text)]
    if repaired_value:
        blocks.append(ActionsBlock(block_id=BlockId.HOST_ACTIONS.value, elements=[
            ButtonElement(text="Host repaired", action_id=ActionId.HOST_REPAIRED.value, value=repaired_value,
                          style="primary")]))
    return blocks


def host_answer_blocks(h: HostAnswer) -> list[Block]:
    """An alert's host-centric answer: the alerts, the probe, recent incidents, the jobs running there."""
    blocks: list[Block] = [_section(_fill(f":rotating_light: *{esc(h.host)}*",
                                          [f"• {esc(x)}" for x in h.alerts], "_…{n} more alerts_"))]
    if h.probes:
        blocks.append(_section(_probe_section_of(h.probes)))
    elif h.probe_note:
        blocks.append(_section(f"*Host probe*\n{esc(h.probe_note)}"))
    recent = [f"• <{link}|{esc(line)}>" if link else f"• {esc(line)}" for line, link in h.incidents]
    head = "*Recent incidents on this host*" + (f" ({esc(h.incidents_note)})" if h.incidents_note else "")
    blocks.append(_section(_fill(head, recent or ["_none in the last 7 days_"], "_…{n} more_")))
    jobs = [f"• {esc(j)}" for j in h.jobs] or [f"_{esc(h.jobs_note)}_" if h.jobs_note else "_none_"]
    blocks.append(_section(_fill("*Jobs running there*", jobs, "_…{n} more_")))
    if h.drain_value:
        blocks.append(ActionsBlock(block_id=BlockId.HOST_ACTIONS.value, elements=[
            ButtonElement(text="Drain host", action_id=ActionId.DRAIN_HOST.value, value=h.drain_value,
                          style="danger")]))
    blocks.append(_context(f"Incident #{h.incident_id} · alert from Alertmanager · paste a log here to diagnose it"))
    return blocks[:MAX_BLOCKS]


def host_answer_text(h: HostAnswer) -> str:
    return clip(esc(f"{h.host}: " + "; ".join(h.alerts[:3])), FALLBACK_MAX)


def _probe_section_of(probes: Sequence[HostProbe]) -> str:
    items = []
    for p in probes:
        mark = ":white_check_mark:" if p.ok else ":x:"
        items.append(f"{mark} *{esc(p.host)}*: " + "\n".join(esc(x) for x in p.lines))
    return _fill("*Host probe*", items, "_…{n} more hosts_")


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
    if h.notify:
        text += f" · <@{h.notify}>"  # the job's owner: mentioned, so Slack tells them
    text += f"\n{esc(h.status)}"
    blocks: list[Block] = [_section(text)]
    if h.detail or h.lifecycle:
        blocks.append(_context(*([esc(h.detail)] if h.detail else []), *h.lifecycle[:3]))
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
            status = f" · *{esc(inc.status)}*" if inc.status and inc.status != "open" else ""
            owner = f" · owner <@{inc.owner}>" if inc.owner else ""
            items.append(f"• {label} · {esc(extra)}{status}{owner}")
        blocks.append(_section(_fill("*Recent incidents*", items, "_…{n} more_")))
    else:
        blocks.append(_section("*Recent incidents*\nNone in the channels and conversations you are in. Paste a "
                               "failed job's log in a channel I am in, or use `/diagnose`."))
    if data.mine:
        mine = []
        for i in data.mine:
            name = esc(f"#{i.id} {i.signature or 'no signature'}")
            mine.append(f"• {f'<{i.link}|{name}>' if i.link else name} · {esc(i.status or 'open')} · {esc(i.when)}")
        blocks.append(_section(_fill("*Yours* (you own them, not resolved)", mine, "_…{n} more_")))
    if data.mutes:
        blocks.append(_section(_fill("*Muted*", [f"• {m}" for m in data.mutes], "_…{n} more_")))
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


# -- lifecycle (bot.service.lifecycle / oncall) ------------------------------------------------------

def lifecycle_block(a: Answer) -> ActionsBlock:
    """Acknowledge, Resolve (or Reopen), Snooze and Owner under the answer. The block id carries the
    incident: a user picker sends no value of its own."""
    value = f"{a.incident_id}:{a.version}"
    elements: list = []
    if a.lifecycle == "resolved":
        elements.append(ButtonElement(text="Reopen", action_id=ActionId.REOPEN.value, value=value))
    else:
        if a.lifecycle == "open":
            elements.append(ButtonElement(text="Acknowledge", action_id=ActionId.ACK.value, value=value))
        elements.append(ButtonElement(text="Resolve", action_id=ActionId.RESOLVE.value, value=value))
        elements.append(OverflowMenuElement(action_id=ActionId.SNOOZE.value, options=[
            _option(f"{a.incident_id}:{seconds}", f"Snooze {label}") for label, seconds in SNOOZE_CHOICES]))
        elements.append(UserSelectElement(action_id=ActionId.OWNER.value,
                                          placeholder=PlainTextObject(text="Owner")))
    return ActionsBlock(block_id=f"{BlockId.LIFECYCLE.value}:{a.incident_id}", elements=elements)


def resolve_modal(*, incident_id: int, judged: str, choices: Sequence[tuple[str, str, str]], channel: str,
                  message_ts: str) -> View:
    """Resolve with the confirmed cause: the diagnosed signature preselected, another one, or words."""
    groups: dict[str, list[Option]] = {}
    initial = None
    for family, sig, title in choices:
        opt = _option(sig, f"{sig}: {title}")
        if sig == judged:
            initial = opt
        groups.setdefault(family, []).append(opt)
    option_groups, total = [], 0
    for family in sorted(groups, key=lambda f: (judged not in [o.value for o in groups[f]], f)):
        opts = groups[family][: MAX_OPTIONS - total]
        if not opts:
            break
        option_groups.append(OptionGroup(label=PlainTextObject(text=clip(family, OPTION_MAX)), options=opts))
        total += len(opts)
    intro = (f"The diagnosis was *{esc(judged)}*: keep it if that was the cause, or pick the real one."
             if judged else "What was the cause?")
    blocks: list[Block] = [_section(intro)]
    if option_groups:
        select = StaticSelectElement(action_id=InputId.RESOLVE_SELECT.value, option_groups=option_groups,
                                     placeholder=PlainTextObject(text="Pick a signature"))
        if initial is not None and any(initial.value in [o.value for o in g.options or []] for g in option_groups):
            select.initial_option = initial
        blocks.append(InputBlock(block_id=BlockId.RESOLVE_SELECT.value, optional=True,
                                 label=PlainTextObject(text="Confirmed cause"), element=select))
    blocks.append(InputBlock(
        block_id=BlockId.RESOLVE_TEXT.value, optional=True, label=PlainTextObject(text="What fixed it (optional)"),
        element=PlainTextInputElement(action_id=InputId.RESOLVE_TEXT.value, max_length=300,
                                      placeholder=PlainTextObject(text="e.g. reseated GPU 3, RMA filed")),
    ))
    return View(
        type="modal", callback_id=CallbackId.RESOLVE_MODAL.value,
        title=PlainTextObject(text=clip("Resolve incident", MODAL_TITLE_MAX)),
        submit=PlainTextObject(text="Resolve"), close=PlainTextObject(text="Cancel"),
        private_metadata=f"{incident_id}:{channel}:{message_ts}", blocks=blocks,
    )


STORM_ROWS = 40


def storm_blocks(s: StormSummary) -> list[Block]:
    """One post for a failure storm: what failed, then a table with a row per host."""
    where = f"{s.partition}" + (f" ({s.cluster})" if s.cluster else "")
    states = ", ".join(f"{n} {st}" for st, n in s.states[:5])
    head = (f":thunder_cloud_and_rain: *Failure storm in partition {esc(where)}*: {s.jobs} failure"
            f"{'s' if s.jobs != 1 else ''} in {s.minutes} min on {len(s.hosts)} host{'s' if len(s.hosts) != 1 else ''}"
            f" ({esc(states)})")
    width = max([len(h.host) for h in s.hosts[:STORM_ROWS]] + [4])
    lines = [f"{'host'.ljust(width)}  jobs  job ids            signatures"]
    for h in s.hosts[:STORM_ROWS]:
        ids = ", ".join(dict.fromkeys(h.jobs))
        lines.append(f"{h.host.ljust(width)}  {len(h.jobs):>4}  {clip(ids, 18).ljust(18)} "
                     f"{clip(', '.join(h.signatures) or '-', 40)}")
    table = "\n".join(lines)
    if len(s.hosts) > STORM_ROWS:
        table += f"\n… and {len(s.hosts) - STORM_ROWS} more hosts"
    blocks: list[Block] = [_section(head), _section(code_block(clip(table, SECTION_MAX - 20)))]
    notes = ["One post for the whole storm, edited as it grows: `/diagnose JOBID` diagnoses one job."]
    if s.earlier:
        notes.append("Posted before the storm began: " + ", ".join(f"incident #{i}" for i in s.earlier[:10]))
    notes.append(f"Incident #{s.incident_id}")
    blocks.append(_context(*notes))
    return blocks


def storm_text(s: StormSummary) -> str:
    return clip(esc(f"Failure storm in partition {s.partition}: {s.jobs} failures on {len(s.hosts)} hosts"),
                FALLBACK_MAX)
