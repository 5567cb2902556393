"""TLS for the agent's port: a server certificate, and optionally client certificates required.

TLS keeps process lists and user names off the wire in clear and lets the bot check it talks to the
real agent; the HMAC signature (node_agent.auth) stays in force either way. With `tls_client_ca`
set, a client must present a certificate issued by that CA before any HTTP is read.
"""

from __future__ import annotations

import ssl


class TLSConfigError(ValueError):
    pass


def server_context(cert_file: str, key_file: str | None = None, client_ca_file: str | None = None) -> ssl.SSLContext:
    """TLS 1.2+ server context; a clear error for a missing file or a key that does not fit."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as exc:
        raise TLSConfigError(f"TLS certificate or key not found: {exc.filename}") from None
    except PermissionError as exc:
        raise TLSConfigError(f"cannot read the TLS certificate or key {exc.filename}: permission denied") from None
    except ssl.SSLError as exc:
        raise TLSConfigError(f"TLS certificate {cert_file} and key {key_file or '(in the same file)'} "
                             f"are not a usable pair: {exc.reason or exc}") from None
    if client_ca_file:
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(f"cannot load the client CA file {client_ca_file}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
