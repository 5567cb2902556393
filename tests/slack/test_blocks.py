"""Block Kit builders: Slack's limits hold whatever the engine and the users throw at them."""

from __future__ import annotations

import json

from bot.service.answer import Answer, CauseLine, EvidenceLine, Headline, HomeData, HomeIncident, HostProbe
from bot.slack import blocks as bk


def as_dicts(blocks: list) -> list[dict]:
    return [b.to_dict() for b in blocks]  # slack_sdk validates lengths here and raises if broken


def huge_answer() -> Answer:
    line = "[rank0]: " + "x" * 10_000
    return Answer(
        incident_id=7, version=3, signature="nccl-cuda-999", title="T" * 500, confidence=0.84, level="initiating",
        summary="S" * 6000, initiating="rank 0, gpu-node-17 (" + "r" * 4000 + ")",
        evidence=[EvidenceLine(f"rank{i}.log:{i}", f"rank {i}, gpu-node-{i}", line) for i in range(5)],
        evidence_total=4096,
        causes=[CauseLine("C" * 2000, ["for " * 300] * 3, ["against " * 300] * 3) for _ in range(3)],
        next_text="N" * 3000, next_command="nvidia-smi " + "--x " * 2000, question="Q" * 5000,
        probes=[HostProbe(f"gpu-node-{i:03d}", False, ["processes (failed): " + "p" * 300] * 10) for i in range(200)],
        recurrence=[f"gpu-node-{i}: 3rd incident in 7 days: " + "s, " * 500 for i in range(20)],
        also_seen=[f"sig-{i} ×{i}" for i in range(100)], warnings=["W" * 5000] * 20, job="J" * 5000,
        probes_enabled=True, feedback=["F" * 3000] * 20, changes=["changed " * 1000],
    )


def test_a_huge_answer_stays_within_slacks_limits() -> None:
    for blocks in (as_dicts(bk.answer_blocks(huge_answer())), as_dicts(bk.details_blocks(huge_answer()))):
        assert len(blocks) <= bk.MAX_BLOCKS
        for b in blocks:
            if b["type"] == "section":
                assert len(b["text"]["text"]) <= 3000
            if b["type"] == "context":
                assert len(b["elements"]) <= 10 and all(len(e["text"]) <= 3000 for e in b["elements"])
    text = json.dumps(as_dicts(bk.details_blocks(huge_answer())))
    assert "more: use *Full report*" in text  # what did not fit is announced, not dropped silently
    assert "more hosts" in text
    assert len(bk.answer_text(huge_answer())) <= 3000


def test_buttons_carry_the_incident_and_version() -> None:
    blocks = as_dicts(bk.answer_blocks(huge_answer()))
    actions = next(b for b in blocks if b["type"] == "actions")
    assert [e["text"]["text"] for e in actions["elements"]] == ["Re-run probes", "Right", "Wrong cause",
                                                               "Show details"]
    assert {e["value"] for e in actions["elements"]} == {"7:3"}


def test_log_text_cannot_ping_or_break_the_code_block() -> None:
    a = huge_answer()
    a.evidence = [EvidenceLine("m:1", "", "<!channel> <@U123> & ``` closes the block")]
    a.summary = "<!here> summary"
    text = json.dumps(as_dicts(bk.answer_blocks(a)) + as_dicts(bk.details_blocks(a)))
    assert "<!channel>" not in text and "<!here>" not in text and "<@U123>" not in text
    assert "&lt;!channel&gt;" in text and "&amp;" in text
    text = json.dumps(as_dicts(bk.details_blocks(a)))
    assert "<!channel>" not in text and "<!here>" not in text and "<@U123>" not in text
    evidence = next(b["text"]["text"] for b in as_dicts(bk.details_blocks(a)) if b["type"] == "section"
                    if "*Evidence*" in b["text"]["text"])
    assert evidence.count("```") == 2  # the log's own ``` was defused


def test_headline_mentions_the_asker_but_escapes_the_subject() -> None:
    h = Headline(subject="Job 1 (<!channel> name)", status="Diagnosing…", requester="UALICE")
    text = json.dumps(as_dicts(bk.headline_blocks(h)))
    assert "<@UALICE>" in text and "<!channel>" not in text


def test_modal_offers_at_most_100_options_and_skips_the_judged_signature() -> None:
    choices = [(f"family-{i % 7}", f"sig-{i:03d}", "A title " * 20) for i in range(300)]
    view = bk.wrong_cause_modal(incident_id=1, version=2, judged="sig-000", choices=choices, channel="C1",
                                message_ts="1.2").to_dict()
    select = next(b for b in view["blocks"] if b.get("block_id") == "triage_cause_select")
    options = [o for g in select["element"]["option_groups"] for o in g["options"]]
    assert len(options) <= 100 and all(len(o["text"]["text"]) <= 75 for o in options)
    assert "sig-000" not in {o["value"] for o in options}
    assert len(view["title"]["text"]) <= 24 and view["private_metadata"] == "1:2:C1:1.2"


def test_home_view_with_many_incidents() -> None:
    data = HomeData(
        recent=[HomeIncident(i, f"https://x.slack.com/archives/C1/p{i}", "nccl-cuda-999", "2 h ago", str(i),
                             ["gpu-node-17"] * 5) for i in range(1000)],
        top_signatures=[(f"sig-{i}", 100 - i) for i in range(50)],
        top_hosts=[(f"host-{i}", 9) for i in range(50)],
        precision=[("nccl-cuda-999", 4, 1), ("never-judged", 0, 0)],
    )
    view = bk.home_view(data).to_dict()
    assert len(view["blocks"]) <= 100
    assert all(len(b["text"]["text"]) <= 3000 for b in view["blocks"] if b["type"] == "section")
    assert "`nccl-cuda-999`: 4/5 right (80%)" in json.dumps(view)


def test_footer_tells_a_refused_host_from_a_silent_agent() -> None:
    a = Answer(incident_id=3, version=1, signature="nccl-cuda-999", title="t", confidence=0.8, level="initiating",
               summary="s", initiating="rank 0", probes_enabled=True,
               probes=[HostProbe("localhost", False, ["not probed: localhost is not a host the bot may contact"]),
                       HostProbe("gpu-07", False, ["did not answer: gpu-07 did not answer in 3 s"])])
    footer = json.dumps(as_dicts(bk.answer_blocks(a))[-1])
    assert "Probes: gpu-07 did not answer" in footer
    assert "Not probed: localhost" in footer and "localhost did not answer" not in footer
