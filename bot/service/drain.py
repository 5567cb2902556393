"""Drain with a human in the loop: "Drain host" on answers whose next step is a drain, a confirmation
modal with the reason prefilled, executed through the job source (no shell), audited; "Host
repaired" resumes the node, resolves the host's open incidents and restarts its recurrence count.

Who may confirm: the Slack user ids in TRIAGE_DRAIN_USERS and the members of the Slack user groups
in TRIAGE_DRAIN_USERGROUP (`usergroups.users.list`, cached for a minute). Anyone else is refused
when they click and again when the work runs; a group that cannot be read refuses (fail closed).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.jobs import JobSourceError, NodeControl, node_control
from bot.jobs.slurm_nodes import check_node_name, check_reason
from bot.store import Incident
from bot.store import host_actions as ha
from bot.store import lifecycle as lc

from .answer import Answer, esc
from .errors import UserFacingError
from .inputs import ActionIn, DrainIn
from .lifecycle import Lifecycle

if TYPE_CHECKING:
    from .workflow import Workflow

log = logging.getLogger(__name__)

GROUP_TTL_S = 60.0  # someone removed from the group loses the right within a minute
GROUP_FAIL_TTL_S = 15.0
MAX_CLOSED_CARDS = 50  # cards of closed incidents brought up to date per repair
# The drain the signature library writes: `scontrol update nodename=<host> state=drain reason="..."`.
_DRAIN = re.compile(r"\bscontrol\s+update\s+nodename=(\S+)\s+state=drain\s+reason=(\"[^\"]*\"|'[^']*'|\S+)", re.I)


class NotAllowed(UserFacingError):
    """The person may not drain or resume hosts; told only to them."""


@dataclass(frozen=True)
class DrainOffer:
    host: str
    reason: str


@dataclass(frozen=True)
class DrainForm:
    """What the confirmation modal shows and carries back."""

    incident_id: int
    version: int
    host: str
    reason: str
    channel: str
    message_ts: str


def offer_from(command: str | None, hosts: list[str], job_nodes: list[str] | None = None) -> DrainOffer | None:
    """The drain in a next-step command, with its host made concrete: the command's own host, else
    the one implicated host (a `$NODE` left for the user to fill is no host to drain). When the
    scheduler named the job's nodes, the host must be one of them: a name read from a log (an
    output file called after the job, a container's hostname) is no node, but a one-node job
    failed on its node."""
    m = _DRAIN.search(command or "")
    if not m:
        return None
    host: str | None = m.group(1)
    try:
        check_node_name(host)
    except JobSourceError:
        host = hosts[0] if len(hosts) == 1 else None
    if job_nodes:
        short = {n.split(".", 1)[0]: n for n in job_nodes}
        host = host if host in job_nodes else short.get((host or "").split(".", 1)[0])
        if host is None and len(job_nodes) == 1:
            host = job_nodes[0]
    try:
        reason = check_reason(m.group(2).strip("\"'"))
        return DrainOffer(check_node_name(host), reason) if host else None
    except (ValueError, JobSourceError):
        return None


class Approvers:
    """TRIAGE_DRAIN_USERS and the members of TRIAGE_DRAIN_USERGROUP."""

    def __init__(self, users: Collection[str] = (), groups: Collection[str] = (),
                 members_of: Callable[[str], Collection[str]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.users = frozenset(users)
        self.groups = tuple(groups)
        self.members_of = members_of
        self.clock = clock
        self._cache: dict[str, tuple[float, frozenset[str] | None, str | None]] = {}
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return bool(self.users or self.groups)

    def _members(self, group: str) -> tuple[frozenset[str] | None, str | None]:
        now = self.clock()
        with self._lock:
            hit = self._cache.get(group)
            if hit and hit[0] > now:
                return hit[1], hit[2]
        try:
            if self.members_of is None:
                raise RuntimeError("no Slack client to read user groups")
            members, problem = frozenset(self.members_of(group)), None
        except Exception as exc:  # missing usergroups:read, a rate limit: refuse rather than guess
            err = getattr(getattr(exc, "response", None), "get", lambda *_: None)("error") or str(exc)
            members, problem = None, f"I could not read the Slack user group {group} ({err})"
        with self._lock:
            self._cache[group] = (now + (GROUP_TTL_S if members is not None else GROUP_FAIL_TTL_S), members, problem)
        return members, problem

    def refusal(self, user: str, what: str = "drain or resume hosts") -> str | None:
        """None when `user` may confirm; else the sentence to tell them."""
        if not self.configured:
            return f"Nobody may {what} from Slack: set TRIAGE_DRAIN_USERS or TRIAGE_DRAIN_USERGROUP."
        if user and user in self.users:
            return None
        problems = []
        for g in self.groups:
            members, problem = self._members(g)
            if members is not None and user in members:
                return None
            if problem:
                problems.append(problem)
        who = []
        if self.users:
            who.append(", ".join(f"<@{u}>" for u in sorted(self.users)[:5]) + (" …" if len(self.users) > 5 else ""))
        if self.groups:
            who.append("members of the Slack user group" + ("s " if len(self.groups) > 1 else " ")
                       + ", ".join(self.groups))
        text = f"Only {' or '.join(who)} may {what}; you are not one of them, so nothing was done. Ask one of them."
        if problems:
            text += " (" + "; ".join(problems) + ".)"
        return text


class DrainFlows:
    def __init__(self, wf: Workflow, approvers: Approvers, lifecycle: Lifecycle | None = None) -> None:
        self.wf = wf
        self.approvers = approvers
        self.lifecycle = lifecycle  # resolves the host's incidents on "Host repaired"

    @property
    def nodes(self) -> NodeControl | None:
        return node_control(self.wf.job_source)

    @property
    def enabled(self) -> bool:
        """Drain is offered when the job source can do it and someone may confirm."""
        return self.nodes is not None and self.approvers.configured

    # -- the offer on the answer card ------------------------------------------------------------

    def annotate(self, answer: Answer, hosts: list[str], job_nodes: list[str] | None = None) -> None:
        """Put the drain the next step asks for on the answer, and where it stands for that host."""
        if not self.enabled:
            return
        offer = offer_from(answer.next_command, hosts, job_nodes)
        if offer is None:
            return
        answer.drain_host, answer.drain_reason = offer.host, offer.reason
        last = ha.last_done(self.wf.store, offer.host)
        answer.drain_state = "drained" if last is not None and last.action == "drain" else None

    def offer_for(self, incident_id: int) -> tuple[Incident, DrainOffer]:
        incident = self.wf.store.get_incident(incident_id)
        if incident is None:
            raise UserFacingError(f"Incident #{incident_id} is no longer stored (retention: TRIAGE_RETENTION_DAYS).")
        rec = self.wf.store.get_diagnosis(incident_id)
        if rec is not None and rec.answer.get("drain_host") and rec.answer.get("drain_reason"):
            return incident, DrainOffer(rec.answer["drain_host"], rec.answer["drain_reason"])
        alert = (incident.job or {}).get("drain")  # an Alertmanager host answer (bot.service.alertmanager)
        if isinstance(alert, dict) and alert.get("host") and alert.get("reason"):
            return incident, DrainOffer(str(alert["host"]), str(alert["reason"]))
        raise UserFacingError(f"Incident #{incident_id} no longer offers a drain (its next step changed).")

    # -- "Drain host": the modal, then the work ----------------------------------------------------

    def form(self, a: ActionIn) -> DrainForm:
        """What the modal needs; raises NotAllowed for someone who may not confirm."""
        refusal = self.approvers.refusal(a.user)
        if refusal:
            raise NotAllowed(refusal)
        if self.nodes is None:
            raise UserFacingError("The job source cannot drain hosts (set TRIAGE_JOB_SOURCE=slurm).")
        _, offer = self.offer_for(a.incident_id)
        return DrainForm(a.incident_id, a.version, offer.host, offer.reason, a.channel, a.message_ts)

    def submission_problem(self, d: DrainIn) -> str | None:
        """Why the modal cannot be accepted (shown under the reason field), or None."""
        refusal = self.approvers.refusal(d.user)
        if refusal:
            return refusal
        try:
            check_reason(d.reason)
        except ValueError as exc:
            return str(exc)
        return None

    def drain(self, d: DrainIn) -> None:
        refusal = self.approvers.refusal(d.user)  # again when it runs: the work may run after a restart
        if refusal:
            raise NotAllowed(refusal)
        nodes = self.nodes
        if nodes is None:
            raise UserFacingError("The job source cannot drain hosts (set TRIAGE_JOB_SOURCE=slurm).")
        incident, offer = self.offer_for(d.incident_id)
        host = offer.host
        reason = check_reason(f"{check_reason(d.reason)} (triage #{incident.id})")
        audit = ha.HostAction(host=host, action="drain", user=d.user, ok=False, reason=reason,
                              incident_id=incident.id, channel=incident.channel, thread_ts=incident.thread_ts)
        try:
            status = nodes.node_status(host)
            if status is None:
                raise JobSourceError(f"Slurm has no node {host}")
            audit.command = nodes.drain_node(host, reason)
            after = nodes.node_status(host)
        except JobSourceError as exc:
            audit.error = str(exc)
            ha.record(self.wf.store, audit)
            self._say(incident, f":x: I did not drain *{esc(host)}*: {esc(str(exc))}.")
            return
        audit.ok, audit.node_state = True, after.state if after else None
        ha.record(self.wf.store, audit)
        state = f" (now `{esc(after.state)}`)" if after else ""
        self._mark_card(incident, host, "drained", f":no_entry: <@{d.user}> drained {esc(host)}")
        self._say(incident, f":no_entry: <@{d.user}> drained *{esc(host)}* in Slurm{state}, reason “{esc(reason)}”. "
                            "Jobs running there carry on; no new job starts there. When it is fixed, press "
                            "*Host repaired*: that resumes it and closes its open incidents.",
                  repaired=f"{incident.id}:{d.version}")

    # -- "Host repaired" -----------------------------------------------------------------------------

    def check_repair(self, a: ActionIn) -> None:
        refusal = self.approvers.refusal(a.user, "mark hosts repaired")
        if refusal:
            raise NotAllowed(refusal)

    def repaired(self, a: ActionIn) -> None:
        self.check_repair(a)
        nodes = self.nodes
        if nodes is None:
            raise UserFacingError("The job source cannot resume hosts (set TRIAGE_JOB_SOURCE=slurm).")
        incident, offer = self.offer_for(a.incident_id)
        host = offer.host
        audit = ha.HostAction(host=host, action="repaired", user=a.user, ok=False, incident_id=incident.id,
                              channel=incident.channel, thread_ts=incident.thread_ts)
        try:
            status = nodes.node_status(host)
            if status is None:
                raise JobSourceError(f"Slurm has no node {host}")
            if status.drained:
                audit.command = nodes.resume_node(host)
            after = nodes.node_status(host)
        except JobSourceError as exc:
            audit.error = str(exc)
            ha.record(self.wf.store, audit)
            self._say(incident, f":x: I did not resume *{esc(host)}*: {esc(str(exc))}. Its incidents stay open.")
            return
        closed = self._close_incidents(host, a.user, incident)
        audit.ok, audit.node_state, audit.closed = True, after.state if after else None, closed
        ha.record(self.wf.store, audit)  # from now on the host's recurrence counts again from zero
        now = f" (now `{esc(after.state)}`)" if after else ""
        did = (f"resumed it in Slurm{now}" if audit.command else
               f"it was not drained in Slurm (`{esc(status.state)}`), so there was nothing to resume")
        shut = (f"Closed {len(closed)} open incident{'s' if len(closed) != 1 else ''} on it: "
                + ", ".join(f"#{i}" for i in closed[:20]) + ("…" if len(closed) > 20 else "") + ". ") if closed else ""
        self._say(incident, f":white_check_mark: <@{a.user}> marked *{esc(host)}* repaired: {did}. {shut}"
                            "Its recurrence count starts again from now.")

    def _close_incidents(self, host: str, user: str, current: Incident) -> list[int]:
        found = lc.incidents_on_host(self.wf.store, [host], since=0, limit=500)
        if current.id not in {i.id for i in found}:
            found.append(current)
        life = self.lifecycle or Lifecycle(self.wf, clock=self.wf.clock)
        closed: list[int] = []
        for inc in sorted(found, key=lambda i: i.id):
            if inc.resolved_at:
                continue
            if len(closed) < MAX_CLOSED_CARDS:
                self._mark_card(inc, host, "repaired", f":wrench: <@{user}> marked {esc(host)} repaired",
                                update=False)  # the resolve below shows it on the card
            try:
                life.resolve(inc.id, user, text=f"{host} repaired")
            except Exception as exc:  # a card Slack refuses must not keep the others open
                log.warning("could not show incident %s as resolved: %s", inc.id, exc)
            closed.append(inc.id)
        return closed

    # -- Slack ------------------------------------------------------------------------------------

    def _mark_card(self, incident: Incident, host: str, state: str, line: str, update: bool = True) -> None:
        """The answer card shows where the drain stands (its buttons follow) and who did it."""
        with self.wf.locks.hold(f"{incident.channel}:{incident.thread_ts}"):
            rec = self.wf.store.get_diagnosis(incident.id)
            if rec is None or not rec.answer:
                return
            answer = Answer.from_dict(rec.answer)
            if answer.drain_host == host:
                answer.drain_state = state
            answer.feedback = (answer.feedback + [line])[-5:]
            self.wf.store.update_answer(incident.id, rec.version, answer.to_dict())
            current = self.wf.store.get_incident(incident.id)
            if update and current is not None and current.channel and current.summary_ts:
                self.wf.update_card(current, answer)

    def _say(self, incident: Incident, text: str, repaired: str | None = None) -> None:
        if incident.channel:
            self.wf.chat.post_host_action(incident.channel, incident.thread_ts, text, repaired)


