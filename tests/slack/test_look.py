"""What the on-call engineer sees at 3 a.m.: the answer posts of typical incidents, rendered at
Slack's 560 px thread width in headless Chromium (Debian package `chromium`).

Acceptance (issue 13): for the seed paste, the seed with a simulated agent, a CUDA OOM upload and an
Xid follow-up, the next action's command comes within the first 70 words of the answer, the answer
is at most 120 words, and the command lies within the first 700 px. Screenshots and the figures go
to $TRIAGE_LOOK_DIR when set (else a temporary folder)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.slack.render_html import blocks_html, command_of, plain_words, words_before_command
from tests.slack.test_agents import probing_bot, seed_agent  # noqa: F401 - fixtures
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import message_event
from tests.support.slack_standin import SlackStandIn

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"
WIDTH = 560
FIRST_SCREEN_PX = 700
MAX_WORDS = 120
COMMAND_WITHIN_WORDS = 70
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9 _-]*>|&lt;[a-z][a-z0-9 _-]*&gt;|\{[a-z_]+\}", re.I)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _measure(html_path: Path, png: Path) -> dict[str, float]:
    """Lay the page out at 560 px in headless Chromium: the command's box, and a screenshot."""
    exe = _chromium()
    assert exe
    probe = """<script>window.addEventListener('load', () => {
      const c = document.getElementById('next-command'); const r = c ? c.getBoundingClientRect() : null;
      document.body.setAttribute('data-look', JSON.stringify({top: r ? r.top : -1, bottom: r ? r.bottom : -1,
        height: document.querySelector('.msg').getBoundingClientRect().bottom, width: document.documentElement.clientWidth}));
    });</script>"""
    measured = html_path.with_suffix(".measure.html")
    measured.write_text(html_path.read_text().replace("</body>", probe + "</body>"))
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-dev-shm-usage", f"--window-size={WIDTH},1600", "--virtual-time-budget=3000"]
    dom = subprocess.run(flags + ["--dump-dom", measured.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r"data-look=\"([^\"]+)\"", dom.stdout)
    assert m, f"chromium gave no layout: {dom.stderr[-2000:]}"
    subprocess.run(flags + [f"--screenshot={png}", html_path.as_uri()], capture_output=True, timeout=120)
    return json.loads(m.group(1).replace("&quot;", '"'))


def _answer_blocks(bot: RunningBot, slack: SlackStandIn, root_ts: str) -> list[dict]:
    inc = bot.store.find_incident(CHANNEL, root_ts)
    assert inc is not None and inc.summary_ts
    return slack.message(CHANNEL, inc.summary_ts)["blocks"]


def _look(name: str, blocks: list[dict], tmp_path: Path) -> dict:
    out_dir = Path(os.environ.get("TRIAGE_LOOK_DIR") or tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(blocks)
    assert not PLACEHOLDER.search(raw), f"{name}: a placeholder reached the user: {PLACEHOLDER.search(raw)}"
    words = plain_words(blocks)
    before = words_before_command(blocks)
    figures = {"case": name, "command": command_of(blocks), "words": len(words), "words_before_command": before}
    page = out_dir / f"{name}.html"
    page.write_text(blocks_html(blocks, name))
    if _chromium():
        box = _measure(page, out_dir / f"{name}.png")
        figures.update(command_top_px=box["top"], command_bottom_px=box["bottom"], height_px=box["height"])
    (out_dir / f"{name}.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))
    assert before is not None, f"{name}: the answer has no command"
    assert before < COMMAND_WITHIN_WORDS, f"{name}: the command comes after {before} words"
    assert len(words) <= MAX_WORDS, f"{name}: the answer is {len(words)} words: {' '.join(words)}"
    if not _chromium():
        pytest.skip("chromium is not installed (apt-get install -y chromium): words checked, pixels not")
    assert 0 <= figures["command_top_px"] and figures["command_bottom_px"] <= FIRST_SCREEN_PX, figures
    return figures


def test_seed_paste(bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:
    ev = message_event(CHANNEL, (EX / "seed-nccl-999" / "rank-0.log").read_text())
    bot.send_event(ev)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    _look("seed-paste", _answer_blocks(bot, slack, ev["ts"]), tmp_path)


def test_seed_with_a_simulated_agent(probing_bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:  # noqa: F811
    bot = probing_bot
    ev = message_event(CHANNEL, (EX / "seed-nccl-999" / "rank-0.log").read_text())
    bot.send_event(ev)
    slack.wait_for("chat.postMessage", timeout=30)
    bot.wait_idle()
    blocks = _answer_blocks(bot, slack, ev["ts"])
    assert "4242,4243" in (command_of(blocks) or "")  # the pids the agent named
    _look("seed-agent", blocks, tmp_path)


def test_cuda_oom_upload(bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:
    f = slack.add_file((EX / "cuda-oom-one-rank" / "a100-node-3.log").read_bytes(), "a100-node-3.log")
    ev = message_event(CHANNEL, "", files=[f])
    bot.send_event(ev)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    blocks = _answer_blocks(bot, slack, ev["ts"])
    assert "cuda-oom" in json.dumps(blocks)
    _look("cuda-oom-upload", blocks, tmp_path)


def test_xid_follow_up(bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:
    d = EX / "xid79-two-nodes"
    root = message_event(CHANNEL, (d / "gpu-node-16.log").read_text())
    bot.send_event(root)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    first = len(slack.calls_to("chat.postMessage"))
    f = slack.add_file((d / "gpu-node-17.kern.log").read_bytes(), "gpu-node-17.kern.log")
    bot.send_event(message_event(CHANNEL, "kernel log of gpu-node-17", thread_ts=root["ts"], files=[f], user="UBOB"))
    slack.wait_for("chat.update")
    bot.wait_idle()
    blocks = _answer_blocks(bot, slack, root["ts"])
    assert "xid-79" in json.dumps(blocks)
    # The change is said once, in one thread reply; the edited answer does not repeat it.
    said = slack.calls_to("chat.postMessage")[first:]
    assert len(said) == 1 and "Updated the answer above" in said[0].params["text"]
    assert "Updated" not in json.dumps(blocks) and "was:" not in json.dumps(blocks)
    _look("xid-follow-up", blocks, tmp_path)
