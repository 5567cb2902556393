"""The one door to the engine from the bot's worker threads.

`workers=1` keeps the engine from forking scan processes out of a threaded server (a fork while
other threads hold locks can deadlock the child); `max_bytes` caps what is read of each item after
decompression, so a small .gz that unpacks to gigabytes costs a bounded scan, with a warning.
"""

from __future__ import annotations

from bot.engine import Report, diagnose_texts


def diagnose(items: list[tuple[str, bytes]], max_bytes: int | None = None) -> Report:
    return diagnose_texts(list(items), max_bytes=max_bytes, workers=1)


def warm_up() -> None:
    """Load the library and compile the matcher before the first event (≈0.2 s once)."""
    diagnose([("warm-up", b"warm-up\n")])
