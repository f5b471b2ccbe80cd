"""The one way safehub talks to the network: HTTPS with rules, and nothing about GitHub.

Every request, whoever makes it (the GitHub client, a signature download, the weights
guard), goes through :class:`Transport`, which enforces:

* HTTPS only (a private CA comes in through ``REQUESTS_CA_BUNDLE``, as with requests);
* every URL, the first and each redirect's, read once by :func:`safehub._internal.urls.read_url`
  (as urllib3, which requests uses, reads it; what the parsers could read differently is
  refused) and sent as the string that was read: the host checked is the host connected to;
* a policy on every hop: by default the host allow-list, or a caller's own check (the
  weights guard matches every hop against the policy's ``weights`` patterns); redirects
  are followed by hand, at most :attr:`TransportConfig.max_redirects`;
* headers chosen per hop by the caller (so a token goes only where its owner says);
* a total deadline per request (``SAFEHUB_TIMEOUT``, start to last byte, however slowly
  a server drips) and a stall timeout between bytes; bounded bodies;
* retries with exponential backoff on 5xx answers, dropped connections, stalls and
  truncated bodies -- but never on a name that does not resolve or a refused connection,
  which fail at once as :class:`UnreachableError`;
* offline mode refuses before any socket is opened, naming where it was switched on.

Build one with :class:`TransportConfig` and hand it to ``safehub.Hub(transport=...)``, as
python-tuf's ``Updater(fetcher=...)`` takes its fetcher. ``session`` may be any object
with requests' ``Session.get`` (tests inject failures through it).
"""

from __future__ import annotations

import contextvars
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from safehub._internal import fixes, gcpause
from safehub._internal.urls import Url, UrlError, as_client_reads, read_url
from safehub.errors import FetchError, IntegrityError, NotFoundError, OfflineError, UnreachableError
from safehub.limits import DEFAULTS
from safehub.sources.network import (
    DIRECT,
    confined_port,
    host_of,
    is_loopback,
    proxy_for,
    proxy_hosts,
    tls_failed,
    unreachable_cause,
)

__all__ = ["HTTPError", "Reply", "Transport", "TransportConfig", "proxy_hosts"]

_USER_AGENT = "safehub/0.1"
_RETRY_STATUS = frozenset({500, 502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 1 << 20
"""Bytes a read asks for: large, so a large download costs few calls per byte."""

Headers = Callable[[str], Mapping[str, str]]
Progress = Callable[[int, "int | None"], None]
HopCheck = Callable[[str], None]
"""Told each hop's URL (as it will be sent) before it is fetched; raises to refuse it."""


@dataclass(frozen=True)
class TransportConfig:
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


@dataclass(frozen=True)
class Reply:
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


def _range_start(headers: Mapping[str, str]) -> int | None:
    """The first byte of a ``Content-Range: bytes N-M/T`` answer (None if not one).

    >>> _range_start({"Content-Range": "bytes 100-199/200"}), _range_start({})
    (100, None)
    """
    text = next((v for k, v in headers.items() if k.lower() == "content-range"), "")
    unit, _, rest = text.strip().partition(" ")
    first = rest.partition("-")[0]
    return int(first) if unit == "bytes" and first.isdigit() and len(first) < 19 else None


class _Retryable(Exception):
    """A transient failure: retried, then reported as a FetchError."""


class _Cancelled(Exception):
    """The caller gave up on this attempt (deadline)."""


class Transport:
    """HTTPS requests under one :class:`TransportConfig` (see the module docstring)."""

    def __init__(self, config: TransportConfig, *, session: Any = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._session = session
        self._sleep = sleep

    def close(self) -> None:
        if self._session is not None and hasattr(self._session, "close"):
            self._session.close()
        self._session = None

    def _get_session(self) -> Any:
        if self._session is None:
            import requests

            session = requests.Session()
            session.headers["User-Agent"] = _USER_AGENT
            # trust_env stays on: proxies and REQUESTS_CA_BUNDLE come from the environment.
            self._session = session
        return self._session

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
                url, what, accept, headers, allow, cap, parts.append, None, write_ok,
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
        """Stream ``url`` into ``out`` (rewound on each retry); return the byte count.

        A body larger than ``max_bytes`` is an :class:`IntegrityError`; a body cut short is
        retried, then a :class:`FetchError`. With ``resume``, a retry after a cut asks for
        the rest only (``Range: bytes=N-``) and appends it when the server answers 206 with
        a ``Content-Range`` starting at N; any other answer starts over from the first
        byte. The caller checks the whole (a blob's digest).
        """
        count = [0]

        def attempt(write_ok: Callable[[], bool]) -> int:
            start = count[0] if resume else 0
            out.seek(start)
            out.truncate()
            count[0] = start

            def ranged(hop: str) -> Mapping[str, str]:
                given = dict(headers(hop)) if headers else {}
                return {**given, "Range": f"bytes={start}-"} if start else given

            def answered(status: int, got: Mapping[str, str]) -> int:
                """How many bytes of ``out`` the answer continues (0: it starts over)."""
                if start and status == 206 and _range_start(got) == start:
                    return start
                out.seek(0)
                out.truncate()
                count[0] = 0
                if status == 206:  # a range that does not continue ours: ask for it all
                    raise _Retryable(f"the answer for {what} was a range that does not "
                                     f"continue the download at byte {start}")
                return 0

            def write(chunk: bytes) -> None:
                out.write(chunk)
                count[0] += len(chunk)

            self._stream(url, what, accept, ranged, allow, max_bytes, write, progress,
                         write_ok, too_big=lambda: IntegrityError(
                             f"{what} is larger than the {max_bytes:,}-byte limit; download "
                             "stopped", fix=fixes.say("if it really is that large, raise "
                             "SAFEHUB_MAX_ARCHIVE_BYTES")), answered=answered)
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
        import requests

        if self.config.offline:
            raise OfflineError(f"offline mode ({self.config.offline_source}) refused to "
                               f"send {what}",
                               fix=fixes.say("turn offline mode off for this command"))
        hop = self._check_hop(url, what, allow)
        sent = str(hop)
        cfg = self.config

        def attempt(write_ok: Callable[[], bool]) -> Reply:
            data: Any = body
            opened = None
            if isinstance(body, Path):
                opened = data = open(body, "rb")  # noqa: SIM115 - closed below
            try:
                resp = self._get_session().request(
                    method, sent, data=data, allow_redirects=False, stream=True,
                    headers=dict(headers(sent)) if headers else {},
                    timeout=(cfg.connect_timeout, min(cfg.stall_timeout, cfg.deadline)),
                    **({"proxies": DIRECT} if is_loopback(hop.host) else {}))
            except (requests.RequestException, OSError, ValueError) as e:
                if (held := tls_failed(e, hop.host, what) or
                        confined_port(e, hop.host, hop.port, what)) is not None:
                    raise held from e
                if unreachable_cause(e) is not None:
                    raise UnreachableError(
                        f"cannot connect to {hop.host} for {what} "
                        f"({unreachable_cause(e)})",
                        fix=fixes.say("check the address, the network or the proxy")) from e
                raise _Retryable(f"could not reach {hop.host} for {what}: {e}") from e
            finally:
                if opened is not None:
                    opened.close()
            with resp:
                if resp.status_code >= 400:
                    self._raise_for_status(resp, what)
                raw = b"" if method == "HEAD" else resp.raw.read(max_bytes + 1,
                                                                 decode_content=True)
                if len(raw) > max_bytes:
                    raise FetchError(f"the answer for {what} is larger than {max_bytes:,} "
                                     "bytes")
                return Reply(raw, sent, False, dict(resp.headers), resp.status_code)

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

    def _stream(self, url: str, what: str, accept: str, headers: Headers | None,
                allow: HopCheck | None, cap: int, sink: Callable[[bytes], None],
                progress: Progress | None, write_ok: Callable[[], bool], *,
                too_big: Callable[[], Exception],
                answered: Callable[[int, Mapping[str, str]], int] | None = None
                ) -> tuple[str, bool, dict[str, str]]:
        """One attempt: follow hops, then stream the body into ``sink``. ``answered`` is
        told the final status and headers and says how many bytes the body comes after
        (a resumed range): the cap counts them too."""
        import requests

        if self.config.offline:
            raise OfflineError(
                f"offline mode ({self.config.offline_source}) refused to fetch {what}",
                fix=fixes.say("serve it from the cache: on a machine with network run `safehub "
                "prefetch` (or `safehub lock`) and share the cache, or turn offline mode off"),
            )
        cfg = self.config
        redirected = False
        for _hop in range(cfg.max_redirects + 1):
            hop = self._check_hop(url, what, allow)
            url = str(hop)  # what was checked is what is sent
            try:
                resp = self._get_session().get(
                    url, headers={"Accept": accept, **(headers(url) if headers else {})},
                    allow_redirects=False, stream=True,
                    timeout=(cfg.connect_timeout, min(cfg.stall_timeout, cfg.deadline)),
                    **({"proxies": DIRECT} if is_loopback(hop.host) else {}))
            except (requests.RequestException, OSError, ValueError) as e:
                if (held := tls_failed(e, hop.host, what) or
                        confined_port(e, hop.host, hop.port, what)) is not None:
                    raise held from e
                reason = unreachable_cause(e)
                if reason is not None:
                    proxy = proxy_for(url)
                    via = f" through the proxy {proxy} (from HTTPS_PROXY/ALL_PROXY)" \
                        if proxy else ""
                    raise UnreachableError(
                        f"the network is unreachable: cannot connect to {hop.host}{via} "
                        f"for {what} ({reason})",
                        fix=fixes.say((f"check that the proxy {proxy} runs, or add {hop.host} to "
                              "NO_PROXY. " if proxy else "check the network or proxy. ") +
                                      "Without a network, a cold load needs "
                        "the code on this machine already: a mirror (SAFEHUB_GITHUB_URL), a "
                                      "cache filled by `safehub prefetch`, or a lockfile with "
                                      "SAFEHUB_OFFLINE=1 and a filled cache"),
                    ) from e
                raise _Retryable(f"could not reach {hop.host} for {what}: {e}") from e
            with resp:
                status = resp.status_code
                if status in _REDIRECT_STATUS and "Location" in resp.headers:
                    try:
                        url = str(hop.join(resp.headers["Location"],
                                           http=bool(cfg.plain_http)))
                    except UrlError as e:
                        raise FetchError(
                            f"{hop.authority} redirected {what} to a URL safehub does not "
                            f"follow: {e}; refused, nothing was sent there",
                            fix=fixes.say("the server (or something between) is broken or hostile; "
                                          "if it is yours, make it redirect to a plain "
                                          "https://host[:port]/path URL")) from None
                    redirected = True
                    continue
                self._raise_for_status(resp, what)
                before = answered(status, resp.headers) if answered is not None else 0
                declared = resp.headers.get("Content-Length", "")
                total = int(declared) if declared.isdigit() and len(declared) < 19 else None
                if total is not None and before + total > cap:
                    raise too_big()
                done, cap = 0, cap - before
                try:
                    for chunk in resp.iter_content(_CHUNK):
                        if not write_ok():
                            raise _Cancelled
                        done += len(chunk)
                        if done > cap:
                            raise too_big()
                        sink(chunk)
                        if progress is not None:
                            progress(done, total)
                except (requests.RequestException, OSError) as e:
                    raise _Retryable(f"the answer for {what} was cut short after {done} "
                                     f"bytes: {e}") from e
                if total is not None and done != total:
                    raise _Retryable(f"the answer for {what} was cut short: {done} of {total} "
                                     "bytes")
                return resp.url or url, redirected, dict(resp.headers)
        raise FetchError(f"too many redirects fetching {what} (more than {cfg.max_redirects})",
                         fix=fixes.say("check SAFEHUB_GITHUB_URL / SAFEHUB_GITHUB_API_URL"))

    def _raise_for_status(self, resp: Any, what: str) -> None:
        status = resp.status_code
        if status < 400:
            return
        message = _server_message(resp)
        shown = f": {message}" if message else ""
        if status in _RETRY_STATUS:
            raise _Retryable(f"{host_of(resp.url)} answered {status} for {what}{shown}")
        if status == 404:
            raise NotFoundError(f"{what} not found (404 from {host_of(resp.url)}){shown}")
        raise HTTPError(f"{host_of(resp.url)} answered {status} for {what}{shown}",
                        status=status, headers=resp.headers, server_message=message,
                        url=resp.url)

    def _retrying(self, what: str, attempt: Callable[[Callable[[], bool]], Any]) -> Any:
        cfg = self.config
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


def _server_message(resp: Any) -> str:
    """A JSON error body's ``message`` field, if it has one (bounded read)."""
    try:
        raw = resp.raw.read(4096, decode_content=True)
        message = json.loads(raw).get("message")
    except Exception:  # only a nicety for the error message
        return ""
    return message[:300] if isinstance(message, str) else ""


def _within_deadline(deadline: float, what: str,
                     attempt: Callable[[Callable[[], bool]], Any]) -> Any:
    """Run one attempt in a worker thread and give up on it at the deadline.

    A server can drip bytes (or headers) forever below any per-read timeout; the
    worker is abandoned, and never writes again once the caller has moved on.

    requests is imported here, in the caller's thread, not first in the worker's: a
    download made while a repo's code runs (the weights guard) holds the guard's own-work
    marker in this thread only, and the worker's import would otherwise be an import the
    guard must decide on, halfway through requests' own.
    """
    import requests  # noqa: F401

    lock = threading.Lock()
    cancelled = False
    box: dict[str, Any] = {}
    done = threading.Event()

    def write_ok() -> bool:
        with lock:
            return not cancelled

    def run() -> None:
        try:
            box["value"] = attempt(write_ok)
        except BaseException as e:  # handed to the caller
            box["error"] = e
        finally:
            done.set()

    context = contextvars.copy_context()  # the caller's context (runtime guard state)
    worker = threading.Thread(target=context.run, args=(run,), daemon=True,
                              name="safehub-http")
    worker.start()
    if not done.wait(deadline):
        with lock:
            cancelled = True
        raise FetchError(
            f"{what} took longer than {deadline:g} s; gave up",
            fix=fixes.say("the server is too slow or stalling on purpose; SAFEHUB_TIMEOUT sets "
                          "the most one request may take"),
        )
    if "error" in box:
        if isinstance(box["error"], _Cancelled):
            raise FetchError(f"{what} was cancelled")
        raise box["error"]
    return box["value"]
