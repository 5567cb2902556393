"""The incident lifecycle: acknowledge (who), owner, resolve with the confirmed cause, snooze, reopen;
mutes by signature, host or job pattern for a time.

Status is kept on the incident row (m003) and shown on the answer card, the channel headline and
App Home. Every time-dependent decision (a mute's or a snooze's expiry) asks `Lifecycle.clock`,
so a test moves time instead of sleeping.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.redact import redact
from bot.store import Feedback, Incident
from bot.store import lifecycle as lc
from bot.store.lifecycle import Mute

from .answer import Answer, esc
from .errors import UserFacingError
from .hostlist import HostListError, expand_hostlist
from .status import clock_text, status_lines, status_word

if TYPE_CHECKING:
    from .workflow import Workflow

log = logging.getLogger(__name__)

MUTE_KINDS = ("signature", "host", "job")
MAX_DURATION_S = 30 * 86400
DEFAULT_MUTE_S = 3600.0
SNOOZE_CHOICES = (("1 h", 3600), ("4 h", 4 * 3600), ("24 h", 86400))
_DURATION = re.compile(r"^(\d{1,6})\s*(s|sec|secs|m|min|mins|h|hr|hrs|hours?|d|days?|w|weeks?)?$", re.I)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SPEC = re.compile(r"^[\w.:@+\-\[\],*?/]{1,200}$")  # globs and host lists; never reaches a shell


def parse_duration(text: str) -> float:
    """"90m", "2h", "1d", "30 min" -> seconds (at most 30 days); ValueError says what is accepted."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"“{text[:40]}” is not a duration: use 30m, 2h, 1d or 1w")
    n = int(m.group(1))
    seconds = n * _UNIT_S[(m.group(2) or "m")[0].lower()]
    if seconds <= 0:
        raise ValueError("the duration must be longer than 0")
    if seconds > MAX_DURATION_S:
        raise ValueError("at most 30 days")
    return float(seconds)


def human_duration(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            v = s / n
            return f"{v:.0f} {unit}" if v >= 10 or v == int(v) else f"{v:.1f} {unit}"
    return f"{s} s"


def mute_patterns(kind: str, spec: str) -> list[str]:
    """What a mute matches, from what the person typed. Raises ValueError with the reason."""
    if kind not in MUTE_KINDS:
        raise ValueError(f"mute what? `signature`, `host` or `job`, not “{kind[:40]}”")
    spec = spec.strip().strip("`")
    if not _SPEC.match(spec):
        raise ValueError("a pattern is letters, digits, . _ - : @ + / and the globs * ? [ ]")
    if kind == "host" and "*" not in spec and "?" not in spec:
        try:
            hosts = expand_hostlist(spec)  # gpu[01-04] is a Slurm host list, not a glob character class
        except HostListError as exc:
            raise ValueError(f"that host list does not parse: {exc}") from None
        if len(hosts) > 512:
            raise ValueError("at most 512 hosts in one mute; use a glob such as gpu-h200-*")
        return hosts
    if kind == "signature" and "*" not in spec and "?" not in spec:
        from bot.engine import default_library

        if spec not in default_library().signatures:
            raise ValueError(f"no signature “{spec}” in the library (`triage signatures list`; globs like nccl-* work)")
    return [p for p in spec.split(",") if p]


def _job_names(job: dict[str, Any]) -> list[str]:
    """What a job pattern is compared with: the id, the array/het job it belongs to, the job's name."""
    jid = str(job.get("job_id") or "")
    out = [jid, re.split(r"[_+.]", jid)[0]] if jid else []
    if job.get("name"):
        out.append(str(job["name"]))
    return out


def mute_matches(mute: Mute, *, signature: str | None = None, hosts: Iterable[str] = (),
                 job: dict[str, Any] | None = None) -> bool:
    if mute.kind == "signature":
        values = [signature] if signature else []
    elif mute.kind == "host":
        values = list(hosts)
    else:
        values = _job_names(job or {})
    return any(fnmatch.fnmatchcase(v, p) for v in values for p in mute.patterns)


@dataclass
class MuteHit:
    mute: Mute

    def describe(self) -> str:
        return f"muted by #{self.mute.id} ({self.mute.kind} {self.mute.spec}) until {clock_text(self.mute.expires_at)}"


def slack_user(value: str) -> str | None:
    """`<@U123>`, `<@U123|bob>` or `U123` -> U123."""
    m = re.fullmatch(r"<@([UW][A-Z0-9]{2,})(?:\|[^>]*)?>|([UW][A-Z0-9]{2,})", value.strip())
    return (m.group(1) or m.group(2)) if m else None


class Lifecycle:
    def __init__(self, wf: Workflow, clock: Callable[[], float] | None = None) -> None:
        self.wf = wf
        self.clock: Callable[[], float] = clock or (lambda: wf.clock())

    @property
    def store(self) -> Any:
        return self.wf.store

    def now(self) -> float:
        return float(self.clock())

    # -- mutes -----------------------------------------------------------------------------------

    def mute(self, kind: str, spec: str, seconds: float, *, user: str | None, channel: str | None,
             reason: str | None = None) -> Mute:
        patterns = mute_patterns(kind, spec)
        return lc.add_mute(self.store, kind=kind, spec=spec.strip().strip("`"), patterns=patterns, created_by=user,
                           channel=channel, reason=reason, now=self.now(), expires_at=self.now() + seconds)

    def unmute(self, mute_id: int) -> Mute:
        mute = lc.get_mute(self.store, mute_id)
        if mute is None or not mute.active(self.now()):
            raise UserFacingError(f"No active mute #{mute_id} (`/diagnose mute list` shows them).")
        lc.end_mute(self.store, mute_id, self.now())
        return mute

    def active_mutes(self) -> list[Mute]:
        return lc.active_mutes(self.store, self.now())

    def muted(self, *, signature: str | None = None, hosts: Iterable[str] = (),
              job: dict[str, Any] | None = None, count: bool = True) -> MuteHit | None:
        """The first active mute that covers this post, counted as one post held back."""
        hosts = list(hosts)
        for m in self.active_mutes():
            if mute_matches(m, signature=signature, hosts=hosts, job=job):
                if count:
                    lc.count_suppressed(self.store, m.id)
                return MuteHit(m)
        return None

    def signature_mutes_active(self) -> bool:
        return bool(lc.active_mutes(self.store, self.now(), kind="signature"))

    def snoozed(self, incident: Incident) -> bool:
        return bool(incident.snoozed_until and incident.snoozed_until > self.now()) and not incident.resolved_at

    # -- incident actions ------------------------------------------------------------------------

    def _incident(self, incident_id: int) -> Incident:
        incident = self.store.get_incident(incident_id)
        if incident is None:
            raise UserFacingError(f"Incident #{incident_id} is not stored (or no longer: TRIAGE_RETENTION_DAYS).")
        return incident

    def acknowledge(self, incident_id: int, user: str) -> Incident:
        incident = self._incident(incident_id)
        fields: dict[str, Any] = {"acked_by": user, "acked_at": self.now()}
        if not incident.owner:
            fields["owner"] = user  # whoever acknowledges owns it until someone hands it on
        return self._change(incident, fields)

    def set_owner(self, incident_id: int, owner: str, by: str) -> Incident:
        incident = self._incident(incident_id)
        fields: dict[str, Any] = {"owner": owner}
        if not incident.acked_by:
            fields.update(acked_by=by, acked_at=self.now())
        return self._change(incident, fields)

    def snooze(self, incident_id: int, user: str, seconds: float) -> Incident:
        incident = self._incident(incident_id)
        if incident.resolved_at:
            raise UserFacingError(f"Incident #{incident_id} is resolved; reopen it first.")
        fields: dict[str, Any] = {"snoozed_until": self.now() + seconds}
        if not incident.acked_by:
            fields.update(acked_by=user, acked_at=self.now())
        return self._change(incident, fields)

    def resolve(self, incident_id: int, user: str, *, signature: str | None = None, text: str | None = None) -> Incident:
        """Resolved with the confirmed cause: the diagnosed signature (counted as Right), another one
        (counted as Wrong cause, like the button), or a description."""
        incident = self._incident(incident_id)
        text = redact(text.strip())[:300] if text and text.strip() else None
        confirmed = signature or None
        rec = self.store.get_diagnosis(incident.id)
        if rec is not None and (confirmed or not text):
            confirmed = confirmed or rec.signature
            verdict = "right" if confirmed == rec.signature else "wrong"
            self.store.add_feedback(Feedback(
                incident_id=incident.id, version=rec.version, user=user, signature=rec.signature, verdict=verdict,
                correct_signature=confirmed if verdict == "wrong" else None, correct_text=text,
                note="resolved"))
        cause = " · ".join(x for x in (confirmed, text) if x) or "no cause given"
        return self._change(incident, {"resolved_by": user, "resolved_at": self.now(), "resolution": cause,
                                       "snoozed_until": None})

    def reopen(self, incident_id: int, user: str) -> Incident:
        incident = self._incident(incident_id)
        return self._change(incident, {"resolved_by": None, "resolved_at": None, "resolution": None})

    def _change(self, incident: Incident, fields: dict[str, Any]) -> Incident:
        with self.wf.locks.hold(f"{incident.channel}:{incident.thread_ts}"):  # not while a re-diagnosis edits it
            self.store.update_incident(incident.id, **fields)
            current = self.store.get_incident(incident.id)
            assert current is not None
            self.refresh(current)
        return current

    def refresh(self, incident: Incident) -> None:
        """Show the incident's status on its card and its channel headline (latest diagnosis)."""
        from .workflow import headline_for

        rec = self.store.get_diagnosis(incident.id)
        if rec is None or not rec.answer:
            return
        answer = Answer.from_dict(rec.answer)
        answer.status = status_lines(incident, self.now())
        answer.lifecycle = status_word(incident, self.now())
        self.store.update_answer(incident.id, rec.version, answer.to_dict())
        if incident.channel and incident.summary_ts:
            self.wf.update_card(incident, answer)
        if incident.channel and incident.headline_ts:
            try:
                self.wf.chat.update_headline(incident.channel, incident.headline_ts,
                                             headline_for(answer, incident.subject, incident.requester))
            except Exception as exc:
                log.info("headline of incident %s not updated: %s", incident.id, exc)

    def say(self, incident: Incident, text: str) -> None:
        """One line in the incident's thread (what changed and who did it)."""
        if incident.channel and incident.thread_ts:
            self.wf.chat.post_notice(incident.channel, incident.thread_ts, text)


def describe_mute(m: Mute, now: float) -> str:
    left = max(0.0, m.expires_at - now)
    who = f" by <@{m.created_by}>" if m.created_by else ""
    why = f" ({esc(m.reason)})" if m.reason else ""
    held = f", {m.suppressed} post{'s' if m.suppressed != 1 else ''} held back" if m.suppressed else ""
    return (f"#{m.id} {m.kind} `{esc(m.spec)}`{who}{why}: until {clock_text(m.expires_at)} "
            f"(in {human_duration(left)}){held}")
