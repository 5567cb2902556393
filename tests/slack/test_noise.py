"""No noise: prose one-liners, archives, other bots' posts, and no placeholder in any command."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

from bot.service.answer import fill_command, fill_text
from tests.slack.logs import NCCL_999, RANK3
from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, run_bot
from tests.support.slack_requests import mention_event, message_event
from tests.support.slack_standin import SlackStandIn


def incidents(bot) -> int:  # noqa: ANN001
    return bot.store.query("SELECT COUNT(*) AS n FROM incidents")[0]["n"]


def test_prose_one_liners_get_a_private_hint_and_no_incident(bot, slack: SlackStandIn) -> None:  # noqa: ANN001
    for text in ("Killed", "my loss is nan again, any ideas?"):
        bot.send_event(message_event(CHANNEL, text))
    bot.wait_idle()
    slack.expect_no("chat.postMessage", within=0.3)
    hints = slack.calls_to("chat.postEphemeral")
    assert len(hints) == 2 and all(h.params["user"] == "UALICE" and "\n" not in h.params["text"] for h in hints)
    assert incidents(bot) == 0
    # Mentioned, the same sentence is diagnosed.
    bot.send_event(mention_event(CHANNEL, "my loss is nan again, any ideas?", slack.bot_user_id))
    post = slack.wait_for("chat.postMessage")[0]
    assert "loss-nan" in post.params["text"] and incidents(bot) == 1


def _zip(members: dict[str, bytes]) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return b.getvalue()


def _tgz(members: dict[str, bytes]) -> bytes:
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w:gz") as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return b.getvalue()


def test_zip_and_tar_gz_members_are_sources(bot, slack: SlackStandIn) -> None:  # noqa: ANN001
    for name, data, mime in (("logs.zip", _zip, "application/zip"), ("logs.tar.gz", _tgz, "application/gzip")):
        f = slack.add_file(data({"job/rank3.log": RANK3.encode(), "job/loss.png": b"\x89PNG\r\n" + bytes(300)}),
                           name, mimetype=mime, filetype=name.rsplit(".", 1)[-1])
        ev = message_event(CHANNEL, "", files=[f])
        bot.send_event(ev)
        bot.wait_idle()
        inc = bot.store.find_incident(CHANNEL, ev["ts"])
        assert inc is not None and inc.signature == "nccl-cuda-999", name
        assert [e.name for e in bot.store.list_evidence(inc.id)] == [f"{name}/job/rank3.log"]


def test_a_zip_of_images_or_too_many_members_is_bounded_and_quiet(bot, slack: SlackStandIn) -> None:  # noqa: ANN001
    f = slack.add_file(_zip({"a.png": b"\x89PNG" + bytes(100), "b.jpg": b"\xff\xd8" + bytes(100)}), "pics.zip",
                       mimetype="application/zip", filetype="zip")
    bot.send_event(message_event(CHANNEL, "", files=[f]))
    many = {f"r{i}.log": b"step 1 loss 2.0\n" for i in range(100)} | {"zz/rank3.log": RANK3.encode()}
    f2 = slack.add_file(_zip(many), "many.zip", mimetype="application/zip", filetype="zip")
    bot.send_event(message_event(CHANNEL, "", files=[f2]))
    bot.wait_idle()
    slack.expect_no("chat.postMessage", within=0.3)  # the 101st member is past the cap: nothing found, said nowhere
    assert incidents(bot) == 0


def test_watched_bot_posts_are_diagnosed_and_others_ignored(slack: SlackStandIn, tmp_path: Path) -> None:
    with run_bot(slack, tmp_path, env={"TRIAGE_BOT_SOURCES": "B0SLURMBOT, C0CIALERTS"}) as bot:
        post = message_event(CHANNEL, "", bot_id="B0SLURMBOT", user="U0SLURMBOT")
        post["attachments"] = [{"title": "Job 1234 FAILED", "text": RANK3, "fallback": "Job 1234 FAILED"}]
        bot.send_event(post)
        answer = slack.wait_for("chat.postMessage")[0]
        bot.wait_idle()
        assert answer.params["thread_ts"] == post["ts"] and "nccl-cuda-999" in answer.params["text"]
        # Another bot in a channel nobody listed: ignored.
        bot.send_event(message_event(CHANNEL, NCCL_999, bot_id="B0RANDOM", user="U0RANDOM"))
        # Any bot in a listed channel: diagnosed.
        bot.send_event(message_event("C0CIALERTS", NCCL_999, bot_id="B0CI", user="U0CI"))
        slack.wait_for("chat.postMessage", n=2)
        bot.wait_idle()
        assert [c.params["channel"] for c in slack.calls_to("chat.postMessage")] == [CHANNEL, "C0CIALERTS"]


def as_bot_post(slack: SlackStandIn, msg: dict, **fields: object) -> None:
    """Make a message the stand-in holds a bot's post (what conversations.replies returns)."""
    for m in slack._messages[CHANNEL]:
        if m["ts"] == msg["ts"]:
            m.update(fields)


def test_a_mention_under_a_bot_post_diagnoses_that_post(bot, slack: SlackStandIn) -> None:  # noqa: ANN001
    root = slack.add_message(CHANNEL, "", user="U0SLURMBOT")
    as_bot_post(slack, root, bot_id="B0SLURMBOT",
                attachments=[{"color": "danger", "title": "Job 1234 FAILED", "text": RANK3}])
    bot.send_event(mention_event(CHANNEL, "what happened?", slack.bot_user_id, thread_ts=root["ts"]))
    post = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    assert post.params["thread_ts"] == root["ts"] and "nccl-cuda-999" in post.params["text"]
    # Under a bot post with nothing readable: one clear sentence, never an empty block.
    empty = slack.add_message(CHANNEL, "", user="U0OTHER")
    as_bot_post(slack, empty, bot_id="B0OTHER")
    bot.send_event(mention_event(CHANNEL, "and this?", slack.bot_user_id, thread_ts=empty["ts"]))
    said = slack.wait_for("chat.postMessage", n=2)[-1]
    assert "no known failure signature" in section_text(said.params["blocks"])


def test_help_texts_are_escaped(bot, slack: SlackStandIn) -> None:  # noqa: ANN001
    status, body = bot.send_command("help")
    assert status == 200 and b"&lt;pasted log lines&gt;" in body and b"<pasted" not in body


def test_no_placeholder_survives_in_a_command() -> None:
    cmd, hints = fill_command("sacct -j {job_id}; nvidia-smi -r -i <gpu>; grep -n x <job log>; "
                              "python train.py --micro-batch-size <half>", {"gpu": "3"})
    assert "<" not in cmd and "{" not in cmd and "-i 3" in cmd
    assert "$JOB_ID" in cmd and "$LOG" in cmd and "$MICRO_BATCH_SIZE" in cmd
    assert any(h.startswith("`JOB_ID`: the job id") for h in hints)
    assert fill_text("Drain <host> and resubmit", {}) == "Drain the failing host (see Started by) and resubmit"
    assert fill_text("Drain {host}", {"host": "gpu-node-17"}) == "Drain gpu-node-17"
