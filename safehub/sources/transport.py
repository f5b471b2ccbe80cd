"""The one way safehub talks to the network: HTTPS with rules, and nothing about GitHub.

Every request, whoever makes it (the GitHub client, a signature download, the weights
guard), goes through :class:`Transport`, which enforces:

* HTTPS only (a private CA comes in through ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE`` or
  ``SSL_CERT_FILE``; else certifi's bundle, as requests has it, else the system's);
* every URL, the first and each redirect's, read once by :func:`safehub._internal.urls.read_url`
  (as urllib3 reads it; what the parsers could read differently is refused): the request
  goes to urllib3's pool for the scheme, host and port read, with the path and query read
  as its target (:mod:`safehub.sources.connections`), so the host checked is the host
  connected to;
* a policy on every hop: by default the host allow-list, or a caller's own check (the
  weights guard matches every hop against the policy's ``weights`` patterns); redirects
  are followed by hand, at most :attr:`TransportConfig.max_redirects`;
* headers chosen per hop by the caller (so a token goes only where its owner says);
* a total deadline per request (``SAFEHUB_TIMEOUT``, start to last byte, however slowly
  a server drips) and a stall timeout between bytes; bounded bodies;
* retries with exponential backoff on 5xx answers, dropped connections, stalls and
  truncated bodies -- but never on a name that does not resolve or a refused connection,
  which fail at once as :class:`UnreachableError`;
* offline mode refuses before any socket is opened, naming where it was switched on;
* proxies from the environment (``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, as requests
  reads them), never for a loopback host; connections kept and reused per host.

A body is read into one buffer reused from read to read and handed on as a view of it (a
download is written and hashed from there: no copy per chunk).

Build one with :class:`TransportConfig` and hand it to ``safehub.Hub(transport=...)``, as
python-tuf's ``Updater(fetcher=...)`` takes its fetcher. ``opener`` may be any function
that sends one request (method, the :class:`~safehub._internal.urls.Url` read, headers,
body) and answers as urllib3's response does (tests inject failures through it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from safehub._internal import fixes, gcpause
from safehub._internal.frozen import Frozen, field
from safehub._internal.urls import Url, UrlError, as_client_reads, read_url
from safehub.errors import FetchError, IntegrityError, NotFoundError, OfflineError
from safehub.limits import DEFAULTS
from safehub.sources.network import (
    confined_port,
    is_loopback,
    proxy_hosts,
    tls_failed,
    unreachable_error,
)

if TYPE_CHECKING:
    from safehub.sources.connections import Pools

__all__ = ["HTTPError", "Opener", "Reply", "Transport", "TransportConfig", "proxy_hosts"]

_USER_AGENT = "safehub/0.1"
_RETRY_STATUS = frozenset({500, 502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 1 << 20
"""Bytes a download's read asks for: large, so a large download costs few calls per byte."""
_SLICE = 128 * 1024
"""The most handed to ``out.write`` at once: a piece read is written in slices (on these
machines' kernel, 6.18 with ext4, one 1 MiB write into the page cache cost ~7x the system
CPU of eight of 128 KiB: 1.5 s a GiB against 0.2; bench/README.md, "Weights at a link's
rate")."""
_SMALL = 64 * 1024
"""Bytes a read of a whole answer (JSON, a manifest) asks for."""

Headers = Callable[[str], Mapping[str, str]]
Progress = Callable[[int, "int | None"], None]
HopCheck = Callable[[str], None]
"""Told each hop's URL (as it will be sent) before it is fetched; raises to refuse it."""
Opener = Callable[[str, Url, Mapping[str, str], Any], Any]
"""Sends one request (method, the URL read, headers, body); its answer, body unread."""
Sink = Callable[[memoryview], None]
"""Told each piece of a body as it arrives: a view of a buffer that is reused at once."""


class TransportConfig(Frozen):
    """The rules of the transport; bounded, documented defaults."""

    allowed_hosts: frozenset[str] = frozenset()
    """Hosts a request (or a redirect) may go to, unless the caller checks hops itself."""
    connect_timeout: float = DEFAULTS.connect_timeout
    stall_timeout: float = DEFAULTS.read_timeout
    """Seconds without a byte that end a request (at most :attr:`deadline`)."""
    deadline: float = DEFAULTS.deadline
    retries: int = DEFAULTS.retries
    backoff: float = DEFAULTS.backoff
    max_redirects: int = 5
    max_json_bytes: int = DEFAULTS.max_api_bytes
    offline: bool = False
    offline_source: str = "SAFEHUB_OFFLINE=1"
    """Where offline mode was switched on, for the error message."""
    plain_http: frozenset[str] = frozenset()
    """Loopback ``host:port`` a policy names explicitly as a plain-HTTP registry: the only
    places ``http://`` is spoken to."""


class Reply(Frozen):
    """A whole (bounded) answer and the URL that finally gave it."""

    body: bytes
    url: str
    redirected: bool
    headers: Mapping[str, str] = field(default_factory=dict)
    status: int = 200

    def json(self, what: str) -> Any:
        """The body as JSON; any decoding problem is a :class:`FetchError`."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as e:
            raise FetchError(f"{what}: the server did not answer valid JSON "
                             f"({type(e).__name__})",
                             fix=fixes.say("retry later; if it persists the "
                                           "server is broken")) from e


class HTTPError(FetchError):
    """The server answered with an error status (other than 404 and 5xx)."""

    def __init__(self, message: str, *, status: int, headers: Mapping[str, str],
                 server_message: str, url: str, fix: fixes.Fix | None = None) -> None:
        super().__init__(message, fix=fix)
        self.status = status
        self.headers = dict(headers)
        self.server_message = server_message
        self.url = url


class _Retryable(Exception):
    """A transient failure: retried, then reported as a FetchError."""


class Transport:
    """HTTPS requests under one :class:`TransportConfig` (see the module docstring)."""

    def __init__(self, config: TransportConfig, *, opener: Opener | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._opener = opener
        self._pools: Pools | None = None
        self._sleep = sleep

    def close(self) -> None:
        """Close every connection kept for reuse."""
        if self._pools is not None:
            self._pools.clear()

    # -- public -----------------------------------------------------------------------

    def get(self, url: str, *, what: str, accept: str = "application/json",
            headers: Headers | None = None, allow: HopCheck | None = None,
            max_bytes: int | None = None, too_big: Callable[[], Exception] | None = None
            ) -> Reply:
        """GET a whole answer (at most ``max_bytes``, default the JSON cap; over it,
        ``too_big()`` is raised, by default a :class:`FetchError`)."""
        cap = self.config.max_json_bytes if max_bytes is None else max_bytes

        def attempt(write_ok: Callable[[], bool]) -> Reply:
            parts: list[bytes] = []
            url_, redirected, resp_headers = self._stream(
                url, what, accept, headers, allow, cap, lambda v: parts.append(bytes(v)),
                None, write_ok,
                too_big=too_big or (lambda: FetchError(f"the answer for {what} is larger "
                                                       f"than {cap:,} bytes")))
            return Reply(b"".join(parts), url_, redirected, resp_headers)

        result: Reply = self._retrying(what, attempt)
        return result

    def download(self, url: str, out: IO[bytes], *, what: str, max_bytes: int,
                 headers: Headers | None = None, allow: HopCheck | None = None,
                 progress: Progress | None = None,
                 accept: str = "application/octet-stream, application/zip",
                 resume: bool = False) -> int:
        """Stream ``url`` into ``out`` (an empty file, rewound and emptied on each retry);
        return the byte count. ``out.write`` is given views of buffers that are reused
        (bytes-like; it must not keep them), from this thread or, for a large body, a
        thread of the transport's.

        A body larger than ``max_bytes`` is an :class:`IntegrityError`; a body cut short is
        retried, then a :class:`FetchError`. With ``resume``, a retry after a cut asks for
        the rest only (``Range: bytes=N-``) and appends it when the server answers 206 with
        a ``Content-Range`` starting at N; any other answer starts over from the first
        byte. The caller checks the whole (a blob's digest).
        """
        count = [-1]  # -1: nothing tried yet

        def attempt(write_ok: Callable[[], bool]) -> int:
            start = max(count[0], 0) if resume else 0
            if count[0] >= 0:  # a retry (an empty file is not truncated: ext4 would flush
                out.seek(start)  # all that is written next when it is closed)
                out.truncate()
            count[0] = start

            def ranged(hop: str) -> Mapping[str, str]:
                given = dict(headers(hop)) if headers else {}
                return {**given, "Range": f"bytes={start}-"} if start else given

            def answered(status: int, got: Mapping[str, str]) -> int:
                """How many bytes of ``out`` the answer continues (0: it starts over)."""
                from safehub.sources.connections import range_start

                if start and status == 206 and range_start(got) == start:
                    return start
                if start:  # what the file holds is not continued: start over
                    out.seek(0)
                    out.truncate()
                    count[0] = 0
                if status == 206:  # a range that does not continue ours: ask for it all
                    raise _Retryable(f"the answer for {what} was a range that does not "
                                     f"continue the download at byte {start}")
                return 0

            def write(chunk: memoryview) -> None:
                for start in range(0, len(chunk), _SLICE):  # see _SLICE
                    out.write(chunk[start:start + _SLICE])
                count[0] += len(chunk)

            self._stream(url, what, accept, ranged, allow, max_bytes, write, progress,
                         write_ok, too_big=lambda: IntegrityError(
                             f"{what} is larger than the {max_bytes:,}-byte limit; download "
                             "stopped", fix=fixes.say("if it really is that large, raise "
                             "SAFEHUB_MAX_ARCHIVE_BYTES")), answered=answered, chunk=_CHUNK)
            out.flush()
            return count[0]

        with gcpause.running():  # a long wait: the collector is not held off meanwhile
            result: int = self._retrying(what, attempt)
        return result

    def send(self, method: str, url: str, *, what: str, body: bytes | Path | None = None,
             headers: Headers | None = None, allow: HopCheck | None = None,
             max_bytes: int = 64 * 1024) -> Reply:
        """One ``HEAD``, ``POST``, ``PUT``, ``PATCH`` or ``DELETE`` with the same rules as
        :meth:`get` (hop check, offline, deadline, retries on 5xx); redirects are not
        followed (an upload that redirects is the server's answer to read). ``body`` is
        bytes or a file sent as it is read; the answer is read up to ``max_bytes``."""
        if self.config.offline:
            raise OfflineError(f"offline mode ({self.config.offline_source}) refused to "
                               f"send {what}",
                               fix=fixes.say("turn offline mode off for this command"))
        hop = self._check_hop(url, what, allow)
        sent = str(hop)

        def attempt(write_ok: Callable[[], bool]) -> Reply:
            given = dict(headers(sent)) if headers else {}
            if not isinstance(body, Path):
                resp = self._request(method, hop, what, given, body, load=False)
            else:
                with open(body, "rb") as data:
                    if not any(k.lower() == "content-length" for k in given):
                        given["Content-Length"] = str(os.fstat(data.fileno()).st_size)
                    resp = self._request(method, hop, what, given, data, load=False)
            from safehub.sources.connections import ERRORS, finish

            try:
                self._raise_for_status(resp, hop, what)
                try:
                    raw = b"" if method == "HEAD" else resp.read(max_bytes + 1)
                except ERRORS as e:
                    raise _Retryable(f"the answer for {what} was cut short: {e}") from e
                if len(raw) > max_bytes:
                    raise FetchError(f"the answer for {what} is larger than {max_bytes:,} "
                                     "bytes")
                return Reply(raw, sent, False, dict(resp.headers), resp.status)
            finally:
                finish(resp, drain=True)

        result: Reply = self._retrying(what, attempt)
        return result

    # -- plumbing ---------------------------------------------------------------------

    def _check_hop(self, url: str, what: str, allow: HopCheck | None) -> Url:
        """Read ``url`` (the one reading, confirmed by the client's own parser) and hold
        it to the rules; ``str()`` of the answer is the URL to send."""
        cfg = self.config
        try:
            hop = read_url(url, http=bool(cfg.plain_http))
            as_client_reads(url, hop)
        except UrlError as e:
            raise FetchError(f"refused to fetch {what}: {e}", fix=fixes.say(e.advice)) from None
        if hop.scheme != "https" and not (is_loopback(hop.host) and hop.origin in {
                read_url(f"http://{p}", http=True).origin for p in cfg.plain_http}):
            raise FetchError(
                f"refused to fetch {what} over {hop.scheme}: {hop}",
                fix=fixes.say("safehub only uses https://; for a private "
                              "CA set REQUESTS_CA_BUNDLE"),
            )
        if allow is not None:
            allow(str(hop))
        elif hop.host not in cfg.allowed_hosts:
            raise FetchError(
                f"refused to fetch {what} from {hop.host!r}, which is not an allowed host "
                f"({', '.join(sorted(cfg.allowed_hosts))})",
                fix=fixes.say("if this host is yours, add it to SAFEHUB_ALLOWED_HOSTS"),
            )
        return hop

    def _request(self, method: str, hop: Url, what: str, headers: Mapping[str, str],
                 body: Any = None, *, load: bool = True) -> Any:
        """Send one request to ``hop``; its answer, body unread. A failure to connect is
        said once here: TLS, a port a confined job may not use, an unreachable network
        (``load``: said as a load says it, with the proxy and what works offline), or a
        transient one to retry."""
        from safehub.sources.connections import SENDING

        sent = {"User-Agent": _USER_AGENT, **headers}
        try:
            if self._opener is not None:
                return self._opener(method, hop, sent, body)
            assert self._pools is not None  # made by _retrying, in the caller's thread
            return self._pools.open(method, hop, sent, body)
        except SENDING as e:
            if (held := tls_failed(e, hop.host, what) or
                    confined_port(e, hop.host, hop.port, what)) is not None:
                raise held from e
            unreachable = unreachable_error(e, hop, what, load=load)
            if unreachable is not None:
                raise unreachable from e
            raise _Retryable(f"could not reach {hop.host} for {what}: {e}") from e

    def _stream(self, url: str, what: str, accept: str, headers: Headers | None,
                allow: HopCheck | None, cap: int, sink: Sink,
                progress: Progress | None, write_ok: Callable[[], bool], *,
                too_big: Callable[[], Exception],
                answered: Callable[[int, Mapping[str, str]], int] | None = None,
                chunk: int = _SMALL) -> tuple[str, bool, dict[str, str]]:
        """One attempt: follow hops, then stream the body into ``sink``. ``answered`` is
        told the final status and headers and says how many bytes the body comes after
        (a resumed range): the cap counts them too. A download (``chunk`` a MiB) asks for
        the body as it is stored (no compression: its bytes are read straight into the
        buffer), and hands it on in a thread of its own while it reads the next piece."""
        from safehub.sources.connections import Cut, finish, read_body

        if self.config.offline:
            raise OfflineError(
                f"offline mode ({self.config.offline_source}) refused to fetch {what}",
                fix=fixes.say("serve it from the cache: on a machine with network run `safehub "
                "prefetch` (or `safehub lock`) and share the cache, or turn offline mode off"),
            )
        cfg = self.config
        redirected = False
        encodings = "identity" if chunk == _CHUNK else "gzip, deflate"
        for _hop in range(cfg.max_redirects + 1):
            hop = self._check_hop(url, what, allow)
            url = str(hop)  # what was checked is what is sent
            resp = self._request("GET", hop, what, {
                "Accept": accept, "Accept-Encoding": encodings,
                **(headers(url) if headers else {})})
            try:
                status = resp.status
                location = resp.headers.get("Location")
                if status in _REDIRECT_STATUS and location is not None:
                    try:
                        url = str(hop.join(location, http=bool(cfg.plain_http)))
                    except UrlError as e:
                        raise FetchError(
                            f"{hop.authority} redirected {what} to a URL safehub does not "
                            f"follow: {e}; refused, nothing was sent there",
                            fix=fixes.say("the server (or something between) is broken or "
                                          "hostile; if it is yours, make it redirect to a "
                                          "plain https://host[:port]/path URL")) from None
                    redirected = True
                    continue
                self._raise_for_status(resp, hop, what)
                before = answered(status, resp.headers) if answered is not None else 0
                try:
                    read_body(resp, cap=cap - before, sink=sink, progress=progress,
                              keep_going=write_ok, too_big=too_big, chunk=chunk)
                except Cut as e:
                    raise _Retryable(f"the answer for {what} was {e}") from e
                return url, redirected, dict(resp.headers)
            finally:
                finish(resp, drain=True)
        raise FetchError(f"too many redirects fetching {what} (more than {cfg.max_redirects})",
                         fix=fixes.say("check SAFEHUB_GITHUB_URL / SAFEHUB_GITHUB_API_URL"))

    def _raise_for_status(self, resp: Any, hop: Url, what: str) -> None:
        status = resp.status
        if status < 400:
            return
        from safehub.sources.connections import server_message

        message = server_message(resp)
        shown = f": {message}" if message else ""
        if status in _RETRY_STATUS:
            raise _Retryable(f"{hop.host} answered {status} for {what}{shown}")
        if status == 404:
            raise NotFoundError(f"{what} not found (404 from {hop.host}){shown}")
        raise HTTPError(f"{hop.host} answered {status} for {what}{shown}",
                        status=status, headers=dict(resp.headers), server_message=message,
                        url=str(hop))

    def _retrying(self, what: str, attempt: Callable[[Callable[[], bool]], Any]) -> Any:
        cfg = self.config
        if self._opener is None and self._pools is None:
            from safehub.sources.connections import Pools

            self._pools = Pools(connect_timeout=cfg.connect_timeout,
                                read_timeout=min(cfg.stall_timeout, cfg.deadline))
        for i in range(cfg.retries + 1):
            try:
                return _within_deadline(cfg.deadline, what, attempt)
            except _Retryable as e:
                if i == cfg.retries:
                    raise FetchError(f"{e} (gave up after {cfg.retries + 1} attempts)",
                                     fix=fixes.say("check the network or proxy, or "
                                                   "retry later")) from e
                self._sleep(cfg.backoff * (2**i))
        raise AssertionError("unreachable")


def _within_deadline(seconds: float, what: str,
                     attempt: Callable[[Callable[[], bool]], Any]) -> Any:
    """Run one attempt in this thread under a :class:`~safehub.sources.deadline.Deadline`:
    a server can drip bytes (or headers) forever below any per-read timeout, so at the
    deadline the attempt's sockets are shut down, and whatever it made of them (an error,
    or a body that seemed to end) is refused."""
    from safehub.sources.deadline import Deadline

    limit = Deadline(seconds)
    try:
        value = attempt(limit.ok)
    except BaseException as e:
        if limit.end() and isinstance(e, Exception):
            raise _too_slow(what, seconds) from e
        raise
    if limit.end():
        raise _too_slow(what, seconds)
    return value


def _too_slow(what: str, seconds: float) -> FetchError:
    return FetchError(
        f"{what} took longer than {seconds:g} s; gave up",
        fix=fixes.say("the server is too slow or stalling on purpose; SAFEHUB_TIMEOUT sets "
                      "the most one request may take"),
    )
