"""A loopback HTTPS stand-in for the GitHub endpoints safehub calls, backed by real git repos.

Tests, benchmarks and the demo command run one of these instead of talking to github.com.
Every answer comes from a real git directory on disk (through the ``git`` command), so commit
shas, tree hashes and ``git archive`` zips are exactly what GitHub would compute:

>>> import tempfile, requests
>>> with tempfile.TemporaryDirectory() as d:
...     root = Path(d)
...     sha = make_repo(root / "repo", {"hubconf.py": "dependencies = []\\n"})
...     with GitHubStandIn(make_tls(root / "tls")) as gh:
...         gh.add_repo("Org", "Repo", root / "repo")
...         url = f"{gh.api_url}/repos/org/repo/commits/main"
...         answer = requests.get(url, verify=gh.ca_cert, timeout=10).json()
>>> answer["sha"] == sha
True

URL layout (one port, three bases, two host names):

* ``api_url`` = ``https://localhost:{port}/api/v3`` -- the REST API.
* ``web_url`` = ``https://localhost:{port}/web`` -- zipball redirects and release assets.
* ``codeload_url`` = ``https://127.0.0.1:{port}/codeload`` -- archives, on another host name so
  that clients can test their redirect host allow-list.

Repos of one fork network share objects as on GitHub: a commit sha resolves under any repo of
the network, while branch and tag *names* resolve only in the repo that owns them. The sharing
is done without touching the repos: sha lookups run in an empty scratch git dir whose object
store is the repo's own plus, for the network view, the others' as alternates (through
``GIT_OBJECT_DIRECTORY`` and ``GIT_ALTERNATE_OBJECT_DIRECTORIES``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import ipaddress
import json
import math
import mimetypes
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, cast
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = [
    "GitCommandError",
    "GitHubStandIn",
    "RequestRecord",
    "TLSFiles",
    "commit_files",
    "git",
    "git_env",
    "make_repo",
    "make_tls",
]

# ---------------------------------------------------------------------------------------------
# git helpers

#: Author/committer identity of every commit the helpers make.
GIT_USER_NAME = "Safehub Test"
GIT_USER_EMAIL = "test@safehub.invalid"
#: Date of a root commit made by :func:`commit_files` (2024-01-01T00:00:00Z); each later
#: commit is one minute after its parent, so shas are the same on every run.
BASE_EPOCH = 1_704_067_200

_GIT_CONFIG = (
    f"user.name={GIT_USER_NAME}",
    f"user.email={GIT_USER_EMAIL}",
    "init.defaultBranch=main",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.autocrlf=false",
    "core.symlinks=true",
    "core.fileMode=true",
    f"core.attributesFile={os.devnull}",
    f"core.excludesFile={os.devnull}",
    f"core.hooksPath={os.devnull}",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
)

_NO_LINKS: Mapping[str, str] = MappingProxyType({})


class GitCommandError(subprocess.CalledProcessError):
    """A git command exited non-zero; ``str()`` includes the command's stderr."""

    def __str__(self) -> str:
        stderr = self.stderr
        text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else str(stderr or "")
        return f"{super().__str__()}\n{text.strip()}"


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return an environment for git that ignores the user's and the system's git config.

    Every inherited ``GIT_*`` variable is dropped; identity and dates are fixed so that the
    same commands make the same shas on every machine. ``extra`` entries are added last.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=GIT_USER_NAME,
        GIT_AUTHOR_EMAIL=GIT_USER_EMAIL,
        GIT_COMMITTER_NAME=GIT_USER_NAME,
        GIT_COMMITTER_EMAIL=GIT_USER_EMAIL,
        GIT_AUTHOR_DATE=f"{BASE_EPOCH} +0000",
        GIT_COMMITTER_DATE=f"{BASE_EPOCH} +0000",
        LC_ALL="C",
    )
    if extra:
        env.update(extra)
    return env


def _run_git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git -c ... <args>`` isolated from user config; raise GitCommandError if asked."""
    argv = ["git"]
    for item in _GIT_CONFIG:
        argv += ["-c", item]
    argv += args
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=git_env(env),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise GitCommandError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc


def git(cwd: Path, *args: str) -> str:
    """Run ``git <args>`` in ``cwd`` with the isolated environment; return stripped stdout.

    Raises :class:`GitCommandError` (a ``subprocess.CalledProcessError``) on failure, e.g.
    ``git(repo, "rev-parse", "HEAD")`` returns the 40-hex sha of the checked-out commit.
    """
    return _run_git(args, cwd=cwd).stdout.decode().strip()


def commit_files(
    path: Path,
    files: Mapping[str, bytes | str],
    message: str,
    *,
    executable: Iterable[str] = (),
    symlinks: Mapping[str, str] = _NO_LINKS,
    delete: Iterable[str] = (),
) -> str:
    """Write ``files`` into the work tree at ``path``, commit everything, return the new sha.

    ``files`` maps a ``/``-separated path to its content (``str`` is written as UTF-8, no
    newline translation); ``executable`` names paths to mark ``0o755``; ``symlinks`` maps a
    link path to its target; ``delete`` names paths to remove. The commit is made on the
    checked-out branch even if nothing changed, dated one minute after its parent.
    """
    for rel in delete:
        target = path / rel
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
    for rel, content in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    for rel in executable:
        (path / rel).chmod(0o755)
    for rel, link_target in symlinks.items():
        link = path / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(link_target)
    last = _run_git(["log", "-1", "--format=%ct"], cwd=path, check=False)
    epoch = int(last.stdout) + 60 if last.returncode == 0 and last.stdout.strip() else BASE_EPOCH
    date = f"{epoch} +0000"
    _run_git(["add", "-A"], cwd=path)
    _run_git(
        ["commit", "-q", "--allow-empty", "-m", message],
        cwd=path,
        env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
    )
    return git(path, "rev-parse", "HEAD")


def make_repo(
    path: Path,
    files: Mapping[str, bytes | str],
    *,
    message: str = "initial",
    executable: Iterable[str] = (),
    symlinks: Mapping[str, str] = _NO_LINKS,
) -> str:
    """Create a git repo at ``path`` (branch ``main``) if there is none, commit ``files``.

    Returns the sha of the new commit. See :func:`commit_files` for the arguments.
    """
    path.mkdir(parents=True, exist_ok=True)
    if not (path / ".git").exists():
        git(path, "init", "-q", "-b", "main")
    return commit_files(path, files, message, executable=executable, symlinks=symlinks)


# ---------------------------------------------------------------------------------------------
# TLS


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of a throwaway CA and of a server certificate it signed."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_tls(dir: Path, hosts: Sequence[str] = ("localhost", "127.0.0.1")) -> TLSFiles:
    """Write a throwaway CA and a server certificate for ``hosts`` into ``dir``.

    Host names that parse as IP addresses become IP SANs, the others DNS SANs. Keys are EC
    P-256; the certificates are valid from an hour ago for three days. Clients trust the
    server with ``REQUESTS_CA_BUNDLE=<ca_cert>`` or ``verify=ca_cert``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not hosts:
        raise ValueError("make_tls needs at least one host name")
    dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=3)

    def usage(*, signs_certs: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=not signs_certs,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=signs_certs,
            crl_sign=signs_certs,
            encipher_only=False,
            decipher_only=False,
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "safehub stand-in test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage(signs_certs=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage(signs_certs=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    files = TLSFiles(dir / "ca.pem", dir / "server.pem", dir / "server-key.pem")
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(files.server_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key_pem)
    return files


# ---------------------------------------------------------------------------------------------
# Records and internal values


@dataclass(frozen=True)
class RequestRecord:
    """One request the stand-in received.

    ``host`` is the Host header without its port; ``path`` is the request target as sent
    (path and query string, still percent-encoded).
    """

    method: str
    host: str
    path: str
    authorization: str | None
    user_agent: str | None
    accept: str | None = None


@dataclass(frozen=True)
class _Repo:
    id: int
    owner: str
    name: str
    git_dir: Path
    objects_dir: Path
    default_branch: str
    network: int
    parent: int | None

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class _Identity:
    name: str
    email: str
    date: str


@dataclass(frozen=True)
class _Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    message: str
    author: _Identity
    committer: _Identity


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    truncate: bool = False


@dataclass
class _Failure:
    remaining: int
    status: int
    prefix: str


_DOCS = "https://docs.github.com/rest"
_ABBREV_SHA = re.compile(r"[0-9a-fA-F]{7,40}")
_FULL_SHA = re.compile(r"[0-9a-f]{40}")
_IDENTITY = re.compile(rb"(.*) <(.*)> (\d+) [+-]\d{4}")
_FORBIDDEN_IN_REF = ("..", "~", "^", ":", "@{", "\\", "?", "*", "[")
_RATE_LIMIT_MESSAGE = (
    "API rate limit exceeded for 127.0.0.1. (But here's the good news: Authenticated requests "
    "get a higher rate limit. Check out the documentation for more details.)"
)


def _json(status: int, payload: object, headers: tuple[tuple[str, str], ...] = ()) -> _Response:
    body = json.dumps(payload, indent=2).encode()
    return _Response(status, body, (("Content-Type", "application/json"), *headers))


def _message(status: int, message: str) -> _Response:
    return _json(status, {"message": message, "documentation_url": _DOCS})


def _not_found() -> _Response:
    return _message(404, "Not Found")


def _redirect(status: int, location: str, *, api: bool = False) -> _Response:
    if api:
        payload = {"message": "Moved Permanently", "url": location, "documentation_url": _DOCS}
        return _json(status, payload, (("Location", location),))
    return _Response(status, b"", (("Location", location),))


def _ref_is_safe(ref: str) -> bool:
    """Whether ``ref`` may be given to git as a name (no revision syntax, no option)."""
    if not ref or ref.startswith("-") or ref == "@":
        return False
    if any(token in ref for token in _FORBIDDEN_IN_REF):
        return False
    return all(ch.isprintable() and not ch.isspace() for ch in ref)


def _int_param(params: Mapping[str, list[str]], key: str, default: int) -> int:
    try:
        return int(params[key][0])
    except (KeyError, IndexError, ValueError):
        return default


def _parse_identity(raw: bytes) -> _Identity:
    match = _IDENTITY.fullmatch(raw)
    if match is None:
        return _Identity(raw.decode(errors="replace"), "", "")
    when = datetime.datetime.fromtimestamp(int(match.group(3)), datetime.timezone.utc)
    return _Identity(
        match.group(1).decode(errors="replace"),
        match.group(2).decode(errors="replace"),
        when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def _parse_commit(sha: str, raw: bytes) -> _Commit:
    head, _, message = raw.partition(b"\n\n")
    fields: dict[bytes, list[bytes]] = {}
    for line in head.split(b"\n"):
        if line.startswith(b" "):  # continuation of a multi-line header (gpgsig, mergetag)
            continue
        key, _, value = line.partition(b" ")
        fields.setdefault(key, []).append(value)
    return _Commit(
        sha=sha,
        tree=fields[b"tree"][0].decode(),
        parents=tuple(p.decode() for p in fields.get(b"parent", [])),
        message=message.decode(errors="replace").rstrip("\n"),
        author=_parse_identity(fields.get(b"author", [b""])[0]),
        committer=_parse_identity(fields.get(b"committer", [b""])[0]),
    )


def _strip_port(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if ":" in host else host


# ---------------------------------------------------------------------------------------------
# HTTP plumbing


class _Handler(BaseHTTPRequestHandler):
    """Turns one HTTP/1.1 connection into calls of :meth:`GitHubStandIn._answer`."""

    protocol_version = "HTTP/1.1"
    server_version = "GitHubStandIn/1.0"
    sys_version = ""
    timeout = 60  # idle keep-alive connections are closed after this many seconds
    wbufsize = -1  # buffer each response so headers and body leave in one write (no Nagle stall)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep stderr quiet (the default logs every request)."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._drain_body()
        self._serve()

    do_PUT = do_PATCH = do_DELETE = do_POST

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
        standin = cast(_TLSServer, self.server).standin
        record = RequestRecord(
            method=self.command,
            host=_strip_port(self.headers.get("Host") or ""),
            path=self.path,
            authorization=self.headers.get("Authorization"),
            user_agent=self.headers.get("User-Agent"),
            accept=self.headers.get("Accept"),
        )
        response = standin._answer(record)
        self.send_response(response.status)
        for key, value in response.headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(response.body)))
        if self.close_connection and not response.truncate:
            self.send_header("Connection", "close")
        self.end_headers()
        if response.truncate:
            self.wfile.write(response.body[: len(response.body) // 2])
            self.wfile.flush()
            self.close_connection = True
        else:
            self.wfile.write(response.body)


class _TLSServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that does the TLS handshake in the per-connection thread."""

    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, standin: GitHubStandIn, context: ssl.SSLContext) -> None:
        self.standin = standin
        self._context = context
        self._live: set[socket.socket] = set()
        self._live_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        raw = cast(socket.socket, request)
        with self._live_lock:
            self._live.add(raw)
        try:
            raw.settimeout(10)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = self._context.wrap_socket(raw, server_side=True)
        except OSError:  # handshake failed or peer went away; ssl.SSLError is an OSError
            with self._live_lock:
                self._live.discard(raw)
            raw.close()
            return
        with self._live_lock:
            self._live.discard(raw)
            self._live.add(conn)
        try:
            _Handler(conn, client_address, self)
        finally:
            with self._live_lock:
                self._live.discard(conn)
            conn.close()

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        """Record unexpected handler errors instead of printing them; ignore dropped peers."""
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):  # a peer that hangs up or times out is no error
            self.standin._record_error(traceback.format_exc())

    def close_connections(self) -> None:
        """Shut down every open connection so that their threads end now."""
        with self._live_lock:
            live = list(self._live)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------------------------------------
# The stand-in


class GitHubStandIn:
    """A loopback HTTPS server that answers like GitHub for repos registered with add_repo.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`); the server listens on
    ``127.0.0.1`` on an ephemeral port and serves each connection in a daemon thread. All
    methods are thread-safe. See the module docstring for an example.
    """

    def __init__(self, tls: TLSFiles) -> None:
        self._tls = tls
        self._lock = threading.RLock()
        self._server: _TLSServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._scratch: Path | None = None
        self._repos: dict[int, _Repo] = {}
        self._names: dict[tuple[str, str], int] = {}
        self._moved: dict[tuple[str, str], int] = {}
        self._networks: dict[int, list[int]] = {}
        self._assets: dict[tuple[int, str, str], bytes] = {}
        self._static: dict[str, bytes] = {}
        self._log: list[RequestRecord] = []
        self._errors: list[str] = []
        self._failures: list[_Failure] = []
        self._rate_limited = False
        self._reset_epoch = int(time.time()) + 3600
        self._truncate = False
        self._archives: dict[tuple[str, str], bytes] = {}
        self._archive_locks: dict[tuple[str, str], threading.Lock] = {}
        self._tampers: dict[str, Callable[[bytes], bytes]] = {}
        self._replacements: dict[str, bytes] = {}

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Bind an ephemeral port on 127.0.0.1 and serve from a daemon thread."""
        with self._lock:
            if self._server is not None:
                raise RuntimeError("GitHubStandIn is already running")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self._tls.server_cert, self._tls.server_key)
            server = _TLSServer(self, context)
            self._port = int(server.server_address[1])
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"github-standin-{self._port}",
                daemon=True,
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop serving, drop open connections and remove scratch files. Idempotent."""
        with self._lock:
            server, thread, self._server, self._thread = self._server, self._thread, None, None
            scratch, self._scratch = self._scratch, None
        if server is not None:
            server.shutdown()
            server.server_close()
            server.close_connections()
        if thread is not None:
            thread.join(timeout=5)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    def __enter__(self) -> GitHubStandIn:
        if self._server is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port the server listens on (only while running)."""
        if self._port is None:
            raise RuntimeError("GitHubStandIn is not started; call start() or use `with`")
        return self._port

    @property
    def api_url(self) -> str:
        """REST API base, like ``https://api.github.com``."""
        return f"https://localhost:{self.port}/api/v3"

    @property
    def web_url(self) -> str:
        """Web base, like ``https://github.com`` (zipball redirects, release downloads)."""
        return f"https://localhost:{self.port}/web"

    @property
    def codeload_url(self) -> str:
        """Archive base, like ``https://codeload.github.com``, on a different host name."""
        return f"https://127.0.0.1:{self.port}/codeload"

    @property
    def ca_cert(self) -> Path:
        """The CA certificate clients must trust."""
        return self._tls.ca_cert

    # -- repos and content ----------------------------------------------------------------

    def add_repo(
        self,
        owner: str,
        name: str,
        git_dir: Path,
        *,
        default_branch: str = "main",
        fork_of: tuple[str, str] | None = None,
        repo_id: int | None = None,
    ) -> None:
        """Serve the git repo (work tree or bare) at ``git_dir`` as ``owner/name``.

        ``fork_of`` names an already added repo; the new repo joins its fork network. The
        repo is read live: commits and refs made later are visible at once.
        """
        for part in (owner, name):
            if not part or "/" in part or part in (".", ".."):
                raise ValueError(f"bad owner or repo name: {owner!r}/{name!r}")
        found = _run_git(
            ["rev-parse", "--absolute-git-dir", "--path-format=absolute", "--git-path", "objects"],
            cwd=git_dir,
            env={"GIT_CEILING_DIRECTORIES": str(git_dir.resolve().parent)},
            check=False,
        )
        lines = found.stdout.decode().splitlines()
        if found.returncode != 0 or len(lines) != 2:
            raise ValueError(f"{git_dir} is not a git repository")
        key = (owner.lower(), name.lower())
        with self._lock:
            if key in self._names:
                raise ValueError(f"repo {owner}/{name} is already served")
            if repo_id is None:
                repo_id = max([1000, *self._repos]) + 1
            elif repo_id in self._repos:
                raise ValueError(f"repo id {repo_id} is already used")
            parent = None
            network = repo_id
            if fork_of is not None:
                parent_id = self._names.get((fork_of[0].lower(), fork_of[1].lower()))
                if parent_id is None:
                    raise ValueError(f"fork_of names an unknown repo: {fork_of[0]}/{fork_of[1]}")
                parent, network = parent_id, self._repos[parent_id].network
            self._repos[repo_id] = _Repo(
                repo_id,
                owner,
                name,
                Path(lines[0]),
                Path(lines[1]),
                default_branch,
                network,
                parent,
            )
            self._names[key] = repo_id
            self._moved.pop(key, None)
            self._networks.setdefault(network, []).append(repo_id)

    def rename_repo(self, old_owner: str, old_name: str, new_owner: str, new_name: str) -> None:
        """Rename (or transfer) a repo; the old name then answers 301 redirects."""
        old_key = (old_owner.lower(), old_name.lower())
        new_key = (new_owner.lower(), new_name.lower())
        with self._lock:
            repo_id = self._names.get(old_key)
            if repo_id is None:
                raise ValueError(f"unknown repo {old_owner}/{old_name}")
            if new_key in self._names and new_key != old_key:
                raise ValueError(f"repo {new_owner}/{new_name} is already served")
            del self._names[old_key]
            self._names[new_key] = repo_id
            self._moved.pop(new_key, None)
            if new_key != old_key:
                self._moved[old_key] = repo_id
            repo = self._repos[repo_id]
            self._repos[repo_id] = dataclasses.replace(repo, owner=new_owner, name=new_name)

    def repo_id(self, owner: str, name: str) -> int:
        """The numeric id of a served repo (as in ``GET /repositories/{id}``)."""
        with self._lock:
            found = self._names.get((owner.lower(), name.lower()))
        if found is None:
            raise ValueError(f"unknown repo {owner}/{name}")
        return found

    def add_release_asset(self, owner: str, name: str, tag: str, asset: str, data: bytes) -> None:
        """Serve ``data`` at ``{web}/{owner}/{name}/releases/download/{tag}/{asset}``."""
        repo_id = self.repo_id(owner, name)
        with self._lock:
            self._assets[(repo_id, tag, asset)] = bytes(data)

    def add_static(self, path: str, data: bytes) -> None:
        """Serve ``data`` at ``https://localhost:{port}{path}`` (exact path, before routing)."""
        if not path.startswith("/"):
            raise ValueError(f"static path must start with '/': {path!r}")
        with self._lock:
            self._static[path] = bytes(data)

    # -- test knobs -----------------------------------------------------------------------

    @property
    def requests_log(self) -> list[RequestRecord]:
        """A copy of the records of every request received so far, oldest first."""
        with self._lock:
            return list(self._log)

    @property
    def server_errors(self) -> list[str]:
        """Tracebacks of unexpected errors while answering (an empty list means none)."""
        with self._lock:
            return list(self._errors)

    def clear_log(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._log.clear()

    def count(self, prefix: str = "") -> int:
        """Count requests whose URL ``https://{host}:{port}{path}`` starts with ``prefix``."""
        with self._lock:
            port = self._port
            return sum(f"https://{r.host}:{port}{r.path}".startswith(prefix) for r in self._log)

    def fail_next(self, n: int, status: int = 503, path_prefix: str = "") -> None:
        """Answer ``status`` to the next ``n`` requests whose path starts with ``path_prefix``."""
        with self._lock:
            self._failures.append(_Failure(n, status, path_prefix))

    def rate_limit(self, on: bool, reset_epoch: int | None = None) -> None:
        """While on, answer every API request with GitHub's 403 "rate limit exceeded".

        ``reset_epoch`` (default: an hour from now) is sent as ``X-RateLimit-Reset``.
        """
        with self._lock:
            self._rate_limited = on
            self._reset_epoch = int(time.time()) + 3600 if reset_epoch is None else reset_epoch

    def truncate_archives(self, on: bool) -> None:
        """While on, archives are sent with their full Content-Length but half the body."""
        with self._lock:
            self._truncate = on

    def tamper_archive(self, sha: str, fn: Callable[[bytes], bytes] | None) -> None:
        """Serve ``fn(original zip)`` for commit ``sha``; ``None`` serves the original again."""
        with self._lock:
            if fn is None:
                self._tampers.pop(sha.lower(), None)
            else:
                self._tampers[sha.lower()] = fn

    def replace_archive(self, sha: str, data: bytes | None) -> None:
        """Serve exactly ``data`` as the archive of commit ``sha``; ``None`` undoes it."""
        with self._lock:
            if data is None:
                self._replacements.pop(sha.lower(), None)
            else:
                self._replacements[sha.lower()] = bytes(data)

    # -- request handling -----------------------------------------------------------------

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _answer(self, record: RequestRecord) -> _Response:
        """Log the request, apply the knobs, route it; never raises."""
        target = urlsplit(record.path)
        path, query = target.path, target.query
        with self._lock:
            self._log.append(record)
            failure = next(
                (f for f in self._failures if f.remaining > 0 and record.path.startswith(f.prefix)),
                None,
            )
            if failure is not None:
                failure.remaining -= 1
                self._failures = [f for f in self._failures if f.remaining > 0]
            limited, reset = self._rate_limited, self._reset_epoch
            static = self._static.get(path)
        if failure is not None:
            try:
                phrase = HTTPStatus(failure.status).phrase
            except ValueError:
                phrase = "Error"
            return _message(failure.status, phrase)
        is_api = path == "/api/v3" or path.startswith("/api/v3/")
        rate_headers = (
            ("X-RateLimit-Limit", "60"),
            ("X-RateLimit-Remaining", "0" if limited else "59"),
            ("X-RateLimit-Reset", str(reset)),
            ("X-RateLimit-Used", "60" if limited else "1"),
            ("X-RateLimit-Resource", "core"),
        )
        if is_api and limited:
            payload = {"message": _RATE_LIMIT_MESSAGE, "documentation_url": _DOCS}
            return _json(403, payload, rate_headers)
        if record.method != "GET":
            return _not_found()
        if static is not None:
            kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
            return _Response(200, static, (("Content-Type", kind),))
        try:
            if is_api:
                response = self._route_api(path[len("/api/v3") :], query, record.accept)
                return dataclasses.replace(response, headers=response.headers + rate_headers)
            if path.startswith("/web/"):
                return self._route_web(path[len("/web/") :], query)
            if path.startswith("/codeload/"):
                return self._route_codeload(path[len("/codeload/") :], query)
            return _not_found()
        except Exception:
            self._record_error(traceback.format_exc())
            return _message(500, "Server Error")

    def _find(self, owner: str, name: str) -> tuple[_Repo, bool] | None:
        """The repo now or formerly called owner/name, and whether it was renamed since."""
        key = (owner.lower(), name.lower())
        with self._lock:
            if key in self._names:
                return self._repos[self._names[key]], False
            if key in self._moved:
                return self._repos[self._moved[key]], True
        return None

    def _route_api(self, path: str, query: str, accept: str | None = None) -> _Response:
        parts = path.split("/")[1:]
        suffix = f"?{query}" if query else ""
        if len(parts) >= 3 and parts[0] == "repos":
            found = self._find(unquote(parts[1]), unquote(parts[2]))
            if found is None:
                return _not_found()
            repo, moved = found
            tail = parts[3:]
            if moved:
                rest = "".join(f"/{p}" for p in tail)
                location = f"{self.api_url}/repositories/{repo.id}{rest}{suffix}"
                return _redirect(301, location, api=True)
        elif len(parts) >= 2 and parts[0] == "repositories" and parts[1].isdigit():
            with self._lock:
                maybe = self._repos.get(int(parts[1]))
            if maybe is None:
                return _not_found()
            repo, tail = maybe, parts[2:]
        else:
            return _not_found()

        if not tail:
            return _json(200, self._repo_json(repo, full=True))
        kind, rest = tail[0], unquote("/".join(tail[1:]))
        if kind == "commits" and rest:
            if accept and "application/vnd.github.sha" in accept:
                sha = self._resolve_commit(repo, rest)
                if sha is None:
                    return _message(422, f"No commit found for SHA: {rest}")
                return _Response(200, sha.encode(), (("Content-Type", "text/plain"),))
            return self._commit_endpoint(repo, rest)
        if kind == "git" and len(tail) >= 4 and tail[1] == "ref" and tail[2] in ("heads", "tags"):
            return self._git_ref(repo, tail[2], unquote("/".join(tail[3:])))
        if kind == "git" and len(tail) == 3 and tail[1] in ("commits", "tags"):
            return self._git_object(repo, tail[1], unquote(tail[2]))
        if kind == "compare" and rest:
            return self._compare_endpoint(repo, rest)
        if kind in ("branches", "tags") and len(tail) == 1:
            return self._refs_endpoint(repo, kind, query)
        if kind == "git" and len(tail) == 3 and tail[1] == "trees" and tail[2]:
            recursive = bool(parse_qs(query).get("recursive", [""])[0])
            return self._tree_endpoint(repo, unquote(tail[2]), recursive=recursive)
        if kind == "git" and len(tail) == 3 and tail[1] == "blobs" and tail[2]:
            return self._blob_endpoint(repo, unquote(tail[2]))
        if kind == "zipball" and rest:  # the REST archive endpoint (works for private repos)
            return self._zipball(repo, rest)
        return _not_found()

    def _git_ref(self, repo: _Repo, kind: str, name: str) -> _Response:
        refname = f"refs/{kind}/{name}"
        if not _ref_is_safe(name):
            return _not_found()
        found = _run_git(["for-each-ref", "--format=%(objectname) %(objecttype)", refname],
                         env={"GIT_DIR": str(repo.git_dir)})
        lines = [line for line in found.stdout.decode().splitlines() if line]
        if len(lines) != 1:
            return _not_found()
        sha, kind_of = lines[0].split()
        api = f"{self.api_url}/repos/{self._url_name(repo)}"
        return _json(200, {"ref": refname, "node_id": "x", "url": f"{api}/git/{refname}",
                           "object": {"type": kind_of, "sha": sha,
                                      "url": f"{api}/git/{kind_of}s/{sha}"}})

    def _git_object(self, repo: _Repo, kind: str, sha: str) -> _Response:
        if not _FULL_SHA.fullmatch(sha):
            return _not_found()
        env = self._object_env(repo, network=True)
        found = _run_git(["cat-file", "-t", sha], env=env, check=False)
        if found.returncode != 0 or found.stdout.decode().strip() != kind[:-1]:
            return _not_found()
        api = f"{self.api_url}/repos/{self._url_name(repo)}"
        if kind == "commits":
            commit = self._read_commits(repo, [sha])[sha]
            return _json(200, {"sha": sha, "url": f"{api}/git/commits/{sha}",
                               "tree": {"sha": commit.tree,
                                        "url": f"{api}/git/trees/{commit.tree}"},
                               "parents": [{"sha": p} for p in commit.parents],
                               "message": commit.message})
        raw = _run_git(["cat-file", "tag", sha], env=env).stdout.decode(errors="replace")
        head = dict(line.split(" ", 1) for line in raw.split("\n\n")[0].splitlines() if " " in line)
        return _json(200, {"sha": sha, "tag": head.get("tag", ""),
                           "object": {"sha": head["object"], "type": head["type"]}})

    def _zipball(self, repo: _Repo, ref: str) -> _Response:
        """Redirect a zipball request to the codeload host, by resolved commit."""
        sha = self._resolve_commit(repo, ref)
        if sha is None:
            return _not_found()
        return _redirect(302, f"{self.codeload_url}/{self._url_name(repo)}/legacy.zip/{sha}")

    def _route_web(self, path: str, query: str) -> _Response:
        parts = path.split("/")
        if len(parts) < 4:
            return _not_found()
        found = self._find(unquote(parts[0]), unquote(parts[1]))
        if found is None:
            return _not_found()
        repo, moved = found
        if moved:
            rest = "/".join(parts[2:]) + (f"?{query}" if query else "")
            return _redirect(301, f"{self.web_url}/{self._url_name(repo)}/{rest}")
        kind, tail = parts[2], parts[3:]
        if kind == "zipball" and tail:
            return self._zipball(repo, unquote("/".join(tail)))
        if kind == "releases" and len(tail) >= 3 and tail[0] == "download":
            tag, asset = unquote("/".join(tail[1:-1])), unquote(tail[-1])
            with self._lock:
                data = self._assets.get((repo.id, tag, asset))
            if data is None:
                return _not_found()
            headers = (
                ("Content-Type", "application/octet-stream"),
                ("Content-Disposition", f"attachment; filename={quote(asset)}"),
            )
            return _Response(200, data, headers)
        return _not_found()

    def _route_codeload(self, path: str, query: str) -> _Response:
        parts = path.split("/")
        if len(parts) < 4 or parts[2] != "legacy.zip":
            return _not_found()
        found = self._find(unquote(parts[0]), unquote(parts[1]))
        if found is None:
            return _not_found()
        repo, moved = found
        if moved:
            rest = "/".join(parts[2:]) + (f"?{query}" if query else "")
            return _redirect(301, f"{self.codeload_url}/{self._url_name(repo)}/{rest}")
        sha = self._resolve_commit(repo, unquote("/".join(parts[3:])))
        if sha is None:
            return _not_found()
        data = self._archive(repo, sha)
        with self._lock:
            truncate = self._truncate
        short = f"{repo.owner}-{repo.name}-{sha[:7]}"
        headers = (
            ("Content-Type", "application/zip"),
            ("Content-Disposition", f"attachment; filename={quote(short)}.zip"),
        )
        return _Response(200, data, headers, truncate=truncate)

    # -- endpoints ------------------------------------------------------------------------

    def _url_name(self, repo: _Repo) -> str:
        return f"{quote(repo.owner, safe='')}/{quote(repo.name, safe='')}"

    def _repo_json(self, repo: _Repo, *, full: bool) -> dict[str, object]:
        url_name = self._url_name(repo)
        payload: dict[str, object] = {
            "id": repo.id,
            "name": repo.name,
            "full_name": repo.full_name,
            "owner": {"login": repo.owner},
            "private": False,
            "html_url": f"{self.web_url}/{url_name}",
            "fork": repo.parent is not None,
            "url": f"{self.api_url}/repos/{url_name}",
            "default_branch": repo.default_branch,
            "visibility": "public",
            "archived": False,
            "disabled": False,
        }
        if full and repo.parent is not None:
            with self._lock:
                parent = self._repos[repo.parent]
                source = self._repos[repo.network]
            payload["parent"] = self._repo_json(parent, full=False)
            payload["source"] = self._repo_json(source, full=False)
        return payload

    def _commit_json(self, repo: _Repo, commit: _Commit) -> dict[str, object]:
        api = f"{self.api_url}/repos/{self._url_name(repo)}"
        web = f"{self.web_url}/{self._url_name(repo)}"

        def person(who: _Identity) -> dict[str, str]:
            return {"name": who.name, "email": who.email, "date": who.date}

        return {
            "sha": commit.sha,
            "url": f"{api}/commits/{commit.sha}",
            "html_url": f"{web}/commit/{commit.sha}",
            "commit": {
                "tree": {"sha": commit.tree, "url": f"{api}/git/trees/{commit.tree}"},
                "message": commit.message,
                "author": person(commit.author),
                "committer": person(commit.committer),
            },
            "parents": [
                {"sha": p, "url": f"{api}/commits/{p}", "html_url": f"{web}/commit/{p}"}
                for p in commit.parents
            ],
        }

    def _commit_endpoint(self, repo: _Repo, ref: str) -> _Response:
        sha = self._resolve_commit(repo, ref)
        if sha is None:
            if _ABBREV_SHA.fullmatch(ref):
                return _message(422, f"No commit found for SHA: {ref}")
            return _not_found()
        commit = self._read_commits(repo, [sha])[sha]
        return _json(200, self._commit_json(repo, commit))

    def _compare_endpoint(self, repo: _Repo, spec: str) -> _Response:
        base_ref, sep, head_ref = spec.partition("...")
        if not sep:
            return _not_found()
        base, head = self._resolve_commit(repo, base_ref), self._resolve_commit(repo, head_ref)
        if base is None or head is None:
            return _not_found()
        env = self._object_env(repo, network=True)
        found = _run_git(["merge-base", base, head], env=env, check=False)
        if found.returncode != 0:
            return _message(404, f"No common ancestor between {base_ref} and {head_ref}.")
        merge_base = found.stdout.decode().strip()
        # "<sha" lines are only in base (behind), ">sha" lines only in head (ahead).
        sides = _run_git(["rev-list", "--left-right", "--reverse", f"{base}...{head}"], env=env)
        marked = sides.stdout.decode().split()
        new = [line[1:] for line in marked if line.startswith(">")]
        ahead_by, behind_by = len(new), len(marked) - len(new)
        if ahead_by == 0 and behind_by == 0:
            status = "identical"
        elif behind_by == 0:
            status = "ahead"
        elif ahead_by == 0:
            status = "behind"
        else:
            status = "diverged"
        new = new[:250]  # GitHub lists at most 250 commits
        commits = self._read_commits(repo, [base, merge_base, *new])
        web = f"{self.web_url}/{self._url_name(repo)}"
        return _json(
            200,
            {
                "url": f"{self.api_url}/repos/{self._url_name(repo)}/compare/{quote(spec)}",
                "html_url": f"{web}/compare/{quote(spec)}",
                "status": status,
                "ahead_by": ahead_by,
                "behind_by": behind_by,
                "total_commits": ahead_by,
                "base_commit": self._commit_json(repo, commits[base]),
                "merge_base_commit": self._commit_json(repo, commits[merge_base]),
                "commits": [self._commit_json(repo, commits[sha]) for sha in new],
            },
        )

    def _refs_endpoint(self, repo: _Repo, kind: str, query: str) -> _Response:
        namespace = "refs/heads" if kind == "branches" else "refs/tags"
        listed = _run_git(
            ["for-each-ref", "--format=%(refname)%00%(objectname)%00%(*objectname)", namespace],
            env={"GIT_DIR": str(repo.git_dir)},
        )
        items: list[tuple[str, str]] = []
        for line in listed.stdout.decode(errors="replace").splitlines():
            refname, target, peeled = line.split("\0")
            items.append((refname[len(namespace) + 1 :], peeled or target))
        items.sort()
        params = parse_qs(query)
        per_page = min(max(_int_param(params, "per_page", 30), 1), 100)
        page = max(_int_param(params, "page", 1), 1)
        last = max(1, math.ceil(len(items) / per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        api = f"{self.api_url}/repos/{self._url_name(repo)}"
        payload = [
            {"name": name, "commit": {"sha": sha, "url": f"{api}/commits/{sha}"}}
            for name, sha in chunk
        ]
        base = f"{self.api_url}/repositories/{repo.id}/{kind}"
        links = []
        if page > 1:
            links.append((min(page - 1, last), "prev"))
        if page < last:
            links += [(page + 1, "next"), (last, "last")]
        if page > 1:
            links.append((1, "first"))
        headers: tuple[tuple[str, str], ...] = ()
        if links:
            link = ", ".join(f'<{base}?per_page={per_page}&page={p}>; rel="{r}"' for p, r in links)
            headers = (("Link", link),)
        return _json(200, payload, headers)

    def _tree_endpoint(self, repo: _Repo, tree_ref: str, *, recursive: bool) -> _Response:
        tree = self._resolve_tree(repo, tree_ref)
        if tree is None:
            return _not_found()
        args = ["ls-tree", "--long", "-z", *(["-r", "-t"] if recursive else []), tree]
        listed = _run_git(args, env=self._object_env(repo, network=True))
        api = f"{self.api_url}/repos/{self._url_name(repo)}"
        entries: list[dict[str, object]] = []
        for raw in listed.stdout.split(b"\0"):
            if not raw:
                continue
            meta, _, name = raw.partition(b"\t")
            mode, kind, sha, size = meta.decode().split()
            entry: dict[str, object] = {
                "path": name.decode(errors="replace"),
                "mode": mode,
                "type": kind,
                "sha": sha,
            }
            if kind == "blob":
                entry["size"] = int(size)
                entry["url"] = f"{api}/git/blobs/{sha}"
            elif kind == "tree":
                entry["url"] = f"{api}/git/trees/{sha}"
            entries.append(entry)
        url = f"{api}/git/trees/{tree}"
        return _json(200, {"sha": tree, "url": url, "tree": entries, "truncated": False})

    def _blob_endpoint(self, repo: _Repo, sha: str) -> _Response:
        """``GET /repos/{o}/{r}/git/blobs/{sha}``: the blob's bytes, base64-encoded."""
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            return _not_found()
        env = self._object_env(repo, network=True)
        kind = _run_git(["cat-file", "-t", sha], env=env, check=False)
        if kind.returncode != 0 or kind.stdout.strip() != b"blob":
            return _not_found()
        data = _run_git(["cat-file", "blob", sha], env=env).stdout
        return _json(200, {"sha": sha, "size": len(data), "encoding": "base64",
                           "content": base64.b64encode(data).decode()})

    # -- git access -----------------------------------------------------------------------

    def _scratch_dir(self) -> Path:
        """An empty bare git dir (no refs) that object-only commands run in."""
        with self._lock:
            if self._scratch is None:
                root = Path(tempfile.mkdtemp(prefix="safehub-standin-"))
                weakref.finalize(self, shutil.rmtree, root, True)
                _run_git(["init", "-q", "--bare", str(root / "scratch.git")])
                self._scratch = root
            return self._scratch / "scratch.git"

    def _object_env(self, repo: _Repo, *, network: bool) -> dict[str, str]:
        """Env for git that sees the repo's objects (and, if ``network``, its network's)."""
        env = {"GIT_DIR": str(self._scratch_dir()), "GIT_OBJECT_DIRECTORY": str(repo.objects_dir)}
        if network:
            with self._lock:
                others = [
                    str(self._repos[i].objects_dir)
                    for i in self._networks[repo.network]
                    if i != repo.id
                ]
            if others:
                env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = os.pathsep.join(others)
        return env

    @staticmethod
    def _rev_parse(env: Mapping[str, str], expression: str) -> str | None:
        found = _run_git(["rev-parse", "--verify", "--quiet", expression], env=env, check=False)
        sha = found.stdout.decode().strip()
        return sha if found.returncode == 0 and _FULL_SHA.fullmatch(sha) else None

    def _resolve(self, repo: _Repo, ref: str, peel: str) -> str | None:
        """Resolve ``ref`` to a ``peel`` object ("commit" or "tree") as GitHub would.

        Names (tags first, as git does, then branches; ``refs/heads/x`` / ``refs/tags/x``
        exactly) resolve in the repo's own refs only; hex strings of 7+ digits then resolve as
        object names in the repo's own objects or its whole fork network (own objects win
        where a prefix is ambiguous across the network).
        """
        if not _ref_is_safe(ref):
            return None
        if ref == "HEAD":
            names = [f"refs/heads/{repo.default_branch}"]
        elif ref.startswith(("refs/heads/", "refs/tags/")):
            names = [ref]
        elif ref.startswith(("heads/", "tags/")):
            names = [f"refs/{ref}", f"refs/tags/{ref}", f"refs/heads/{ref}"]
        else:
            names = [f"refs/tags/{ref}", f"refs/heads/{ref}"]
        wanted = "".join(f"{name}^{{{peel}}}\n" for name in names).encode()
        found = _run_git(
            ["cat-file", "--batch-check=%(objectname)"],
            env={"GIT_DIR": str(repo.git_dir)},
            stdin=wanted,
            check=False,
        )
        for line in found.stdout.decode(errors="replace").splitlines():
            if _FULL_SHA.fullmatch(line):
                return line
        if _ABBREV_SHA.fullmatch(ref):
            # The network view answers unless the prefix is ambiguous there but not in the
            # repo's own objects, where GitHub would find the repo's own commit.
            for network in (True, False):
                env = self._object_env(repo, network=network)
                sha = self._rev_parse(env, f"{ref.lower()}^{{{peel}}}")
                if sha is not None:
                    return sha
        return None

    def _resolve_commit(self, repo: _Repo, ref: str) -> str | None:
        return self._resolve(repo, ref, "commit")

    def _resolve_tree(self, repo: _Repo, ref: str) -> str | None:
        return self._resolve(repo, ref, "tree")

    def _read_commits(self, repo: _Repo, shas: Sequence[str]) -> dict[str, _Commit]:
        """Read and parse commit objects (visible in the repo's network) with one git call."""
        unique = list(dict.fromkeys(shas))
        batch = "".join(f"{sha}\n" for sha in unique).encode()
        out = _run_git(
            ["cat-file", "--batch"], env=self._object_env(repo, network=True), stdin=batch
        ).stdout
        commits: dict[str, _Commit] = {}
        pos = 0
        for sha in unique:
            end = out.index(b"\n", pos)
            header = out[pos:end].decode().split()
            if len(header) != 3 or header[1] != "commit":
                raise LookupError(f"{sha} is not a commit in the network of {repo.full_name}")
            size = int(header[2])
            commits[sha] = _parse_commit(sha, out[end + 1 : end + 1 + size])
            pos = end + 1 + size + 1
        return commits

    def _archive(self, repo: _Repo, sha: str) -> bytes:
        """The zip GitHub would serve for ``sha`` under ``repo``, after the test knobs."""
        with self._lock:
            replaced = self._replacements.get(sha)
            tamper = self._tampers.get(sha)
        if replaced is not None:
            return replaced
        key = (repo.full_name, sha)
        with self._lock:
            lock = self._archive_locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                data = self._archives.get(key)
            if data is None:
                prefix = f"--prefix={repo.owner}-{repo.name}-{sha[:7]}/"
                env = self._object_env(repo, network=True)
                data = _run_git(["archive", "--format=zip", prefix, sha], env=env).stdout
                with self._lock:
                    self._archives[key] = data
        return tamper(data) if tamper is not None else data
