"""The only place safehub opens network connections.

Rules enforced here, for every request:

* HTTPS only (a private CA comes in through ``REQUESTS_CA_BUNDLE``, as with requests);
* a host allow-list, checked again on every redirect hop (redirects are followed by hand);
* ``GITHUB_TOKEN`` is sent only to URLs under the API base, never to a redirect target
  elsewhere (not even to the web host when it shares the API's host name);
* connect and read timeouts, retries with exponential backoff on 5xx answers, dropped
  connections and truncated bodies;
* bounded bodies: JSON answers and downloads stop at a size cap;
* offline mode refuses before any socket is opened.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from safehub.config import Settings
from safehub.errors import (
    FetchError,
    IntegrityError,
    NotFoundError,
    OfflineError,
    RateLimitError,
)

if TYPE_CHECKING:
    import requests

__all__ = ["Http", "Reply"]

_USER_AGENT = "safehub/0.1 (+https://github.com/safehub)"
_RETRY_STATUS = frozenset({500, 502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 5
_CHUNK = 256 * 1024


@dataclass(frozen=True)
class Reply:
    """A JSON answer and the URL that finally gave it (after redirects)."""

    data: Any
    url: str
    redirected: bool
    headers: dict[str, str]


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


class _Progress:
    """A one-line byte counter on stderr, shown only when stderr is a terminal."""

    def __init__(self, label: str, total: int | None, enabled: bool) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.enabled = enabled and sys.stderr.isatty()
        self._last = 0.0

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        mib = self.done / 1048576
        if self.total:
            text = f"{mib:.1f}/{self.total / 1048576:.1f} MiB ({100 * self.done // self.total}%)"
        else:
            text = f"{mib:.1f} MiB"
        sys.stderr.write(f"\r{self.label}: {text}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{self.label}: {self.done / 1048576:.1f} MiB, done\n")
            sys.stderr.flush()


class Http:
    """A small HTTPS client bound to one :class:`Settings`."""

    def __init__(self, settings: Settings, *, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        self._session: requests.Session | None = None
        self._sleep = sleep

    # -- plumbing ---------------------------------------------------------------------

    def _get_session(self) -> requests.Session:
        if self._session is None:
            import requests

            session = requests.Session()
            session.headers["User-Agent"] = _USER_AGENT
            # trust_env stays on: proxies and REQUESTS_CA_BUNDLE come from the environment.
            self._session = session
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _check_url(self, url: str, what: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "https":
            raise FetchError(
                f"refused to fetch {what} over {parts.scheme or 'no scheme'}: {url}",
                hint="safehub only uses https://; for a private CA set REQUESTS_CA_BUNDLE",
            )
        host = (parts.hostname or "").lower()
        if host not in self.settings.allowed_hosts:
            raise FetchError(
                f"refused to fetch {what} from {host!r}, which is not an allowed host "
                f"({', '.join(sorted(self.settings.allowed_hosts))})",
                hint="if this host is yours, add it to SAFEHUB_ALLOWED_HOSTS",
            )

    def _headers(self, url: str, accept: str) -> dict[str, str]:
        headers = {"Accept": accept}
        if url.startswith(self.settings.api_url + "/"):
            headers["X-GitHub-Api-Version"] = "2022-11-28"
            if self.settings.token:
                headers["Authorization"] = f"Bearer {self.settings.token}"
        return headers

    def _open(self, url: str, what: str, accept: str) -> tuple[requests.Response, bool]:
        """GET ``url`` following allowed redirects; return the streaming response."""
        import requests

        if self.settings.offline:
            raise OfflineError(
                f"offline mode (SAFEHUB_OFFLINE=1) refused to fetch {what}",
                hint="fill the cache first with `safehub prefetch`, or unset SAFEHUB_OFFLINE",
            )
        limits = self.settings.limits
        redirected = False
        for _hop in range(_MAX_REDIRECTS + 1):
            self._check_url(url, what)
            try:
                resp = self._get_session().get(
                    url,
                    headers=self._headers(url, accept),
                    allow_redirects=False,
                    stream=True,
                    timeout=(limits.connect_timeout, limits.read_timeout),
                )
            except requests.RequestException as e:
                raise _Retryable(f"could not reach {_host(url)} for {what}: {e}") from e
            if resp.status_code in _REDIRECT_STATUS and "Location" in resp.headers:
                resp.close()
                url = urljoin(url, resp.headers["Location"])
                redirected = True
                continue
            return resp, redirected
        raise FetchError(
            f"too many redirects fetching {what} (more than {_MAX_REDIRECTS})",
            hint="check SAFEHUB_GITHUB_URL / SAFEHUB_GITHUB_API_URL",
        )

    def _raise_for_status(self, resp: requests.Response, what: str) -> None:
        status = resp.status_code
        if status < 400:
            return
        body = _error_message(resp)
        resp.close()
        if status in _RETRY_STATUS:
            raise _Retryable(f"{resp.url} answered {status} for {what}{body}")
        if status in (403, 429) and (
            resp.headers.get("X-RateLimit-Remaining") == "0" or "rate limit" in body.lower()
        ):
            reset = resp.headers.get("X-RateLimit-Reset", "")
            when = ""
            if reset.isdigit():
                when = " until " + time.strftime("%H:%M:%S UTC", time.gmtime(int(reset)))
            fix = (
                "the token's hourly quota is spent; wait, or use another token"
                if self.settings.token
                else "set GITHUB_TOKEN (5,000 requests an hour instead of 60)"
            )
            raise RateLimitError(
                f"GitHub API rate limit exceeded{when} while fetching {what}",
                hint=f"{fix}; pinned loads (lockfile or 40-hex ref) that are cached need no API",
            )
        if status == 404:
            raise NotFoundError(f"{what} not found (404 from {_host(resp.url)}){body}")
        if status in (401, 403):
            raise FetchError(
                f"{_host(resp.url)} refused access to {what} ({status}){body}",
                hint="check GITHUB_TOKEN: it may be wrong, expired or lack access to the repo",
            )
        raise FetchError(f"{_host(resp.url)} answered {status} for {what}{body}")

    def _retrying(self, what: str, attempt: Callable[[], Any]) -> Any:
        limits = self.settings.limits
        for i in range(limits.retries + 1):
            try:
                return attempt()
            except _Retryable as e:
                if i == limits.retries:
                    raise FetchError(
                        f"{e} (gave up after {limits.retries + 1} attempts)",
                        hint="check the network or proxy; warm loads work offline with "
                        "SAFEHUB_OFFLINE=1",
                    ) from e
                self._sleep(limits.backoff * (2**i))
        raise AssertionError("unreachable")

    # -- public -----------------------------------------------------------------------

    def get_json(self, url: str, what: str) -> Reply:
        """GET a JSON document (bounded in size), retrying transient failures."""

        def attempt() -> Reply:
            import requests

            resp, redirected = self._open(url, what, "application/vnd.github+json")
            with resp:
                self._raise_for_status(resp, what)
                try:
                    body = _read_bounded(resp, self.settings.limits.max_api_bytes, what)
                except requests.RequestException as e:
                    raise _Retryable(f"connection dropped while reading {what}: {e}") from e
            try:
                data = json.loads(body)
            except ValueError as e:
                raise FetchError(f"{what}: the server did not answer JSON ({e})") from e
            return Reply(data, resp.url, redirected, dict(resp.headers))

        result: Reply = self._retrying(what, attempt)
        return result

    def download(
        self, url: str, out: IO[bytes], *, what: str, max_bytes: int, progress: bool
    ) -> int:
        """Stream ``url`` into ``out`` (rewound on each retry); return the byte count.

        A body larger than ``max_bytes`` stops the download with an :class:`IntegrityError`;
        a body cut short is retried, then reported as a :class:`FetchError`.
        """

        def attempt() -> int:
            import requests

            out.seek(0)
            out.truncate()
            resp, _ = self._open(url, what, "application/octet-stream, application/zip")
            with resp:
                self._raise_for_status(resp, what)
                declared = resp.headers.get("Content-Length")
                total = int(declared) if declared and declared.isdigit() else None
                if total is not None and total > max_bytes:
                    raise _too_big(what, max_bytes)
                bar = _Progress(f"Downloading {what}", total, progress)
                try:
                    for chunk in resp.iter_content(_CHUNK):
                        out.write(chunk)
                        bar.update(len(chunk))
                        if bar.done > max_bytes:
                            raise _too_big(what, max_bytes)
                except requests.RequestException as e:
                    raise _Retryable(
                        f"download of {what} was cut short after {bar.done} bytes: {e}"
                    ) from e
                finally:
                    bar.close()
                if total is not None and bar.done != total:
                    raise _Retryable(
                        f"download of {what} was cut short: {bar.done} of {total} bytes"
                    )
            out.flush()
            return bar.done

        result: int = self._retrying(what, attempt)
        return result


class _Retryable(Exception):
    """A transient failure: retried, then reported as a FetchError."""


def _too_big(what: str, cap: int) -> IntegrityError:
    return IntegrityError(
        f"{what} is larger than the {cap:,}-byte limit; download stopped",
        hint="if this repo really is that large, raise SAFEHUB_MAX_ARCHIVE_BYTES",
    )


def _read_bounded(resp: requests.Response, cap: int, what: str) -> bytes:
    parts: list[bytes] = []
    size = 0
    for chunk in resp.iter_content(_CHUNK):
        size += len(chunk)
        if size > cap:
            raise FetchError(f"the answer for {what} is larger than {cap:,} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _error_message(resp: requests.Response) -> str:
    """GitHub's ``message`` field, if the error body has one (bounded read)."""
    try:
        raw = resp.raw.read(4096, decode_content=True)
        message = json.loads(raw).get("message")
    except Exception:
        return ""
    return f": {message}" if isinstance(message, str) and message else ""
