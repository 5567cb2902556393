"""systemd readiness (Type=notify): one datagram to $NOTIFY_SOCKET, as sd_notify(3) sends it.

Standard library only, so both the agent and the bot use it. Without NOTIFY_SOCKET (not started
by systemd, or Type=simple) it does nothing.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send `state` ("READY=1", "STOPPING=1", "STATUS=..." lines); True when it was sent."""
    addr = os.environ.get("NOTIFY_SOCKET", "")
    if not addr:
        return False
    if addr.startswith("@"):  # abstract namespace
        addr = "\0" + addr[1:]
    elif not addr.startswith("/"):
        log.warning("NOTIFY_SOCKET=%s is not a unix socket path; readiness not sent", addr)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(addr)
            sock.sendall(state.encode("utf-8"))
    except OSError as exc:
        log.warning("cannot notify systemd at %s: %s", os.environ.get("NOTIFY_SOCKET"), exc)
        return False
    return True
