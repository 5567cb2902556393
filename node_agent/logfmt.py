"""Log output for the agent and the bot: the usual text line, or one JSON object per line.

`--log-format json` (NODE_AGENT_LOG_FORMAT / TRIAGE_LOG_FORMAT) suits journald forwarders and log
pipelines: each record is {"time", "level", "logger", "message"}, plus "exception" with the
traceback and any scalar fields passed as `extra=` (the bot's per-diagnosis line carries incident,
signature and latency_ms that way).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; `clean` (the bot's redactor) is applied to text fields from `extra=`."""

    def __init__(self, clean: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self.clean = clean

    def format(self, record: logging.LogRecord) -> str:
        ts = record.created
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key in _STANDARD or key.startswith("_") or key in out:
                continue
            if isinstance(value, str):
                out[key] = self.clean(value) if self.clean else value
            elif value is None or isinstance(value, (bool, int, float)):
                out[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, ensure_ascii=False)


def setup(level: str, fmt: str = "text", stream: IO[str] | None = None,
          clean: Callable[[str], str] | None = None, text_format: str = TEXT_FORMAT) -> None:
    """Configure the root logger once for the process (replacing handlers a previous call set)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(clean) if fmt == "json" else logging.Formatter(text_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
