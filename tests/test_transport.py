"""Time and size are bounded: a server that answers slowly or forever cannot hold a load.
Every request has a total deadline (``SAFEHUB_TIMEOUT``), not a per-read one that a drip of
bytes keeps alive; paged listings (the branches and tags searched for a commit's provenance)
stop after a bounded number of pages. On the loopback GitHub, with real git repos.

The client under the transport is urllib3, spoken to directly: a download is read into one
reused buffer, a compressed answer decoded, connections reused, the environment's proxy
used with its credentials (and NO_PROXY honoured), failures retried or not as the transport
promises (injected through its ``opener``).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

import safehub
from safehub._internal.frozen import replace
from safehub.errors import (
    FetchError,
    NotFoundError,
    OfflineError,
    PinError,
    UnreachableError,
)
from safehub.sources.transport import Transport, TransportConfig
from tests.conftest import HubRepo
from tests.support import GitHubStandIn, Reply
from tests.support.tls import TLSFiles


def load(spec: str, entrypoint: str = "echo", *args: object, **kwargs: object) -> object:
    return safehub.load(spec, entrypoint, *args, trust_repo=True, verbose=False, **kwargs)


def test_a_server_that_drips_is_cut_off_at_the_deadline(
    hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAFEHUB_TIMEOUT", "1.5")
    server.drip(server.codeload_url, chunk_size=1, delay=0.1)  # bytes keep coming, slowly
    with pytest.raises(FetchError, match="longer than 1.5 s"):  # the deadline, not forever
        load("acme/models:v1.0")


class _Dripper:
    """A TLS server on loopback that answers every request one byte at a time, for as long
    as the client reads: its status line and headers (``headers``), or whole headers and
    then a body without end, with no length (``body``) or a length it never reaches
    (``length``); or nothing at all (``silent``). ``/ok`` is answered at once."""

    def __init__(self, tls: TLSFiles, mode: str) -> None:
        self.mode = mode
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(tls.server_cert, tls.server_key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(client,), daemon=True).start()

    def _answer(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError), \
                self.context.wrap_socket(client, server_side=True) as conn:
            while True:
                with conn.makefile("rb") as f:
                    line = f.readline()
                    if not line:
                        return  # the client closed the connection
                    target = line.split(b" ")[1]
                    while f.readline() not in (b"\r\n", b""):
                        pass
                if target == b"/ok":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    continue
                head = {"headers": b"HTTP/1.1 200 OK\r\nX-Drip: ",
                        "body": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
                        "length": b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n",
                        "silent": b""}[self.mode]
                conn.sendall(head if self.mode != "headers" else b"")
                drip = head if self.mode == "headers" else b""
                while not self.stop.wait(0.01):  # a real pause between bytes
                    if self.mode == "silent":
                        continue
                    conn.sendall(drip[:1] or b"a")
                    drip = drip[1:]
                return

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.mark.parametrize("mode", ["headers", "body", "length", "silent"])
def test_a_server_that_drips_headers_or_a_body_forever_is_cut_off_at_the_deadline(
        mode: str, tls: TLSFiles, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request runs in the caller's thread; its deadline (not the stall timeout, far
    longer here) ends it however the bytes come, and retries do not start it again. The
    same transport then answers an honest request on the same host."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca_cert))
    dripper = _Dripper(tls, mode)
    try:
        transport = Transport(TransportConfig(
            allowed_hosts=frozenset({"127.0.0.1"}), deadline=1.5, stall_timeout=600,
            retries=3, backoff=0.0))
        base = f"https://127.0.0.1:{dripper.port}"
        with pytest.raises(FetchError, match=r"the drip took longer than 1\.5 s; gave up"):
            transport.get(f"{base}/drip", what="the drip")
        with pytest.raises(FetchError, match="took longer than"):
            transport.download(f"{base}/drip", io.BytesIO(), what="the drip", max_bytes=1 << 40)
        assert transport.get(f"{base}/ok", what="an answer").body == b"{}"
    finally:
        dripper.close()


def test_a_request_runs_in_the_callers_thread() -> None:
    """No thread is started per request: the opener is called in the caller's thread."""
    seen: list[int] = []

    class Here(_Opener):
        def __call__(self, method: str, hop: Any, headers: Any, body: Any) -> Any:
            seen.append(threading.get_ident())
            return super().__call__(method, hop, headers, body)

    config = TransportConfig(allowed_hosts=frozenset({"h.example"}))
    transport = Transport(config, opener=Here())
    for _ in range(3):
        assert transport.get("https://h.example/x", what="x").body == b"{}"
    assert seen == [threading.get_ident()] * 3


def test_a_deadline_wakes_a_read_blocked_on_its_socket() -> None:
    """The watchdog shuts the sockets of a deadline that passed down: a read blocked on
    one returns (here the end of the stream), and the deadline says it passed."""
    from safehub.sources.deadline import Deadline, watch

    ours, theirs = socket.socketpair()
    with ours, theirs:
        limit = Deadline(0.2)
        watch(ours)
        assert ours.recv(1) == b""  # nothing was ever sent: only the shutdown ends it
        assert limit.end() and not limit.ok()
    honest = Deadline(600)
    assert honest.ok() and not honest.end()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_never_shuts_the_parents_sockets_down() -> None:
    """A child forked while a request runs drops the parent's deadlines: its copies of
    the parent's sockets are closed, so none is shut down in the child when that
    deadline passes (a shutdown acts on the socket the parent keeps, in its pool)."""
    from safehub.sources import deadline

    ours, theirs = socket.socketpair()
    with ours, theirs:
        running = deadline.Deadline(600)
        deadline.watch(ours)
        pid = os.fork()
        if pid == 0:  # the child: report, then leave at once (no pytest teardown)
            kept = deadline._WATCHDOG._heap or running._descriptors
            os._exit(1 if kept or not running._ended else 0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert running._descriptors and not running._ended  # the parent's is untouched
        assert not running.end()
        theirs.sendall(b"x")
        assert ours.recv(1) == b"x"  # still open, never shut down


def test_ref_listing_is_bounded(hub_repo: HubRepo, make_hub_repo,  # type: ignore[no-untyped-def]
                                server: GitHubStandIn) -> None:
    fork = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"evil.py": "x = 1\n"})
    page = [{"name": f"b{i}", "commit": {"sha": "f" * 40, "url": "x"}} for i in range(100)]

    def endless(record: object) -> Reply:
        return Reply.json(page, headers=[("Link", '<https://x/?page=2>; rel="next"')])

    server.intercept(lambda r: "/branches" in r.path or "/tags?" in r.path, endless)
    with pytest.raises(PinError):
        load(f"acme/models:{evil}")
    listed = [r for r in server.requests_log if "/branches" in r.path or "/tags?" in r.path]
    assert len(listed) <= 20 and len(server.requests_log) < 60


@pytest.mark.parametrize("spelling", [
    "https://{foreign}\\@{codeload}{path}", "//{foreign}\\@{codeload}{path}",
    "https://{foreign}\t@{codeload}{path}", "https://{codeload}@{foreign}{path}"])
def test_an_archive_redirect_two_parsers_read_as_two_hosts_is_refused(
        hub_repo: HubRepo, server: GitHubStandIn, spelling: str) -> None:
    """The web host sends the archive to ``https://FOREIGN\\@CODELOAD/...``: Python's
    parser reads the allowed codeload host, requests would connect to the foreign one.
    Refused before anything is sent; with the honest redirect the same load works."""
    codeload = f"{server.host('codeload')}:{server.port}"
    foreign = f"{server.host('foreign')}:{server.port}"
    location = spelling.format(foreign=foreign, codeload=codeload,
                               path=f"/codeload/acme/models/legacy.zip/{hub_repo.sha}")
    with server.intercept(lambda r: "/zipball/" in r.path, Reply.redirect(location)), \
            pytest.raises(FetchError) as e:
        load("acme/models:v1.0")
    assert not any(r.role == "foreign" for r in server.requests_log)
    assert "archive of acme/models" in e.value.message
    assert location.replace("\t", "\\t") in e.value.message and e.value.hint
    assert load("acme/models:v1.0") is not None  # the stand-in's own redirect


def test_a_ca_bundle_that_does_not_exist_is_named_and_its_fix_works(
    hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """What a stopped `demo --serve` leaves in a shell: REQUESTS_CA_BUNDLE naming a deleted
    file. Not "check the network": the variable, and how to mend it."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", f"{tmp_path}/gone/ca.pem")
    before = len(server.requests_log)
    with pytest.raises(FetchError) as e:
        load("acme/models:v1.0")
    assert "REQUESTS_CA_BUNDLE names does not exist" in e.value.message
    assert "unset REQUESTS_CA_BUNDLE" in e.value.hint and "network" not in e.value.hint
    assert len(server.requests_log) == before  # nothing was sent
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server.ca_cert))  # "point it at a PEM file"
    load("acme/models:v1.0")


# -- the client under the transport: urllib3, spoken to directly ----------------------------

def _transport(server: GitHubStandIn, **config: object) -> Transport:
    hosts = frozenset({server.host("foreign"), server.host("mirror")})
    return Transport(TransportConfig(allowed_hosts=hosts, **config))  # type: ignore[arg-type]


class _Views:
    """A file that keeps the digest of what it is given and the buffers it came in."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.kinds: set[type] = set()
        self.buffers: set[int] = set()
        self.size = 0

    def write(self, chunk: memoryview) -> int:
        self.kinds.add(type(chunk))
        self.buffers.add(id(chunk.obj))
        self.hash.update(chunk)
        self.size += len(chunk)
        return len(chunk)

    def seek(self, offset: int, whence: int = 0) -> int:
        return offset

    def truncate(self, size: int | None = None) -> int:
        return 0

    def flush(self) -> None:
        pass


def test_a_download_is_read_into_one_buffer_and_written_from_it(
        server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body sent as it is stored is read straight from the connection into buffers
    reused from read to read (two in turn: one is written while the next piece is read into
    the other), handed on as views of them: no bytes object per chunk (urllib3's own read,
    which makes them, is not used); progress still counts."""
    import urllib3.response

    data = os.urandom(3 * 1024 * 1024 + 17)
    server.add_static("/w/big.bin", data)

    def copying(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("read through urllib3's copies")

    monkeypatch.setattr(urllib3.response.HTTPResponse, "read", copying)
    out, seen = _Views(), []
    got = _transport(server).download(f"{server.foreign_url}/w/big.bin", out,  # type: ignore[arg-type]
                                      what="weights", max_bytes=len(data),
                                      progress=lambda done, total: seen.append((done, total)))
    assert got == out.size == len(data) and out.hash.digest() == hashlib.sha256(data).digest()
    assert out.kinds == {memoryview} and len(out.buffers) == 2
    assert seen[-1] == (len(data), len(data)) and len(seen) >= 4


def test_a_compressed_answer_is_decoded_and_a_cut_one_retried(server: GitHubStandIn) -> None:
    """A body with a ``Content-Encoding`` is read through urllib3, which decodes it; cut
    short, it is retried and then said to be cut short, as any body."""
    payload = json.dumps({"a": list(range(2000))}).encode()
    packed = gzip.compress(payload)
    encoded = (("Content-Encoding", "gzip"), ("Content-Type", "application/json"))
    with server.intercept(lambda r: r.path == "/packed", Reply(200, packed, encoded)):
        reply = _transport(server).get(f"{server.foreign_url}/packed", what="a listing")
    assert reply.json("a listing") == {"a": list(range(2000))}
    with server.intercept(lambda r: r.path == "/packed",
                          Reply(200, packed, encoded, cut_after=len(packed) // 2)), \
            pytest.raises(FetchError, match="cut short"):
        _transport(server, retries=1, backoff=0.0).get(f"{server.foreign_url}/packed",
                                                         what="a listing")


def test_connections_are_kept_and_reused(server: GitHubStandIn) -> None:
    """Requests to one host share a connection (one TLS handshake), whether the answer was
    read whole, was a redirect or an error."""
    server.add_static("/w/a", b"a" * 1000)
    transport = _transport(server)
    base = server.foreign_url
    with server.intercept(lambda r: r.path == "/moved", Reply.redirect(f"{base}/w/a")):
        for _ in range(3):
            assert transport.get(f"{base}/moved", what="a thing").body == b"a" * 1000
    with pytest.raises(NotFoundError):
        transport.get(f"{base}/nothing-here", what="a thing")
    assert transport.get(f"{base}/w/a", what="a thing").body == b"a" * 1000
    assert transport._pools is not None
    manager = next(iter(transport._pools._managers.values()))
    pool = manager.connection_from_host(server.host("foreign"), server.port, "https")
    assert pool.num_connections == 1


class _Opener:
    """Fails the first requests as ``failures`` say, then answers 200 with ``{}``."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self, method: str, hop: Any, headers: Any, body: Any) -> Any:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        from tests.test_urls import _Answer

        return _Answer()


def test_a_dropped_connection_is_retried_and_a_name_that_does_not_resolve_is_not() -> None:
    config = TransportConfig(allowed_hosts=frozenset({"h.example"}), backoff=0.0)
    flaky = _Opener(ConnectionResetError(104, "reset"), TimeoutError("stalled"))
    assert Transport(config, opener=flaky).get("https://h.example/x", what="x").body == b"{}"
    assert flaky.calls == 3
    for failure in (socket.gaierror(-2, "Name or service not known"),
                    ConnectionRefusedError(111, "Connection refused")):
        gone = _Opener(failure)
        with pytest.raises(UnreachableError, match="network is unreachable"):
            Transport(config, opener=gone).get("https://h.example/x", what="x")
        assert gone.calls == 1  # at once, no retry
    offline = _Opener()
    with pytest.raises(OfflineError):
        Transport(replace(config, offline=True), opener=offline).get("https://h.example/x",
                                                                      what="x")
    assert offline.calls == 0  # before any socket


class _ConnectProxy:
    """An HTTP proxy on loopback that tunnels ``CONNECT host:port`` to ``to`` (whatever the
    host), recording each request line and its Proxy-Authorization."""

    def __init__(self, to: tuple[str, int]) -> None:
        self.to = to
        self.seen: list[tuple[str, str | None]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        with client, client.makefile("rb") as f:
            line = f.readline().decode("latin-1").strip()
            auth = None
            while (header := f.readline().decode("latin-1").strip()):
                name, _, value = header.partition(":")
                auth = value.strip() if name.lower() == "proxy-authorization" else auth
            self.seen.append((line, auth))
            with socket.create_connection(self.to) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                pump = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
                pump.start()
                _pump(client, upstream)
                pump.join(5)

    def close(self) -> None:
        """Stop listening now (a shutdown wakes the thread blocked in accept; a close alone
        would leave the port listening until the next connection)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def test_the_environments_proxy_carries_the_request_with_its_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS_PROXY (its user and password, percent-decoded, as Basic proxy auth) tunnels a
    request for a host that is not this machine's; NO_PROXY naming the host sends it
    directly (here: a name that does not resolve, said at once)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.support import make_tls

    tls = make_tls(tmp_path / "tls", hosts=("weights.invalid",))

    class Files(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"{self.path} via {self.headers['Host']}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    files = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.server_cert, tls.server_key)
    files.socket = context.wrap_socket(files.socket, server_side=True)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    proxy = _ConnectProxy(("127.0.0.1", files.server_address[1]))
    try:
        for name in ("https_proxy", "all_proxy", "no_proxy", "NO_PROXY", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", f"http://fleet:p%40ss@127.0.0.1:{proxy.port}")
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca_cert))
        config = TransportConfig(allowed_hosts=frozenset({"weights.invalid"}), retries=0)
        reply = Transport(config).get("https://weights.invalid:8443/w?x=1", what="weights",
                                      accept="*/*")
        assert reply.body == b"/w?x=1 via weights.invalid:8443"
        assert proxy.seen == [("CONNECT weights.invalid:8443 HTTP/1.0",
                               "Basic " + base64.b64encode(b"fleet:p@ss").decode())]
        monkeypatch.setenv("NO_PROXY", "example.com,.invalid")
        with pytest.raises(UnreachableError) as e:
            Transport(config).get("https://weights.invalid:8443/w", what="weights")
        assert "through the proxy" not in e.value.message and len(proxy.seen) == 1
    finally:
        proxy.close()
        files.shutdown()
        files.server_close()


def test_a_download_whose_writes_fail_is_said_as_such(server: GitHubStandIn) -> None:
    """A write that fails (a full disk) while the next piece is read stops the download:
    a FetchError that says so, after the retries; anything else the file raises comes out
    as it was raised."""
    server.add_static("/w/big.bin", os.urandom(4 * 1024 * 1024))

    class Full(_Views):
        def write(self, chunk: memoryview) -> int:
            if self.size > 1024 * 1024:
                raise OSError(28, "No space left on device")
            return super().write(chunk)

    class Broken(_Views):
        def write(self, chunk: memoryview) -> int:
            raise LookupError("a bug of the file's")

    url = f"{server.foreign_url}/w/big.bin"
    with pytest.raises(FetchError, match="No space left on device"):
        _transport(server, retries=1, backoff=0.0).download(
            url, Full(), what="weights", max_bytes=1 << 30)  # type: ignore[arg-type]
    with pytest.raises(LookupError):
        _transport(server).download(url, Broken(), what="weights",  # type: ignore[arg-type]
                                    max_bytes=1 << 30)


def test_a_download_truncates_its_file_only_to_start_over(server: GitHubStandIn) -> None:
    """The empty file a download starts with is written as it is: truncating it (even to
    its size, 0) makes ext4 write all of it out when it is closed, a second pass over a
    large checkpoint. A retry after a cut starts over from an emptied file."""
    data = os.urandom(3 * 1024 * 1024)
    server.add_static("/w/big.bin", data)

    class Spy(_Views):
        truncated = 0

        def truncate(self, size: int | None = None) -> int:
            self.truncated += 1
            return 0

    url, first = f"{server.foreign_url}/w/big.bin", Spy()
    _transport(server).download(url, first, what="w", max_bytes=len(data))  # type: ignore[arg-type]
    assert first.truncated == 0 and first.size == len(data)
    cut, again = Reply(200, data, cut_after=len(data) // 2), Spy()
    with server.intercept(lambda r: r.path == "/w/big.bin", cut, times=1):
        _transport(server, backoff=0.0).download(url, again, what="w",  # type: ignore[arg-type]
                                                 max_bytes=len(data))
    assert again.truncated == 1
