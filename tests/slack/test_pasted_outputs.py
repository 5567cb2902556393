"""The seed thread through the real Bolt app: a pasted `nvidia-smi` reply is evidence (the answer
moves to the foreign process and names its pid, the question is dropped), and an edited reply is
read again."""

from __future__ import annotations

from pathlib import Path

from tests.slack.test_messages import section_text
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import message_event, new_ts
from tests.support.slack_standin import SlackStandIn

ROOT = Path(__file__).resolve().parents[2]
SEED_RANK0 = (ROOT / "examples" / "seed-nccl-999" / "rank-0.log").read_text()
FOREIGN = (ROOT / "tests" / "data" / "pasted" / "nvidia-smi-570-h200-foreign.txt").read_text()
CLEAN = (ROOT / "tests" / "data" / "pasted" / "nvidia-smi-570-h200-clean.txt").read_text()


def edit_event(channel: str, ts: str, thread_ts: str, old: str, new: str, user: str = "UBOB") -> dict:
    """Slack's `message_changed`: the edited message nested under `message`, the old one under `previous_message`."""
    return {"type": "message", "subtype": "message_changed", "hidden": True, "channel": channel,
            "channel_type": "channel", "ts": new_ts(), "event_ts": new_ts(),
            "message": {"type": "message", "user": user, "text": new, "ts": ts, "thread_ts": thread_ts,
                        "edited": {"user": user, "ts": new_ts()}, "team": "T0STANDIN"},
            "previous_message": {"type": "message", "user": user, "text": old, "ts": ts, "thread_ts": thread_ts}}


def test_pasted_nvidia_smi_in_the_seed_thread_is_evidence_and_an_edit_is_read_again(
        bot: RunningBot, slack: SlackStandIn) -> None:
    root = message_event(CHANNEL, f"```{SEED_RANK0}```")
    bot.send_event(root)
    first = slack.wait_for("chat.postMessage")[0]
    bot.wait_idle()
    first_text = section_text(first.params["blocks"])
    assert "nccl-cuda-999" in first_text and "`nvidia-smi`" in first_text  # the question asks for it
    inc = bot.store.find_incident(CHANNEL, root["ts"])

    reply = message_event(CHANNEL, f"here you go\n```{FOREIGN}```", thread_ts=root["ts"], user="UBOB")
    bot.send_event(reply)
    update = slack.wait_for("chat.update")[0]
    bot.wait_idle()
    updated = section_text(update.params["blocks"])
    assert "4242" in updated  # the next action names the foreign pid
    assert "What does `nvidia-smi` show" not in updated  # the answered question is gone
    rec = bot.store.get_diagnosis(inc.id)
    top = rec.report["diagnoses"][0]
    assert top["signature"] == "nccl-cuda-999" and top["causes"][0]["id"] == "gpu-memory-pressure"
    assert "python3.10 (pid 4242) holds 71.0 GiB on GPU 0" in " ".join(top["causes"][0]["evidence_for"])
    assert rec.report["pasted"][0]["source"] == "pasted" and rec.report["pasted"][0]["from"] == "reply 1"
    assert "4242" in rec.report["next_action"]

    # Bob edits his reply: the GPUs were freed meanwhile. The edit replaces the reply's text.
    n_updates = len(slack.calls_to("chat.update"))
    bot.send_event(edit_event(CHANNEL, reply["ts"], root["ts"], reply["text"], f"```{CLEAN}```"))
    slack.wait_for("chat.update", where=lambda c: len(slack.calls_to("chat.update")) > n_updates)
    bot.wait_idle()
    rec = bot.store.get_diagnosis(inc.id)
    causes = {c["id"]: c for c in rec.report["diagnoses"][0]["causes"]}
    assert any("probe processes clean" in x for x in causes["gpu-memory-pressure"]["evidence_against"])
    assert "4242" not in (rec.report["next_action"] or "")
    assert rec.trigger == "edit"
    names = [e.name for e in bot.store.list_evidence(inc.id)]
    assert names == ["message", "reply 1", "reply 1"]  # the edit is kept under the reply's own name
