"""Every kind in the redaction corpus stays out of Slack posts, the SQLite store and the log, through
the real bot on loopback; the person who pasted is told how many secrets were removed; a forged
request never has its body logged; malformed signature headers get 401, never a traceback."""

from __future__ import annotations

import http.client
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.logsafe import MAX_MESSAGE, MAX_TRACEBACK, clean_message
from bot.slack.ids import ActionId
from tests.data.secrets.corpus import CORPUS
from tests.slack.logs import NCCL_999
from tests.slack.test_actions import button_value
from tests.slack.test_look import _answer_blocks, _look
from tests.support.bot_server import CHANNEL, RunningBot
from tests.support.slack_requests import block_action, message_event
from tests.support.slack_standin import SlackStandIn

EX = Path(__file__).resolve().parents[2] / "examples"
NON_ASCII_TIMESTAMPS = ["¹²", "١٢٣", "１７６４５４３６００", "1764543600²", "٣"]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def all_logs() -> Iterator[_Collect]:
    """Every log record of the process at DEBUG, formatted as a handler would write it."""
    h = _Collect()
    root = logging.getLogger()
    old = root.level
    root.addHandler(h)
    root.setLevel(logging.DEBUG)
    try:
        yield h
    finally:
        root.removeHandler(h)
        root.setLevel(old)


def _corpus_paste() -> str:
    lines = ["+ env | sort", *(t for _, t, _ in CORPUS)]
    lines += [f"[rank{i}]: Cuda failure 999 'unknown error' ({t.replace(chr(10), ' ')})"
              for i, (_, t, _) in enumerate(CORPUS)]
    return "\n".join(lines) + "\n" + NCCL_999


def test_no_kind_reaches_slack_store_or_log(bot: RunningBot, slack: SlackStandIn, all_logs: _Collect) -> None:
    ev = message_event(CHANNEL, _corpus_paste())
    bot.send_event(ev)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    answer = slack.bot_messages(CHANNEL)[0]
    # a thread reply with more secrets, Show details, the full report as a file: every path out
    bot.send_event(message_event(CHANNEL, NCCL_999 + CORPUS[0][1] + "\n" + CORPUS[-1][1], thread_ts=ev["ts"]))
    bot.wait_idle()
    answer = slack.message(CHANNEL, answer["ts"])
    for action in (ActionId.SHOW_DETAILS, ActionId.FULL_REPORT):
        bot.send_interaction(block_action(action, button_value(answer, ActionId.SHOW_DETAILS),
                                          channel=CHANNEL, message=answer))
        bot.wait_idle()
    assert slack.uploads
    sent = slack.all_request_text() + "".join(u["content"].decode() for u in slack.uploads)
    assert "[REDACTED]" in sent
    inc = bot.store.find_incident(CHANNEL, ev["ts"])
    texts = "".join((e.text or "") + (e.excerpt or "") for e in bot.store.list_evidence(inc.id))
    reports = "".join(str(r) for r in bot.store.query("SELECT * FROM diagnoses"))
    db = b"".join(p.read_bytes() for p in Path(bot.bot.settings.db_path).parent.glob("triage.db*"))
    logs = "\n".join(all_logs.lines)
    where = {"Slack": sent, "stored evidence": texts, "stored diagnoses": reports, "log": logs}
    leaks = [(kind, place) for kind, _, secrets in CORPUS for place, text in where.items()
             if any(s in text for s in secrets)]
    leaks += [(kind, "database file") for kind, _, secrets in CORPUS if any(s.encode() in db for s in secrets)]
    assert not leaks, leaks
    # told: the answer's footer says how many (the first paste's count plus the reply's two)
    first = sum(1 for _ in CORPUS)
    notes = [w for w in (answer.get("text") or "").splitlines()] + [str(b) for b in answer["blocks"]]
    assert any("secrets redacted from the pasted text" in n for n in notes), answer["blocks"]
    stored = sum(e.redactions for e in bot.store.list_evidence(inc.id))
    assert stored >= first + 2


def test_the_note_fits_the_first_screen(bot: RunningBot, slack: SlackStandIn, tmp_path: Path) -> None:
    env = "HF_TOKEN=" + "hf_" + "QmZtLpXvRsNwKyJhGfDcBaEoIuYtRe0123\nWANDB_API_KEY=8c2f9e41d07b3a65f2e8c1d9b4a7e60f3c5d2b18\n"
    ev = message_event(CHANNEL, env + (EX / "seed-nccl-999" / "rank-0.log").read_text())
    bot.send_event(ev)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    blocks = _answer_blocks(bot, slack, ev["ts"])
    assert "2 secrets redacted from the pasted text." in str(blocks)
    _look("seed-paste-redacted", blocks, tmp_path)
    # the poster alone is told, privately, that their own message still shows them
    private = [c.params for c in slack.calls_to("chat.postEphemeral")]
    assert [(p["user"], p["channel"]) for p in private] == [(ev["user"], CHANNEL)], private
    assert "held 2 secrets" in private[0]["text"] and "rotate" in private[0]["text"]


def test_a_paste_without_secrets_sends_no_private_note(bot: RunningBot, slack: SlackStandIn) -> None:
    ev = message_event(CHANNEL, (EX / "seed-nccl-999" / "rank-0.log").read_text())
    bot.send_event(ev)
    slack.wait_for("chat.postMessage")
    bot.wait_idle()
    assert slack.calls_to("chat.postEphemeral") == []


def test_forged_requests_log_one_short_line_and_no_body(bot: RunningBot, all_logs: _Collect) -> None:
    marker = "FORGED-BODY-CONTENT-" + "x" * 64
    body = ("payload=" + marker + "&" + "a" * (1 << 20)).encode()  # 1 MB each, a token inside
    body += b"&token=xoxb-2209318745-5550001112223-Qw8rT1yU2iO3pA4sD5fG6hJ7"
    for _ in range(5):
        status, _ = _raw_post(bot, "/slack/events", body, {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=" + "0" * 64})
        assert status == 401
    logs = "\n".join(all_logs.lines)
    assert marker not in logs and "aaaaaaaaaaaaaaaa" not in logs and "Qw8rT1yU2iO3" not in logs
    assert len(logs) < 5 * (MAX_MESSAGE + 200), f"{len(logs)} characters of log for 5 forged requests"
    assert logs.count("refused a Slack request") == 5  # still said, once each, without the body
    # Bolt's own message, should a badly signed request reach its verifier: cut and redacted too
    # (the record factory covers every logger in the process, not only ours)
    all_logs.lines.clear()
    logging.getLogger("slack_bolt.RequestVerification").info(
        "Invalid request signature detected (signature: v0=00, timestamp: 1, body: %s)", body.decode())
    logging.getLogger("slack_sdk.web.base_client").debug("Received the following response - body: %s", body.decode())
    logs = "\n".join(all_logs.lines)
    assert marker not in logs and "Qw8rT1yU2iO3" not in logs and len(logs) < 2 * (MAX_MESSAGE + 200), logs
    assert "Invalid request signature detected" in logs and "characters not logged" in logs


def _raw_post(bot: RunningBot, path: str, body: bytes, headers: dict[str, str | bytes]) -> tuple[int, bytes]:
    """A POST with header values sent byte for byte (str as Latin-1, as http.client does; bytes as is)."""
    host, port = bot.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.putrequest("POST", path)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _as_sent(ts: str) -> str | bytes:
    try:
        ts.encode("latin-1")
        return ts
    except UnicodeEncodeError:
        return ts.encode("utf-8")


@pytest.mark.parametrize("ts", NON_ASCII_TIMESTAMPS)
def test_slack_endpoint_non_ascii_timestamp_is_401(bot: RunningBot, all_logs: _Collect, ts: str) -> None:
    status, raw = _raw_post(bot, "/slack/events", b'{"type":"url_verification","challenge":"x"}', {
        "Content-Type": "application/json", "X-Slack-Request-Timestamp": _as_sent(ts),
        "X-Slack-Signature": "v0=" + "0" * 64})
    assert status == 401, raw
    assert not any("Traceback" in line for line in all_logs.lines)


@pytest.mark.parametrize("sig", ["v0=é" + "0" * 63, "v0=" + "0" * 64 + "²"])
def test_slack_endpoint_non_ascii_signature_is_401(bot: RunningBot, sig: str) -> None:
    status, _ = _raw_post(bot, "/slack/events", b"{}", {
        "Content-Type": "application/json", "X-Slack-Request-Timestamp": str(int(time.time())),
        "X-Slack-Signature": sig})
    assert status == 401


@pytest.mark.parametrize("ts", NON_ASCII_TIMESTAMPS)
def test_webhook_non_ascii_timestamp_is_401(bot: RunningBot, all_logs: _Collect, ts: str) -> None:
    status, raw = _raw_post(bot, "/hooks/job-failed", b'{"event_id":"e1","job_id":"1"}', {
        "Content-Type": "application/json", "X-Triage-Timestamp": _as_sent(ts), "X-Triage-Signature": "v1=" + "0" * 64})
    assert status == 401, raw
    assert not any("Traceback" in line for line in all_logs.lines)


def test_non_ascii_content_length_is_refused(bot: RunningBot) -> None:
    host, port = bot.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.putrequest("POST", "/hooks/job-failed")
    conn.putheader("Content-Length", "¹²")
    conn.endheaders()
    assert conn.getresponse().status == 411
    conn.close()


def test_clean_message_bounds() -> None:
    line = clean_message("Invalid request signature detected (signature: v0=00, timestamp: 1, body: "
                         + "token=hf_" + "a" * 40 + "&" + "b" * (4 << 20) + ")")
    assert "body: <" in line and "characters not logged>" in line and "bbbb" not in line
    assert len(clean_message("x" * 100_000)) < MAX_MESSAGE + 80
    assert len(clean_message("y" * 100_000, MAX_TRACEBACK)) < MAX_TRACEBACK + 80
    assert clean_message("GITHUB_TOKEN=" + "ghp_" + "R4nd0mF4k3T0k3nF0rT3st5Abcdef012345") == "GITHUB_TOKEN=[REDACTED]"
