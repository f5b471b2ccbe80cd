"""The HTTP client under the transport: urllib3's connection pools, spoken to directly.

A request goes to the pool of the exact (scheme, host, port) that
:func:`~safehub._internal.urls.read_url` read, and sends the path and query it read as the
request target: no parser reads the URL string again to decide where to connect, so the
host checked is the host connected to. (urllib3 re-encodes a target only where a
character is not allowed or a percent-encoding is in lower case; ``read_url`` refuses the
first and writes the second in upper case, so the target sent is the one read, and
tests/test_urls.py checks it.)

One :class:`Pools` per transport keeps one pool manager per (proxy, CA bundle): a
``PoolManager``, or a ``ProxyManager`` for the proxy the environment names for the host
(:func:`~safehub.sources.network.environ_proxy`, never for loopback), so connections
and their TLS sessions are reused from one request to the next. TLS is verified against
the bundle :func:`~safehub.sources.network.ca_bundle` names. Each connection hands the
socket it makes, and the one it sends each request on, to the request's deadline
(:mod:`safehub.sources.deadline`), and its connect and read timeouts are at most the
time left: a request runs in the caller's thread, ended at its deadline by one watchdog.

A body is read by :func:`read_body` straight into a buffer reused from read to read
(``readinto`` of the HTTP response under urllib3's, :func:`reader`), where urllib3 would
hand out a new bytes object per read and copy it again; a body with a
``Content-Encoding`` is read through urllib3, which decodes it. A large body is read into
two buffers in turn: while one is handed on (a download's hashing and writing, in a thread
of its own) the next piece is read into the other, so hashing costs no wall time where a
core is free (SHA-256 and TLS both let go of the interpreter lock). :func:`finish` hands a
connection back to its pool when its answer was read to the end, and closes it otherwise.
"""

from __future__ import annotations

import contextlib
import contextvars
import http.client
import json
import os
import queue
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import HTTPError as _ClientError

from safehub._internal import fixes
from safehub._internal.urls import Url, UrlError
from safehub.errors import FetchError
from safehub.sources.deadline import current, watch
from safehub.sources.network import Proxy, ca_bundle, environ_proxy

__all__ = ["ERRORS", "SENDING", "Cut", "Pools", "finish", "range_start", "read_body", "reader",
           "server_message", "tls_context"]

ERRORS: tuple[type[BaseException], ...] = (_ClientError, OSError, http.client.HTTPException)
"""What a request or a body's read raises when the network, the server or TLS fails."""
SENDING: tuple[type[BaseException], ...] = (*ERRORS, ValueError)
"""What sending a request raises when it fails (and a header http.client refuses)."""
_DRAIN = 64 * 1024
"""The most bytes read past an answer that is not kept (a redirect's, an error's), to
hand its connection back; a longer one is closed."""
_CONTEXTS: dict[tuple[str | None, int, int], ssl.SSLContext] = {}
_LOCK = threading.Lock()


def tls_context(bundle: str | None) -> ssl.SSLContext:
    """urllib3's TLS context (certificates and host names verified) trusting ``bundle`` (a
    PEM file, or a folder of hashed certificates), or the system's store for None; one
    per bundle and its version on disk, shared by every transport of the process."""
    from urllib3.util.ssl_ import create_urllib3_context

    stat = os.stat(bundle) if bundle is not None else None
    key = (bundle, stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)
    with _LOCK:
        context = _CONTEXTS.get(key)
    if context is None:
        context = create_urllib3_context()
        if bundle is None:
            context.load_default_certs()
        elif os.path.isdir(bundle):
            context.load_verify_locations(capath=bundle)
        else:
            context.load_verify_locations(cafile=bundle)
        with _LOCK:
            context = _CONTEXTS.setdefault(key, context)
    return context


class Pools:
    """One transport's connections (see the module docstring)."""

    def __init__(self, *, connect_timeout: float, read_timeout: float) -> None:
        self._connect, self._read = connect_timeout, read_timeout
        self._timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        self._managers: dict[tuple[Proxy | None, str | None], urllib3.PoolManager] = {}
        self._lock = threading.Lock()

    def open(self, method: str, hop: Url, headers: Mapping[str, str], body: Any) -> Any:
        """Send one request to ``hop``; its answer with the body not read yet."""
        try:
            proxy = environ_proxy(hop)
        except UrlError as e:
            raise FetchError(f"the proxy the environment names for {hop.host} is not a URL "
                             f"safehub follows: {e}", fix=fixes.say(
                                 f"{e.advice}, in HTTPS_PROXY (or ALL_PROXY), or add "
                                 f"{hop.host} to NO_PROXY")) from None
        if proxy is not None and hop.scheme != "https":  # plain http is loopback's only
            raise FetchError(f"refused to send {hop} through the proxy {proxy.url.host}",
                             fix=fixes.say("use an https:// URL"))
        tls = hop.scheme == "https" or (proxy is not None and proxy.url.scheme == "https")
        manager = self._manager(proxy, ca_bundle()[0] if tls else None)
        pool = manager.connection_from_host(hop.host, hop.port, hop.scheme)
        return pool.urlopen(method, hop.target, body=body, headers=dict(headers),
                            redirect=False, retries=False, timeout=self._timeout_now(),
                            preload_content=False, release_conn=False,
                            assert_same_host=False)

    def _timeout_now(self) -> urllib3.Timeout:
        """The connect and read timeouts, each at most the time left to the request's
        deadline (a connection not made yet has no socket the deadline can end)."""
        limit = current()
        if limit is None:
            return self._timeout
        left = limit.left()
        if left <= 0:
            raise TimeoutError("the deadline has passed")
        if left >= self._connect and left >= self._read:
            return self._timeout
        return urllib3.Timeout(connect=min(self._connect, left), read=min(self._read, left))

    def _manager(self, proxy: Proxy | None, bundle: str | None) -> urllib3.PoolManager:
        key = (proxy, bundle)
        with self._lock:
            manager = self._managers.get(key)
            if manager is None:
                manager = self._managers[key] = _manager(proxy, bundle)
            return manager

    def clear(self) -> None:
        """Close every connection."""
        with self._lock:
            managers, self._managers = list(self._managers.values()), {}
        for manager in managers:
            manager.clear()


def _manager(proxy: Proxy | None, bundle: str | None) -> urllib3.PoolManager:
    """A pool manager for ``proxy`` and ``bundle`` whose connections put each socket they
    use under the deadline of the request (:func:`_watched`)."""
    manager = _unwatched(proxy, bundle)
    manager.pool_classes_by_scheme = {scheme: _watched(pool) for scheme, pool
                                      in manager.pool_classes_by_scheme.items()}
    return manager


_WATCHED: dict[type[HTTPConnectionPool], type[HTTPConnectionPool]] = {}


def _watched(pool: type[HTTPConnectionPool]) -> type[HTTPConnectionPool]:
    """``pool`` (urllib3's, or a SOCKS one) with connections that hand to the deadline of
    their thread (:func:`safehub.sources.deadline.watch`) the socket they make (before a
    tunnel or TLS is set up on it) and the one they send each request on (a kept one)."""
    with _LOCK:
        if pool in _WATCHED:
            return _WATCHED[pool]
    base: Any = pool.ConnectionCls

    def _new_conn(self: Any) -> Any:
        return watch(base._new_conn(self))

    def putrequest(self: Any, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:
            watch(self.sock)
        base.putrequest(self, *args, **kwargs)

    connection = type(base.__name__, (base,), {"_new_conn": _new_conn,
                                               "putrequest": putrequest})
    watched: type[HTTPConnectionPool] = type(pool.__name__, (pool,),
                                             {"ConnectionCls": connection})
    with _LOCK:
        return _WATCHED.setdefault(pool, watched)


def _unwatched(proxy: Proxy | None, bundle: str | None) -> urllib3.PoolManager:
    context = tls_context(bundle)
    if proxy is None:
        return urllib3.PoolManager(maxsize=10, ssl_context=context)
    where = f"{proxy.url.scheme}://{proxy.url.authority}"
    if proxy.url.scheme.startswith("socks"):
        try:
            from urllib3.contrib.socks import SOCKSProxyManager
        except ImportError:
            raise FetchError(f"the proxy {where} ({proxy.variable}) is a SOCKS proxy, which "
                             "needs PySocks", fix=fixes.run("pip install pysocks",
                                                            "to reach it")) from None
        user, _, password = (proxy.auth or "").partition(":")
        return SOCKSProxyManager(where, username=user or None, password=password or None,
                                 maxsize=10, ssl_context=context)
    from urllib3.util import make_headers

    return urllib3.ProxyManager(
        where, maxsize=10, ssl_context=context,
        proxy_headers=make_headers(proxy_basic_auth=proxy.auth) if proxy.auth else None,
        proxy_ssl_context=context if proxy.url.scheme == "https" else None)


def reader(resp: Any) -> tuple[Callable[[memoryview], int], bool]:
    """(a ``readinto`` of the answer's body, whether the body is content-encoded): straight
    from the HTTP response under urllib3's where the body is sent as it is, else
    urllib3's own (which decodes it, a copy per read)."""
    encoding = str(resp.headers.get("Content-Encoding", "")).strip().lower()
    raw = getattr(resp, "_fp", None)
    if encoding in ("", "identity") and isinstance(raw, http.client.HTTPResponse):
        return raw.readinto, False
    return resp.readinto, encoding not in ("", "identity")


class Cut(Exception):
    """A body that stopped before its end or failed to arrive (worth another attempt)."""


def read_body(resp: Any, *, cap: int, sink: Callable[[memoryview], None],
              progress: Callable[[int, int | None], None] | None,
              keep_going: Callable[[], bool], too_big: Callable[[], Exception],
              chunk: int) -> None:
    """Read the body of ``resp`` in pieces of at most ``chunk`` bytes and hand each to
    ``sink`` as a view of a reused buffer: at most ``cap`` bytes (else ``too_big()``), and
    every byte where the length is said (else :class:`Cut`, as for a failed read or a
    failed write). ``keep_going`` is asked before each piece is handed on. A body of more
    than two pieces (or of no said length) is handed on in a thread of its own (the
    module docstring); ``sink`` has had every piece read when this returns or raises."""
    declared = str(resp.headers.get("Content-Length", ""))
    total = int(declared) if declared.isdigit() and len(declared) < 19 else None
    if total is not None and total > cap:
        raise too_big()
    readinto, encoded = reader(resp)
    size = chunk if total is None else max(1, min(chunk, total))
    feed = _Handoff(sink, size) if total is None or total > 2 * size else _Inline(sink, size)
    done = 0
    try:
        while n := readinto(feed.buffer()):
            if not keep_going():
                raise Cut("cancelled (the deadline passed)")
            done += n
            if done > cap:
                raise too_big()
            feed.hand(n)
            if progress is not None:
                progress(done, total)
    except _SinkFailed:
        pass  # said below
    except ERRORS as e:
        raise Cut(f"cut short after {done} bytes: {e}") from e
    finally:
        failed = feed.close()
    if failed is not None and not isinstance(failed, OSError):
        raise failed  # as the sink raised it, as where it runs in this thread
    if failed is not None:
        raise Cut(f"not written after {done} bytes: {failed}") from failed
    if total is not None and not encoded and done != total:
        raise Cut(f"cut short: {done} of {total} bytes")


class _SinkFailed(Exception):
    """The sink failed on a piece: reading stops (its error is said once it is closed)."""


class _Inline:
    """One buffer; each piece handed on before the next is read."""

    def __init__(self, sink: Callable[[memoryview], None], size: int) -> None:
        self._sink, self._view = sink, memoryview(bytearray(size))

    def buffer(self) -> memoryview:
        return self._view

    def hand(self, n: int) -> None:
        self._sink(self._view[:n])

    def close(self) -> BaseException | None:
        return None


class _Handoff:
    """Two buffers: a thread hands one's piece to the sink while the other is read into
    (each buffer is read into again only once the sink is done with it)."""

    def __init__(self, sink: Callable[[memoryview], None], size: int) -> None:
        self._sink = sink
        self._views = [memoryview(bytearray(size)), memoryview(bytearray(size))]
        self._free = [threading.Semaphore(1), threading.Semaphore(1)]
        self._queue: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._next = 0
        self.failed: BaseException | None = None
        context = contextvars.copy_context()  # the reader's (runtime guard state)
        self._thread = threading.Thread(target=context.run, args=(self._run,), daemon=True,
                                        name="safehub-sink")
        self._thread.start()

    def buffer(self) -> memoryview:
        self._free[self._next].acquire()
        if self.failed is not None:
            raise _SinkFailed
        return self._views[self._next]

    def hand(self, n: int) -> None:
        self._queue.put((self._next, n))
        self._next ^= 1

    def close(self) -> BaseException | None:
        """Wait until every piece handed on is in the sink; what it failed with."""
        self._queue.put(None)
        self._thread.join()
        return self.failed

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            index, n = item
            if self.failed is None:
                try:
                    self._sink(self._views[index][:n])
                except BaseException as e:  # said by the reader
                    self.failed = e
            self._free[index].release()


def finish(resp: Any, *, drain: bool = False) -> None:
    """Hand the connection of ``resp`` back to its pool if its answer was read to the end
    (with ``drain``: after reading what is left of a short one), else close it."""
    if drain and not resp.closed:
        with contextlib.suppress(*ERRORS):
            resp.read(_DRAIN)
    if resp.closed:
        resp.release_conn()
    else:
        resp.close()


def range_start(headers: Mapping[str, str]) -> int | None:
    """The first byte of a ``Content-Range: bytes N-M/T`` answer (None if not one).

    >>> range_start({"Content-Range": "bytes 100-199/200"}), range_start({})
    (100, None)
    """
    text = next((v for k, v in headers.items() if k.lower() == "content-range"), "")
    unit, _, rest = text.strip().partition(" ")
    first = rest.partition("-")[0]
    return int(first) if unit == "bytes" and first.isdigit() and len(first) < 19 else None


def server_message(resp: Any) -> str:
    """A JSON error body's ``message`` field, if it has one (bounded read)."""
    try:
        raw = resp.read(4096)
        message = json.loads(raw).get("message")
    except Exception:  # only a nicety for the error message
        return ""
    return message[:300] if isinstance(message, str) else ""
