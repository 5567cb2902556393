"""Request signing shared by the agent, the bot and the Slurm webhook (stdlib only).

Scheme v1: `X-Triage-Timestamp: <unix seconds>` and
`X-Triage-Signature: v1=<hex HMAC-SHA256(secret, b"v1:" + timestamp + b":" + body)>`.
A request is accepted once, within WINDOW_S of the receiver's clock.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import threading
import time

HEADER_TIMESTAMP = "X-Triage-Timestamp"
HEADER_SIGNATURE = "X-Triage-Signature"
SCHEME = "v1"
WINDOW_S = 300


class AuthError(Exception):
    """A request that must be rejected; `reason` is safe to log and to return (no secret in it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SecretFileError(Exception):
    """The secret file cannot be used; the message says why and how to fix it."""


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret, b"v1:" + timestamp.encode("ascii") + b":" + body, hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def signed_headers(secret: bytes, body: bytes, now: float | None = None) -> dict[str, str]:
    timestamp = str(int(time.time() if now is None else now))
    return {HEADER_TIMESTAMP: timestamp, HEADER_SIGNATURE: sign(secret, timestamp, body)}


class ReplayCache:
    """Signatures already accepted, kept until their timestamp leaves the window."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()
        self._max = max_entries
        self._pruned_at = 0.0

    def check_and_remember(self, signature: str, expires_at: float, now: float) -> bool:
        """True the first time a signature is seen; False for a replay."""
        with self._lock:
            if len(self._seen) >= self._max or now - self._pruned_at >= 1.0:
                self._prune(now)
            if signature in self._seen:
                return False
            if len(self._seen) >= self._max:
                # Full of live entries: refusing is safer than forgetting (which would allow replays).
                raise AuthError("too many recent requests to track replays; retry shortly")
            self._seen[signature] = expires_at
            return True

    def _prune(self, now: float) -> None:
        self._pruned_at = now
        for sig in [s for s, exp in self._seen.items() if exp < now]:
            del self._seen[sig]

    def __len__(self) -> int:
        return len(self._seen)


def verify(
    secret: bytes,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    *,
    now: float | None = None,
    window_s: int = WINDOW_S,
    replay_cache: ReplayCache | None = None,
) -> bool:
    """Return True for an authentic, fresh, first-seen request; raise AuthError otherwise."""
    if not timestamp or not signature:
        raise AuthError(f"missing {HEADER_TIMESTAMP} or {HEADER_SIGNATURE} header")
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise AuthError(f"{HEADER_TIMESTAMP} is not unix seconds")
    current = time.time() if now is None else now
    skew = current - int(timestamp)
    if abs(skew) > window_s:
        raise AuthError(f"timestamp outside the {window_s} s window (clock skew {skew:+.0f} s)")
    expected = sign(secret, timestamp, body)
    # compare_digest on equal-type strings: constant time whatever the mismatch position.
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("ascii", "replace")):
        raise AuthError("signature mismatch (wrong secret or altered body)")
    if replay_cache is not None:
        if not replay_cache.check_and_remember(expected, int(timestamp) + window_s, current):
            raise AuthError("replayed request (this signature was already used)")
    return True


def load_secret(path: str | os.PathLike[str]) -> bytes:
    """Read a shared secret, refusing files other users can read or that hold nothing."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SecretFileError(f"cannot read secret file {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise SecretFileError(f"secret file {path} is not a regular file")
    if st.st_mode & stat.S_IROTH:
        raise SecretFileError(
            f"secret file {path} is world-readable (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"run: chmod o-rwx {path}  (Kubernetes: set the Secret volume's defaultMode to 0400 or 0440)"
        )
    try:
        with open(path, "rb") as fh:
            secret = fh.read().rstrip()
    except OSError as exc:
        raise SecretFileError(f"cannot read secret file {path}: {exc.strerror}") from exc
    if not secret:
        raise SecretFileError(f"secret file {path} is empty")
    return secret
