"""The whole chain on a real Slurm: job fails -> EpilogSlurmctld -> notifier -> signed webhook -> the
real bot (TriageBot over HTTP, TRIAGE_JOB_SOURCE=slurm) -> stand-in Slack Web API.

The time-limit job is submitted when this module starts and checked last: Slurm's smallest limit
is one minute and the limit is enforced every 30 s, so it ends 60-95 s later while the other
tests run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import SlurmEnv

from bot.slack.runtime import TriageBot
from bot.slack.settings import Settings
from tests.support.bot_server import CHANNEL, SIGNING_SECRET, RunningBot, bot_env
from tests.support.slack_standin import SlackStandIn

pytestmark = pytest.mark.slurm

# Real formats (PyTorch 2.x c10d over NCCL 2.26): a CUDA error 999 surfacing through NCCL on rank 0.
NCCL_JOB = """#!/bin/bash
#SBATCH --job-name=train-llm
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err
echo "[rank0]:[W626 05:06:21.118] ProcessGroupNCCL.cpp:1166 Warning: TORCH_NCCL_ASYNC_ERROR_HANDLING=3"
echo "epoch 0 step 120 loss 2.3141"
cat >&2 <<'EOF'
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 212, in <module>
[rank0]:     model = DDP(model, device_ids=[local_rank])
[rank0]:   File "/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py", line 825, in __init__
[rank0]:     _verify_param_shape_across_processes(self.process_group, parameters)
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2
[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank0]: Last error:
[rank0]: Cuda failure 999 'unknown error'
EOF
date +%s.%N > failed-at-$SLURM_JOB_ID
exit 1
"""

TIMEOUT_JOB = """#!/bin/bash
#SBATCH --job-name=stuck-eval
#SBATCH --output=%x-%j.out
#SBATCH --time=1
echo "eval: waiting for the dataloader"
sleep 600
"""


@dataclass
class Bot:
    """The real bot on the port the Slurm hook posts to; can go down and come back (same DB)."""

    slack: SlackStandIn
    tmp: Path
    slurm: SlurmEnv
    running: RunningBot | None = None

    def start(self) -> RunningBot:
        env = bot_env(self.slack, self.tmp, webhook_secret=self.slurm.secret, env={"TRIAGE_JOB_SOURCE": "slurm",
                      # each test's jobs run on this one node: group by job, not by host, so every job has its thread
                      "TRIAGE_GROUP_HOST_WINDOW_S": "0", "TRIAGE_STORM_THRESHOLD": "0"})
        bot = TriageBot(Settings.from_env(env))
        server = bot.serve_http(self.slurm.port, "127.0.0.1")
        self.running = RunningBot(bot, server, self.slack, SIGNING_SECRET, self.slurm.secret)
        return self.running

    def stop(self) -> None:
        if self.running:
            self.running.bot.close(drain_s=30)
            self.running = None


@pytest.fixture(scope="module")
def timeout_job(slurm: SlurmEnv) -> str:
    slurm.configure_hook()
    return slurm.submit(TIMEOUT_JOB)


@pytest.fixture(scope="module")
def chain(slurm: SlurmEnv, timeout_job: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bot]:
    mp = pytest.MonkeyPatch()
    # The bot builds its job source from the environment (SLURM_CONF is set by the slurm fixture).
    mp.setenv("TRIAGE_SLURM_LOG_GLOB", "{workdir}/logs/{job_id}/*.log")
    with SlackStandIn() as slack:
        bot = Bot(slack, tmp_path_factory.mktemp("bot"), slurm)
        bot.start()
        try:
            yield bot
        finally:
            bot.stop()
            mp.undo()


def text_of(msg: dict[str, Any]) -> str:
    return msg.get("text", "") + "\n" + json.dumps(msg.get("blocks") or [])


def headlines(slack: SlackStandIn, job: str) -> list[dict[str, Any]]:
    """Channel-level messages (not in a thread) about this job."""
    return [m for m in slack.bot_messages(CHANNEL) if "thread_ts" not in m and f"Job {job} " in m.get("text", "")]


def answers(slack: SlackStandIn, job: str) -> list[dict[str, Any]]:
    """Bot replies in the threads of this job's headlines."""
    out = []
    for h in headlines(slack, job):
        out += [m for m in slack.thread(CHANNEL, h["ts"]) if m["ts"] != h["ts"] and m.get("bot_id")]
    return out


def wait_answer(slack: SlackStandIn, job: str, needle: str, timeout: float) -> tuple[dict[str, Any], float]:
    """The first threaded answer for `job` containing `needle`, and when it was posted."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for m in answers(slack, job):
            if needle in text_of(m):
                posted = [c.at for c in slack.calls_to("chat.postMessage") if c.params.get("thread_ts")
                          and str(c.params.get("text", "")) == m.get("text")]
                return m, (posted[0] if posted else time.time())
        time.sleep(0.05)
    raise AssertionError(f"no answer containing {needle!r} for job {job} within {timeout}s; bot messages:\n"
                         + "\n---\n".join(text_of(m)[:600] for m in slack.bot_messages(CHANNEL)))


def test_failed_nccl_job_gets_one_threaded_diagnosis(slurm: SlurmEnv, chain: Bot) -> None:
    slurm.configure_hook()
    job = slurm.submit(NCCL_JOB)
    answer, posted_at = wait_answer(chain.slack, job, "nccl-cuda-999", 30)
    failed_at = float((slurm.jobs_dir / f"failed-at-{job}").read_text())
    latency = posted_at - failed_at
    print(f"\n[latency] job {job} failure -> threaded diagnosis in Slack: {latency:.2f} s")
    assert latency <= 10, f"failure -> threaded diagnosis took {latency:.1f} s (target 10 s)"

    [head] = headlines(chain.slack, job)
    assert "FAILED" in head["text"] and "exit 1:0" in head["text"] and "localhost" in head["text"]
    body = text_of(answer)
    assert "nccl-cuda-999" in body and "localhost" in body
    time.sleep(2)  # a duplicate would have arrived by now
    assert len(headlines(chain.slack, job)) == 1
    assert [m for m in answers(chain.slack, job) if "nccl-cuda-999" in text_of(m)] == [answer]
    assert slurm.spooled() == []


def test_diagnose_command_for_the_same_job(slurm: SlurmEnv, chain: Bot) -> None:
    job = slurm.submit(NCCL_JOB.replace("train-llm", "train-llm-2"))
    wait_answer(chain.slack, job, "nccl-cuda-999", 30)
    before = len(headlines(chain.slack, job))
    assert chain.running is not None
    status, _ = chain.running.send_command(f"job-{job}", channel=CHANNEL)
    assert status == 200
    end = time.monotonic() + 20
    while time.monotonic() < end and len(headlines(chain.slack, job)) == before:
        time.sleep(0.05)
    new = headlines(chain.slack, job)[before:]
    assert len(new) == 1, f"/diagnose job-{job} posted {len(new)} new headlines"
    # the answer in the new headline's own thread (the hook's answer is already there)
    end = time.monotonic() + 20
    replies: list[dict[str, Any]] = []
    while time.monotonic() < end and not replies:
        replies = [m for m in chain.slack.thread(CHANNEL, new[0]["ts"])
                   if m["ts"] != new[0]["ts"] and m.get("bot_id") and "nccl-cuda-999" in text_of(m)]
        time.sleep(0.05)
    assert replies, f"/diagnose job-{job} got no threaded answer"
    assert "localhost" in text_of(replies[0])
    chain.running.wait_idle()


@pytest.mark.parametrize(("text", "why"), [
    ("4294967295", "Slurm job ids run from 1 to 4294967293"),
    ("job-1234_99999999", "not a Slurm job id"),
])
def test_invalid_job_ids_get_a_clear_private_refusal(slurm: SlurmEnv, chain: Bot, text: str, why: str) -> None:
    responses = commands_for(chain, text)
    said = json.dumps(responses)
    assert why in said and "1234_7" in said, said  # says what is wrong and what would work


@pytest.mark.parametrize("text", ["1234; rm -rf /", "$(id)", "job $(scontrol shutdown)", "`id`", "1" * 10_000])
def test_hostile_input_never_reaches_slurm(slurm: SlurmEnv, chain: Bot, text: str) -> None:
    # No Slurm command runs, nothing appears in the channel, and the asker gets a clear refusal
    # that says what a job id looks like without echoing what was typed.
    responses = commands_for(chain, text)
    assert responses, "the asker got no reply"
    said = json.dumps(responses)
    assert "not a Slurm job id" in said and "1234_7" in said, said
    assert text[:12] not in said or text[:12].isdigit()
    assert slurm.cluster.node_state() in ("idle", "mixed", "allocated")


def commands_for(chain: Bot, text: str) -> list[dict[str, Any]]:
    """Send /diagnose `text`; return the private replies. Asserts that no Slurm command ran and
    that nothing was posted in the channel."""
    assert chain.running is not None
    source = chain.running.bot.service.wf.job_source
    ran: list[list[str]] = []
    real = source._run

    def recording(argv: list[str], timeout: float):  # noqa: ANN202
        ran.append(argv)
        return real(argv, timeout)

    source._run = recording
    try:
        chain.running.wait_idle()  # an earlier test's answer still on its way is not this command's post
        posted = len(chain.slack.bot_messages(CHANNEL))
        seen = len(chain.slack.responses)
        status, _ = chain.running.send_command(text, channel=CHANNEL, response_url=chain.slack.response_url())
        assert status == 200
        end = time.monotonic() + 10
        while time.monotonic() < end and len(chain.slack.responses) == seen:
            time.sleep(0.05)
        chain.running.wait_idle()
        assert ran == [], f"/diagnose {text[:40]!r} ran {ran}"
        assert len(chain.slack.bot_messages(CHANNEL)) == posted
        return chain.slack.responses[seen:]
    finally:
        source._run = real


def test_bot_down_when_the_job_fails_then_up_gets_exactly_one_answer(slurm: SlurmEnv, chain: Bot) -> None:
    chain.stop()
    job = slurm.submit(NCCL_JOB.replace("train-llm", "train-llm-down"))
    slurm.wait_log(job, "not delivered")
    assert len(slurm.spooled()) == 1
    time.sleep(1)
    chain.start()
    answer, _ = wait_answer(chain.slack, job, "nccl-cuda-999", 30)
    assert slurm.spooled() == []
    time.sleep(2)
    assert len(headlines(chain.slack, job)) == 1
    assert len([m for m in answers(chain.slack, job) if "nccl-cuda-999" in text_of(m)]) == 1


def test_time_limit_job_is_diagnosed_as_slurm_time_limit(slurm: SlurmEnv, chain: Bot, timeout_job: str) -> None:
    slurm.configure_hook()
    state = slurm.cluster.wait_state(timeout_job, {"TIMEOUT"}, 150)
    assert state == "TIMEOUT"
    answer, _ = wait_answer(chain.slack, timeout_job, "slurm-time-limit", 60)
    print(f"\n[time limit] answer for job {timeout_job}:\n{answer['text'][:800]}")
    [head] = headlines(chain.slack, timeout_job)
    assert "TIMEOUT" in head["text"]
    assert len([m for m in answers(chain.slack, timeout_job) if "slurm-time-limit" in text_of(m)]) == 1
