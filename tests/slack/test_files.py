"""Shared files: downloaded with the bot token from the stand-in, size-limited, gzip-aware."""

from __future__ import annotations

import gzip
import os
import random
import zlib
from pathlib import Path

import pytest

from tests.slack.logs import NCCL_999, RANK3
from tests.support.bot_server import CHANNEL, RunningBot, run_bot
from tests.support.slack_requests import message_event
from tests.support.slack_standin import SlackStandIn


def share(bot: RunningBot, slack: SlackStandIn, content: bytes, name: str, text: str = "", **file_kw: object) -> dict:
    f = slack.add_file(content, name, **file_kw)
    ev = message_event(CHANNEL, text, files=[f])
    assert bot.send_event(ev)[0] == 200
    return ev


def file_id(ev: dict) -> str:
    return ev["files"][0]["id"]


def test_shared_log_file_is_diagnosed_in_its_thread(bot: RunningBot, slack: SlackStandIn) -> None:
    ev = share(bot, slack, RANK3.encode(), "rank3.log")
    post = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    assert post.params["thread_ts"] == ev["ts"]
    assert "nccl-cuda-999" in post.params["text"] and "rank 3" in post.params["text"]
    assert slack.downloads == 1
    # Progress was shown on the message while working, and taken away with the answer.
    assert [c.params["name"] for c in slack.calls_to("reactions.add")] == ["hourglass_flowing_sand"]
    assert [c.params["name"] for c in slack.calls_to("reactions.remove")] == ["hourglass_flowing_sand"]
    assert slack.reactions[(CHANNEL, ev["ts"])] == set()
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    (item,) = bot.store.list_evidence(inc.id)
    assert item.name == "rank3.log" and item.ref == {"file_id": file_id(ev)} and "Cuda failure 999" in item.text


def _big_gzip(target_compressed: int) -> bytes:
    """A training log of random-looking lines (it resists compression) with the failure near the end."""
    rnd = random.Random(7)
    block = []
    for i in range(20000):
        block.append(f"[rank{i % 8}]:[I1203 04:{i % 60:02d}:{i % 60:02d}.{rnd.randrange(10**6):06d} "
                     f"{2200 + i % 8} train.py:311] step {i} loss {rnd.random():.6f} "
                     f"grad_norm {rnd.random():.5f} tokens/s {rnd.randrange(10**6)} "
                     f"batch {os.urandom(24).hex()}\n")
    unit = "".join(block).encode()
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    parts, size = [], 0
    while size < target_compressed:
        # Fresh random tail per block so deflate cannot reuse the previous block.
        chunk = unit + os.urandom(4096).hex().encode() + b"\n"
        out = comp.compress(chunk)
        parts.append(out)
        size += len(out)
    parts.append(comp.compress(b"[rank3]:[E1203 04:12:55.120001 2213 ProcessGroupNCCL.cpp:1896] NCCL error\n"
                               + RANK3.encode()))
    parts.append(comp.flush())
    return b"".join(parts)


@pytest.fixture(scope="module")
def big_gz() -> bytes:
    return _big_gzip(50 << 20)


def test_a_50mb_gzip_upload(bot: RunningBot, slack: SlackStandIn, big_gz: bytes) -> None:
    assert len(big_gz) >= 50 << 20
    ev = share(bot, slack, big_gz, "rank3.log.gz", mimetype="application/gzip", filetype="gzip")
    post = slack.wait_for("chat.postMessage", timeout=120)[0]
    bot.wait_idle()
    assert post.params["thread_ts"] == ev["ts"]
    assert "nccl-cuda-999" in post.params["text"] and "rank 3" in post.params["text"]
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    (item,) = bot.store.list_evidence(inc.id)
    # Too big to keep whole: the store keeps the matched lines and where to fetch the file again.
    assert item.text is None and item.size == len(big_gz)
    assert "Cuda failure 999" in item.excerpt and item.ref.get("file_id")
    db_size = sum(p.stat().st_size for p in Path(bot.bot.settings.db_path).parent.glob("triage.db*"))
    assert db_size < 5 << 20


def test_follow_up_re_reads_a_big_upload_from_slack(bot: RunningBot, slack: SlackStandIn, big_gz: bytes) -> None:
    ev = share(bot, slack, big_gz, "rank3.log.gz", mimetype="application/gzip", filetype="gzip")
    slack.wait_for("chat.postMessage", timeout=120)
    bot.wait_idle()
    bot.send_event(message_event(CHANNEL, "thanks, draining the node", thread_ts=ev["ts"], user="UBOB"))
    bot.wait_idle()
    assert slack.downloads == 1  # chatter in the thread does not trigger a re-read of 50 MB
    bot.send_event(message_event(CHANNEL, "@here rank 0 log:\n" + NCCL_999, thread_ts=ev["ts"], user="UBOB"))
    bot.wait_idle(120)
    assert slack.downloads == 2  # the re-diagnosis fetched the upload again instead of keeping 50 MB


def test_upload_over_the_size_limit_is_refused_clearly(slack: SlackStandIn, tmp_path: Path) -> None:
    with run_bot(slack, tmp_path, env={"TRIAGE_MAX_UPLOAD_MB": "1"}) as bot:
        ev = share(bot, slack, b"x" * (2 << 20), "huge.log")
        post = slack.wait_for("chat.postMessage")[0]
        bot.wait_idle()
    assert post.params["thread_ts"] == ev["ts"]
    assert "huge.log is 2 MB, over the 1 MB limit (TRIAGE_MAX_UPLOAD_MB)" in post.params["text"]
    assert slack.downloads == 0


def test_truncated_gzip_is_diagnosed_as_far_as_it_goes(bot: RunningBot, slack: SlackStandIn) -> None:
    data = gzip.compress((NCCL_999 + "more lines that were never written\n" * 200).encode())
    cut = data[: len(data) - 30]
    share(bot, slack, cut, "rank0.log.gz", mimetype="application/gzip", filetype="gzip")
    post = slack.wait_for("chat.postMessage")[0]
    text = str(post.params["blocks"])
    assert "nccl-cuda-999" in post.params["text"]
    assert "truncated" in text


def test_images_and_pdfs_are_passed_over_in_silence(bot: RunningBot, slack: SlackStandIn) -> None:
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(2048)
    share(bot, slack, png, "loss-curve.png", mimetype="image/png", filetype="png")
    share(bot, slack, b"%PDF-1.7\n" + os.urandom(2048), "runbook.pdf", text="our runbook",
          mimetype="application/pdf", filetype="pdf")
    bot.wait_idle()
    slack.expect_no("chat.postMessage", within=0.3)
    assert slack.downloads == 0 and not slack.calls_to("reactions.add")
    assert bot.store.query("SELECT COUNT(*) AS n FROM incidents")[0]["n"] == 0


def test_an_image_with_a_mention_says_what_it_reads(bot: RunningBot, slack: SlackStandIn) -> None:
    from tests.support.slack_requests import mention_event

    f = slack.add_file(b"\x89PNG\r\n\x1a\n" + os.urandom(64), "loss-curve.png", mimetype="image/png", filetype="png")
    ev = mention_event(CHANNEL, "why?", slack.bot_user_id, files=[f])
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage")[0]
    assert "Skipped loss-curve.png (image/png)" in post.params["text"]


def test_binary_junk_named_log_is_reported_not_stored(bot: RunningBot, slack: SlackStandIn) -> None:
    rnd = random.Random(3)
    junk = bytes(rnd.randrange(256) for _ in range(64 << 10))
    ev = share(bot, slack, junk, "core.log", text=NCCL_999)
    post = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    assert "nccl-cuda-999" in post.params["text"]
    assert "core.log looks like binary data" in str(post.params["blocks"])
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    items = {e.name: e for e in bot.store.list_evidence(inc.id)}
    assert items["core.log"].text is None and items["message"].text


def test_download_link_on_a_foreign_host_never_gets_the_token(bot: RunningBot, slack: SlackStandIn) -> None:
    f = slack.add_file(RANK3.encode(), "rank3.log")
    f["url_private_download"] = "http://198.51.100.7/steal/rank3.log"
    slack.files[f["id"]]["url_private_download"] = f["url_private_download"]
    bot.send_event(message_event(CHANNEL, "", files=[f]))
    post = slack.wait_for("chat.postMessage")[0]
    assert "Refusing to download rank3.log from 198.51.100.7" in post.params["text"]


def test_file_event_without_details_is_looked_up(bot: RunningBot, slack: SlackStandIn) -> None:
    f = slack.add_file(RANK3.encode(), "rank-3.log")
    ev = message_event(CHANNEL, "", files=[{"id": f["id"], "file_access": "check_file_info"}])
    bot.send_event(ev)
    post = slack.wait_for("chat.postMessage")[0]
    assert [c.params["file"] for c in slack.calls_to("files.info")] == [f["id"]]
    assert "nccl-cuda-999" in post.params["text"]
