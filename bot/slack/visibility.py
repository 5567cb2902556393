"""Who may see which conversation's incidents (the App Home tab).

A user sees the incidents of a conversation when
  * it is a public channel and the user is a full member of the workspace (guests see only the
    channels they were added to, as in Slack itself), or
  * the user is a member of it: a private channel or group DM (`conversations.members`), or the
    user's own DM with the bot (`conversations.info`'s `user`).

Everything fails closed: a conversation Slack will not describe (missing scope, rate limit, an
archived or deleted channel, an error) is hidden, and so is a channel beyond the per-view cap.
Answers are cached briefly (TTL, default 60 s), per conversation and per user, so opening the Home
tab costs a handful of Web API calls, not one per incident; a failed lookup is cached for a
shorter time so that a burst of Home opens does not hammer a rate-limited API.

Scopes: channels:read, groups:read, im:read, mpim:read (conversations.info / .members) and
users:read (users.info, to tell guests).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

log = logging.getLogger(__name__)

TTL_S = 60.0
FAILED_TTL_S = 15.0
MAX_MEMBER_PAGES = 20  # 20 x 1000 members; a bigger private channel counts only its first 20,000
MAX_CACHED = 5000


@dataclass
class _Conv:
    kind: str  # public | private | im | mpim | unknown (lookup failed: hidden)
    im_user: str | None = None
    members: frozenset[str] | None = None  # private and mpim, and public ones when a guest asked


class ConversationAccess:
    def __init__(self, client: WebClient, ttl_s: float = TTL_S, failed_ttl_s: float = FAILED_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.failed_ttl_s = failed_ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._convs: dict[str, tuple[float, _Conv]] = {}
        self._members: dict[str, tuple[float, frozenset[str] | None]] = {}
        self._guests: dict[str, tuple[float, bool]] = {}

    # -- the question -------------------------------------------------------------------------

    def visible_channels(self, user: str, channels: Iterable[str]) -> set[str]:
        """The subset of `channels` whose incidents `user` may see."""
        if not user:
            return set()
        guest: bool | None = None
        out = set()
        for ch in dict.fromkeys(channels):
            if not ch:
                continue
            conv = self._conversation(ch)
            if conv.kind == "im":
                ok = conv.im_user == user
            elif conv.kind == "public":
                if guest is None:
                    guest = self._is_guest(user)
                ok = not guest or user in (self._members_of(ch) or ())
            elif conv.kind in ("private", "mpim"):
                ok = user in (self._members_of(ch) or ())
            else:
                ok = False
            if ok:
                out.add(ch)
        return out

    # -- cached lookups -----------------------------------------------------------------------

    def _cached(self, table: dict[str, tuple[float, Any]], key: str) -> tuple[bool, Any]:
        with self._lock:
            hit = table.get(key)
            if hit and hit[0] > self.clock():
                return True, hit[1]
        return False, None

    def _store(self, table: dict[str, tuple[float, Any]], key: str, value: Any, ok: bool) -> None:
        with self._lock:
            if len(table) >= MAX_CACHED:
                now = self.clock()
                for k in [k for k, (exp, _) in table.items() if exp <= now] or list(table)[: MAX_CACHED // 2]:
                    table.pop(k, None)
            table[key] = (self.clock() + (self.ttl_s if ok else self.failed_ttl_s), value)

    def _conversation(self, channel: str) -> _Conv:
        hit, conv = self._cached(self._convs, channel)
        if hit:
            return conv
        try:
            info = self.client.conversations_info(channel=channel).get("channel") or {}
        except (SlackApiError, OSError, ValueError) as e:
            log.warning("App Home: %s hidden, conversations.info failed: %s", channel, _why(e))
            conv, ok = _Conv("unknown"), False
        else:
            if info.get("is_im"):
                conv = _Conv("im", im_user=info.get("user"))
            elif info.get("is_mpim"):
                conv = _Conv("mpim")
            elif info.get("is_private") or info.get("is_group"):
                conv = _Conv("private")
            elif info.get("is_channel"):
                conv = _Conv("public")
            else:
                conv = _Conv("unknown")
            ok = True
        self._store(self._convs, channel, conv, ok)
        return conv

    def _members_of(self, channel: str) -> frozenset[str] | None:
        hit, members = self._cached(self._members, channel)
        if hit:
            return members
        got: set[str] = set()
        cursor = None
        try:
            for _ in range(MAX_MEMBER_PAGES):
                resp = self.client.conversations_members(channel=channel, limit=1000, cursor=cursor)
                got.update(resp.get("members") or [])
                cursor = (resp.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    break
        except (SlackApiError, OSError, ValueError) as e:
            log.warning("App Home: %s hidden, conversations.members failed: %s", channel, _why(e))
            self._store(self._members, channel, None, False)
            return None
        members = frozenset(got)
        self._store(self._members, channel, members, True)
        return members

    def _is_guest(self, user: str) -> bool:
        """Guests (and anyone users.info cannot describe) see public channels only as members."""
        hit, guest = self._cached(self._guests, user)
        if hit:
            return guest
        try:
            u = self.client.users_info(user=user).get("user") or {}
        except (SlackApiError, OSError, ValueError) as e:
            log.warning("App Home: treating %s as a guest, users.info failed: %s", user, _why(e))
            self._store(self._guests, user, True, False)
            return True
        guest = bool(u.get("is_restricted") or u.get("is_ultra_restricted") or u.get("is_stranger")
                     or u.get("deleted"))
        self._store(self._guests, user, guest, True)
        return guest


def _why(e: Exception) -> str:
    if isinstance(e, SlackApiError):
        return str((e.response.data or {}).get("error") if isinstance(e.response.data, dict) else e.response.status_code)
    return type(e).__name__
