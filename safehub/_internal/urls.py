r"""The one reading of a URL safehub follows: every decision about where a request goes
(host allow-lists, the GitHub token, registry credentials, redirect hops, storage hops,
token realms, proxies, the weights guard) reads the URL here, and the transport sends
exactly the string it read (:meth:`Url.__str__`).

Two parsers may read one string as two hosts: Python's ``urllib.parse`` takes the host
after the last ``@``, while urllib3 (the HTTP client safehub's transport speaks through,
and requests') ends the host at a backslash, so ``https://storage\@registry/x`` is
``registry`` to one and ``storage`` to the other. :func:`read_url` therefore refuses
whatever the parsers could read differently, or has no business in a URL safehub follows,
and reads the rest in the one shape they all agree on (``scheme://host[:port]/path[?query]``):

* a backslash, a control or whitespace character, or a non-ASCII character anywhere;
* a user or password (an ``@`` before the host), a fragment (``#``);
* a host that is empty, percent-encoded, not plain letters, digits, ``-``, ``_`` and
  dots, a number that is not a dotted IPv4 address (``127.1``, ``0x7f.1``), an IP
  address with a final dot (looked up in DNS as a name), or an IPv6 address with a zone;
* a port that is not 1 to 65535;
* ``.``/``..`` path segments (urllib3 removes them: the path sent would not be the path
  checked), a ``%`` that starts no percent-encoded byte, a character RFC 3986 does not
  allow unencoded in a path or query;
* a scheme other than ``https`` (``http`` only where the caller allows it).

What it accepts is normalised as urllib3 prepares it (host lower case without a final
dot, IPv6 without brackets, the scheme's default port dropped from the string,
percent-encodings upper case and unreserved ones decoded), so the string is a fixed point
of urllib3's reading: what was checked is what is sent. The transport connects to the
scheme, host and port read here and sends the path and query read as the request target
(:mod:`safehub.sources.connections`); it also asks urllib3 itself
(:func:`as_client_reads`) before it sends (urllib3 is not imported here: a warm load makes
no request), and tests/test_urls.py checks, against urllib3's parser and pools and real
loopback listeners reached through the transport, that the host read here is the host
connected to, for any URL.

>>> u = read_url("HTTPS://Registry.Example.:443/v2/%7eteam/x?n=1")
>>> str(u), u.origin
('https://registry.example/v2/~team/x?n=1', ('https', 'registry.example', 443))
>>> read_url("https://storage.example\\@registry.example/x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
safehub._internal.urls.UrlError: the URL 'https://storage.example\@registry...' has a backslash, ...
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import urljoin

from safehub._internal.hosts import is_name

__all__ = ["Url", "UrlError", "as_client_reads", "hosts_of_urls", "pattern_authority",
           "proxy_credentials", "read_url"]

DEFAULT_PORTS = {"https": 443, "http": 80, "socks4": 1080, "socks4a": 1080, "socks5": 1080,
                 "socks5h": 1080}
PROXY_SCHEMES = frozenset({"http", "https", "socks4", "socks4a", "socks5", "socks5h"})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_TARGET_CHARS = _UNRESERVED | frozenset("!$&'()*+,;=:@/?%")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")


class UrlError(ValueError):
    """A URL :func:`read_url` refuses: ``shown`` is the URL made printable (and cut),
    ``reason`` what is wrong with it, ``advice`` how to write it instead."""

    def __init__(self, text: str, reason: str, advice: str) -> None:
        self.shown = shown(text)
        self.reason = reason
        self.advice = advice
        super().__init__(f"the URL {self.shown} {reason}")


def shown(text: str) -> str:
    """``text`` quoted for a message, one printable line, at most about 200 characters."""
    from safehub._internal.text import printable

    cut = text if len(text) <= 200 else text[:200] + "..."
    return "'" + printable(cut.encode("ascii", "backslashreplace").decode("ascii")) + "'"


class Url(NamedTuple):
    """A URL as :func:`read_url` read it; ``str()`` gives the string to send. (A named
    tuple rather than a frozen dataclass: every load imports this module, and the
    dataclass costs 0.6 ms more to make.)"""

    scheme: str
    host: str
    """Lower case, no final dot; an IPv6 address without brackets, in its short form."""
    port: int
    """As written, else the scheme's default."""
    target: str
    """Path (from its ``/``) and ``?query``, as sent."""

    @property
    def origin(self) -> tuple[str, str, int]:
        """(scheme, host, port): what credentials are bound to."""
        return self.scheme, self.host, self.port

    @property
    def authority(self) -> str:
        """``host[:port]`` as written in the URL (no port where it is the default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = DEFAULT_PORTS.get(self.scheme)
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}{self.target}"

    def join(self, reference: str, *, http: bool = False) -> Url:
        """``reference`` (a redirect's ``Location``) resolved against this URL, then read
        as any URL is. The reference is checked before it is joined: a backslash or a
        control character must not reach the join's own reading."""
        _check_characters(reference)
        try:
            joined = urljoin(str(self), reference)
        except ValueError:  # a '[' without its ']'
            raise UrlError(reference, "is not a URL Python's parser can read",
                           "write scheme://host[:port]/path") from None
        return read_url(joined, http=http)

    def under(self, base: Url) -> bool:
        """Whether this URL is ``base`` or below it: the same origin, and its path
        ``base``'s or under it (``/api`` is not under ``/ap``)."""
        prefix = base.path.rstrip("/")
        return self.origin == base.origin and (self.path == prefix or
                                               self.path.startswith(prefix + "/"))


def read_url(text: str, *, http: bool = False, proxy: bool = False) -> Url:
    """Read ``text`` as the client that connects would, or raise :class:`UrlError` (see
    the module docstring). ``http``: ``http://`` is read too (the caller decides where it
    may be spoken). ``proxy``: a proxy as the environment names it (``HTTPS_PROXY``): any
    proxy scheme, ``http://`` where none is written, and a user and password, which are
    read past and never kept."""
    if not isinstance(text, str):
        raise UrlError(repr(text), "is not a string", "pass the URL as a str")
    if proxy and "://" not in text:
        text = "http://" + text  # as requests reads a proxy without a scheme
    _check_characters(text)
    m = _SCHEME.match(text)
    if m is None:
        raise UrlError(text, "is not an absolute URL", "write scheme://host/path, such as "
                       "https://example.com/file")
    scheme = m.group(1).lower()
    wanted = PROXY_SCHEMES if proxy else {"https", "http"} if http else {"https"}
    if scheme not in wanted:
        raise UrlError(text, f"uses {scheme}://; safehub speaks {' and '.join(sorted(wanted))}"
                       " only here", "use an https:// URL (for a private CA set "
                       "REQUESTS_CA_BUNDLE)")
    authority, target = _split(text[m.end():])
    if "@" in authority:
        if not proxy:
            raise UrlError(text, "names a user or password before '@'", "take the "
                           "credentials out of the URL (GITHUB_TOKEN, `docker login`)")
        authority = authority.rpartition("@")[2]  # as both parsers take a proxy's host
    host, port = _authority(text, authority, scheme)
    return Url(scheme, host, port, _target(text, target))


def _split(rest: str) -> tuple[str, str]:
    """(authority, target) of what follows a URL's ``scheme://``."""
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    return rest[:end], rest[end:]


def proxy_credentials(text: str) -> str | None:
    """The ``user:password`` written before the host of a proxy URL that
    ``read_url(text, proxy=True)`` read (percent-decoded; None where none is written),
    split where :func:`read_url` splits it: the credentials go to the host it read.

    >>> proxy_credentials("me:p%40ss@proxy.example:3128"), proxy_credentials("http://p:8080")
    ('me:p@ss', None)
    """
    from urllib.parse import unquote

    if "://" not in text:
        text = "http://" + text
    m = _SCHEME.match(text)
    user, at, _ = _split(text[m.end():] if m else "")[0].rpartition("@")
    name, _, password = user.partition(":")
    return f"{unquote(name)}:{unquote(password)}" if at else None


def as_client_reads(text: str, url: Url) -> None:
    """Raise :class:`UrlError` unless urllib3's ``parse_url`` (the parser of the client
    the transport speaks through, and of requests) reads ``text`` and ``str(url)`` as
    ``url`` (the transport calls this before each request, urllib3 then imported)."""
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    for given in dict.fromkeys((text, str(url))):  # the text as sent: read once
        try:
            got = parse_url(given)
        except LocationParseError:
            got = None
        host = (got.host or "") if got is not None else ""
        host = host[1:-1] if host.startswith("[") else host
        host = host[:-1] if host.endswith(".") else host
        if ":" in host and "%" not in host:
            with contextlib.suppress(ValueError):
                host = str(ipaddress.IPv6Address(host))
        if got is None or (got.scheme, host, got.port or DEFAULT_PORTS.get(got.scheme or "")
                           ) != url.origin or got.auth is not None:
            raise UrlError(text, "is read as another place by the HTTP client (urllib3)",
                           "write the URL in its plain form: scheme://host[:port]/path")


def pattern_authority(pattern: str) -> tuple[str, int | None]:
    """The host (lower case, no final dot, IPv6 without brackets) and port (None where
    none is written, or a glob is) of a URL pattern such as a policy's ``weights`` glob,
    split where :func:`read_url` splits a URL; the host may hold glob characters
    (``*.hf.co``). Raise :class:`UrlError` where the authority has what :func:`read_url`
    refuses.

    >>> pattern_authority("https://*.HF.co/x/*"), pattern_authority("https://[::1]:8080/*")
    (('*.hf.co', None), ('::1', 8080))
    >>> pattern_authority("https://localhost:*/weights/*")
    ('localhost', None)
    """
    _check_characters(pattern)
    m = _SCHEME.match(pattern)
    if m is None:
        raise UrlError(pattern, "is not an absolute URL pattern", "start it with https://")
    authority = _split(pattern[m.end():])[0]
    if "@" in authority or "%" in authority:
        raise UrlError(pattern, "has '@' or '%' in its host", "write the host name plainly")
    host, port = _split_port(pattern, authority, glob=True)
    host = host.lower()
    return (host[:-1] if host.endswith(".") else host), port


def hosts_of_urls(patterns: Iterable[str]) -> tuple[str, ...]:
    """The hosts of URL patterns (such as a policy's ``weights``), for ``weights_hosts``.

    >>> hosts_of_urls(["https://download.pytorch.org/models/*", "https://*.hf.co/x/*"])
    ('download.pytorch.org', '*.hf.co')
    """
    hosts: list[str] = []
    for pattern in patterns:
        try:  # the host where a URL's reading puts it (urls.read_url)
            host = pattern_authority(pattern)[0]
        except UrlError:
            continue  # the policy validator refuses such a pattern
        if not host or set("*?[]!") & set(host.replace("*.", "", 1)):
            continue  # a glob, not one host
        host = f"[{host}]" if ":" in host else host
        if host not in hosts:
            hosts.append(host)
    return tuple(hosts)


# -- the parts -----------------------------------------------------------------------------

def _check_characters(text: str) -> None:
    if text.isascii() and text.isprintable() and not any(c in text for c in " #\\"):
        return  # no character the loop below refuses (the others of isspace are controls)
    for c in text:
        if c == "\\":
            raise UrlError(text, "has a backslash, which one parser reads as the end of the "
                           "host and another as part of it", "write '/' between path "
                           "segments, or %5C for a backslash in a path")
        if c.isspace() or not c.isprintable() or not c.isascii():
            raise UrlError(text, f"has the character {c!a}, which has no place in a URL "
                           "(a control, whitespace or non-ASCII character)",
                           "percent-encode it in a path (%20 for a space); write a host "
                           "in its ASCII form (xn--...)")
        if c == "#":
            raise UrlError(text, "has a fragment ('#')", "remove the '#' and what follows")


def _split_port(text: str, authority: str, *, glob: bool = False
                ) -> tuple[str, int | None]:
    if authority.startswith("["):
        close = authority.find("]")
        after = authority[close + 1:] if close > 0 else "x"
        if after and not after.startswith(":"):
            raise UrlError(text, "has an IPv6 host that is not [address] or [address]:port",
                           "write https://[address]:port/path")
        host, port_text = authority[1:close], after[1:] if after else None
    else:
        host, colon, port_text_ = authority.partition(":")
        port_text = port_text_ if colon else None
    if port_text is None or (glob and port_text and not port_text.isdigit()):
        return host, None  # none written, or a pattern's glob (any port)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UrlError(text, f"has the port {port_text!r}, not a number from 1 to 65535",
                       "write the port as a number, or leave ':' out for the default")
    return host, int(port_text)


def _authority(text: str, authority: str, scheme: str) -> tuple[str, int]:
    if "%" in authority:
        raise UrlError(text, "has a percent-encoded byte in its host, which parsers decode "
                       "differently or not at all", "write the host name plainly")
    host, port = _split_port(text, authority)
    if authority.startswith("["):
        try:
            host = str(ipaddress.IPv6Address(host))
        except ValueError:
            raise UrlError(text, f"has {host!r} in brackets, which is not an IPv6 address",
                           "write an IPv6 address as [address], without a zone") from None
    else:
        host = host.lower()
        dot = host.endswith(".")
        host = host[:-1] if dot else host
        if not host:
            raise UrlError(text, "has no host", "write scheme://host/path")
        if not is_name(host):
            raise UrlError(text, f"has the host {host!r}, which is not a host name (letters, "
                           "digits, '-', '_' and dots) or an IP address",
                           "write the host name plainly")
        last = host.rpartition(".")[2]
        if last.isdigit() or (last.startswith("0x") and all(c in "0123456789abcdef"
                                                             for c in last[2:])):
            try:
                ip = str(ipaddress.IPv4Address(host))
            except ValueError:
                raise UrlError(text, f"has the host {host!r}, a number that is not a dotted "
                               "IPv4 address (resolvers read such numbers in more than one "
                               "way)", "write the address as four decimal numbers, such "
                               "as 127.0.0.1") from None
            if dot:
                raise UrlError(text, "has an IP address with a final dot, which a resolver "
                               "looks up in DNS as a name", "write the address without it")
            host = ip
    return host, port if port is not None else DEFAULT_PORTS.get(scheme, 0)


def _normal_percent(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else match.group(0).upper()


def _target(text: str, target: str) -> str:
    odd = next((c for c in target if c not in _TARGET_CHARS), None)
    if odd is not None:
        raise UrlError(text, f"has {odd!r} in its path or query, which RFC 3986 does not "
                       "allow unencoded (clients would encode it before sending)",
                       f"percent-encode it (%{ord(odd):02X})")
    if "%" in _PERCENT.sub("", target):
        raise UrlError(text, "has a '%' that starts no percent-encoded byte",
                       "write %25 for a literal '%'")
    path, _, query = target.partition("?")
    path = _PERCENT.sub(_normal_percent, path or "/")  # %2E is '.': checked decoded
    if {".", ".."} & set(path.split("/")[1:]):
        raise UrlError(text, "has '.' or '..' path segments, which clients remove before "
                       "sending (the path sent would not be the path checked)",
                       "write the path without them")
    return path + ("?" + _PERCENT.sub(_normal_percent, query) if query else "")  # as sent
