"""What the environment says about reaching a host: loopback, proxies, CA bundles, and
whether a failure means the network is unreachable.

The transport asks this module whether a host is this machine's (never proxied), which
proxy the environment sends a URL through (``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``,
read as requests reads them), which CA bundle verifies TLS (``REQUESTS_CA_BUNDLE``,
``CURL_CA_BUNDLE``, ``SSL_CERT_FILE``, else certifi's bundle, else the system's), and
whether a failure means the network is unreachable (fail at once) rather than flaky
(retry). The proxy read here is the proxy connected to: the transport connects to the
host and port of :attr:`Proxy.url`, which :func:`~safehub._internal.urls.read_url` read.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from safehub._internal import fixes
from safehub._internal.urls import Url, UrlError, proxy_credentials, read_url

if TYPE_CHECKING:
    from safehub.errors import FetchError, UnreachableError

__all__ = [
    "CA_VARIABLES",
    "CONFINED",
    "MissingBundle",
    "Proxy",
    "ca_bundle",
    "confined_port",
    "environ_proxy",
    "host_of",
    "is_loopback",
    "proxy_for",
    "proxy_hosts",
    "tls_cause",
    "tls_failed",
    "unreachable_cause",
    "unreachable_error",
]

_UNREACHABLE = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH,
                          errno.EADDRNOTAVAIL})
CA_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE")
"""The variables that name a CA bundle, the first one set winning (requests reads the
first two; ``SSL_CERT_FILE`` is OpenSSL's own, which urllib, and so torch.hub, reads)."""


def host_of(url: str) -> str:
    """The host of ``url`` as the transport reads it ("" where it refuses the URL)."""
    try:
        return read_url(url, http=True).host
    except UrlError:
        return ""


def is_loopback(host: str) -> bool:
    """A name or address of this machine: never sent through a proxy (a proxy cannot reach
    the caller's loopback, and ``NO_PROXY`` rarely names it)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Proxy(NamedTuple):
    """A proxy the environment names: where it is (no credentials in it) and the
    ``user:password`` to send it (never shown)."""

    url: Url
    auth: str | None
    variable: str


def environ_proxy(url: Url) -> Proxy | None:
    """The proxy the environment sends ``url`` through, as requests chose it: none for a
    loopback host or one ``NO_PROXY`` names (a suffix, ``*``, or an IPv4 network in CIDR
    form); else ``{scheme}_proxy``, then ``all_proxy`` (lower case first). A proxy that
    :func:`read_url` refuses is a :class:`UrlError` (never guessed at)."""
    from urllib.request import getproxies, proxy_bypass

    if is_loopback(url.host) or _no_proxy(url):
        return None
    try:
        if proxy_bypass(url.host):
            return None
    except (TypeError, OSError):
        pass
    proxies = getproxies()
    for key in (f"{url.scheme}://{url.host}", url.scheme, f"all://{url.host}", "all"):
        if proxies.get(key):
            text = proxies[key]
            break
    else:
        return None
    variable = f"{key.partition(':')[0].upper()}_PROXY"
    return Proxy(read_url(text, proxy=True), proxy_credentials(text), variable)


def _no_proxy(url: Url) -> bool:
    """``NO_PROXY`` as requests reads it (its own suffix and CIDR checks)."""
    text = os.environ.get("no_proxy") or os.environ.get("NO_PROXY")
    if not text:
        return False
    names = [n for n in text.replace(" ", "").split(",") if n]
    try:
        address = ipaddress.IPv4Address(url.host)
    except ValueError:
        address = None
    if address is not None:
        for name in names:
            try:
                if "/" in name and address in ipaddress.IPv4Network(name, strict=False):
                    return True
            except ValueError:
                continue
            if name == url.host:
                return True
        return False
    with_port = f"{url.host}:{url.port}" if url.authority != url.host else url.host
    return any(url.host.endswith(n) or with_port.endswith(n) for n in names)


def proxy_for(url: str) -> str | None:
    """The proxy the environment sends ``url`` through, if any (credentials removed;
    "a proxy" where its variable holds what safehub does not read as a URL)."""
    try:
        proxy = environ_proxy(read_url(url, http=True))
    except UrlError:
        return "a proxy"
    return f"{proxy.url.scheme}://{proxy.url.authority}" if proxy is not None else None


def proxy_hosts(urls: Iterable[str]) -> tuple[str, ...]:
    """The hosts of the proxies the environment sends ``urls`` through (the one reading of
    ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``...: :func:`environ_proxy`)."""
    found = set()
    for url in urls:
        try:
            proxy = environ_proxy(read_url(url, http=True))
        except UrlError:
            continue
        if proxy is not None:
            found.add(proxy.url.host)
    return tuple(sorted(found))


class MissingBundle(OSError):
    """The CA bundle a variable names does not exist (nothing is sent anywhere)."""

    def __init__(self, variable: str, path: str) -> None:
        super().__init__(f"the CA bundle {path} that {variable} names does not exist")
        self.variable = variable


def ca_bundle() -> tuple[str | None, str]:
    """(the file or folder that verifies TLS, where it comes from): the first of
    :data:`CA_VARIABLES` that is set, else certifi's bundle (requests' default) where
    certifi is installed, else (None, "system") for the system's store. A variable that
    names nothing is a :class:`MissingBundle`."""
    for variable in CA_VARIABLES:
        path = os.environ.get(variable)
        if path:
            if not os.path.exists(path):
                raise MissingBundle(variable, path)
            return path, variable
    try:
        import certifi
    except ImportError:
        return None, "system"
    return certifi.where(), "certifi"


def unreachable_cause(exc: BaseException) -> BaseException | None:
    """The socket-level reason behind a failed request, if it is unreachability."""
    for current in _chain(exc):
        if isinstance(current, socket.gaierror) or (
                isinstance(current, OSError) and current.errno in _UNREACHABLE):
            return current
    return None


def unreachable_error(exc: BaseException, hop: Url, what: str, *, load: bool = True
                      ) -> UnreachableError | None:
    """The error for a request to ``hop`` that failed because the network is unreachable
    (a name that does not resolve, a refused connection), or None for another failure.
    ``load``: said as a load says it, with the proxy and what works without a network."""
    from safehub.errors import UnreachableError

    reason = unreachable_cause(exc)
    if reason is None:
        return None
    if not load:
        return UnreachableError(f"cannot connect to {hop.host} for {what} ({reason})",
                                fix=fixes.say("check the address, the network or the proxy"))
    proxy = proxy_for(str(hop))
    via = f" through the proxy {proxy} (from HTTPS_PROXY/ALL_PROXY)" if proxy else ""
    return UnreachableError(
        f"the network is unreachable: cannot connect to {hop.host}{via} for {what} ({reason})",
        fix=fixes.say((f"check that the proxy {proxy} runs, or add {hop.host} to NO_PROXY. "
                       if proxy else "check the network or proxy. ") +
                      "Without a network, a cold load needs the code on this machine already: "
                      "a mirror (SAFEHUB_GITHUB_URL), a cache filled by `safehub prefetch`, or "
                      "a lockfile with SAFEHUB_OFFLINE=1 and a filled cache"))


CONFINED = "SAFEHUB_CONFINED"
"""Set in a job of ``safehub run --confine`` to its ruleset's JSON
(:mod:`safehub.run.confine.ruleset`, which the transport, a lower layer, does not import)."""


def confined_port(exc: BaseException, host: str, port: int, what: str) -> FetchError | None:
    """The refusal of a connection the kernel held (``EACCES``) in a job of ``safehub run
    --confine`` whose ``[confine] connect_ports`` leave ``port`` out, with its cause and
    fix; None for any other failure (said as before)."""
    import json

    from safehub.errors import FetchError

    raw = os.environ.get(CONFINED)
    try:
        ports = [int(p) for p in json.loads(raw)["connect_ports"]] if raw else None
    except (ValueError, KeyError, TypeError):
        ports = None
    if ports is None or port in ports:
        return None
    for current in _chain(exc):
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
    return None


def tls_failed(exc: BaseException, host: str, what: str) -> FetchError | None:
    """A request that failed at TLS, as one error: the handshake (its cause as the TLS
    library said it), or a CA bundle the environment names that does not exist (then no
    request is made at all); None for any other failure."""
    from safehub.errors import FetchError

    if isinstance(exc, MissingBundle):
        return FetchError(
            f"the CA bundle {exc.variable} names does not exist, so nothing was sent to "
            f"{host} for {what}",
            fix=fixes.say(f"unset {exc.variable} (a stopped `safehub demo --serve` leaves it "
                          "behind), or point it at an existing PEM file"))
    cause = tls_cause(exc)
    if cause is None:
        return None
    return FetchError(f"TLS to {host} failed for {what}: {cause}",
                      fix=fixes.say("for a private CA set REQUESTS_CA_BUNDLE to its PEM file"))


def tls_cause(exc: BaseException) -> BaseException | None:
    """The TLS library's own error behind a failed request, if TLS is what failed."""
    import ssl

    for current in _chain(exc):
        if isinstance(current, ssl.SSLError):
            return current
    return None


def _chain(exc: BaseException) -> Iterable[BaseException]:
    """``exc`` and what caused it: its cause or context, or an exception it wraps as its
    first argument (as urllib3 wraps the socket's and the TLS library's errors)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        wrapped = [a for a in (current.__cause__, current.__context__,
                               getattr(current, "original_error", None), *current.args)
                   if isinstance(a, BaseException)]
        current = wrapped[0] if wrapped else None
