"""An operator's first install, literally: tests/deploy/walkthrough.py runs the install comments of the systemd
units, docs/node-agent.md and deploy/slurm/README.md as written (adaptations listed in its report) on this
machine, under real systemd in private namespaces, then checks what the documents promise: the agent answers
a signed probe round, a failed Slurm job reaches the bot and is answered in Slack with its log read.

About 40 s on the 2-CPU machine (two pip installs from the package mirror, the Slurm cluster); root only.
It shares the tests/slurm cluster and its lock (a `pytest -m slurm` elsewhere is waited for), and needs the
documented ports 9477 and 9478 free.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

import pytest

from tests.deploy.walkthrough import SLURM_BASE, Walkthrough, ports_in_use
from tests.support.slack_standin import SlackStandIn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, systemd as their PID 1, Slurm)"),
    pytest.mark.skipif(not (shutil.which("unshare") and os.path.exists("/lib/systemd/systemd")),
                       reason="needs unshare and systemd installed"),
    pytest.mark.skipif(not os.path.exists("/usr/sbin/slurmctld") and not shutil.which("apt-get"),
                       reason="needs Slurm, or apt-get to install it (tests/slurm/slurm_cluster.py)"),
]


@pytest.fixture(autouse=True)
def _machine_free() -> None:
    busy = ports_in_use()
    if busy:
        pytest.skip(f"ports {busy} are taken on this host; the walkthrough needs the documented ones")
    # This session's tests/slurm fixture holds the cluster lock until the session ends: waiting would deadlock.
    if os.environ.get("SLURM_CONF") == str(SLURM_BASE / "etc" / "slurm.conf"):
        pytest.skip("this session's tests/slurm fixture holds the Slurm test cluster; run this test on its own")


def text_of(msg: dict[str, Any]) -> str:
    return msg.get("text", "") + "\n" + json.dumps(msg.get("blocks") or [])


def wait_answer(slack: SlackStandIn, channel: str, job: str, timeout: float = 60) -> tuple[dict[str, Any], list[dict]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        heads = [m for m in slack.bot_messages(channel) if "thread_ts" not in m and f"Job {job} " in m.get("text", "")]
        if heads:
            replies = [m for m in slack.thread(channel, heads[0]["ts"]) if m["ts"] != heads[0]["ts"] and m.get("bot_id")]
            if replies:
                return heads[0], replies
        time.sleep(0.2)
    raise AssertionError(f"no threaded answer for job {job} in {channel}: {slack.bot_messages()}")


def test_the_documented_install_works_as_written() -> None:
    t0 = time.monotonic()
    with SlackStandIn() as slack:
        w = Walkthrough(slack.api_url, slack.bot_token, slack.app_token, echo=True)
        try:
            w.boot()
            w.node_agent()
            with w.slurm_cluster():
                w.slurm_hook()
                w.bot(with_slurm=True)

                # No GPU here: the agent answers, and its NVML probes say why instead of pretending.
                real = w.probe_round()
                assert len(real["results"]) == 10 and not real["simulated"], real
                nvml = {r["probe"]: r for r in real["results"]}["inventory"]
                assert nvml["health"] == "failed" and {f["code"] for f in nvml["findings"]} & {
                    "nvml-unavailable", "driver-not-loaded"}, nvml
                w.agent_endpoints()
                # The simulated host the unit's comment describes, through the same unit and secret.
                scenario = w.simulate()
                sim = w.probe_round()
                assert sim["simulated"] and sim["scenario"] == scenario, sim
                w.agent_slice()

                job = w.failed_job()
                head, replies = wait_answer(slack, w.channel, job)
                said = text_of(head) + "".join(text_of(r) for r in replies)
                assert "triage-hook-test" in said and "FAILED" in said, said
                # The bot read the job's own log (the sandbox drop-in of docs/slurm.md), not just the event.
                assert "could not read" not in said, said
                assert "python-exception" in said and "rank 0" in said, said

                w.drain_as_dynamic_user()
                w.bot_fails_start()
                # HTTPS as docs/node-agent.md and the unit's TLS comment say; the key reaches it as a credential.
                tls = w.agent_tls()
                assert tls["reachable"] and tls["url"].startswith("https://") and tls["results"], tls
                w.flush_timer()
        finally:
            print(w.report())
            w.close()
    print(f"walkthrough: {len(w.steps)} steps in {time.monotonic() - t0:.1f}s")
