"""Which hosts the bot may send a signed probe to (standard library only).

Host names come from logs and from `/diagnose hosts ...`, that is from whoever wrote the log or
typed the command. Before any URL is formed a name must be an RFC 1123 host name (letters, digits
and hyphens in dot-separated labels: no port, path, `#`, `@`, userinfo or spaces), and it must be
allowed:

* a host in the agent map is allowed (the operator wrote its URL);
* with `TRIAGE_AGENT_ALLOW` set (host globs such as `gpu-*` or `*.cluster.internal`, and CIDRs such
  as `10.20.0.0/16`), a host must be in the map or match one of its entries;
* without it, any valid name is allowed when there is no agent map (the URL template decides where it
  goes), and only the map's hosts when there is one.

IP literals are refused unless a CIDR in the allow-list holds them. Whatever the list, an address in
loopback, link-local (169.254/16, fe80::/10, the cloud metadata services), unspecified or multicast
space is never contacted unless a CIDR in the allow-list names it explicitly; names are resolved and
the checked address is the one connected to.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import socket
from collections.abc import Iterable

MAX_HOSTS_PER_DIAGNOSIS = 64
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)
_FORBIDDEN_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "metadata",
                    "metadata.google.internal", "instance-data", "instance-data.ec2.internal"}
# Cloud metadata services outside link-local (Alibaba, Oracle's legacy, AWS IPv6).
_METADATA = [ipaddress.ip_network(n) for n in ("100.100.100.200/32", "192.0.0.192/32", "fd00:ec2::254/128")]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def host_name_problem(host: object) -> str | None:
    """None for an RFC 1123 host name; otherwise why it is not one (a sentence safe to show)."""
    if not isinstance(host, str) or not host:
        return "empty host name"
    if len(host) > 253:
        return "host name longer than 253 characters"
    if not host.isascii():
        return "host name with non-ASCII characters"
    for ch, what in (("@", "userinfo ('@')"), ("/", "a path"), ("#", "a fragment ('#')"), ("?", "a query"),
                     (":", "a port or IPv6 address (':')"), ("%", "an escape ('%')"), ("\\", "a backslash")):
        if ch in host:
            return f"host name with {what}"
    if any(c.isspace() for c in host):
        return "host name with spaces"
    labels = host.lower().split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return "not an RFC 1123 host name (letters, digits and hyphens in dot-separated labels)"
    return None


def ip_literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def special_address(addr: Address) -> str | None:
    """Why an address is never contacted by default (loopback, link-local/metadata, ...), or None."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_loopback:
        return "a loopback address"
    if addr.is_link_local or any(addr in n for n in _METADATA):
        return "a link-local or cloud metadata address"
    if addr.is_unspecified:
        return "the unspecified address"
    if addr.is_multicast:
        return "a multicast address"
    if isinstance(addr, ipaddress.IPv4Address) and addr == ipaddress.IPv4Address("255.255.255.255"):
        return "the broadcast address"
    return None


class AllowList:
    """Parsed `TRIAGE_AGENT_ALLOW`: host globs and CIDRs (comma or space separated)."""

    def __init__(self, entries: Iterable[str] | str | None = None) -> None:
        if isinstance(entries, str):
            entries = re.split(r"[\s,]+", entries)
        self.globs: list[str] = []
        self.networks: list[Network] = []
        self.configured = entries is not None
        for raw in entries or []:
            entry = raw.strip().lower()
            if not entry:
                continue
            if "/" in entry or ip_literal(entry) is not None:
                try:
                    self.networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise ValueError(f"agent allow-list entry {raw!r} is not a CIDR") from None
            elif re.fullmatch(r"[a-z0-9*?.\-\[\]]+", entry, re.ASCII):
                self.globs.append(entry)
            else:
                raise ValueError(f"agent allow-list entry {raw!r} is neither a host glob nor a CIDR")

    def __bool__(self) -> bool:
        return bool(self.globs or self.networks)

    def name_matches(self, host: str) -> bool:
        host = host.lower()
        return any(fnmatch.fnmatchcase(host, g) for g in self.globs)

    def holds(self, addr: Address) -> bool:
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr.version == n.version and addr in n for n in self.networks)


class TargetPolicy:
    """Decides, before any URL is formed, whether a host may be probed; None means yes."""

    def __init__(self, allow: AllowList | Iterable[str] | str | None, mapped: Iterable[str] = (),
                 has_map: bool = False) -> None:
        self.allow = allow if isinstance(allow, AllowList) else AllowList(allow)
        self.mapped = {h.lower() for h in mapped}
        self.has_map = has_map

    def is_mapped(self, host: str) -> bool:
        h = host.lower()
        return h in self.mapped or h.split(".", 1)[0] in self.mapped

    def refusal(self, host: str) -> str | None:
        """Why `host` is not probed ("not probed: ..."), or None when it may be."""
        problem = host_name_problem(host)
        addr = ip_literal(host) if isinstance(host, str) else None
        if problem and addr is None:
            return f"not probed: {host!r} is not a host name ({problem})"
        if self.is_mapped(host):
            return None
        if addr is not None:
            if self.allow.holds(addr):
                return None
            return (f"not probed: {host} is an IP address; list its network in TRIAGE_AGENT_ALLOW "
                    "(--agent-allow) or map it in the agent map to probe it")
        if host.lower() in _FORBIDDEN_NAMES or host.lower().endswith(".localhost"):
            return f"not probed: {host} names this machine or a metadata service"
        if self.allow.name_matches(host):
            return None
        if self.allow.configured:
            return f"not probed: {host} is not in the agent map and matches nothing in TRIAGE_AGENT_ALLOW"
        if self.has_map:
            return f"not probed: {host} is not in the agent map (TRIAGE_AGENT_MAP / --agent-map)"
        return None

    def address_refusal(self, host: str, addr: Address) -> str | None:
        """Why a resolved address of a template-derived URL must not be contacted, or None."""
        why = special_address(addr)
        if why and not self.allow.holds(addr):
            return (f"not probed: {host} resolves to {addr}, {why}; list it in TRIAGE_AGENT_ALLOW "
                    "(--agent-allow) to allow it")
        return None


def resolve(host: str, port: int) -> list[tuple[Address, tuple]]:
    """(address, sockaddr) for each address of host: the ones the client will check and connect to."""
    out = []
    for family, _type, _proto, _canon, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if family in (socket.AF_INET, socket.AF_INET6):
            out.append((ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]), sockaddr))
    return out
