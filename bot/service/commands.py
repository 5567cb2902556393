"""`/diagnose <text | job id | hosts ...>`: the answer is a channel message plus its thread."""

from __future__ import annotations

import re

from bot.jobs import InvalidJobId, JobSourceError
from bot.redact import redact

from .answer import Headline, esc, probe_host_lines
from .chat import slack_text_to_log
from .evidence import prepare
from .hostlist import HostListError, expand_hostlist
from .inputs import SlashIn, Where
from .jobs import JobEvent, JobFlows
from .oncall import HELP as ONCALL_HELP
from .oncall import WORDS as ONCALL_WORDS
from .oncall import OnCallFlows
from .workflow import Workflow, headline_for

HELP = (
    "*/diagnose* finds why a GPU job failed.\n"
    "• `/diagnose &lt;pasted log lines&gt;`: diagnose the text\n"
    "• `/diagnose 1234` (or `job 1234`): look the job up in the scheduler and diagnose its logs\n"
    "• `/diagnose hosts gpu[01-04]`: ask the node agents on those hosts\n"
    "Or paste a log / attach a .log or .gz file in a channel I am in, and mention me in a failing job's thread.\n"
    "*Incidents*\n" + ONCALL_HELP
)

# What users type for a job (the job source has the final word): 1234, job-1234, job 1234, #1234,
# JobId=1234, array tasks 1234_7, het job components 1234+1.
_JOB_LIKE = re.compile(r"^(?:job(?:id)?\s*[-_#=:]?\s*|#)?\d+(?:[_+.]\d+)?$", re.I)
_HOST_WORDS = ("hosts", "host", "nodes", "node")
# One line that starts like a job id but is not one (`1234; rm -rf /`, `$(id)`, `job 12 && x`): the
# user meant a job, so they get the job source's refusal rather than "no failure found in your text".
_ATTEMPTED_JOB = re.compile(r"^\s*(?:job\b|#|\d|\$\(|`)", re.I)


class SlashFlows:
    def __init__(self, wf: Workflow, jobs: JobFlows, oncall: OnCallFlows | None = None) -> None:
        self.wf = wf
        self.jobs = jobs
        self.oncall = oncall

    def on_slash(self, cmd: SlashIn, where: Where | None = None) -> None:
        text = cmd.text.strip()
        words = text.split()
        if not words or words[0].lower() in ("help", "-h", "--help"):
            self._reply(cmd, HELP)
            return
        if self.oncall is not None and words[0].lower() in ONCALL_WORDS:
            self.oncall.on_slash(cmd, words, lambda text: self._reply(cmd, text))
        elif words[0].lower() in _HOST_WORDS:
            self.hosts(cmd, " ".join(words[1:]))
        elif len(words) <= 2 and len(text) <= 64 and self.job(cmd, text, where):
            pass
        else:
            self.text(cmd, where)

    def _reply(self, cmd: SlashIn, text: str) -> None:
        """Only the person who typed the command sees it."""
        if cmd.response_url:
            self.wf.chat.respond(cmd.response_url, text)
        else:
            self.wf.chat.post_ephemeral(cmd.channel, cmd.user, text)

    def text(self, cmd: SlashIn, where: Where | None) -> None:
        log_text = slack_text_to_log(cmd.text)
        piece = prepare("slash", "pasted text", log_text.encode("utf-8"), author=cmd.user)
        report, notes = self.wf.engine([piece])
        if not report.diagnoses and "\n" not in cmd.text.strip() and _ATTEMPTED_JOB.match(cmd.text):
            try:
                self.wf.job_source.parse_job_id(cmd.text.strip())
            except JobSourceError as exc:  # InvalidJobId too; the message never echoes the input
                self._reply(cmd, str(exc))
                return
        if not report.diagnoses:
            self._reply(cmd, "I found no known failure signature in the text you gave. Paste more of the log (the "
                             "lines before the traceback matter), or attach the file in the channel and mention me.")
            return
        subj = "Log pasted with /diagnose"
        channel, ts = self.wf.chat.post_headline(cmd.channel, Headline(subj, "Diagnosing…", requester=cmd.user))
        if where is not None:
            where.channel, where.thread_ts = channel, ts
        incident, _ = self.wf.store.create_incident(origin="slash", channel=channel, thread_ts=ts, headline_ts=ts,
                                                    requester=cmd.user, team=cmd.team, subject=subj)
        with self.wf.locks.hold(f"{channel}:{ts}"):
            report, more, run = self.wf.probe(report)
            answer, _ = self.wf.record(incident, report, trigger="initial", notes=notes + more, new_pieces=[piece],
                                       probe_run=run)
            self.wf.post_card(incident, ts, answer)
            self.wf.chat.update_headline(channel, ts, headline_for(answer, subj, cmd.user))

    def job(self, cmd: SlashIn, text: str, where: Where | None) -> bool:
        """Diagnose a job if `text` is a job id; False when it is not one (then it is pasted text)."""
        try:
            job_id = self.wf.job_source.parse_job_id(text)
        except InvalidJobId as exc:
            if not _JOB_LIKE.match(text):
                return False
            self._reply(cmd, str(exc))
            return True
        except JobSourceError as exc:  # no job source: say so, but only to someone who typed an id
            if not _JOB_LIKE.match(text):
                return False
            self._reply(cmd, str(exc))
            return True
        self._reply(cmd, f"Looking up job {job_id}…")
        try:
            job = self.wf.job_source.resolve(job_id)
        except JobSourceError as exc:  # unknown job, scheduler down: tell the asker, not the channel
            self._reply(cmd, str(exc))
            return True
        incident, _ = self.wf.store.create_incident(origin="slash", channel=cmd.channel, thread_ts=None,
                                                    job_id=job_id, requester=cmd.user, team=cmd.team)
        self.jobs.run(incident, JobEvent(job_id=job_id, requester=cmd.user), where, job=job)
        return True

    def hosts(self, cmd: SlashIn, spec: str) -> None:
        if not self.wf.prober.enabled:
            self._reply(cmd, f"I cannot probe hosts: {self.wf.prober.problem}.")
            return
        try:
            hosts = expand_hostlist(spec.replace(" ", ","))
        except HostListError as exc:
            self._reply(cmd, f"That host list does not parse: {exc}")
            return
        if not hosts:
            self._reply(cmd, "Name the hosts: `/diagnose hosts gpu[01-04]` or `/diagnose hosts gpu01 gpu02`.")
            return
        if len(hosts) > 64:
            self._reply(cmd, f"{len(hosts)} hosts is too many for one check; name at most 64.")
            return
        results = self.wf.prober.probe(hosts)
        lines = probe_host_lines(results)
        bad = [p for p in lines if not p.ok]
        subj = f"Host check: {', '.join(hosts[:8])}" + (" …" if len(hosts) > 8 else "")
        status = f"{len(bad)} of {len(hosts)} host(s) with problems" if bad else f"all {len(hosts)} host(s) healthy"
        channel, ts = self.wf.chat.post_headline(
            cmd.channel, Headline(subj, status, state="diagnosed" if bad else "ok", requester=cmd.user))
        body = "\n".join(f"{':x:' if not p.ok else ':white_check_mark:'} *{esc(p.host)}*\n"
                         + "\n".join(f"    {esc(x.strip())}" for x in p.lines) for p in lines) or "No agent answered."
        self.wf.chat.post_notice(channel, ts, redact(body))
