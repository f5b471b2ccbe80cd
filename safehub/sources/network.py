"""What the environment says about reaching a host: loopback, proxies, unreachability.

The transport asks this module whether a host is this machine's (never proxied), which
proxy the environment sends a URL through (requests' own reading of ``HTTPS_PROXY``,
``ALL_PROXY``, ``NO_PROXY``), and whether a failure means the network is unreachable
(fail at once) rather than flaky (retry).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.urls import UrlError, read_url

if TYPE_CHECKING:
    from safehub.errors import FetchError

__all__ = [
    "CONFINED",
    "DIRECT",
    "confined_port",
    "host_of",
    "is_loopback",
    "proxy_for",
    "proxy_hosts",
    "tls_failed",
    "unreachable_cause",
]

_UNREACHABLE = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH,
                          errno.EADDRNOTAVAIL})


def host_of(url: str) -> str:
    """The host of ``url`` as the transport reads it ("" where it refuses the URL)."""
    try:
        return read_url(url, http=True).host
    except UrlError:
        return ""


#: Request-level proxies that override the environment's (requests drops ``None`` keys).
DIRECT = {"http": None, "https": None, "all": None}


def is_loopback(host: str) -> bool:
    """A name or address of this machine: never sent through a proxy (a proxy cannot reach
    the caller's loopback, and ``NO_PROXY`` rarely names it)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_for(url: str) -> str | None:
    """The proxy the environment sends ``url`` through, if any (credentials removed)."""
    if is_loopback(host_of(url)):
        return None
    import requests.utils

    try:
        proxy = requests.utils.select_proxy(url, requests.utils.get_environ_proxies(url))
    except (ValueError, OSError):
        return None
    if not proxy:
        return None
    try:  # as urllib3 reads the proxy for requests; its user and password are not kept
        read = read_url(proxy, proxy=True)
    except UrlError:
        return "a proxy"
    return f"{read.scheme}://{read.authority}"


def proxy_hosts(urls: Iterable[str]) -> tuple[str, ...]:
    """The hosts of the proxies the environment sends ``urls`` through (the one reading of
    ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``...: requests' own)."""
    found = {read_url(proxy, proxy=True).host for proxy in map(proxy_for, urls)
             if proxy and "://" in proxy}
    return tuple(sorted(found))


def unreachable_cause(exc: BaseException) -> BaseException | None:
    """The socket-level reason behind a requests/urllib3 error, if it is unreachability."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, socket.gaierror) or (
                isinstance(current, OSError) and current.errno in _UNREACHABLE):
            return current
        current = current.__cause__ or current.__context__
    return None


CONFINED = "SAFEHUB_CONFINED"
"""Set in a job of ``safehub run --confine`` to its ruleset's JSON
(:mod:`safehub.run.confine.ruleset`, which the transport, a lower layer, does not import)."""


def confined_port(exc: BaseException, host: str, port: int, what: str) -> FetchError | None:
    """The refusal of a connection the kernel held (``EACCES``) in a job of ``safehub run
    --confine`` whose ``[confine] connect_ports`` leave ``port`` out, with its cause and
    fix; None for any other failure (said as before)."""
    import json
    import os

    from safehub.errors import FetchError

    raw = os.environ.get(CONFINED)
    try:
        ports = [int(p) for p in json.loads(raw)["connect_ports"]] if raw else None
    except (ValueError, KeyError, TypeError):
        ports = None
    if ports is None or port in ports:
        return None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.EACCES, errno.EPERM):
            wider = ", ".join(map(str, [*ports, port]))
            return FetchError(
                f"could not connect to {host} port {port} for {what}: this process runs "
                "under `safehub run --confine`, whose [confine] connect_ports "
                f"({', '.join(map(str, ports)) or 'none'}) leave port {port} out, so the "
                f"kernel refused the connection ({current.strerror or current})",
                fix=fixes.say(f"set connect_ports = [{wider}] in the [confine] table of your "
                "policy file (~/.config/safehub/policy.toml; only an admin's file or yours "
                "widens [confine], see `safehub docs confine`), then start the job again "
                              "with `safehub run --confine`"))
        current = current.__cause__ or current.__context__
    return None


def tls_failed(exc: BaseException, host: str, what: str) -> FetchError | None:
    """A request that failed at TLS, as one error: the handshake (its cause as the TLS
    library said it), or a CA bundle the environment names that does not exist (requests
    then makes no request at all); None for any other failure."""
    import os

    import requests

    from safehub.errors import FetchError

    if isinstance(exc, requests.exceptions.SSLError):
        return FetchError(f"TLS to {host} failed for {what}: {exc}",
                          fix=fixes.say("for a private CA set REQUESTS_CA_BUNDLE to its PEM "
                                        "file"))
    if not (isinstance(exc, OSError) and "TLS CA certificate bundle" in str(exc)):
        return None
    named = [name for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
             if os.environ.get(name) and not os.path.exists(os.environ[name])]
    return FetchError(
        f"the CA bundle {' or '.join(named) or 'the environment'} names does not exist, so "
        f"nothing was sent to {host} for {what}",
        fix=fixes.say(f"unset {' '.join(named) or 'REQUESTS_CA_BUNDLE'} (a stopped `safehub "
                      "demo --serve` leaves it behind), or point it at an existing PEM file"))
