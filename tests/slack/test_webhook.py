"""POST /hooks/job-failed: HMAC-signed, replay-proof, idempotent on event_id, routed per partition."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from bot.jobs import InvalidJobId, JobInfo, JobLog, JobSourceError
from tests.slack.logs import NCCL_999
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, WEBHOOK_SECRET, RunningBot, hook_headers, run_bot
from tests.support.slack_requests import post
from tests.support.slack_standin import SlackStandIn

EVENT = {"event_id": "eos:1234:1732615505", "job_id": "1234", "state": "FAILED", "exit_code": "1:0",
         "name": "llama-70b-pretrain", "user": "alice", "partition": "h200", "cluster": "eos",
         "nodes": "gpu-h200-[07-08]", "extra_key_is_ignored": True}


class DirJobSource:
    """A job source over real files (the Slurm source is tested on a real Slurm in tests/slurm)."""

    name = "dir"

    def __init__(self, logs: dict[str, Path], verdict: list[str] | None = None,
                 log_problems: list[str] | None = None) -> None:
        self.logs = logs
        self.verdict = verdict or []
        self.log_problems = log_problems or []
        self.resolved: list[str] = []

    def parse_job_id(self, text: str) -> str:
        m = re.fullmatch(r"(?:job[-_ ]?|#)?(\d+)", text.strip(), re.I)
        if not m:
            raise InvalidJobId("That is not a job id (try 1234 or job-1234).")
        return m.group(1)

    def resolve(self, job_id: str, hints: object = None) -> JobInfo:
        self.resolved.append(job_id)
        if job_id != "1234":
            raise JobSourceError(f"job {job_id} is not known to the scheduler")
        return JobInfo(job_id=job_id, name="llama-70b-pretrain", user="alice", state="FAILED", exit_code="1:0",
                       partition="h200", cluster="eos", nodes=["gpu-h200-07", "gpu-h200-08"],
                       logs=[JobLog(name=n, path=str(p)) for n, p in self.logs.items()],
                       verdict_lines=self.verdict, extra={"log_problems": self.log_problems})


def test_signed_event_opens_an_incident_naming_the_job(bot: RunningBot, slack: SlackStandIn) -> None:
    t0 = time.monotonic()
    status, body = bot.send_hook(EVENT)
    assert status == 202 and body["status"] == "accepted" and time.monotonic() - t0 < 1.0
    headline = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    assert headline.params["channel"] == CHANNEL and "thread_ts" not in headline.params
    text = section_text(headline.params["blocks"])
    assert "Job 1234 (llama-70b-pretrain) FAILED, exit 1:0, on gpu-h200-07, gpu-h200-08" in text
    assert "partition h200" in text and "cluster eos" in text
    # No job source configured: the thread says so, and the channel message says nothing was read.
    note = slack.calls_to("chat.postMessage")[1]
    assert note.params["thread_ts"] == slack.bot_messages(CHANNEL)[0]["ts"]
    assert "No job source is configured" in note.params["text"]
    inc = bot.store.get_incident(body["incident"])
    assert inc.origin == "webhook" and inc.job_id == "1234" and inc.hosts == ["gpu-h200-07", "gpu-h200-08"]
    assert inc.state == "no-failure"


def test_job_logs_are_diagnosed_into_the_thread(bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:
    log = tmp_path / "slurm-1234.out"
    log.write_text("epoch 3 step 1200 loss 1.9\n" + NCCL_999)
    source = DirJobSource({"slurm-1234.out": log},
                          ["slurmstepd: error: *** JOB 1234 ON gpu-h200-07 CANCELLED AT 2025-11-26T10:15:05 ***"])
    bot.bot.service.wf.job_source = source
    status, body = bot.send_hook(EVENT)
    assert status == 202
    headline, answer = slack.wait_for("chat.postMessage", n=2)
    update = slack.wait_for("chat.update")[0]
    bot.wait_idle()
    assert answer.params["thread_ts"] == slack.bot_messages(CHANNEL)[0]["ts"]
    a = section_text(answer.params["blocks"])
    assert "nccl-cuda-999" in a and "Job 1234 (llama-70b-pretrain) FAILED, exit 1:0" in a
    assert "nvidia-smi" in a  # the next step is on the answer; the evidence lines are in its details
    stored = bot.store.get_diagnosis(body["incident"]).answer
    assert stored["evidence"][0]["where"].startswith("slurm-1234.out:")
    head = section_text(update.params["blocks"])
    assert "Job 1234" in head and "nccl-cuda-999" in head and "gpu-h200-07" in head
    assert source.resolved == ["1234"]
    inc = bot.store.get_incident(body["incident"])
    assert inc.signature == "nccl-cuda-999" and inc.state == "open"
    assert {e.name for e in bot.store.list_evidence(inc.id)} == {"slurm-1234.out", "scheduler verdict"}


def test_retried_post_is_idempotent(bot: RunningBot, slack: SlackStandIn) -> None:
    status, first = bot.send_hook(EVENT)
    assert status == 202
    # The scheduler did not see the answer and retries (each attempt signed afresh).
    time.sleep(1.05)
    status, again = bot.send_hook(EVENT)
    assert status == 200 and again["status"] == "exists" and again["incident"] == first["incident"]
    bot.wait_idle()
    headlines = [c for c in slack.calls_to("chat.postMessage") if "thread_ts" not in c.params]
    assert len(headlines) == 1


def test_unsigned_forged_old_and_replayed_requests_are_refused(bot: RunningBot, slack: SlackStandIn) -> None:
    body = json.dumps(EVENT).encode()
    assert bot.send_hook(body, headers={"Content-Type": "application/json"})[0] == 401
    assert bot.send_hook(body, secret=b"some-other-secret")[0] == 401
    assert bot.send_hook(body, now=time.time() - 600)[0] == 401  # outside the 5-minute window
    signed = hook_headers(WEBHOOK_SECRET, body)
    tampered = body.replace(b"1234", b"9999")
    assert post(bot.hooks_url, tampered, signed)[0] == 401
    assert post(bot.hooks_url, body, signed)[0] == 202
    status, raw = post(bot.hooks_url, body, signed)  # the identical request again: a replay
    assert status == 401 and b"replayed" in raw
    bot.wait_idle()
    assert len([c for c in slack.calls_to("chat.postMessage") if "thread_ts" not in c.params]) == 1


def test_bad_bodies_get_400_and_big_ones_413(bot: RunningBot, slack: SlackStandIn) -> None:
    assert bot.send_hook(b"{not json")[0] == 400
    assert bot.send_hook(b"[1, 2]")[0] == 400
    status, body = bot.send_hook({"job_id": "1234"})
    assert status == 400 and "event_id is required" in body["error"]
    status, body = bot.send_hook({"event_id": "e1", "job_id": "12; rm -rf /`"})
    assert status == 400
    status, _ = bot.send_hook({"event_id": "e2", "job_id": "1", "name": "x" * 70_000})
    assert status == 413
    bot.wait_idle()
    assert not slack.calls_to("chat.postMessage")


def test_routes_pick_the_channel_by_partition_and_cluster(slack: SlackStandIn, tmp_path: Path) -> None:
    routes = ("routes:\n"
              "  - match: {cluster: eos, partition: 'h200*'}\n    channel: C0H200\n"
              "  - match: {user: bob}\n    channel: '#bob-jobs'\n"
              "default: C0DEFAULT\n")
    with run_bot(slack, tmp_path, env={"TRIAGE_ROUTES": routes}) as bot:
        assert bot.send_hook(EVENT)[0] == 202
        assert bot.send_hook({**EVENT, "event_id": "e-bob", "partition": "a100", "user": "bob"})[0] == 202
        assert bot.send_hook({**EVENT, "event_id": "e-other", "partition": "cpu", "user": "carol"})[0] == 202
        bot.wait_idle()
    channels = sorted(c.params["channel"] for c in slack.calls_to("chat.postMessage") if "thread_ts" not in c.params)
    assert channels == ["#bob-jobs", "C0DEFAULT", "C0H200"]


def test_webhook_without_a_secret_is_disabled(slack: SlackStandIn, tmp_path: Path) -> None:
    with run_bot(slack, tmp_path, webhook_secret=None) as bot:
        status, body = bot.send_hook(EVENT, secret=b"anything")
    assert status == 503 and "TRIAGE_WEBHOOK_SECRET_FILE" in body["error"]


def test_healthz(bot: RunningBot) -> None:
    import urllib.request

    with urllib.request.urlopen(bot.url + "/healthz", timeout=5) as resp:
        data = json.loads(resp.read())
    assert resp.status == 200 and data["ok"] and data["store"]


def test_a_job_that_could_not_be_posted_is_retried(bot: RunningBot, slack: SlackStandIn) -> None:
    slack.not_in_channel.add(CHANNEL)
    status, first = bot.send_hook(EVENT)
    assert status == 202
    bot.wait_idle()
    assert bot.store.get_incident(first["incident"]).state == "error"
    slack.not_in_channel.clear()  # someone invited the bot; the scheduler's notifier retries
    time.sleep(1.05)
    status, again = bot.send_hook(EVENT)
    assert status == 202 and again["status"] == "retrying" and again["incident"] == first["incident"]
    bot.wait_idle()
    assert len(slack.bot_messages(CHANNEL)) == 2  # the channel message and the note in its thread
    assert bot.store.get_incident(first["incident"]).state == "no-failure"


def test_free_text_job_name_is_cleaned_not_refused() -> None:
    from bot.service.hooks import parse_event

    ev = parse_event(json.dumps({"event_id": "eos:77:1", "job_id": "77", "name": "train (v2) <b>"}).encode())
    assert ev.name == "train _v2_ _b_" and ev.job_id == "77"
    with pytest.raises(ValueError, match="job_id"):
        parse_event(json.dumps({"event_id": "e", "job_id": "77 (v2)"}).encode())


def test_unreadable_job_logs_say_why(bot: RunningBot, slack: SlackStandIn) -> None:
    why = "/scratch/alice/run7/slurm-1234.out is not owned by the job's user; not read"
    bot.bot.service.wf.job_source = DirJobSource({}, log_problems=[why])
    assert bot.send_hook(EVENT)[0] == 202
    slack.wait_for("chat.postMessage", n=2)
    bot.wait_idle()
    said = " ".join(json.dumps(c.params) for c in slack.calls_to("chat.postMessage") + slack.calls_to("chat.update"))
    assert "could not read any of the job" in said and "not owned by the job" in said


def test_output_paths_from_the_hook_are_kept_and_checked() -> None:
    from bot.service.hooks import parse_event

    ev = parse_event(json.dumps({"event_id": "e", "job_id": "77", "stdout": "/scratch/u/train-77.out",
                                 "stderr": "/scratch/u/train-77.err", "work_dir": "/scratch/u"}).encode())
    hints = ev.log_hints()
    assert hints is not None and (hints.stdout, hints.stderr, hints.work_dir) == (
        "/scratch/u/train-77.out", "/scratch/u/train-77.err", "/scratch/u")
    assert parse_event(json.dumps({"event_id": "e", "job_id": "77"}).encode()).log_hints() is None
    for bad in ("train-77.out", "/x\n/y", 5):
        with pytest.raises(ValueError, match="absolute path"):
            parse_event(json.dumps({"event_id": "e", "job_id": "77", "stdout": bad}).encode())
