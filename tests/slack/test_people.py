"""The job's user, mapped to a Slack user, is mentioned on the scheduler's post.

`users.lookupByEmail` goes to the Web API stand-in (tests/support/slack_standin.py), which finds only
users added with an email; TRIAGE_USER_MAP is a real YAML file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.slack.runtime import TriageBot
from bot.slack.settings import Settings, SettingsError
from tests.slack.test_grouping import hook_event, top_level
from tests.slack.test_messages import section_text
from tests.support.bot_server import bot_env, run_bot
from tests.support.slack_standin import SlackStandIn


def headlines(slack: SlackStandIn) -> dict[str, str]:
    """Job id -> its channel message as Slack shows it now (workers post in any order)."""
    out = {}
    for h in top_level(slack):
        text = section_text(slack.message(h["channel"], h["ts"])["blocks"])
        out[re.search(r"Job (\d+)", text).group(1)] = text  # type: ignore[union-attr]
    return out


def test_the_job_user_is_looked_up_by_email_and_mentioned(slack: SlackStandIn, tmp_path: Path) -> None:
    slack.add_user("U0ALICE", email="alice@corp.example")
    with run_bot(slack, tmp_path, env={"TRIAGE_USER_EMAIL_DOMAIN": "corp.example"}) as bot:
        assert bot.send_hook(hook_event("6001", nodes="gpu01"))[0] == 202
        first = slack.wait_for("chat.postMessage")[0]
        assert "<@U0ALICE>" in section_text(first.params["blocks"])  # on the very first post: Slack notifies
        assert bot.send_hook({**hook_event("6002", nodes="gpu02", n=1), "user": "mallory"})[0] == 202
        assert bot.send_hook(hook_event("6003", nodes="gpu03", n=2))[0] == 202
        bot.wait_idle()
        # The mention stays when the headline is edited with the verdict (here: no job source).
        texts = headlines(slack)
        assert {job: "<@U0ALICE>" in t for job, t in texts.items()} == {"6001": True, "6002": False, "6003": True}
    lookups = [c.params["email"] for c in slack.calls_to("users.lookupByEmail")]
    assert lookups == ["alice@corp.example", "mallory@corp.example"]  # alice's answer was remembered


def test_a_map_file_names_slack_users_or_their_emails(slack: SlackStandIn, tmp_path: Path) -> None:
    slack.add_user("U0CAROL", email="carol.smith@corp.example")
    users = tmp_path / "users.yaml"
    users.write_text("alice: U0ALICE\ncarol: carol.smith@corp.example\n")
    with run_bot(slack, tmp_path, env={"TRIAGE_USER_MAP": str(users)}) as bot:
        bot.send_hook(hook_event("7001", nodes="gpu01"))
        bot.send_hook({**hook_event("7002", nodes="gpu02", n=1), "user": "carol"})
        bot.send_hook({**hook_event("7003", nodes="gpu03", n=2), "user": "dave"})  # in no map, no domain
        bot.wait_idle()
        texts = headlines(slack)
    assert "<@U0ALICE>" in texts["7001"] and "<@U0CAROL>" in texts["7002"] and "<@" not in texts["7003"]
    assert [c.params["email"] for c in slack.calls_to("users.lookupByEmail")] == ["carol.smith@corp.example"]


def test_a_refused_lookup_posts_without_a_mention(slack: SlackStandIn, tmp_path: Path) -> None:
    slack.add_user("U0ALICE", email="alice@corp.example")
    slack.fail("users.lookupByEmail", status=200, retry_after=None, error="missing_scope")
    with run_bot(slack, tmp_path, env={"TRIAGE_USER_EMAIL_DOMAIN": "corp.example"}) as bot:
        assert bot.send_hook(hook_event("8001", nodes="gpu01"))[0] == 202
        bot.wait_idle()
        (head,) = top_level(slack)
    assert "<@" not in section_text(head["blocks"]) and "Job 8001" in section_text(head["blocks"])


@pytest.mark.parametrize("env, says", [
    ({"TRIAGE_USER_EMAIL_DOMAIN": "not a domain"}, "TRIAGE_USER_EMAIL_DOMAIN"),
    ({"TRIAGE_USER_MAP": "alice: <!channel>"}, "TRIAGE_USER_MAP"),
    ({"TRIAGE_USER_MAP": "/nonexistent/users.yaml"}, "cannot read"),
])
def test_bad_people_settings_stop_the_start(slack: SlackStandIn, tmp_path: Path, env: dict, says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        TriageBot(Settings.from_env(bot_env(slack, tmp_path, env=env)), warm=False)
