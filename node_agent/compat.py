"""Stand-ins for the few newer standard-library helpers the agent uses; it runs on Python >= 3.8.

tests/node_agent/test_py38_compat.py parses every agent module with Python 3.8's grammar and
refuses the 3.9+ APIs that a parse cannot see (str.removeprefix, zip(strict=), functools.cache...).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


def removeprefix(text: str, prefix: str) -> str:
    """str.removeprefix (3.9+)."""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def removesuffix(text: str, suffix: str) -> str:
    """str.removesuffix (3.9+)."""
    return text[:-len(suffix)] if suffix and text.endswith(suffix) else text


def zip_strict(*seqs: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """zip(..., strict=True) (3.10+) for sequences: a length mismatch is a ValueError."""
    if len({len(s) for s in seqs}) > 1:
        raise ValueError(f"zip_strict: lengths differ ({', '.join(str(len(s)) for s in seqs)})")
    return zip(*seqs)
