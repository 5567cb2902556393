"""Grouping scheduler failures: one array job, one host, one storm -> one thread or one summary post.

Through the real bot (signed webhook over HTTP, durable work, worker pool) against the Web API
stand-in. Time moves through the workflow's clock (no sleeps).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from bot.jobs import InvalidJobId, JobInfo, JobLog, JobSourceError
from tests.slack.logs import NCCL_999
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot, run_bot
from tests.support.slack_standin import SlackStandIn


class ArraySource:
    """Job source over real files: every task of job 1234 wrote the same failure into its own log."""

    name = "dir"

    def __init__(self, tmp: Path, text: str = NCCL_999) -> None:
        self.tmp = tmp
        self.text = text
        self.resolved: list[str] = []

    def parse_job_id(self, text: str) -> str:
        if not re.fullmatch(r"\d+(?:[_+]\d+)?", text.strip()):
            raise InvalidJobId("That is not a job id.")
        return text.strip()

    def resolve(self, job_id: str, hints: object = None) -> JobInfo:
        self.resolved.append(job_id)
        if not job_id.startswith("1234"):
            raise JobSourceError(f"job {job_id} is not known to the scheduler")
        log = self.tmp / f"slurm-{job_id}.out"
        log.write_text(f"task {job_id} starting\n" + self.text)
        return JobInfo(job_id=job_id, name="sweep", user="alice", state="FAILED", exit_code="1:0", partition="h200",
                       cluster="eos", nodes=["gpu-h200-07"], logs=[JobLog(name=log.name, path=str(log))])


def hook_event(job_id: str, *, nodes: str = "gpu-h200-07", partition: str = "h200", n: int = 0) -> dict:
    return {"event_id": f"eos:{job_id}:{1732615505 + n}", "job_id": job_id, "state": "FAILED", "exit_code": "1:0",
            "name": "sweep", "user": "alice", "partition": partition, "cluster": "eos", "nodes": nodes}


def top_level(slack: SlackStandIn, channel: str = CHANNEL) -> list[dict]:
    return [m for m in slack.bot_messages(channel) if "thread_ts" not in m]


def cards(slack: SlackStandIn, thread: str) -> list[dict]:
    return [m for m in slack.thread(CHANNEL, thread) if "diagnosis v" in section_text(m.get("blocks") or [])
            and "thread_ts" in m]


def test_twenty_failing_tasks_of_one_array_job_make_one_thread(bot: RunningBot, slack: SlackStandIn,
                                                               tmp_path: Path) -> None:
    bot.bot.service.wf.job_source = ArraySource(tmp_path)
    answers = [bot.send_hook(hook_event(f"1234_{i}", n=i)) for i in range(20)]
    bot.wait_idle(120)
    assert [s for s, _ in answers] == [202] * 20
    assert answers[0][1]["status"] == "accepted" and {b["status"] for _, b in answers[1:]} == {"grouped"}
    assert len({b["incident"] for _, b in answers}) == 1
    (head,) = top_level(slack)  # one channel message for the whole array
    text = section_text(head["blocks"])
    assert "20 tasks of job 1234 failed" in text and "1234_0, 1234_1" in text and "nccl-cuda-999" in text
    (card,) = cards(slack, head["ts"])  # one answer, edited in place, not one per task
    inc = bot.store.get_incident(answers[0][1]["incident"])
    assert inc.signature == "nccl-cuda-999" and inc.thread_ts == head["ts"]
    names = {e.name for e in bot.store.list_evidence(inc.id)}
    assert {"slurm-1234_0.out", "slurm-1234_19.out"} <= names  # every task's log is evidence of the one incident
    # A retried delivery of a grouped task is still the same failure: nothing new is posted.
    status, again = bot.send_hook(hook_event("1234_7", n=7), now=time.time() + 2)  # signed afresh
    assert status == 200 and again == {"incident": inc.id, "status": "exists"}


def test_a_later_failure_of_the_job_after_the_window_opens_a_new_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    now = [bot.store.clock()]
    bot.bot.service.wf.clock = lambda: now[0]
    assert bot.send_hook(hook_event("1234_0"))[0] == 202
    assert bot.send_hook(hook_event("1234_1", n=1))[1]["status"] == "grouped"
    bot.wait_idle()
    now[0] += 25 * 3600  # TRIAGE_GROUP_JOB_WINDOW_S is a day by default
    status, body = bot.send_hook(hook_event("1234_2", n=2))
    bot.wait_idle()
    assert status == 202 and body["status"] == "accepted"
    assert len(top_level(slack)) == 2


def test_a_resolved_incident_collects_nothing_more(bot: RunningBot, slack: SlackStandIn) -> None:
    _, first = bot.send_hook(hook_event("1234_0"))
    bot.wait_idle()
    bot.bot.service.lifecycle.resolve(first["incident"], "UCAROL", text="bad riser on gpu-h200-07, replaced")
    status, body = bot.send_hook(hook_event("1234_1", n=1))
    bot.wait_idle()
    assert status == 202 and body["status"] == "accepted" and body["incident"] != first["incident"]
    assert len(top_level(slack)) == 2


def test_failures_of_other_jobs_on_one_host_share_a_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    a = bot.send_hook(hook_event("2001", nodes="gpu-h200-[07-08]"))[1]
    b = bot.send_hook(hook_event("2002", nodes="gpu-h200-07", n=1))[1]
    c = bot.send_hook(hook_event("2003", nodes="gpu-h200-09", n=2))[1]  # another host: its own thread
    bot.wait_idle()
    assert b == {"incident": a["incident"], "status": "grouped", "group": "host"}
    assert c["incident"] != a["incident"]
    heads = top_level(slack)
    assert len(heads) == 2
    first = bot.store.get_incident(a["incident"])
    text = section_text(slack.message(CHANNEL, first.headline_ts)["blocks"])
    assert "2 jobs failed (2001, 2002)" in text


def test_a_storm_is_one_summary_post_with_a_row_per_host(slack: SlackStandIn, tmp_path: Path) -> None:
    env = {"TRIAGE_STORM_THRESHOLD": "3", "TRIAGE_GROUP_HOST_WINDOW_S": "0"}
    with run_bot(slack, tmp_path, env=env) as bot:
        for i in range(9):
            status, body = bot.send_hook(hook_event(str(3000 + i), nodes=f"gpu-h200-{i:02d}", n=i))
            assert status == 202
        other = bot.send_hook(hook_event("4000", nodes="cpu-01", partition="cpu", n=99))[1]
        bot.wait_idle()
        assert body["status"] == "grouped" and body["group"] == "storm"
        assert other["status"] == "accepted"  # another partition is no part of it
        heads = top_level(slack)
        storm = [m for m in heads if "Failure storm" in section_text(m["blocks"])]
        assert len(heads) == 3 + 1 + 1 and len(storm) == 1  # 3 before the storm, its summary, the cpu job
        text = section_text(slack.message(CHANNEL, storm[0]["ts"])["blocks"])
        assert "Failure storm in partition h200 (eos)*: 9 failures" in text and "on 9 hosts" in text
        rows = [line for line in text.splitlines() if line.startswith("gpu-h200-")]
        assert len(rows) == 9 and any(r.split()[0] == "gpu-h200-08" and " 3008 " in r for r in rows)
        assert slack.calls_to("chat.update")  # the summary was edited as the storm grew


def test_a_snoozed_incident_collects_failures_without_posting(bot: RunningBot, slack: SlackStandIn,
                                                               tmp_path: Path) -> None:
    from tests.slack.logs import WATCHDOG

    now = [bot.store.clock()]
    bot.bot.service.wf.clock = lambda: now[0]
    source = ArraySource(tmp_path)
    bot.bot.service.wf.job_source = source
    _, first = bot.send_hook(hook_event("1234_0"))
    bot.wait_idle()
    bot.bot.service.lifecycle.snooze(first["incident"], "UCAROL", 3600)
    head = bot.store.get_incident(first["incident"]).thread_ts
    before = len(slack.thread(CHANNEL, head))
    source.text = WATCHDOG  # a different failure: un-snoozed, the thread would hear what changed
    bot.send_hook(hook_event("1234_1", n=1))
    bot.wait_idle()
    assert len(slack.thread(CHANNEL, head)) == before  # nothing new in the thread ...
    assert "2 tasks of job 1234 failed" in section_text(slack.message(CHANNEL, head)["blocks"])  # ... counted
    assert "slurm-1234_1.out" in {e.name for e in bot.store.list_evidence(first["incident"])}
    assert bot.store.get_incident(first["incident"]).version == 1  # not re-diagnosed while snoozed
    now[0] += 3601
    bot.send_hook(hook_event("1234_2", n=2))
    bot.wait_idle()
    assert bot.store.get_incident(first["incident"]).version >= 2  # re-diagnosed once the snooze ended
