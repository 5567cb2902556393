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

from node_agent.digits import is_ascii_uint

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


def parse_timestamp(value: str) -> int:
    """Unix seconds from a timestamp header: 1 to 12 ASCII digits, else AuthError (401).
    `str.isdigit()` is not enough: it accepts "¹²" (then `int()` raises) and "١٢٣" (then signing,
    which encodes the timestamp as ASCII, raises)."""
    if not is_ascii_uint(value, 12):
        raise AuthError(f"{HEADER_TIMESTAMP} is not unix seconds")
    return int(value)


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
    ts = parse_timestamp(timestamp)
    current = time.time() if now is None else now
    skew = current - ts
    if abs(skew) > window_s:
        raise AuthError(f"timestamp outside the {window_s} s window (clock skew {skew:+.0f} s)")
    expected = sign(secret, timestamp, body)
    # compare_digest on equal-type strings: constant time whatever the mismatch position.
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("ascii", "replace")):
        raise AuthError("signature mismatch (wrong secret or altered body)")
    if replay_cache is not None:
        if not replay_cache.check_and_remember(expected, ts + window_s, current):
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


# --- scheme v2: node-agent requests, bound to their target, each accepted once -----------------------
# X-Triage-Signature: v2=<hex HMAC-SHA256(secret, "v2\n" METHOD "\n" PATH "\n" HOST "\n" TIMESTAMP "\n"
#                         NONCE "\n" hex(SHA-256(body)))>
# HOST is X-Triage-Host: the host name (or address) the client meant, which the agent checks against
# its own names; NONCE is X-Triage-Nonce, which the agent remembers for the window and refuses twice.
HEADER_HOST = "X-Triage-Host"
HEADER_NONCE = "X-Triage-Nonce"
SCHEME_V2 = "v2"
_NONCE_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_")


def _canonical_v2(method: str, path: str, host: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    return "\n".join((SCHEME_V2, method.upper(), path, host.lower().rstrip("."), timestamp, nonce,
                      hashlib.sha256(body).hexdigest())).encode("utf-8", "surrogateescape")


def sign_request(secret: bytes, method: str, path: str, host: str, timestamp: str, nonce: str, body: bytes) -> str:
    mac = hmac.new(secret, _canonical_v2(method, path, host, timestamp, nonce, body), hashlib.sha256)
    return f"{SCHEME_V2}={mac.hexdigest()}"


def request_headers(secret: bytes, method: str, path: str, host: str, body: bytes,
                    now: float | None = None, nonce: str | None = None) -> dict[str, str]:
    """The headers of one v2-signed request to `host` (a fresh random nonce unless one is given)."""
    import secrets as _secrets

    timestamp = str(int(time.time() if now is None else now))
    nonce = nonce or _secrets.token_hex(16)
    return {HEADER_TIMESTAMP: timestamp, HEADER_HOST: host, HEADER_NONCE: nonce,
            HEADER_SIGNATURE: sign_request(secret, method, path, host, timestamp, nonce, body)}


def verify_request(
    secret: bytes,
    headers: dict[str, str | None],
    method: str,
    path: str,
    body: bytes,
    *,
    accept_host: object = None,
    now: float | None = None,
    window_s: int = WINDOW_S,
    nonces: ReplayCache | None = None,
) -> bool:
    """Verify a v2 request; `headers` maps the four X-Triage-* names to their values (None if absent).

    `accept_host(name) -> bool` says whether X-Triage-Host names this receiver. Returns True or raises
    AuthError (401). The nonce is remembered only once the signature is known good.
    """
    timestamp = headers.get(HEADER_TIMESTAMP)
    signature = headers.get(HEADER_SIGNATURE)
    host = headers.get(HEADER_HOST)
    nonce = headers.get(HEADER_NONCE)
    if not timestamp or not signature:
        raise AuthError(f"missing {HEADER_TIMESTAMP} or {HEADER_SIGNATURE} header")
    scheme = signature.strip().split("=", 1)[0]
    if scheme != SCHEME_V2:
        raise AuthError(f"signature scheme {scheme[:8]!r} is not accepted: this agent needs {SCHEME_V2} "
                        "(method, path, host and nonce signed); upgrade the bot")
    if not host or not nonce:
        raise AuthError(f"missing {HEADER_HOST} or {HEADER_NONCE} header")
    ts = parse_timestamp(timestamp)
    if not 16 <= len(nonce) <= 64 or not set(nonce) <= _NONCE_CHARS:
        raise AuthError(f"{HEADER_NONCE} must be 16 to 64 characters of [A-Za-z0-9_-]")
    if len(host) > 253 or not host.isascii():
        raise AuthError(f"{HEADER_HOST} is not a host name")
    current = time.time() if now is None else now
    skew = current - ts
    if abs(skew) > window_s:
        raise AuthError(f"timestamp outside the {window_s} s window (clock skew {skew:+.0f} s)")
    expected = sign_request(secret, method, path, host, timestamp, nonce, body)
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("ascii", "replace")):
        raise AuthError("signature mismatch (wrong secret, or altered method, path, host or body)")
    if accept_host is not None and not accept_host(host):  # type: ignore[operator]
        raise AuthError(f"request meant for {host}, not this agent")
    if nonces is not None and not nonces.check_and_remember(nonce, ts + window_s, current):
        raise AuthError("replayed request (this nonce was already used)")
    return True
