"""Secrets pasted with a log never reach the store or any Slack call."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.redact import redact_text
from bot.slack.ids import ActionId
from tests.slack.logs import ENV_DUMP, NCCL_999, SECRETS
from tests.slack.test_actions import button_value
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import block_action, message_event
from tests.support.slack_standin import SlackStandIn


@pytest.mark.parametrize("line, secret", [
    ("HF_TOKEN=hf_QmZtLpXvRsNwKyJhGfDcBaEoIuYtRe0123", "hf_QmZt"),
    ("export GITHUB_TOKEN=ghp_9fK2mN4pQ6rS8tU0vW2xY4zA6bC8dE0fG2hI", "9fK2mN4p"),
    ("git clone https://x-access-token:github_pat_11ABCDEFG0abcdefghijklmnopqrstuvwxyz@github.com/o/r", "github_pat_11A"),
    ("SLACK_TOKEN xoxb-2209318745-5550001112223-Qw8rT1yU2iO3pA4sD5fG6hJ7", "Qw8rT1yU"),
    ("[default]\naws_secret_access_key = u7Jk2Lm9Np4Qr6St8Vw0Xy3Za5Bc7De9Fg1Hi2Jk", "u7Jk2Lm9"),
    ("AKIAZ7EXAMPLE4Q3R2T1 used for s3://bucket", "Z7EXAMPLE4Q3R2T1"),
    ("wandb: WANDB_API_KEY='8c2f9e41d07b3a65f2e8c1d9b4a7e60f3c5d2b18'", "8c2f9e41"),
    ("wandb login 8c2f9e41d07b3a65f2e8c1d9b4a7e60f3c5d2b18", "8c2f9e41"),
    ("MYSQL_PASSWORD=Tr0ub4dor&3-horse", "Tr0ub4dor"),
    ("python train.py --password hunter2-xyz --lr 3e-4", "hunter2-xyz"),
    ("postgresql://trainer:s3cr3tP4ss@db.internal:5432/runs", "s3cr3tP4ss"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZw", "eyJzdWIi"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nabc\n-----END RSA PRIVATE KEY-----", "MIIEpAIBAAK"),
    ("[rank0]: -----BEGIN OPENSSH PRIVATE KEY-----\n[rank0]: b3BlbnNzaC1rZXkt", "b3BlbnNzaC1"),
])
def test_redacts_each_kind(line: str, secret: str) -> None:
    out = redact_text(line)
    assert secret not in out.text and out.count >= 1


@pytest.mark.parametrize("line", [
    "[rank0]: Cuda failure 999 'unknown error'",
    "NCCL_SOCKET_IFNAME=ib0 NCCL_IB_HCA=mlx5_0,mlx5_1",
    "PWD=/home/alice/runs/llama",
    "max_tokens=4096 num_key_value_heads=8",
    "gpu-node-17:4242:4290 [3] NCCL WARN Cuda failure 'unknown error'",
])
def test_leaves_log_lines_alone(line: str) -> None:
    assert redact_text(line).text == line


def test_secrets_never_reach_store_or_slack(bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:
    # A failure whose decisive line carries a token, after an env dump: both go through the bot.
    leaky = f"[rank0]: Cuda failure 999 'unknown error' (launched with HF_TOKEN={SECRETS['hf']})\n"
    ev = message_event(CHANNEL, ENV_DUMP + NCCL_999 + leaky)
    bot.send_event(ev)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    # The file upload of all evidence, a reply in the thread, and feedback: every path out.
    answer = slack.bot_messages(CHANNEL)[0]
    many = "".join(NCCL_999.replace("rank0", f"rank{r}") for r in range(40))
    bot.send_event(message_event(CHANNEL, many + f"GITHUB_TOKEN={SECRETS['github']}\n", thread_ts=ev["ts"]))
    bot.wait_idle()
    answer = slack.message(CHANNEL, answer["ts"])  # updated to diagnosis v2 by the follow-up
    bot.send_interaction(block_action(ActionId.SHOW_DETAILS, button_value(answer, ActionId.SHOW_DETAILS),
                                      channel=CHANNEL, message=answer))
    bot.wait_idle()
    bot.send_interaction(block_action(ActionId.FULL_REPORT, button_value(answer, ActionId.SHOW_DETAILS),
                                      channel=CHANNEL, message=answer))
    bot.wait_idle()
    assert slack.uploads, "the long evidence went out as a file"
    sent = slack.all_request_text() + "".join(u["content"].decode() for u in slack.uploads)
    assert "[REDACTED]" in sent
    stored = b"".join(p.read_bytes() for p in Path(bot.bot.settings.db_path).parent.glob("triage.db*"))
    # zlib-compressed evidence is checked decompressed too.
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    texts = "".join((e.text or "") + (e.excerpt or "") for e in bot.store.list_evidence(inc.id))
    for name, secret in SECRETS.items():
        assert secret not in sent, f"{name} reached Slack"
        assert secret.encode() not in stored, f"{name} reached the database file"
        assert secret not in texts, f"{name} is in the stored evidence"
