"""Host names and addresses as policy entries write them: the one grammar of the
``network`` key (read by the policy validator and the runtime guard alike) and of hosts
in URL patterns.

>>> HostPattern.parse("*.hf.co:443").matches("cdn.hf.co", 443)
True
>>> [HostPattern.parse(e).host for e in ("[::1]:8080", "unix:/run/x.sock", "Hub.Example.")]
['::1', 'unix:/run/x.sock', 'hub.example']
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket

from safehub._internal.frozen import Frozen

__all__ = ["HostPattern", "is_name", "local_name", "normalise_host",
           "parse_ip"]

_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (IPv4-mapped IPv6 as IPv4), or None if it is a name."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_name(host: str) -> bool:
    """Whether ``host`` (lower case) is a host name: dot-separated labels of letters,
    digits, ``-`` and ``_`` (the one grammar of names, in policy entries and URLs alike).

    >>> is_name("cdn.hf.co"), is_name("a..b"), is_name("-x.example")
    (True, False, False)
    """
    return 0 < len(host) <= 253 and all(_LABEL.match(label) for label in host.split("."))


def normalise_host(host: str) -> str:
    """Lower case, no trailing dot, no IPv6 brackets; IP addresses in their short form."""
    host = host.strip().rstrip(".").lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    ip = parse_ip(host)
    return str(ip) if ip is not None else host


class HostPattern(Frozen):
    """One ``network`` entry: ``host``, ``host:port``, ``*.suffix[:port]``, ``[v6]:port``,
    an IP address, or ``unix:/path`` for a Unix socket.

    ``*.example.com`` matches any name under ``example.com`` (at any depth), not the name
    itself. A pattern without a port matches every port.
    """

    text: str
    host: str
    port: int | None = None
    wildcard: bool = False

    @classmethod
    def parse(cls, text: str, *, names_only: bool = False) -> HostPattern:
        """Read one entry; raise ``ValueError`` saying what is wrong. ``names_only``: a
        plain host name or address, no port, wildcard or socket (``allowed_hosts``)."""
        raw = text.strip()
        if names_only and (":" in raw or raw.startswith("*.")):
            raise ValueError("expected a host name (no port, wildcard or socket)")
        if raw.startswith("unix:"):
            if not raw[5:].startswith("/"):
                raise ValueError("a unix socket entry is unix:/absolute/path")
            return cls(raw, raw)
        host, port = raw, None
        if raw.startswith("["):
            close = raw.find("]")
            rest = raw[close + 1:]
            if close < 0 or (rest and not rest.startswith(":")):
                raise ValueError("an IPv6 entry is [address] or [address]:port")
            host = raw[1:close]
            port = _port(rest[1:]) if rest else None
            if parse_ip(host) is None:
                raise ValueError(f"{host!r} is not an IPv6 address")
        elif raw.count(":") == 1:
            host, port_text = raw.split(":")
            port = _port(port_text)
        host = normalise_host(host)
        wildcard = host.startswith("*.")
        name = host[2:] if wildcard else host
        if (parse_ip(name) is None or wildcard) and not is_name(name):
            raise ValueError("expected a host name, *.domain, an IP address or unix:/path")
        return cls(raw, name, port, wildcard)

    def matches(self, host: str, port: int | None) -> bool:
        """Whether this entry allows ``host`` (already normalised) on ``port``."""
        if self.port is not None and port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def local_name(host: str) -> bool:
    """Names the resolver answers without asking DNS; decided at connect instead."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    with contextlib.suppress(OSError):
        return host == socket.gethostname().lower()
    return False
