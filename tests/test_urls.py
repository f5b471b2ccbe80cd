"""One reading of a URL for every decision (issue 29, item 5): the host safehub checks is
the host the HTTP client connects to, for any URL.

The property is differential: strings that mix the characters parsers disagree on
(``\\``, ``@``, ``%``, controls, whitespace, ``#``, ``?``) in the authority are read by
:func:`read_url`; whatever it accepts must be where the transport's client (urllib3)
goes, asked three ways: urllib3's ``parse_url``, the connection pool urllib3 picks for the
string (and the request target it would send), and a real connection made by the
transport to loopback listeners, each of which answers with its own address.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import urllib3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from urllib3.util.url import _encode_target, parse_url

from safehub._internal.urls import Url, UrlError, as_client_reads, read_url
from safehub.errors import FetchError
from safehub.sources.transport import Transport, TransportConfig

# -- what is read, and how ------------------------------------------------------------------


@pytest.mark.parametrize(("text", "read"), [
    ("https://Registry.Example.:443/v2/x", ("https", "registry.example", 443, "/v2/x")),
    ("https://h:0443", ("https", "h", 443, "/")),
    ("https://h?x=1", ("https", "h", 443, "/?x=1")),
    ("https://[::1]:5000/a", ("https", "::1", 5000, "/a")),
    ("https://[0:0::1]/", ("https", "::1", 443, "/")),
    ("https://h/%7e%2f%41?q=%2a", ("https", "h", 443, "/~%2FA?q=%2A")),
    ("https://h/a;b=c,d@e:f", ("https", "h", 443, "/a;b=c,d@e:f")),
])
def test_what_is_accepted_is_read_in_its_plain_form(text: str, read: tuple[Any, ...]) -> None:
    url = read_url(text)
    assert tuple(url) == read
    assert read_url(str(url)) == url  # the string sent reads the same again
    assert parse_url(str(url)).url == str(url)  # urllib3 reads it unchanged
    assert _encode_target(url.target) == url.target  # and sends the target as it is


@pytest.mark.parametrize(("text", "reason"), [
    ("https://storage\\@registry/v2/x", "backslash"),
    ("https://registry:443\\@storage/", "backslash"),
    ("https://user:pw@host/x", "user or password"),
    ("https://host%2Eexample/", "percent-encoded byte in its host"),
    ("https://[fe80::1%25eth0]/", "percent-encoded byte in its host"),
    ("https://h\tx/", "character '\\t'"),
    ("https://h x/", "character ' '"),
    ("https://h/\x00", "character '\\x00'"),
    ("https://h/x\x1b[2K", "character '\\x1b'"),
    ("https://bücher.example/", "non-ASCII"),
    ("https://h\uff0fx/", "non-ASCII"),
    ("https://h/x#y", "fragment"),
    ("https:///x", "no host"),
    ("https://:443/x", "no host"),
    ("https:h/x", "not an absolute URL"),
    ("ftp://h/x", "uses ftp://"),
    ("http://h/x", "uses http://"),
    ("https://127.1/", "not a dotted IPv4"),
    ("https://0x7f.0.0.1/", "not a dotted IPv4"),
    ("https://2130706433/", "not a dotted IPv4"),
    ("https://h:0/", "port '0'"),
    ("https://h:/", "port ''"),
    ("https://h:99999/", "port '99999'"),
    ("https://h:1:2/", "port '1:2'"),
    ("https://a..b/", "not a host name"),
    ("https://127.0.0.1./", "final dot"),
    ("https://*.h/", "not a host name"),
    ("https://[::1/", "IPv6"),
    ("https://[h]/", "not an IPv6 address"),
    ("https://h/a/../b", "path segments"),
    ("https://h/a/%2E%2e/b", "path segments"),
    ("https://h/%zz", "starts no percent-encoded byte"),
    ("https://h/a{b}", "does not allow unencoded"),
    ("https://h/?a[]=1", "does not allow unencoded"),
])
def test_what_parsers_could_read_differently_is_refused(text: str, reason: str) -> None:
    with pytest.raises(UrlError) as e:
        read_url(text)
    assert reason in str(e.value)
    assert e.value.advice  # and how to write it instead


def test_each_refusal_names_the_url_printably_and_the_fix() -> None:
    hostile = "https://evil\\@good/\x1b]52;c;Zm9v\x07\u202e\n" + "x" * 500
    with pytest.raises(UrlError) as e:
        read_url(hostile)
    message = str(e.value)
    assert message.isprintable() and message.isascii()
    assert "https://evil\\@good/\\x1b]52;c;Zm9v\\x07\\u202e\\n" in message
    assert len(message) < 400 and "..." in message  # cut
    assert "%5C" in e.value.advice


def test_a_proxy_is_read_as_requests_reads_it_without_its_password() -> None:
    proxy = read_url("user:s3cret@Proxy.Example:3128", proxy=True)
    assert proxy.origin == ("http", "proxy.example", 3128) and "s3cret" not in str(proxy)
    assert read_url("socks5h://p", proxy=True).port == 1080
    with pytest.raises(UrlError, match="backslash"):
        read_url("http://p\\@q:3128", proxy=True)


def test_a_redirect_is_joined_then_read_the_same_way() -> None:
    here = read_url("https://registry.example/v2/team/blobs/x")
    assert str(here.join("//storage.example/b?sig=1")) == "https://storage.example/b?sig=1"
    assert str(here.join("../other")) == "https://registry.example/v2/team/other"
    for location in ("https://storage.example\\@registry.example/x", "/\\storage.example/x",
                     "https:\\\\storage.example/x", "//storage.example\t@registry.example/",
                     "//registry.example@storage.example/"):
        with pytest.raises(UrlError):
            here.join(location)
    with pytest.raises(UrlError, match="http://"):
        here.join("http://registry.example/x")
    with pytest.raises(UrlError, match="parser can read"):
        here.join("http://[::1")


def test_under_a_base_means_the_same_origin_and_path_below() -> None:
    api = read_url("https://ghe.example/api/v3")
    assert read_url("https://GHE.example:443/api/v3/repos/a/b").under(api)
    assert not read_url("https://ghe.example/api/v30/x").under(api)
    assert not read_url("https://ghe.example:8443/api/v3/x").under(api)
    assert not read_url("http://ghe.example/api/v3/x", http=True).under(api)


# -- the transport checks and sends one string ---------------------------------------------

class _Recorder:
    """An opener that records where it is asked to connect and what to send, and answers
    200 with ``{}``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, int, str]] = []

    def __call__(self, method: str, hop: Url, headers: Any, body: Any) -> Any:
        self.sent.append((hop.scheme, hop.host, hop.port, hop.target))
        return _Answer()


class _Answer:
    status = 200
    headers: dict[str, str] = {}  # noqa: RUF012
    closed = False

    def __init__(self) -> None:
        self._left = b"{}"

    def readinto(self, buffer: memoryview) -> int:
        n, self._left = len(self._left), b""
        buffer[:n] = b"{}"[:n]
        self.closed = not n
        return n

    def read(self, amt: int = -1) -> bytes:
        self.closed = True
        return b""

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_the_transport_connects_where_it_checked_and_sends_the_target_it_read() -> None:
    opener = _Recorder()
    transport = Transport(TransportConfig(allowed_hosts=frozenset({"host.example"})),
                          opener=opener)
    reply = transport.get("HTTPS://Host.Example.:443/a/%7e?b=1", what="a thing")
    assert opener.sent == [("https", "host.example", 443, "/a/~?b=1")]
    assert reply.url == "https://host.example/a/~?b=1" and reply.body == b"{}"
    with pytest.raises(FetchError) as e:
        transport.get("https://evil.example\\@host.example/x", what="a thing")
    assert "'https://evil.example\\@host.example/x' has a backslash" in e.value.message
    assert e.value.hint and "%5C" in e.value.hint
    assert len(opener.sent) == 1  # nothing sent


# -- the differential property -------------------------------------------------------------

SCALE = int(os.environ.get("SAFEHUB_FUZZ_SCALE", "1"))

_HOSTS = ("127.0.0.1", "127.0.0.2", "[::1]", "localhost", "Example.COM", "example.com.",
          "xn--bcher-kva.example", "127.1", "0x7f.0.0.1", "[::ffff:127.0.0.1]", "a_b.example",
          "b\u00fccher.example", "")
_JUNK = ("\\", "@", "%", "%40", "%5c", "%5C", "%2e", "%41", "#", "?", "/", " ", "\t", "\n",
         "\r", "\x00", "\x7f", "\x85", "\u3002", "\uff0f", "\uff20", ".", ":", "[", "]",
         "user", "user:pw", ";", "*", "..")
_SCHEMES = ("http://", "https://", "HTTP://", "http:", "//", "http:\\\\", "http:/\\",
            "ftp://", " http://", "")
_PATHS = ("", "/", "/x", "/a/b?q=1", "?q", "/a/../b", "/%2e%2e/x", "/\\x", "/@x", "#f", "/x#@y")


def _url_texts(ports: tuple[int, ...], hosts: tuple[str, ...] = _HOSTS,
               schemes: tuple[str, ...] = _SCHEMES) -> st.SearchStrategy[str]:
    """Strings shaped like URLs whose authority mixes hosts, ports and what parsers
    disagree on: junk, a host, maybe a port, junk, maybe another host and port."""
    junk = st.lists(st.sampled_from(_JUNK), max_size=2).map("".join)
    port = st.sampled_from(("", *(f":{p}" for p in ports)))
    host = st.sampled_from(hosts)
    authority = st.builds(lambda *parts: "".join(parts), junk, host, port, junk,
                          st.one_of(st.just(""), st.builds(str.__add__, host, port)))
    return st.builds(lambda s, a, p: s + a + p, st.sampled_from(schemes), authority,
                     st.sampled_from(_PATHS))


def _pool_key(text: str) -> tuple[str, str, int]:
    """(scheme, host, port) of the connection pool urllib3 picks for ``text`` (what a
    client that hands urllib3 the string, as requests does, connects to)."""
    pool: Any = urllib3.PoolManager().connection_from_url(text)
    host = pool.host[:-1] if pool.host.endswith(".") else pool.host
    with contextlib.suppress(ValueError):  # one address, however it is written
        host = str(ipaddress.IPv6Address(host))
    return pool.scheme, host, pool.port or {"https": 443, "http": 80}[pool.scheme]


@settings(max_examples=1500 * SCALE, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(_url_texts((8080, 5000)))
def test_what_read_url_accepts_is_where_urllib3_connects(text: str) -> None:
    try:
        url = read_url(text, http=True)
    except UrlError as e:
        assert str(e).isprintable()
        return
    as_client_reads(text, url)  # urllib3's parse_url agrees
    assert _pool_key(text) == url.origin  # the pool urllib3 connects with, given the text
    assert _pool_key(str(url)) == url.origin  # and given the string read
    assert _encode_target(url.target) == url.target  # the target is sent as it was read


def test_the_property_tells_the_two_readings_apart() -> None:
    """What the property would catch: Python's own parser reads the attack's host as the
    registry, urllib3 (and requests) connects to the storage host."""
    text = "https://storage.example\\@registry.example/v2/x"
    assert urlsplit(text).hostname == "registry.example"
    assert _pool_key(text) == ("https", "storage.example", 443)


# -- and a real connection -----------------------------------------------------------------

class _Echo(BaseHTTPRequestHandler):
    """Answers every GET with the address and port that accepted the connection."""

    def do_GET(self) -> None:
        host, port = self.connection.getsockname()[:2]
        body = f"{host} {port}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _free_port_everywhere(addresses: list[str]) -> int:
    """A port free on every address (the first free one on 127.0.0.1, checked on all)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        try:
            with contextlib.ExitStack() as stack:
                for address in addresses:
                    family = socket.AF_INET6 if ":" in address else socket.AF_INET
                    sock = stack.enter_context(socket.socket(family))
                    sock.bind((address, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every loopback address")


@pytest.fixture(scope="module")
def listeners() -> Iterator[tuple[int, int, list[str]]]:
    """HTTP listeners on 127.0.0.1, 127.0.0.2 and ::1 (where this machine has it), each on
    the same two ports."""
    addresses = ["127.0.0.1", "127.0.0.2"]
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        addresses.append("::1")
    ports = (_free_port_everywhere(addresses), _free_port_everywhere(addresses))
    servers: list[ThreadingHTTPServer] = []
    for address in addresses:
        for port in ports:
            cls = _Server6 if ":" in address else ThreadingHTTPServer
            server = cls((address, port), _Echo)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
    yield ports[0], ports[1], addresses
    for server in servers:
        server.shutdown()
        server.server_close()


def _connected(transport: Transport, url: str) -> tuple[str, int]:
    """Where the transport's request for ``url`` landed, as the listener says."""
    answer = transport.get(url, what="an echo", accept="*/*", allow=lambda hop: None)
    host, port = answer.body.decode().split()
    return host, int(port)


def test_the_connection_lands_where_read_url_says(
        listeners: tuple[int, int, list[str]]) -> None:
    first, second, addresses = listeners
    written = [f"[{a}]" if ":" in a else a for a in addresses]
    transport = Transport(TransportConfig(retries=0, plain_http=frozenset(
        f"{a}:{p}" for a in written for p in (first, second))))
    seen = []

    @settings(max_examples=1500 * SCALE, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(_url_texts((first, second), ("127.0.0.1", "127.0.0.2", "[::1]", "127.0.0.1.",
                                        "[0::1]", "[::ffff:127.0.0.2]", "127.2"),
                      ("http://", "HTTP://", "http:/\\", "//", "http:\\\\")))
    def check(text: str) -> None:
        try:
            url = read_url(text, http=True)
        except UrlError:
            return
        if url.scheme != "http" or url.host not in addresses or url.port not in (first,
                                                                                second):
            return  # TLS, a name (never looked up here) or a port nothing listens on
        assert _connected(transport, str(url)) == (url.host, url.port)
        assert _connected(transport, text) == (url.host, url.port)  # as given, too
        seen.append(text)

    check()
    for address in addresses:  # every listener answers for itself
        for port in (first, second):
            shown = f"[{address}]" if ":" in address else address
            assert _connected(transport, f"http://{shown}:{port}/") == (address, port)
    attack = f"http://127.0.0.2:{first}\\@127.0.0.1:{second}/x"
    assert urlsplit(attack).hostname == "127.0.0.1"  # Python's own reading
    with urllib3.PoolManager() as client:  # where urllib3 (or requests) goes, given it
        assert client.request("GET", attack).data.split() == [b"127.0.0.2", b"%d" % first]
    with pytest.raises(UrlError, match="backslash"):
        read_url(attack, http=True)
    with pytest.raises(FetchError, match="backslash"):  # the transport sends nothing
        _connected(transport, attack)
    assert len(seen) > 5, seen  # the property met URLs that connect (derandomized: fixed)


# -- every decision reads with it ----------------------------------------------------------

def test_the_github_token_goes_to_the_api_base_only() -> None:
    from safehub.sources.github import GitHub

    github = GitHub(Transport(TransportConfig()), api_url="https://ghe.example/api/v3",
                    web_url="https://ghe.example", token="ghp_secret")
    assert github.headers("https://GHE.example:443/api/v3/repos/a/b")["Authorization"] \
        == "Bearer ghp_secret"
    for elsewhere in ("https://ghe.example/api/v30/x", "https://ghe.example:8443/api/v3/x",
                      "https://ghe.example/web/a/b", "https://evil.example\\@ghe.example/api/v3/",
                      "https://ghe.example@evil.example/api/v3/x", "http://ghe.example/api/v3/x"):
        assert github.headers(elsewhere) == {}, elsewhere


def test_the_bases_and_hosts_of_the_settings_are_read_the_same_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.config import Settings
    from safehub.errors import SpecError

    env = {"SAFEHUB_GITHUB_API_URL": "https://GHE.Example.:443/api/v3/",
           "SAFEHUB_GITHUB_URL": "https://[::1]:8443", "SAFEHUB_ALLOWED_HOSTS": "Store.Example."}
    settings_ = Settings.from_env(env)
    assert settings_.api_url == "https://ghe.example/api/v3" and settings_.api_host == "ghe.example"
    assert {"ghe.example", "::1", "store.example"} <= settings_.allowed_hosts
    with pytest.raises(SpecError) as e:
        Settings.from_env({"SAFEHUB_GITHUB_API_URL": "https://evil.example\\@ghe.example/api"})
    assert "SAFEHUB_GITHUB_API_URL" in e.value.message and "backslash" in e.value.message
    assert "'https://evil.example\\@ghe.example/api'" in e.value.message and e.value.hint


def test_a_proxy_is_named_without_its_password_and_read_the_same_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.sources.network import proxy_for, proxy_hosts

    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:s3cret@Proxy.Example:3128")
    assert proxy_for("https://example.com/x") == "http://proxy.example:3128"
    assert proxy_hosts(["https://example.com/x"]) == ("proxy.example",)
    assert proxy_for("https://127.0.0.1/x") is None  # loopback is never proxied
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example\\@other.example:3128")
    assert proxy_for("https://example.com/x") == "a proxy"
    assert proxy_hosts(["https://example.com/x"]) == ()


def test_policy_urls_and_weights_patterns_are_read_where_urls_are(tmp_path: Path) -> None:
    from safehub._internal.urls import hosts_of_urls
    from safehub.errors import PolicyError
    from safehub.policy import load_policy

    for text, said in (
            ("[safehub]\ngithub_api_url = 'https://a.example\\\\@b.example/api'\n", "backslash"),
            ("[[allow]]\nrepo = 'a/b'\nweights = ['https://good.example@evil.example/*']\n",
             "'@' or '%'"),
            ("[[allow]]\nrepo = 'a/b'\nweights = ['https://good.example%2F/*']\n", "'@' or '%'")):
        path = tmp_path / "p.toml"
        path.write_text(text)
        with pytest.raises(PolicyError) as e:
            load_policy(paths=[path])
        assert str(path) in str(e.value) and said in str(e.value), str(e.value)
    assert hosts_of_urls(["https://Good.Example./w/*", "https://[::1]:8080/*",
                          "https://*.hf.co/*", "https://w[0-9].example/*"]) == (
        "good.example", "[::1]", "*.hf.co")


def test_weights_urls_are_refused_as_the_transport_would_refuse_them() -> None:
    from safehub.errors import PolicyDenied
    from safehub.run.weights import WeightsGuard

    guard = WeightsGuard("acme/models")
    guard.check_url("https://download.example/models/w.pth")  # no pattern: any plain URL
    for url in ("https://evil.example\\@download.example/w.pth",
                "https://download.example/w.pth#x", "https://u:p@download.example/w.pth"):
        with pytest.raises(PolicyDenied) as e:
            guard.check_url(url)
        assert "does not follow" in e.value.message and e.value.hint
