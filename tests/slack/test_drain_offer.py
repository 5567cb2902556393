"""Where "Drain host" is offered and who may confirm it, without Slurm (tests/slurm/test_drain.py
runs the drain itself on a real Slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import default_library
from bot.jobs.slurm_nodes import InvalidNodeName, check_node_name, check_reason
from bot.service.drain import Approvers, offer_from
from bot.slack.ids import ActionId
from tests.support.bot_server import CHANNEL, RunningBot, run_bot
from tests.support.slack_requests import message_event
from tests.support.slack_standin import SlackStandIn

ECC = ("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/workspace/train.py\", line 301, in <module>\n"
       "[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")


def drain_commands() -> list[str]:
    """Every next-step command in the signature library that drains a node."""
    out = []
    for sig in default_library().signatures.values():
        for cause in sig.causes:
            cmd = cause.action_command
            if cmd and "state=drain" in cmd:
                out.append(cmd)
    return out


def test_every_drain_in_the_library_is_offered_with_its_reason() -> None:
    cmds = drain_commands()
    assert len(cmds) >= 20
    for cmd in cmds:
        filled = cmd.replace("{host}", "gpu-node-17").replace("<host>", "gpu-node-17")
        offer = offer_from(filled, ["gpu-node-17"])
        assert offer is not None and offer.host == "gpu-node-17", cmd
        assert offer.reason and '"' not in offer.reason and len(offer.reason) <= 200, cmd


def test_the_host_is_a_job_node_or_none() -> None:
    cmd = 'scontrol update nodename={} state=drain reason="uncorrectable ECC error"; nvidia-smi -q -d ECC'
    # the log named the host: it is drained
    assert offer_from(cmd.format("gpu07"), ["gpu07"]).host == "gpu07"
    # left for the user to fill ($NODE): the one implicated host, else nothing
    assert offer_from(cmd.format("$NODE"), ["gpu07"]).host == "gpu07"
    assert offer_from(cmd.format("$NODE"), ["gpu07", "gpu08"]) is None
    # the scheduler named the job's nodes: a log's name that is none of them is not drained...
    assert offer_from(cmd.format("train-llm-1234"), ["train-llm-1234"], ["gpu07", "gpu08"]) is None
    # ...unless the job had one node; a FQDN in the log is the node's short name
    assert offer_from(cmd.format("train-llm-1234"), ["train-llm-1234"], ["gpu07"]).host == "gpu07"
    assert offer_from(cmd.format("gpu08.cluster.internal"), [], ["gpu07", "gpu08"]).host == "gpu08"
    # not a drain at all
    assert offer_from("nvidia-smi -q -d ECC", ["gpu07"]) is None


@pytest.mark.parametrize("host", ["gpu[01-64]", "gpu01,gpu02", "gpu01 state=resume", "$(reboot)", "-h", "",
                                  "a" * 200, "gpü01"])
def test_node_names_that_are_not_one_node_are_refused(host: str) -> None:
    with pytest.raises(InvalidNodeName, match="not one Slurm node name"):
        check_node_name(host)


def test_reasons_are_one_line_of_text() -> None:
    assert check_reason("  uncorrectable\nECC  error ") == "uncorrectable ECC error"
    assert check_reason('Xid 79; "GPU lost" $(x)') == 'Xid 79; "GPU lost" $(x)'  # argv: text, not syntax
    for bad, why in (("", "Give a reason"), ("x" * 201, "201 characters"), ("bell\x07", "control characters")):
        with pytest.raises(ValueError, match=why):
            check_reason(bad)


def test_approvers_read_the_user_group_and_refuse_when_they_cannot(bot: RunningBot, slack: SlackStandIn) -> None:
    slack.usergroups["S0ONCALL"] = ["U0GRACE"]
    members = bot.bot.gateway.usergroup_members  # the real Web API client against the stand-in
    ok = Approvers({"U0OPS"}, ["S0ONCALL"], members)
    assert ok.refusal("U0OPS") is None and ok.refusal("U0GRACE") is None
    said = ok.refusal("U0EVE")
    assert said and "<@U0OPS>" in said and "S0ONCALL" in said and "nothing was done" in said
    assert len(slack.calls_to("usergroups.users.list")) == 1
    ok.refusal("U0GRACE")
    assert len(slack.calls_to("usergroups.users.list")) == 1  # cached for a minute
    broken = Approvers((), ["S0GONE"], members)
    said = broken.refusal("U0GRACE")
    assert said and "could not read the Slack user group S0GONE (no_such_subteam)" in said
    assert "Nobody may" in (Approvers((), (), members).refusal("U0OPS") or "")


def test_no_drain_button_without_a_job_source_that_can_drain(slack: SlackStandIn, tmp_path: Path) -> None:
    with run_bot(slack, tmp_path, env={"TRIAGE_DRAIN_USERS": "U0OPS"}) as bot:
        bot.send_event(message_event(CHANNEL, ECC))
        post = slack.wait_for("chat.postMessage", timeout=30)[0]
        bot.wait_idle()
    assert "cuda-ecc-error" in post.params["text"] and "state=drain" in str(post.params["blocks"])
    assert ActionId.DRAIN_HOST.value not in str(post.params["blocks"])


def test_drain_modal_and_thread_notice_are_valid_block_kit() -> None:
    from bot.slack.blocks import drain_modal, host_action_blocks
    from tests.slack.payload_check import call_problems

    view = drain_modal(incident_id=12, version=3, host="gpu07", reason='Xid 79 <GPU> "lost" & gone', channel="C1",
                       message_ts="1.2")
    d = view.to_dict()
    assert not call_problems("views.open", {"view": d, "trigger_id": "t"})
    assert d["private_metadata"] == "12:3:C1:1.2" and "&lt;GPU&gt;" in str(d["blocks"][0])
    blocks = [b.to_dict() for b in host_action_blocks(":no_entry: drained *gpu07*", "12:3")]
    assert not call_problems("chat.postMessage", {"text": "drained gpu07", "blocks": blocks})
    assert blocks[1]["elements"][0]["action_id"] == ActionId.HOST_REPAIRED
