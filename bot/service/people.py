"""The job's user as a Slack user, so scheduler posts mention the person whose job died.

Two sources, the map first: TRIAGE_USER_MAP (a YAML file or inline YAML of `unix-user: U123` or
`unix-user: someone@corp.example`), then `users.lookupByEmail` with `<user>@TRIAGE_USER_EMAIL_DOMAIN`
(needs the `users:read.email` scope). Answers are cached (a miss for less long) so a burst of one
user's array tasks costs one lookup.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

log = logging.getLogger(__name__)

HIT_TTL_S = 6 * 3600
MISS_TTL_S = 300
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_EMAIL = re.compile(r"^[^@\s<>]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
_UNIX_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")
_DOMAIN = re.compile(r"^[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")


class PeopleError(ValueError):
    """TRIAGE_USER_MAP or TRIAGE_USER_EMAIL_DOMAIN is malformed (the message names it)."""


def load_user_map(spec: str | None) -> dict[str, str]:
    """`alice: U0ALICE` / `bob: bob.smith@corp.example` from a YAML file path or the YAML itself."""
    if not spec:
        return {}
    text = spec
    if "\n" not in spec and ":" not in spec or os.path.exists(spec):
        try:
            with open(spec, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise PeopleError(f"TRIAGE_USER_MAP: cannot read {spec}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PeopleError(f"TRIAGE_USER_MAP is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PeopleError("TRIAGE_USER_MAP: expected a mapping of job user -> Slack user id or email")
    out = {}
    for k, v in data.items():
        user, target = str(k), str(v).strip()
        if not _UNIX_USER.match(user) or not (_USER_ID.match(target) or _EMAIL.match(target)):
            raise PeopleError(f"TRIAGE_USER_MAP: {user!r}: {target!r} is neither a Slack user id (U…) nor an email")
        out[user] = target
    return out


@dataclass
class People:
    """Who to mention for a job user. `lookup(email)` is the Slack call (None: not found)."""

    lookup: Callable[[str], str | None] | None = None
    domain: str | None = None
    user_map: dict[str, str] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.domain is not None:
            self.domain = self.domain.lstrip("@").strip().lower() or None
            if self.domain and not _DOMAIN.match(self.domain):
                raise PeopleError(f"TRIAGE_USER_EMAIL_DOMAIN={self.domain!r} is not a mail domain (corp.example)")
        self._cache: dict[str, tuple[str | None, float]] = {}
        self._guard = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.user_map or (self.domain and self.lookup))

    def slack_user(self, job_user: str | None) -> str | None:
        """The Slack user id for a job's user, or None (unknown, lookup refused, not configured)."""
        if not job_user or not self.enabled or not _UNIX_USER.match(job_user):
            return None
        target = self.user_map.get(job_user)
        if target and _USER_ID.match(target):
            return target
        email = target or (f"{job_user}@{self.domain}" if self.domain else None)
        if not email or self.lookup is None:
            return None
        now = self.clock()
        with self._guard:
            hit = self._cache.get(email)
            if hit is not None and hit[1] > now:
                return hit[0]
        try:
            found = self.lookup(email)
        except Exception as exc:  # a missing users:read.email scope, a rate limit: no mention, no failure
            log.warning("users.lookupByEmail for a job user failed: %s", exc)
            found = None
        with self._guard:
            self._cache[email] = (found, now + (HIT_TTL_S if found else MISS_TTL_S))
        return found
