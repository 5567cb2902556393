"""Nothing acknowledged is lost: `kill -9` mid-burst and a restart on the same store answer every
acked event and webhook job once; Slack's 429 / 5xx / layout refusals delay an answer, never drop it;
a card left on an old diagnosis is repaired from the store."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.slack.logs import NCCL_999
from tests.slack.test_serve_cli import TRIAGE, clean_env, free_port
from tests.support.bot_server import (
    CHANNEL,
    SIGNING_SECRET,
    WEBHOOK_SECRET,
    RunningBot,
    bot_env,
    hook_headers,
)
from tests.support.slack_requests import event_body, message_event, post, post_signed
from tests.support.slack_standin import SlackStandIn

# The full size (100 events, 40 jobs) takes about a minute here; the suite runs a smaller
# burst. Full size: TRIAGE_DURABLE_EVENTS=100 TRIAGE_DURABLE_JOBS=40 pytest -s -k kill_9 tests/slack/test_durable.py
EVENTS = int(os.environ.get("TRIAGE_DURABLE_EVENTS", "24"))
JOBS = int(os.environ.get("TRIAGE_DURABLE_JOBS", "10"))


def _start(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    before = log.read_bytes().count(b"listening on") if log.exists() else 0
    out = open(log, "ab")
    proc = subprocess.Popen([*TRIAGE, "serve", "--http", "--port", str(port), "--host", "127.0.0.1"],
                            env=env, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    deadline = time.monotonic() + 30
    while log.read_bytes().count(b"listening on") <= before:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "triage serve did not start"
        time.sleep(0.05)
    return proc


def _answers(slack: SlackStandIn) -> Counter[str]:
    """thread ts -> number of diagnosis answers in it (the answer's text names the signature)."""
    return Counter(m["thread_ts"] for m in slack.bot_messages(CHANNEL)
                   if m.get("thread_ts") and "nccl-cuda-999" in (m.get("text") or "") and m.get("blocks"))


def test_kill_9_mid_burst_then_restart_answers_everything_once(slack: SlackStandIn, tmp_path: Path) -> None:
    # Slack is slow (every 3rd post rate-limited for 1 s) so the kill lands with work in flight.
    for _ in range(EVENTS // 3):
        slack.fail("chat.postMessage", status=429, retry_after=1)
    job_dir = tmp_path / "jobs"
    job_dir.mkdir()
    env = clean_env(bot_env(slack, tmp_path, env={"TRIAGE_WORKERS": "2"}))
    port = free_port()
    log = tmp_path / "serve.log"
    proc = _start(env, port, log)
    url = f"http://127.0.0.1:{port}"
    events = [message_event(CHANNEL, NCCL_999.replace("rank0", f"rank{i}")) for i in range(EVENTS)]
    bodies = [event_body(ev, event_id=f"Ev{i:04d}") for i, ev in enumerate(events)]
    hooks = [{"event_id": f"burst-{i}", "job_id": str(5000 + i), "state": "FAILED", "nodes": f"gpu{i:02d}"}
             for i in range(JOBS)]
    try:
        def send_event(body: str) -> int:
            return post_signed(url + "/slack/events", body, SIGNING_SECRET)[0]

        def send_hook(payload: dict[str, str]) -> int:
            import json
            raw = json.dumps(payload).encode()
            return post(url + "/hooks/job-failed", raw, hook_headers(WEBHOOK_SECRET, raw))[0]

        with ThreadPoolExecutor(8) as ex:
            ev_status = list(ex.map(send_event, bodies))
        assert proc.poll() is None, (proc.returncode, log.read_text()[-3000:])
        with ThreadPoolExecutor(8) as ex:
            hook_status = list(ex.map(send_hook, hooks))
        assert ev_status == [200] * EVENTS and hook_status == [202] * JOBS
        t0 = time.monotonic()  # kill once some answers are out: the rest is queued or half done
        while sum(_answers(slack).values()) < 3 and time.monotonic() - t0 < 15:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        before = sum(_answers(slack).values())
        assert before < EVENTS, "the kill came too late to test anything"
        proc = _start(env, port, log)
        for body in bodies[:5]:  # Slack's retries of already-queued events are dropped, not re-run
            post_signed(url + "/slack/events", body, SIGNING_SECRET, retry_num=1)
        deadline = time.monotonic() + float(os.environ.get("TRIAGE_DURABLE_WAIT_S", "45"))
        while time.monotonic() < deadline:
            got = _answers(slack)
            heads = [m for m in slack.bot_messages(CHANNEL) if not m.get("thread_ts") and "Job 5" in m["text"]]
            if len(got) == EVENTS and len(heads) >= JOBS:
                break
            time.sleep(0.2)
        got = _answers(slack)
        heads = [m for m in slack.bot_messages(CHANNEL) if not m.get("thread_ts") and "Job 5" in m["text"]]
        print(f"\nkill -9 after {before}/{EVENTS} answers; after restart {len(got)}/{EVENTS} answered, "
              f"{len(heads)}/{JOBS} jobs posted")
        assert set(got) == {ev["ts"] for ev in events}, "an acked event was never answered"
        assert set(got.values()) == {1}, f"answered twice: {[t for t, n in got.items() if n > 1]}"
        by_job = Counter(m["text"].split()[1] for m in heads)
        assert len(by_job) == JOBS and set(by_job.values()) == {1}, by_job
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_slack_failing_429_500_and_too_long_still_answers(bot: RunningBot, slack: SlackStandIn) -> None:
    bot.bot.gateway.write_deadline_s = 60
    bot.bot.gateway.backoff_base_s = 0.05
    for _ in range(6):
        slack.fail("chat.postMessage", status=429, retry_after=0)
    slack.fail("chat.postMessage", status=500, retry_after=None, error="internal_error", times=5)
    slack.fail("chat.postMessage", status=200, retry_after=None, error="msg_too_long")
    ev = message_event(CHANNEL, NCCL_999)
    bot.send_event(ev)
    bot.wait_idle(90)
    answers = [m for m in slack.bot_messages(CHANNEL) if m.get("thread_ts") == ev["ts"]]
    assert len(answers) == 1 and "nccl-cuda-999" in answers[0]["text"]  # its text form
    assert len(slack.calls_to("chat.postMessage")) == 6 + 5 + 1 + 1


def test_a_failed_update_is_repaired_from_the_store(bot: RunningBot, slack: SlackStandIn) -> None:
    bot.bot.gateway.write_deadline_s = 0.5
    ev = message_event(CHANNEL, NCCL_999)
    bot.send_event(ev)
    bot.wait_idle()
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    assert inc is not None and inc.card_version == 1
    slack.fail("chat.update", status=500, retry_after=None, error="internal_error", times=50)
    bot.send_event(message_event(CHANNEL, "Xid 79 on gpu-h200-07: GPU has fallen off the bus\n"
                                 "[rank3]: NCCL WARN Cuda failure 'unknown error'\n", thread_ts=ev["ts"]))
    bot.wait_idle()
    inc = bot.store.get_incident(inc.id)
    if inc.version == 1:
        return  # the reply changed nothing: no update was due
    assert inc.card_version == 1 < inc.version  # stale: Slack kept refusing the update
    with slack._lock:
        slack._failures.clear()
    assert bot.bot.service.wf.repair_cards() == 1
    inc = bot.store.get_incident(inc.id)
    assert inc.card_version == inc.version
    card = slack.message(CHANNEL, inc.summary_ts)
    assert card.get("edited")


def test_the_same_slash_command_twice_makes_one_incident(bot: RunningBot, slack: SlackStandIn) -> None:
    assert bot.send_command(NCCL_999)[0] == 200
    assert bot.send_command(NCCL_999)[0] == 200
    bot.wait_idle()
    rows = bot.store.query("SELECT COUNT(*) AS n FROM incidents WHERE origin = 'slash'")
    assert rows[0]["n"] == 1


def test_killed_between_headline_post_and_store_posts_one_headline(slack: SlackStandIn, tmp_path: Path) -> None:
    """Slack posted the job's channel message but the bot was killed before its reply arrived (so
    the store never noted the ts): the resumed job adopts that message instead of posting another."""
    import json

    env = clean_env(bot_env(slack, tmp_path))
    port = free_port()
    log = tmp_path / "serve.log"
    slack.stall("chat.postMessage", lambda p: not p.get("thread_ts") and "7001" in str(p.get("text")))
    proc = _start(env, port, log)
    url = f"http://127.0.0.1:{port}"
    raw = json.dumps({"event_id": "stall-1", "job_id": "7001", "state": "FAILED", "nodes": "gpu01"}).encode()
    try:
        assert post(url + "/hooks/job-failed", raw, hook_headers(WEBHOOK_SECRET, raw))[0] == 202
        assert slack.stalled.wait(20), "the headline was never posted"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = _start(env, port, log)
        def heads() -> list[dict[str, object]]:
            return [m for m in slack.bot_messages(CHANNEL) if not m.get("thread_ts") and "7001" in m["text"]]

        deadline = time.monotonic() + 30  # until the job's channel message leaves "Diagnosing…"
        while time.monotonic() < deadline and all("Diagnosing" in str(h["text"]) for h in heads()):
            time.sleep(0.1)
        assert len(heads()) == 1, [h["text"] for h in heads()]
        head = heads()[0]
        assert "Diagnosing" not in str(head["text"]), "the adopted message was never brought up to date"
        assert [m for m in slack.bot_messages(CHANNEL) if m.get("thread_ts") == head["ts"]], \
            "the resumed job did not answer in the adopted thread"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_a_lost_reply_to_a_post_does_not_post_the_answer_twice(bot: RunningBot, slack: SlackStandIn) -> None:
    """Slack posted the answer but its reply never reached the bot (the client timed out): the
    retry finds the posted message by its metadata mark instead of posting a second answer."""
    bot.bot.gateway.backoff_base_s = 0.05
    bot.bot.gateway.client.timeout = 1
    ev = message_event(CHANNEL, NCCL_999)
    slack.stall("chat.postMessage", lambda p: p.get("thread_ts") == ev["ts"], seconds=3)
    bot.send_event(ev)
    bot.wait_idle(60)
    answers = [m for m in slack.bot_messages(CHANNEL) if m.get("thread_ts") == ev["ts"] and m.get("blocks")]
    assert slack.stalled.is_set()
    assert len(answers) == 1, [a["text"][:80] for a in answers]
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    assert inc is not None and inc.summary_ts == answers[0]["ts"]
