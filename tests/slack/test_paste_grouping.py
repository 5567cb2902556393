"""Pasted logs of one failure -> one incident: four rank logs pasted as four messages share one answer.

Through the real Bolt app (signed events over HTTP, durable work, worker pool) against the Web API
stand-in. Time moves through the workflow's clock (no sleeps).
"""

from __future__ import annotations

from pathlib import Path

from tests.slack.logs import NCCL_999
from tests.slack.test_files import share
from tests.slack.test_lifecycle import command
from tests.slack.test_messages import section_text
from tests.slack.test_pasted_outputs import edit_event
from tests.support.bot_server import CHANNEL, RunningBot, run_bot
from tests.support.slack_requests import message_event
from tests.support.slack_standin import SlackStandIn

HOST = "gpu-h200-07"


def watchdog_rank(rank: int, job: str = "88123", host: str = HOST) -> str:
    """A rank that only waited: its watchdog gave up ten minutes after rank 3 failed."""
    pid = 51200 + rank
    return (
        f"SLURM_JOB_ID={job}\n"
        f"{host}:{pid}:{pid + 61} [{rank}] NCCL INFO ncclCommInitRankConfig comm 0x55d1c8a3e240 rank {rank} nranks 4"
        f" cudaDev {rank} nvmlDev {rank} busId 18000 commId 0x6b9d1f2a0c7e4412 - Init COMPLETE\n"
        f"[rank{rank}]:[E1203 04:12:55.12345{rank} {pid} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught"
        " collective operation timeout: WorkNCCL(SeqNum=81723, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576,"
        " Timeout(ms)=600000) ran for 600043 milliseconds before timing out.\n"
        f"[rank{rank}]:[E1203 04:12:55.12400{rank} {pid} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg)"
        f" Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: 81723, last enqueued"
        " NCCL work: 81723, last completed NCCL work: 81722.\n")


def failing_rank(job: str = "88123", host: str = HOST) -> str:
    """Rank 3's own log: the CUDA error that started it."""
    return (
        f"SLURM_JOB_ID={job}\n"
        f"{host}:51203:51264 [3] NCCL INFO ncclCommInitRankConfig comm 0x55d1c8a3e240 rank 3 nranks 4 cudaDev 3"
        " nvmlDev 3 busId 3a000 commId 0x6b9d1f2a0c7e4412 - Init COMPLETE\n"
        f"{host}:51203:51290 [3] NCCL WARN Cuda failure 'unknown error'\n"
        "[rank3]:[E1203 04:02:51.901200 51203 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3]"
        " Process group watchdog thread terminated with exception: NCCL error: unhandled cuda error (run with"
        " NCCL_DEBUG=INFO for details), NCCL version 2.26.2\n"
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317,"
        " unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2\n"
        "[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "[rank3]: Last error:\n"
        "[rank3]: Cuda failure 999 'unknown error'\n")


def without_job(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("SLURM_JOB_ID")) + "\n"


def paste(bot: RunningBot, text: str, channel: str = CHANNEL) -> dict:
    ev = message_event(channel, f"```{text}```")
    assert bot.send_event(ev)[0] == 200
    return ev


def cards(slack: SlackStandIn, ts: str, channel: str = CHANNEL) -> list[dict]:
    return [m for m in slack.thread(channel, ts) if m.get("bot_id") and "diagnosis v" in section_text(m.get("blocks") or [])]


def bot_replies(slack: SlackStandIn, ts: str, channel: str = CHANNEL) -> list[dict]:
    return [m for m in slack.thread(channel, ts) if m.get("bot_id") and m.get("thread_ts") == ts]


def incident_count(bot: RunningBot) -> int:
    return bot.store.query("SELECT COUNT(*) AS n FROM incidents")[0]["n"]


def test_four_rank_logs_of_one_job_pasted_as_four_messages_are_one_incident(bot: RunningBot,
                                                                            slack: SlackStandIn) -> None:
    first = paste(bot, watchdog_rank(0))
    bot.wait_idle()
    (card,) = cards(slack, first["ts"])
    before = section_text(card["blocks"])
    assert "nccl-watchdog-timeout" in before and "rank 0" in before  # one waiting rank alone: it looks first
    later = []
    for text in (watchdog_rank(1), failing_rank(), watchdog_rank(2)):
        later.append(paste(bot, text))
        bot.wait_idle()
    assert incident_count(bot) == 1
    inc = bot.store.find_incident(CHANNEL, first["ts"])
    assert inc.thread_ts == first["ts"]
    assert [len(cards(slack, ev["ts"])) for ev in [first, *later]] == [1, 0, 0, 0]  # one full answer
    link = f"{slack.base_url}/workspace/archives/{CHANNEL}/p{first['ts'].replace('.', '')}"
    for ev in later:  # each later paste: one short line pointing to the incident's thread
        (pointer,) = bot_replies(slack, ev["ts"])
        text = section_text(pointer["blocks"])
        assert "Same job 88123" in text and f"<{link}|incident #{inc.id}>" in text and "diagnosis v" not in text
        assert bot.store.find_incident(CHANNEL, ev["ts"]).id == inc.id
    # The card, edited in place, names the rank that started it, found across the four pastes.
    after = section_text(slack.message(CHANNEL, inc.summary_ts)["blocks"])
    assert inc.signature == "nccl-cuda-999" and "nccl-cuda-999" in after
    assert "*Started by* rank 3" in after and f"diagnosis v{inc.version}" in after and inc.version >= 3
    assert {e.name for e in bot.store.list_evidence(inc.id)} == {"message", "message (2)", "message (3)",
                                                                 "message (4)"}
    assert len([m for m in slack.bot_messages(CHANNEL) if "thread_ts" not in m]) == 0  # nothing top-level
    assert "4 pasted logs collected in its thread" in command(bot, slack, f"status {inc.id}")["text"]


def test_four_rank_logs_pasted_at_once_still_make_one_incident(bot: RunningBot, slack: SlackStandIn) -> None:
    evs = [paste(bot, t) for t in (watchdog_rank(0), failing_rank(), watchdog_rank(1), watchdog_rank(2))]
    bot.wait_idle()
    assert incident_count(bot) == 1  # the pool ran them side by side; one of them opened the incident
    inc = bot.store.find_incident(CHANNEL, evs[0]["ts"])
    assert sum(len(cards(slack, ev["ts"])) for ev in evs) == 1
    pointers = [ev for ev in evs if ev["ts"] != inc.thread_ts]
    assert len(pointers) == 3 and all(len(bot_replies(slack, ev["ts"])) == 1 for ev in pointers)
    assert "*Started by* rank 3" in section_text(slack.message(CHANNEL, inc.summary_ts)["blocks"])
    assert len(bot.store.list_evidence(inc.id)) == 4


def test_two_jobs_on_one_host_are_two_incidents(bot: RunningBot, slack: SlackStandIn) -> None:
    a = paste(bot, failing_rank(job="88123"))
    bot.wait_idle()
    b = paste(bot, failing_rank(job="88200"))  # the same failure on the same host, but another job
    bot.wait_idle()
    assert incident_count(bot) == 2
    assert len(cards(slack, a["ts"])) == 1 and len(cards(slack, b["ts"])) == 1
    assert bot.store.find_incident(CHANNEL, b["ts"]).thread_ts == b["ts"]


def test_without_a_job_id_the_same_failure_on_the_same_host_joins(bot: RunningBot, slack: SlackStandIn) -> None:
    a = paste(bot, without_job(failing_rank()))
    bot.wait_idle()
    b = paste(bot, without_job(watchdog_rank(1)))  # names no job: the waiting rank on the same host
    c = paste(bot, without_job(failing_rank(host="gpu-h200-09")))  # another host
    d = paste(bot, NCCL_999)  # no job id and no host at all
    bot.wait_idle()
    inc = bot.store.find_incident(CHANNEL, a["ts"])
    assert bot.store.find_incident(CHANNEL, b["ts"]).id == inc.id
    (pointer,) = bot_replies(slack, b["ts"])
    assert f"Same failure on {HOST}" in section_text(pointer["blocks"])
    assert {bot.store.find_incident(CHANNEL, ev["ts"]).thread_ts for ev in (c, d)} == {c["ts"], d["ts"]}
    assert incident_count(bot) == 3


def test_never_across_channels_nor_into_a_resolved_incident(bot: RunningBot, slack: SlackStandIn) -> None:
    a = paste(bot, watchdog_rank(0))
    bot.wait_idle()
    other = paste(bot, watchdog_rank(1), channel="C0OTHER")
    bot.wait_idle()
    assert bot.store.find_incident("C0OTHER", other["ts"]).thread_ts == other["ts"]
    inc = bot.store.find_incident(CHANNEL, a["ts"])
    bot.bot.service.lifecycle.resolve(inc.id, "UCAROL", text="rebooted gpu-h200-07")
    b = paste(bot, watchdog_rank(2))
    bot.wait_idle()
    assert bot.store.find_incident(CHANNEL, b["ts"]).id != inc.id
    assert len(cards(slack, b["ts"])) == 1 and incident_count(bot) == 3


def test_a_paste_after_the_window_opens_a_new_incident(bot: RunningBot, slack: SlackStandIn) -> None:
    now = [bot.store.clock()]
    bot.bot.service.wf.clock = lambda: now[0]
    a = paste(bot, watchdog_rank(0))
    bot.wait_idle()
    now[0] += 29 * 60  # TRIAGE_GROUP_PASTE_WINDOW_S is 30 min by default, from the last paste
    b = paste(bot, watchdog_rank(1))
    bot.wait_idle()
    now[0] += 31 * 60
    c = paste(bot, watchdog_rank(2))
    bot.wait_idle()
    first = bot.store.find_incident(CHANNEL, a["ts"])
    assert bot.store.find_incident(CHANNEL, b["ts"]).id == first.id
    assert bot.store.find_incident(CHANNEL, c["ts"]).thread_ts == c["ts"]
    assert incident_count(bot) == 2 and len(cards(slack, c["ts"])) == 1


def test_a_reply_in_a_joined_paste_thread_rediagnoses_the_incident(bot: RunningBot, slack: SlackStandIn) -> None:
    a = paste(bot, watchdog_rank(0))
    bot.wait_idle()
    b = paste(bot, watchdog_rank(1))
    bot.wait_idle()
    inc = bot.store.find_incident(CHANNEL, a["ts"])
    assert inc.signature == "nccl-watchdog-timeout"
    # Someone answers the pointer with rank 3's log, in the joined message's thread.
    reply = message_event(CHANNEL, f"```{failing_rank()}```", thread_ts=b["ts"])
    assert bot.send_event(reply)[0] == 200
    bot.wait_idle()
    after = bot.store.get_incident(inc.id)
    assert after.signature == "nccl-cuda-999" and after.version == inc.version + 1
    assert any(e.kind == "reply" and e.ref.get("ts") == reply["ts"] for e in bot.store.list_evidence(inc.id))
    card = section_text(slack.message(CHANNEL, after.summary_ts)["blocks"])
    assert "nccl-cuda-999" in card and "*Started by* rank 3" in card
    said = [section_text(m["blocks"]) for m in bot_replies(slack, b["ts"])]
    assert len(said) == 2 and "Re-diagnosed" in said[1] and "nccl-cuda-999" in said[1]  # pointer, then this
    assert any("nccl-cuda-999" in section_text(m.get("blocks") or []) for m in bot_replies(slack, a["ts"])
               if m["ts"] != after.summary_ts)  # the incident's own thread heard what changed
    assert incident_count(bot) == 1


def test_a_zero_paste_window_keeps_every_paste_apart(slack: SlackStandIn, tmp_path: Path) -> None:
    with run_bot(slack, tmp_path, env={"TRIAGE_GROUP_PASTE_WINDOW_S": "0"}) as bot:
        a, b = paste(bot, watchdog_rank(0)), paste(bot, watchdog_rank(1))
        bot.wait_idle()
        assert incident_count(bot) == 2 and len(cards(slack, a["ts"])) == len(cards(slack, b["ts"])) == 1


def test_uploads_named_after_one_job_join_across_hosts(bot: RunningBot, slack: SlackStandIn) -> None:
    """Only the file names say which job wrote them (slurm-%A_%a.out); the ranks ran on two hosts."""
    a = share(bot, slack, without_job(watchdog_rank(0)).encode(), "slurm-88123_0.out")
    bot.wait_idle()
    b = share(bot, slack, without_job(failing_rank(host="gpu-h200-08")).encode(), "slurm-88123_1.out")
    bot.wait_idle()
    inc = bot.store.find_incident(CHANNEL, a["ts"])
    assert bot.store.find_incident(CHANNEL, b["ts"]).id == inc.id and incident_count(bot) == 1
    assert "Same job 88123" in section_text(bot_replies(slack, b["ts"])[0]["blocks"])
    assert "nccl-cuda-999" in section_text(slack.message(CHANNEL, bot.store.get_incident(inc.id).summary_ts)["blocks"])


def test_an_edited_joined_paste_is_read_again_in_the_incident(bot: RunningBot, slack: SlackStandIn) -> None:
    a = paste(bot, watchdog_rank(0))
    bot.wait_idle()
    old = f"```{watchdog_rank(1)}```"
    b = paste(bot, watchdog_rank(1))
    bot.wait_idle()
    inc = bot.store.find_incident(CHANNEL, a["ts"])
    assert inc.signature == "nccl-watchdog-timeout"
    # The second paste was the wrong rank's log: its writer swaps in rank 3's.
    bot.send_event(edit_event(CHANNEL, b["ts"], b["ts"], old, f"```{failing_rank()}```", user="UALICE"))
    bot.wait_idle()
    after = bot.store.get_incident(inc.id)
    assert after.signature == "nccl-cuda-999" and bot.store.get_diagnosis(inc.id).trigger == "edit"
    assert "*Started by* rank 3" in section_text(slack.message(CHANNEL, after.summary_ts)["blocks"])
    assert incident_count(bot) == 1 and len(bot_replies(slack, b["ts"])) == 1  # still just the pointer
