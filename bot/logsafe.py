"""Every log line the bot writes is redacted and bounded, and no request body is ever logged.

Bolt logs the whole body of each badly signed request at INFO ("Invalid request signature detected
(signature: …, timestamp: …, body: …)"); slack_sdk logs request and response bodies at DEBUG; an
exception message can quote a pasted log. `install()` wraps the logging record factory, so this
holds for every logger in the process (ours, Bolt's, slack_sdk's, urllib3's) and every handler
(journald, a file, pytest's caplog): the message is formatted once, a request body is cut out,
secrets go through `bot.redact`, and the line is clipped to MAX_MESSAGE characters (a traceback to
MAX_TRACEBACK).
"""

from __future__ import annotations

import logging
import re
import threading

from bot.redact import redact

MAX_MESSAGE = 1000
MAX_TRACEBACK = 8000

# Bolt's request-verification message (slack_bolt/middleware/request_verification), and any other
# "..., body: <payload>" a library writes: the body goes, its size stays.
_BODY = re.compile(r"(?is)([(,\s]body\s*[:=]\s*)(.+?)(\)?\s*)$")
_lock = threading.Lock()
_installed = False


def clean_message(text: str, limit: int = MAX_MESSAGE) -> str:
    m = _BODY.search(text)
    if m:
        text = text[:m.start(2)] + f"<{len(m.group(2))} characters not logged>" + m.group(3)
    if len(text) > limit * 4:  # redacting megabytes to keep 1,000 characters is wasted work
        text = text[:limit * 4]
    text = redact(text)
    if len(text) > limit:
        text = text[:limit] + f" … ({len(text) - limit} more characters not logged)"
    return text


def _clean(record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: log what was given rather than fail
        message = f"{record.msg!r} {record.args!r}"
    record.msg = clean_message(message)
    record.args = None
    if record.exc_info and not record.exc_text:
        tb = logging.Formatter().formatException(record.exc_info)
        record.exc_text = clean_message(tb, MAX_TRACEBACK)
    return record


def install() -> None:
    """Make every log record of the process safe (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: object, **kwargs: object) -> logging.LogRecord:
            return _clean(previous(*args, **kwargs))

        logging.setLogRecordFactory(factory)
        _installed = True


__all__ = ["MAX_MESSAGE", "MAX_TRACEBACK", "clean_message", "install"]
