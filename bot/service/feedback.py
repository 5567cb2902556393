"""The answer's buttons (Right, Wrong cause, Show details / Full report, Re-run probes) and the App Home tab."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from bot.engine import default_library
from bot.redact import redact
from bot.store import Feedback
from bot.store import stats as st

from .answer import Answer, HomeData, HomeIncident, esc
from .errors import UserFacingError
from .inputs import ActionIn, WrongCauseIn
from .workflow import Workflow

INLINE_EVIDENCE_MAX = 2500  # longer than this goes to a file upload instead of a message
HOME_CHANNELS_CHECKED = 100  # the Home tab checks access to this many conversations (most recent first)


def ago(seconds: float) -> str:
    if seconds < 90:
        return "just now"
    if seconds < 5400:
        return f"{round(seconds / 60)} min ago"
    if seconds < 129600:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} days ago"


class FeedbackFlows:
    def __init__(self, wf: Workflow) -> None:
        self.wf = wf

    def _diagnosis(self, incident_id: int, version: int | None = None) -> tuple[Any, Any]:
        incident = self.wf.store.get_incident(incident_id)
        rec = self.wf.store.get_diagnosis(incident_id, version) if incident else None
        if incident is None or rec is None:
            raise UserFacingError(f"Incident #{incident_id} is no longer stored (retention: TRIAGE_RETENTION_DAYS).")
        return incident, rec

    def _refresh(self, incident_id: int, channel: str, message_ts: str, line: str) -> None:
        """Show the feedback on the answer message (latest version's answer, one more context line)."""
        incident, _ = self._diagnosis(incident_id)
        with self.wf.locks.hold(f"{incident.channel}:{incident.thread_ts}"):  # not while a re-diagnosis edits it
            _, rec = self._diagnosis(incident_id)
            answer = Answer.from_dict(rec.answer)
            answer.feedback = (answer.feedback + [line])[-5:]
            # Keep the line on the stored answer too, so a later update of the message does not drop it.
            self.wf.store.update_answer(incident_id, rec.version, answer.to_dict())
            self.wf.chat.update_answer(channel, incident.summary_ts or message_ts, answer)

    def right(self, a: ActionIn) -> None:
        _, rec = self._diagnosis(a.incident_id, a.version)
        self.wf.store.add_feedback(Feedback(incident_id=a.incident_id, version=a.version, user=a.user,
                                            signature=rec.signature, verdict="right"))
        self._refresh(a.incident_id, a.channel, a.message_ts,
                      f":white_check_mark: <@{a.user}> confirmed *{esc(rec.signature or '')}*")

    def wrong_cause_choices(self, incident_id: int, version: int) -> tuple[str, list[tuple[str, str, str]]]:
        """What the modal needs: the judged signature and the library's (family, id, title) list."""
        _, rec = self._diagnosis(incident_id, version)
        lib = default_library()
        choices = sorted((s.family, s.id, s.title) for s in lib.signatures.values())
        return rec.signature or "", choices

    def wrong(self, w: WrongCauseIn) -> None:
        incident, rec = self._diagnosis(w.incident_id, w.version)
        correct_sig = w.signature or None
        correct_text = redact(w.text.strip()) if w.text and w.text.strip() else None
        if not correct_sig and not correct_text:
            raise UserFacingError("Pick the real cause or describe it.")
        self.wf.store.add_feedback(Feedback(
            incident_id=w.incident_id, version=w.version, user=w.user, signature=rec.signature, verdict="wrong",
            correct_signature=correct_sig, correct_text=correct_text, note=redact(w.note) if w.note else None))
        said = f"*{esc(correct_sig)}*" if correct_sig else f"“{esc(correct_text or '')}”"
        if correct_sig and correct_text:
            said += f" (“{esc(correct_text)}”)"
        self._refresh(w.incident_id, w.channel, w.message_ts,
                      f":x: <@{w.user}> says the cause was {said}, not {esc(rec.signature or '')}")
        self.wf.chat.post_notice(
            w.channel, incident.thread_ts,
            f"Thanks <@{w.user}>: recorded that the cause was {said}, not *{esc(rec.signature or '')}*. "
            "It counts against that signature's precision on my Home tab.")

    def show_details(self, a: ActionIn) -> None:
        """"Show details": the latest answer's evidence, causes and probes as a thread reply."""
        incident, rec = self._diagnosis(a.incident_id)
        self.wf.chat.post_details(a.channel, incident.thread_ts, Answer.from_dict(rec.answer))

    def full_report(self, a: ActionIn) -> None:
        """The full report as a file (short ones inline)."""
        self.show_evidence(a)

    def show_evidence(self, a: ActionIn) -> None:
        # The latest version: thread replies since the message was last edited count too.
        incident, rec = self._diagnosis(a.incident_id)
        text = evidence_text(rec.report, self.wf.store.list_evidence(incident.id))
        if len(text) <= INLINE_EVIDENCE_MAX:
            self.wf.chat.post_notice(a.channel, incident.thread_ts, "```" + esc(text).replace("```", "`\u200b``") + "```")
        else:
            self.wf.chat.upload_text(a.channel, incident.thread_ts, f"incident-{incident.id}-evidence.txt",
                                     f"All evidence for incident #{incident.id} (v{rec.version})", text,
                                     comment=f"All evidence for incident #{incident.id}, diagnosis v{rec.version}.")

    def rerun_probes(self, a: ActionIn) -> None:
        if not self.wf.prober.enabled:
            raise UserFacingError(f"I cannot probe: {self.wf.prober.problem}.")
        incident, _ = self._diagnosis(a.incident_id)
        with self.wf.locks.hold(f"{incident.channel}:{incident.thread_ts}"):
            incident = self.wf.store.get_incident(a.incident_id)
            assert incident is not None
            self.wf.rediagnose(incident, [], trigger="probes", force_post=True)

    def home(self, user: str, visible: Callable[[str, list[str]], set[str]], now: float | None = None) -> HomeData:
        """The Home tab for `user`: incidents (and the week's signatures, the month's hosts) only from
        the conversations `visible(user, channels)` allows. Feedback precision is about the signature
        library, not any one incident, so it counts every incident."""
        now = time.time() if now is None else now
        store = self.wf.store
        candidates = st.incident_channels(store, HOME_CHANNELS_CHECKED)
        channels = sorted(set(visible(user, candidates)) & set(candidates)) if candidates and user else []
        recent = [self._home_incident(r.id, now) for r in st.recent_incidents_in(store, channels, 10)]
        mine = []
        if channels:  # the viewer's own unresolved incidents, from the same conversations
            from bot.store.lifecycle import incidents_where

            mine = [self._home_incident(i.id, now) for i in incidents_where(
                store, "owner = ? AND resolved_at IS NULL AND state = 'open' AND channel IN (SELECT value FROM"
                " json_each(?))", [user, json.dumps(channels)], limit=10)]
        from .lifecycle import describe_mute

        return HomeData(
            recent=[r for r in recent if r is not None],
            top_signatures=st.top_signatures_in(store, channels, 7, now=now),
            top_hosts=st.top_hosts_in(store, channels, 30, now=now),
            precision=[(p.signature, p.right, p.wrong) for p in st.feedback_precision(store)],
            mine=[r for r in mine if r is not None],
            mutes=[describe_mute(m, self.wf.clock()) for m in self._active_mutes()],
        )

    def _active_mutes(self) -> list[Any]:
        from bot.store.lifecycle import active_mutes

        return active_mutes(self.wf.store, self.wf.clock())

    def _home_incident(self, incident_id: int, now: float) -> HomeIncident | None:
        """One Home line: the incident, its link and its lifecycle status (open, acknowledged, ...)."""
        from .status import status_word

        i = self.wf.store.get_incident(incident_id)
        if i is None:
            return None
        return HomeIncident(id=i.id, link=self.wf.chat.permalink(i.channel, i.thread_ts), signature=i.signature,
                            when=ago(now - i.created_at), job_id=i.job_id, hosts=i.hosts,
                            status=status_word(i, self.wf.clock()), owner=i.owner)


def evidence_text(report: dict[str, Any], items: list[Any]) -> str:
    """Plain text of everything the diagnosis rests on (already redacted in the store)."""
    out = []
    for d in report.get("diagnoses", []):
        out.append(f"== {d['signature']} ({d.get('confidence', 0):.0%}, {d.get('level')}): "
                   f"{d.get('evidence_count', len(d.get('evidence', [])))} line(s) ==")
        for e in d.get("evidence", []):
            who = ", ".join(x for x in (f"rank {e['rank']}" if e.get("rank") is not None else "", e.get("host") or "") if x)
            out.append(f"{e['source']}:{e['line']}" + (f" ({who})" if who else "") + f": {e['text']}")
        out.append("")
    if report.get("probes"):
        out.append("== host probes ==")
        for host, res in sorted(report["probes"].items()):
            for r in (res or {}).get("results", []):
                out.append(f"{host} {r.get('probe')}: {r.get('health')}: {r.get('reason')}")
        out.append("")
    if items:
        out.append("== evidence items ==")
        for it in items:
            kept = "kept whole" if it.text is not None else "excerpt kept"
            out.append(f"{it.name} ({it.kind}, {it.size} bytes, {kept}, {it.redactions} secret(s) redacted)")
    return redact("\n".join(out).strip() + "\n")
