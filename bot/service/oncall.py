"""On-call commands over incidents: `/diagnose status | list | search <host> | mute … | unmute N |
ack N | owner N @who | snooze N 2h | resolve N [cause] | reopen N`, and the card's lifecycle buttons.

Answers go to the person who typed the command only; a mute (and an unmute) is said in the channel
as well, since it changes what everybody there will see. Incidents are listed only from
conversations the person may see (`visible`, wired by the Slack layer; this channel otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bot.store import Incident
from bot.store import lifecycle as lc

from .answer import esc
from .errors import UserFacingError
from .feedback import ago
from .hostlist import HostListError, expand_hostlist
from .inputs import LifecycleIn, ResolveIn, SlashIn
from .lifecycle import (
    DEFAULT_MUTE_S,
    MUTE_KINDS,
    Lifecycle,
    describe_mute,
    human_duration,
    parse_duration,
    slack_user,
)
from .status import clock_text, status_lines, status_word
from .workflow import Workflow

WORDS = ("status", "list", "search", "mute", "unmute", "ack", "acknowledge", "owner", "own", "snooze", "resolve",
         "reopen")
SEARCH_DAYS = 30
LIST_MAX = 15

HELP = (
    "• `/diagnose status [N]`: open incidents here and active mutes, or incident N\n"
    "• `/diagnose list`: the unresolved incidents in this channel\n"
    "• `/diagnose search gpu07` (a host list or glob): incidents on those hosts, 30 days\n"
    "• `/diagnose mute host|signature|job PATTERN [for] 2h [reason]`, `mute list`, `unmute N`\n"
    "• `/diagnose ack N`, `owner N @who`, `snooze N 4h`, `resolve N [signature] [what fixed it]`, `reopen N`"
)

_INCIDENT_REF = re.compile(r"^#?(\d{1,9})$")


def incident_ref(word: str) -> int:
    m = _INCIDENT_REF.match(word.strip())
    if not m:
        raise UserFacingError(f"“{esc(word[:20])}” is not an incident number (the card's footer says “Incident #12”).")
    return int(m.group(1))


class OnCallFlows:
    def __init__(self, wf: Workflow, lifecycle: Lifecycle) -> None:
        self.wf = wf
        self.lifecycle = lifecycle
        # (user, channels) -> the channels that user may see; the Slack layer sets a real check.
        self.visible: Callable[[str, list[str]], set[str]] | None = None

    @property
    def store(self) -> Any:
        return self.wf.store

    # -- /diagnose <word> ... ---------------------------------------------------------------------

    def on_slash(self, cmd: SlashIn, words: list[str], reply: Callable[[str], None]) -> None:
        verb = words[0].lower()
        args = words[1:]
        try:
            if verb == "status":
                reply(self.status(cmd, args))
            elif verb == "list":
                reply(self.list_open(cmd))
            elif verb == "search":
                reply(self.search(cmd, args))
            elif verb == "mute":
                self.mute(cmd, args, reply)
            elif verb == "unmute":
                self.unmute(cmd, args, reply)
            else:
                reply(self.incident_verb(cmd, verb, args))
        except UserFacingError as exc:
            reply(str(exc))

    def _channels_for(self, cmd: SlashIn, channels: list[str]) -> set[str]:
        allowed = {cmd.channel}
        if self.visible is not None and channels:
            allowed |= set(self.visible(cmd.user, channels))
        return allowed & (set(channels) | {cmd.channel})

    def _visible_incident(self, cmd: SlashIn, incident_id: int) -> Incident:
        incident = self.store.get_incident(incident_id)
        if incident is None or not incident.channel or incident.channel not in self._channels_for(cmd, [incident.channel]):
            raise UserFacingError(f"No incident #{incident_id} in a conversation you are in.")
        return incident

    def _line(self, i: Incident) -> str:
        now = self.lifecycle.now()
        link = self.wf.chat.permalink(i.channel, i.thread_ts)
        name = f"#{i.id} {i.signature or ('storm' if i.origin == 'storm' else 'no signature')}"
        label = f"<{link}|{esc(name)}>" if link else esc(name)
        bits = [f"job {i.job_id}" if i.job_id else "", ", ".join(i.hosts[:3]), ago(now - i.created_at)]
        extra = " · ".join(esc(b) for b in bits if b)
        status = status_lines(i, now) or ["open"]
        return f"• {label} · {extra} · " + "; ".join(status)

    def status(self, cmd: SlashIn, args: list[str]) -> str:
        now = self.lifecycle.now()
        if args:
            i = self._visible_incident(cmd, incident_ref(args[0]))
            lines = [self._line(i), f"State: *{status_word(i, now)}*" + (f", diagnosis v{i.version}" if i.version else "")]
            members = lc.count_members(self.store, i.id)
            if members > 1:
                what = "scheduler failures" if i.origin in ("webhook", "storm") else "pasted logs"
                lines.append(f"{members} {what} collected in its thread")
            return "\n".join(lines)
        rows = self.store.query(
            "SELECT resolved_at, acked_by, snoozed_until FROM incidents WHERE channel = ? AND state IN ('open', 'storm')"
            " AND created_at >= ?", [cmd.channel, now - SEARCH_DAYS * 86400])
        counts = {"open": 0, "acknowledged": 0, "snoozed": 0, "resolved": 0}
        for r in rows:
            if r["resolved_at"]:
                counts["resolved"] += 1
            elif r["snoozed_until"] and r["snoozed_until"] > now:
                counts["snoozed"] += 1
            elif r["acked_by"]:
                counts["acknowledged"] += 1
            else:
                counts["open"] += 1
        out = ["*Incidents here* (30 days): " + ", ".join(f"{n} {k}" for k, n in counts.items())]
        mutes = self.lifecycle.active_mutes()
        out.append("*Active mutes*:\n" + "\n".join(describe_mute(m, now) for m in mutes) if mutes else "No active mutes.")
        return "\n".join(out)

    def list_open(self, cmd: SlashIn) -> str:
        incidents = lc.incidents_where(self.store, "channel = ? AND resolved_at IS NULL AND state IN ('open', 'storm')",
                                       [cmd.channel], limit=LIST_MAX + 1)
        if not incidents:
            return "No unresolved incidents in this channel."
        lines = [self._line(i) for i in incidents[:LIST_MAX]]
        more = "\n…and more: `/diagnose search HOST` narrows it down." if len(incidents) > LIST_MAX else ""
        return "*Unresolved incidents here*\n" + "\n".join(lines) + more

    def search(self, cmd: SlashIn, args: list[str]) -> str:
        if not args:
            raise UserFacingError("Name a host: `/diagnose search gpu07` (a host list like gpu[01-04] or a glob works).")
        spec = args[0].strip("`")
        if "*" in spec or "?" in spec:
            if not re.fullmatch(r"[\w.\-*?\[\]]{1,100}", spec):
                raise UserFacingError("That host pattern has characters a host name cannot have.")
            patterns = [spec]
        else:
            try:
                patterns = expand_hostlist(spec)
            except HostListError as exc:
                raise UserFacingError(f"That host list does not parse: {esc(str(exc))}") from None
            if len(patterns) > 256:
                raise UserFacingError("At most 256 hosts in one search; use a glob such as gpu-h200-*.")
        since = self.lifecycle.now() - SEARCH_DAYS * 86400
        found = lc.incidents_on_host(self.store, patterns, since, limit=100)
        allowed = self._channels_for(cmd, sorted({i.channel for i in found if i.channel}))
        found = [i for i in found if i.channel in allowed][:LIST_MAX]
        if not found:
            return f"No incidents on {esc(spec)} in {SEARCH_DAYS} days (in the conversations you are in)."
        return f"*Incidents on {esc(spec)}* ({SEARCH_DAYS} days)\n" + "\n".join(self._line(i) for i in found)

    def mute(self, cmd: SlashIn, args: list[str], reply: Callable[[str], None]) -> None:
        now = self.lifecycle.now()
        if not args or args[0].lower() == "list":
            mutes = self.lifecycle.active_mutes()
            reply("*Active mutes*\n" + "\n".join(describe_mute(m, now) for m in mutes) if mutes else "No active mutes.")
            return
        if len(args) < 2 or args[0].lower() not in MUTE_KINDS:
            raise UserFacingError("Say what to mute: `/diagnose mute host gpu07 for 2h`, "
                                  "`/diagnose mute signature nccl-cuda-999 1d`, `/diagnose mute job 1234 30m`.")
        kind, spec, rest = args[0].lower(), args[1], args[2:]
        if rest and rest[0].lower() == "for":
            rest = rest[1:]
        seconds = DEFAULT_MUTE_S
        if rest:
            try:
                seconds = parse_duration(rest[0])
                rest = rest[1:]
            except ValueError as exc:
                if re.match(r"^\d", rest[0]):
                    raise UserFacingError(f"{esc(str(exc))}.") from None
        try:
            m = self.lifecycle.mute(kind, spec, seconds, user=cmd.user, channel=cmd.channel,
                                    reason=" ".join(rest) or None)
        except ValueError as exc:
            raise UserFacingError(f"Not muted: {esc(str(exc))}.") from None
        self._announce(cmd, f":mute: <@{cmd.user}> muted {m.kind} `{esc(m.spec)}` for {human_duration(seconds)} "
                            f"(until {clock_text(m.expires_at)}, mute #{m.id}): no posts for it until then. "
                            f"`/diagnose unmute {m.id}` ends it.", reply)

    def unmute(self, cmd: SlashIn, args: list[str], reply: Callable[[str], None]) -> None:
        if not args:
            raise UserFacingError("Which mute? `/diagnose mute list` shows their numbers.")
        m = self.lifecycle.unmute(incident_ref(args[0]))
        self._announce(cmd, f":loud_sound: <@{cmd.user}> ended mute #{m.id} ({m.kind} `{esc(m.spec)}`).", reply)

    def _announce(self, cmd: SlashIn, text: str, reply: Callable[[str], None]) -> None:
        if cmd.response_url:
            self.wf.chat.respond(cmd.response_url, text, ephemeral=False)
        else:
            reply(text)

    def incident_verb(self, cmd: SlashIn, verb: str, args: list[str]) -> str:
        if not args:
            raise UserFacingError(f"Which incident? `/diagnose {verb} 12` (the card's footer has the number).")
        i = self._visible_incident(cmd, incident_ref(args[0]))
        rest = args[1:]
        if verb in ("ack", "acknowledge"):
            self.lifecycle.acknowledge(i.id, cmd.user)
            return f"Acknowledged incident #{i.id}."
        if verb in ("owner", "own"):
            owner = slack_user(rest[0]) if rest else cmd.user
            if owner is None:
                raise UserFacingError("Name the owner as a mention: `/diagnose owner 12 @bob`.")
            self.owner(i.id, owner, cmd.user)
            return f"Incident #{i.id} is owned by <@{owner}> now."
        if verb == "snooze":
            try:
                seconds = parse_duration(rest[0]) if rest else 3600.0
            except ValueError as exc:
                raise UserFacingError(f"{esc(str(exc))}.") from None
            self.snooze(i.id, cmd.user, seconds)
            return f"Snoozed incident #{i.id} for {human_duration(seconds)}."
        if verb == "resolve":
            from bot.engine import default_library

            # `resolve 12 xid-79-fallen-off-bus reseated GPU 3`: a signature first is the confirmed cause
            sig = rest[0] if rest and rest[0] in default_library().signatures else None
            self.resolve(ResolveIn(incident_id=i.id, user=cmd.user, channel=i.channel or "", message_ts="",
                                   signature=sig, text=" ".join(rest[1:] if sig else rest) or None))
            return f"Resolved incident #{i.id}."
        self.reopen(LifecycleIn(incident_id=i.id, user=cmd.user, channel=i.channel or "", message_ts="",
                                kind="reopen"))
        return f"Reopened incident #{i.id}."

    # -- the card's buttons (and the verbs above) ------------------------------------------------------

    def acknowledge(self, a: LifecycleIn) -> None:
        self.lifecycle.acknowledge(a.incident_id, a.user)

    def owner(self, incident_id: int, owner: str, by: str) -> None:
        i = self.lifecycle.set_owner(incident_id, owner, by)
        self.lifecycle.say(i, f":bust_in_silhouette: <@{by}> made <@{owner}> the owner of this incident.")

    def set_owner(self, a: LifecycleIn) -> None:
        owner = slack_user(a.value or "")
        if owner is None:
            raise UserFacingError("Pick a person as the owner.")
        self.owner(a.incident_id, owner, a.user)

    def snooze(self, incident_id: int, user: str, seconds: float) -> None:
        i = self.lifecycle.snooze(incident_id, user, seconds)
        self.lifecycle.say(i, f":zzz: <@{user}> snoozed this incident for {human_duration(seconds)} (until "
                              f"{clock_text(i.snoozed_until or 0)}): failures it collects meanwhile post nothing new.")

    def snooze_action(self, a: LifecycleIn) -> None:
        try:
            seconds = float(int(a.value or "0"))
        except ValueError:
            raise UserFacingError("Pick how long to snooze.") from None
        if not 0 < seconds <= 30 * 86400:
            raise UserFacingError("Pick how long to snooze.")
        self.snooze(a.incident_id, a.user, seconds)

    def resolve(self, r: ResolveIn) -> None:
        i = self.lifecycle.resolve(r.incident_id, r.user, signature=r.signature, text=r.text)
        self.lifecycle.say(i, f":white_check_mark: <@{r.user}> resolved this incident: {esc(i.resolution or '')}. "
                              "New failures of this job or host open a new incident.")

    def reopen(self, a: LifecycleIn) -> None:
        i = self.lifecycle.reopen(a.incident_id, a.user)
        self.lifecycle.say(i, f":leftwards_arrow_with_hook: <@{a.user}> reopened this incident.")

    def resolve_choices(self, incident_id: int) -> tuple[str, list[tuple[str, str, str]]]:
        """What the Resolve modal offers: the diagnosed signature first, the library's (family, id, title)."""
        from bot.engine import default_library

        rec = self.store.get_diagnosis(incident_id)
        if self.store.get_incident(incident_id) is None:
            raise UserFacingError(f"Incident #{incident_id} is no longer stored (retention: TRIAGE_RETENTION_DAYS).")
        lib = default_library()
        return (rec.signature or "") if rec else "", sorted((s.family, s.id, s.title) for s in lib.signatures.values())
