"""HTTP plumbing of the GitHub stand-in: replies, the request log, TLS listeners.

A :class:`Reply` says what to send and how: a body of bytes or an iterable of chunks (sent
close-delimited, possibly without end), a body cut short after some bytes while the
``Content-Length`` promises more, or a slow drip (a few bytes, a real pause, the next few).
The :class:`Listener` binds one port on several loopback addresses and serves each
connection in a daemon thread; :meth:`Listener.stop` ends everything at once.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import ssl
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

__all__ = ["Drip", "Listener", "Reply", "RequestRecord"]


@dataclass(frozen=True)
class RequestRecord:
    """One request the stand-in received.

    ``host`` is the Host header without its port (lower case); ``path`` is the request target
    as sent (path and query, still percent-encoded); ``role`` is the part of GitHub the
    connected address plays (``api``, ``web``, ``codeload``, ``release_assets``, ``foreign``,
    ``mirror``); ``headers`` holds every request header in the order sent.
    """

    method: str
    host: str
    path: str
    authorization: str | None
    user_agent: str | None
    accept: str | None = None
    role: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)


@dataclass(frozen=True)
class Drip:
    """Send a body ``chunk_size`` bytes at a time with ``delay`` seconds between chunks."""

    chunk_size: int = 1
    delay: float = 0.05

    def __post_init__(self) -> None:
        if self.chunk_size < 1 or self.delay < 0:
            raise ValueError(f"bad drip: {self.chunk_size} bytes every {self.delay} s")


@dataclass(frozen=True)
class Reply:
    """What the stand-in sends for one request.

    ``body`` is bytes (sent with its ``Content-Length``) or an iterable of byte chunks (sent
    without a length, ``Connection: close``, for as long as the iterable yields). With
    ``cut_after`` the connection is closed after that many body bytes although the announced
    length is the whole body's. ``drip`` slows the body down. Header values are sent as given,
    so a test can send what a real server never would.
    """

    status: int
    body: bytes | Iterable[bytes] = b""
    headers: tuple[tuple[str, str], ...] = ()
    cut_after: int | None = None
    drip: Drip | None = None

    @classmethod
    def json(cls, payload: object, status: int = 200,
             headers: Sequence[tuple[str, str]] = ()) -> Reply:
        """A JSON answer with GitHub's content type."""
        body = json.dumps(payload, indent=2).encode()
        return cls(status, body, (("Content-Type", "application/json; charset=utf-8"), *headers))

    @classmethod
    def redirect(cls, location: str, status: int = 302) -> Reply:
        """An empty answer with ``Location`` set."""
        return cls(status, b"", (("Location", location),))

    def with_headers(self, *extra: tuple[str, str]) -> Reply:
        return Reply(self.status, self.body, (*self.headers, *extra), self.cut_after, self.drip)


class _Handler(BaseHTTPRequestHandler):
    """Turns one HTTP/1.1 connection into calls of the listener's ``answer`` function."""

    protocol_version = "HTTP/1.1"
    server_version = "GitHubStandIn/2.0"
    sys_version = ""
    timeout = 60  # idle keep-alive connections are closed after this many seconds
    wbufsize = -1  # buffer each response so headers and body leave in one write (no Nagle stall)

    @property
    def listener(self) -> Listener:
        return cast(_Origin, self.server).listener

    @property
    def role(self) -> str:
        return cast(_Origin, self.server).role

    def log_message(self, format: str, *args: Any) -> None:
        """Keep stderr quiet (the default logs every request)."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._drain_body()
        self._serve()

    do_PUT = do_PATCH = do_DELETE = do_HEAD = do_POST

    def _drain_body(self) -> None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if 0 <= length <= 10_000_000:
            self.rfile.read(length)
        else:
            self.close_connection = True

    def _serve(self) -> None:
        host = (self.headers.get("Host") or "").strip().lower()
        host = host.partition("]")[0] + "]" if host.startswith("[") else host.partition(":")[0]
        record = RequestRecord(
            method=self.command, host=host, path=self.path,
            authorization=self.headers.get("Authorization"),
            user_agent=self.headers.get("User-Agent"), accept=self.headers.get("Accept"),
            role=self.role, headers=tuple(self.headers.items()),
        )
        self._send(self.listener.answer(record))

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        for key, value in reply.headers:
            self.send_header(key, value)
        body = reply.body
        if isinstance(body, (bytes, bytearray)):
            self.send_header("Content-Length", str(len(body)))
            cut = reply.cut_after is not None and reply.cut_after < len(body)
            if cut:
                body = body[: reply.cut_after]
            if self.close_connection or cut:
                self.send_header("Connection", "close")
            self.close_connection = self.close_connection or cut
            chunks: Iterable[bytes] = [bytes(body)] if self.command != "HEAD" else []
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
            chunks = body if self.command != "HEAD" else []
        self.end_headers()
        self._write(chunks, reply.drip)

    def _write(self, chunks: Iterable[bytes], drip: Drip | None) -> None:
        stopping = self.listener.stopping
        if drip is None:
            for chunk in chunks:
                self.wfile.write(chunk)
                if stopping.is_set():
                    return
            return
        self.wfile.flush()  # the headers leave at once; the body trickles
        for chunk in chunks:
            for start in range(0, len(chunk), drip.chunk_size):
                if stopping.wait(drip.delay):  # a real pause, cut short only by stop()
                    self.close_connection = True
                    return
                self.wfile.write(chunk[start : start + drip.chunk_size])
                self.wfile.flush()


@dataclass(frozen=True)
class _Origin:
    """What a handler knows of where its connection came in (stands where a server goes)."""

    listener: Listener
    role: str


class Listener:
    """TLS listeners on one port of several loopback addresses, one thread per connection.

    The sockets are bound at once (so ``port`` is known); :meth:`serve` starts accepting.

    ``roles`` maps a bound address to the role its requests get; ``answer`` is called for
    every request (from connection threads, concurrently) and must not raise. Unexpected
    handler errors go to ``on_error``.
    """

    def __init__(self, roles: dict[str, str], context: ssl.SSLContext,
                 answer: Callable[[RequestRecord], Reply], on_error: Callable[[str], None]):
        self.answer = answer
        self.stopping = threading.Event()
        self._roles = roles
        self._context = context
        self._on_error = on_error
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._sockets = self._bind(list(roles))
        self.port = int(self._sockets[0].getsockname()[1])
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"github-standin-{self.port}")

    def serve(self) -> None:
        """Start accepting connections (from a daemon thread)."""
        self._thread.start()

    @staticmethod
    def _bind(addresses: list[str]) -> list[socket.socket]:
        """Bind every address on one free port (retrying if another program holds it)."""
        for _attempt in range(50):
            bound: list[socket.socket] = []
            port = 0
            try:
                for address in addresses:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    bound.append(sock)
                    sock.bind((address, port))
                    sock.listen(256)
                    port = sock.getsockname()[1]
                return bound
            except OSError:
                for sock in bound:
                    sock.close()
        raise OSError(f"could not bind one port on all of {', '.join(addresses)}")

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            for sock in self._sockets:
                selector.register(sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self.stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is self._wake_r:
                        return
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    with contextlib.suppress(OSError):
                        conn, peer = sock.accept()
                        role = self._roles[sock.getsockname()[0]]
                        threading.Thread(target=self._serve, args=(conn, peer, role),
                                         daemon=True).start()

    def _serve(self, raw: socket.socket, peer: Any, role: str) -> None:
        self._track(raw, add=True)
        try:
            raw.settimeout(10)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = self._context.wrap_socket(raw, server_side=True)
        except OSError:  # handshake failed or peer went away; ssl.SSLError is an OSError
            self._track(raw, add=False)
            raw.close()
            return
        self._track(raw, add=False)
        self._track(conn, add=True)
        try:
            _Handler(conn, peer, _Origin(self, role))  # type: ignore[arg-type]
        except OSError:
            pass  # a peer that hangs up or times out is no error
        except Exception:
            self._on_error(traceback.format_exc())
        finally:
            self._track(conn, add=False)
            with contextlib.suppress(OSError):
                conn.close()

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._live.add(conn)
            else:
                self._live.discard(conn)

    def stop(self) -> None:
        """Close the listening sockets and every open connection; end drips now."""
        self.stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for sock in (*self._sockets, self._wake_r, self._wake_w):
            sock.close()
        with self._lock:
            live = list(self._live)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
