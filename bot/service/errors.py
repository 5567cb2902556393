"""Errors whose message is meant for the person in Slack (no traceback, says what to do)."""

from __future__ import annotations


class UserFacingError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
