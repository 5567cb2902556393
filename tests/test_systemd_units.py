"""deploy/systemd units: the bot's starts as its comments say (credentials, optional secrets), is sandboxed
at least as tightly as the agent's, and the bot reads what the unit hands it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.slack.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[1]
UNITS = ROOT / "deploy" / "systemd"
CREDENTIALS = ["slack-bot-token", "slack-app-token", "slack-signing-secret", "webhook-secret", "agent-secret"]


def directives(path: Path) -> list[tuple[str, str]]:
    """(key, value) pairs of the [Service] section, comments and other sections left out."""
    out, section = [], None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def test_bot_unit_loads_every_credential_with_a_blank_default() -> None:
    d = directives(UNITS / "triage-bot.service")
    loads = {v.split(":", 1)[0]: v.split(":", 1)[1] for k, v in d if k == "LoadCredential"}
    defaults = {v.split(":", 1)[0]: v.split(":", 1)[1] for k, v in d if k == "SetCredential"}
    assert sorted(loads) == sorted(CREDENTIALS)
    assert all(p == f"/etc/gpu-triage/{name}" for name, p in loads.items())
    # a missing file must not stop the unit: SetCredential= is LoadCredential='s non-fatal default
    assert defaults == {name: "\\n" for name in CREDENTIALS}
    # specifiers such as %d are not expanded inside an EnvironmentFile: none is needed, and it is optional
    assert [v for k, v in d if k == "EnvironmentFile"] == ["-/etc/gpu-triage/bot.env"]
    text = (UNITS / "triage-bot.service").read_text(encoding="utf-8")
    assert "%d/" not in text


def _exposure(unit: Path) -> float:
    p = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True,
                       text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", p.stdout + p.stderr)
    assert m, p.stdout + p.stderr
    return float(m.group(1))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_bot_is_sandboxed_at_least_like_the_agent() -> None:
    bot, agent = _exposure(UNITS / "triage-bot.service"), _exposure(UNITS / "node-agent.service")
    assert bot <= agent, (bot, agent)
    assert bot <= 1.5, bot  # 1.2 when written (3.4 before)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_parse_without_warnings() -> None:
    # `verify` also wants ExecStart's binary; the syntax warnings are what matters here
    p = subprocess.run(["systemd-analyze", "verify", *map(str, sorted(UNITS.glob("*.service")))],
                       capture_output=True, text=True, timeout=60)
    noise = [line for line in (p.stdout + p.stderr).splitlines() if line.strip()
             and "is not executable: No such file or directory" not in line]
    assert not noise, "\n".join(noise)


def _creds(tmp_path: Path, **files: str) -> str:
    d = tmp_path / "credentials"
    d.mkdir()
    for name in CREDENTIALS:
        (d / name).write_text(files.get(name.replace("-", "_"), "\n"), encoding="utf-8")  # the unit's default
        os.chmod(d / name, 0o400)
    return str(d)


def test_bot_reads_the_credentials_directory(tmp_path: Path) -> None:
    d = _creds(tmp_path, slack_bot_token="xoxb-1\n", slack_app_token="xapp-2\n", agent_secret="s3cret\n")
    s = Settings.from_env({"CREDENTIALS_DIRECTORY": d, "TRIAGE_AGENT_URL": "http://{host}:9477"})
    assert (s.bot_token, s.app_token, s.signing_secret) == ("xoxb-1", "xapp-2", None)
    assert s.agent_secret_file == os.path.join(d, "agent-secret") and s.agents_configured
    assert s.webhook_secret_file is None  # blank: the webhook is off, and that is not an error
    s.require_socket()


def test_variables_win_over_credentials_and_blank_ones_are_unset(tmp_path: Path) -> None:
    d = _creds(tmp_path, slack_bot_token="xoxb-cred", webhook_secret="hook")
    s = Settings.from_env({"CREDENTIALS_DIRECTORY": d, "SLACK_BOT_TOKEN": "xoxb-env",
                           "TRIAGE_WEBHOOK_SECRET_FILE": "/elsewhere"})
    assert s.bot_token == "xoxb-env" and s.webhook_secret_file == "/elsewhere"
    assert s.agent_secret_file is None and not s.agents_configured  # probing off: no agent secret needed
    (tmp_path / "none").mkdir()
    with pytest.raises(SettingsError, match="SLACK_BOT_TOKEN"):
        Settings.from_env({"CREDENTIALS_DIRECTORY": _creds(tmp_path / "none")})
