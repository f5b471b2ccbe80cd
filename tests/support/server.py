"""A loopback HTTPS stand-in for the parts of GitHub safehub talks to, backed by real git repos.

Every answer comes from a real git directory on disk (through the ``git`` command), so commit
shas, tree hashes, diffs and ``git archive`` zips are exactly what GitHub would compute.
Usage (tests/test_standin*.py show every endpoint and knob)::

    with GitHubStandIn(make_tls(tmp / "tls")) as gh:
        gh.add_repo("Org", "Repo", tmp / "repo")
        requests.get(f"{gh.api_url}/repos/org/repo/commits/main", verify=gh.ca_cert)

Each part of GitHub is its own host, all on one port of the loopback network:

==================  =====================  ===============================================
role                address                like
==================  =====================  ===============================================
``api``             127.0.0.1, localhost   ``https://api.github.com`` (under ``/api/v3``)
``web``             127.0.0.2              ``https://github.com`` (under ``/web``)
``codeload``        127.0.0.3              ``https://codeload.github.com`` (``/codeload``)
``release_assets``  127.0.0.4              ``https://release-assets.githubusercontent.com``
``foreign``         127.0.0.5              a host no client should trust (for attacks)
``mirror``          127.0.0.6              a static file server or object store
==================  =====================  ===============================================

The web and REST zipball endpoints redirect (302) to codeload by commit; release downloads
redirect to a signed, expiring URL on the release-assets host; renamed repos answer 301.
Static content (:meth:`GitHubStandIn.add_static`, :meth:`GitHubStandIn.serve_directory`) is
answered on every host, before the role's own endpoints.

Repos of one fork network share objects as on GitHub: a commit sha resolves under any repo of
the network, while branch and tag *names* resolve only in the repo that owns them.

Knobs for tests (all thread-safe): :meth:`~GitHubStandIn.intercept` answers any request
with anything; :meth:`~GitHubStandIn.drip` slows bodies down; ``fail_next``,
``rate_limit``, ``truncate_archives``, ``tamper_archive``, ``replace_archive``; the request
log (``requests_log``, ``count``) records method, host, role, path and headers.
"""

from __future__ import annotations

import ssl
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote, urlsplit

from . import answers
from .registry import Registry
from .routes import Bases, Router
from .tls import TLSFiles, cert_hosts
from .transport import Drip, Listener, Reply, RequestRecord

__all__ = ["ROLES", "GitHubStandIn", "Rule"]

#: The loopback address of each role.
ROLES = {"api": "127.0.0.1", "web": "127.0.0.2", "codeload": "127.0.0.3",
         "release_assets": "127.0.0.4", "foreign": "127.0.0.5", "mirror": "127.0.0.6"}
_PREFIXES = {"api": "/api/v3", "web": "/web", "codeload": "/codeload"}
_RATE_DOCS = "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api"

Match = str | Callable[[RequestRecord], bool]
Handler = Reply | Callable[[RequestRecord], "Reply | None"]


class Rule:
    """A registered :meth:`GitHubStandIn.intercept` or :meth:`GitHubStandIn.drip`.

    ``hits`` counts the requests it applied to; :meth:`remove` (or leaving its ``with``
    block) unregisters it. After ``times`` hits it unregisters itself.
    """

    def __init__(self, owner: GitHubStandIn, match: Match, times: int | None) -> None:
        if times is not None and times < 1:
            raise ValueError(f"times must be at least 1, not {times}")
        self._owner = owner
        self._match = match
        self._left = times
        self.hits = 0

    def matches(self, record: RequestRecord, port: int) -> bool:
        if callable(self._match):
            return bool(self._match(record))
        if self._match.startswith("/"):
            return record.path.startswith(self._match)
        return f"https://{record.host}:{port}{record.path}".startswith(self._match)

    def take(self) -> bool:
        """Count one hit (under the owner's lock); False if the rule is used up."""
        if self._left is not None:
            if self._left <= 0:
                return False
            self._left -= 1
        self.hits += 1
        return True

    def remove(self) -> None:
        self._owner._remove_rule(self)

    def __enter__(self) -> Rule:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


@dataclass
class _RateLimit:
    secondary: bool
    status: int
    reset: int
    retry_after: int


class GitHubStandIn:
    """A loopback HTTPS server that answers like GitHub for repos registered with add_repo.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`). ``tls`` must name
    every host of :data:`ROLES` (``make_tls`` does by default). ``name_miss_status`` is the
    status of ``GET .../commits/{name}`` for a name that is no branch or tag: GitHub answers
    422 ``No commit found for SHA: {name}``; 404 keeps the stand-in's former answer.
    """

    def __init__(self, tls: TLSFiles, *, name_miss_status: int = 422) -> None:
        if name_miss_status not in (404, 422):
            raise ValueError("name_miss_status is 404 or 422")
        self._tls = tls
        self._name_miss_status = name_miss_status
        self._lock = threading.RLock()
        self._listener: Listener | None = None
        self._port: int | None = None
        self._router: Router | None = None
        self._registry = Registry()
        self._log: list[RequestRecord] = []
        self._errors: list[str] = []
        self._rules: list[tuple[Rule, Handler | Drip]] = []
        self._limit: _RateLimit | None = None
        self._truncate = False

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Bind one free port on every role's address and serve from daemon threads."""
        missing = set(ROLES.values()) - cert_hosts(self._tls.server_cert)
        if missing:
            raise ValueError(f"{self._tls.server_cert} does not name {', '.join(sorted(missing))}"
                             "; make it with tests.support.make_tls()")
        with self._lock:
            if self._listener is not None:
                raise RuntimeError("GitHubStandIn is already running")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self._tls.server_cert, self._tls.server_key)
            roles = {address: role for role, address in ROLES.items()}
            listener = Listener(roles, context, self._answer, self._record_error)
            self._port = listener.port
            self._router = Router(self._registry, Bases(
                self.api_url, self.web_url, self.codeload_url, self.release_assets_url),
                name_miss_status=self._name_miss_status)
            self._router.truncate_archives = self._truncate
            self._listener = listener
            listener.serve()

    def stop(self) -> None:
        """Stop serving, drop open connections and remove scratch files. Idempotent."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self._registry.close()

    def __enter__(self) -> GitHubStandIn:
        if self._listener is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- addresses ----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port every host listens on (the last one used, after stop)."""
        if self._port is None:
            raise RuntimeError("GitHubStandIn is not started; call start() or use `with`")
        return self._port

    def host(self, role: str) -> str:
        """The address of ``role`` (a key of :data:`ROLES`)."""
        return ROLES[role]

    def url(self, role: str) -> str:
        """The URL base of ``role``, e.g. ``url("api") == api_url``."""
        return f"https://{ROLES[role]}:{self.port}{_PREFIXES.get(role, '')}"

    @property
    def api_url(self) -> str:
        """REST API base, like ``https://api.github.com``."""
        return self.url("api")

    @property
    def web_url(self) -> str:
        """Web base, like ``https://github.com`` (zipball and release-download redirects)."""
        return self.url("web")

    @property
    def codeload_url(self) -> str:
        """Archive base, like ``https://codeload.github.com``."""
        return self.url("codeload")

    @property
    def release_assets_url(self) -> str:
        """Release download host, like ``https://release-assets.githubusercontent.com``."""
        return self.url("release_assets")

    @property
    def foreign_url(self) -> str:
        """A host that serves only static content and intercepts: the attacker's."""
        return self.url("foreign")

    @property
    def mirror_url(self) -> str:
        """A static host (see :meth:`serve_directory`), like a mirror or an object store."""
        return self.url("mirror")

    @property
    def redirect_hosts(self) -> tuple[str, str]:
        """The hosts GitHub's web and API redirect to (codeload, release assets): what a
        client allows beside the API and web hosts, as it does for github.com."""
        return ROLES["codeload"], ROLES["release_assets"]

    @property
    def ca_cert(self) -> Path:
        """The CA certificate clients must trust."""
        return self._tls.ca_cert

    # -- repos and content --------------------------------------------------------------------

    def add_repo(self, owner: str, name: str, git_dir: Path, *, default_branch: str = "main",
                 fork_of: tuple[str, str] | None = None, repo_id: int | None = None) -> None:
        """Serve the git repo (work tree or bare) at ``git_dir`` as ``owner/name``.

        ``fork_of`` names an already added repo; the new repo joins its fork network. The
        repo is read live: commits and refs made later are visible at once. A clone's
        ``refs/remotes/*`` are not served (they are no refs of a GitHub repo).
        """
        self._registry.add_repo(owner, name, git_dir, default_branch=default_branch,
                                fork_of=fork_of, repo_id=repo_id)

    def rename_repo(self, old_owner: str, old_name: str, new_owner: str, new_name: str) -> None:
        """Rename (or transfer) a repo; the old name then answers 301 redirects."""
        self._registry.rename_repo((old_owner, old_name), (new_owner, new_name))

    def repo_id(self, owner: str, name: str) -> int:
        """The numeric id of a served repo (as in ``GET /repositories/{id}``)."""
        return self._registry.repo_id(owner, name)

    def add_release_asset(self, owner: str, name: str, tag: str, asset: str,
                          data: bytes) -> str:
        """Publish ``data`` as release asset ``asset`` of ``tag``; return its download URL
        ``{web}/{Owner}/{Name}/releases/download/{tag}/{asset}`` (which redirects)."""
        repo_id = self.repo_id(owner, name)
        self._registry.add_asset(repo_id, tag, asset, data)
        repo = self._registry.by_id(repo_id)
        assert repo is not None
        return f"{self.web_url}/{repo.url_name}/releases/download/{tag}/{asset}"

    def add_static(self, path: str, data: bytes) -> None:
        """Serve ``data`` at exactly ``path`` (e.g. ``/weights/x.pth``) on every host."""
        self._registry.add_static(path, data)

    def serve_directory(self, directory: Path, prefix: str = "/mirror") -> str:
        """Serve the files under ``directory`` as they are, like an object store: names are
        matched case-sensitively, folders and links are not served. Returns the base URL on
        the mirror host (e.g. a ``SAFEHUB_GITHUB_URL`` for a mirror ``safehub prefetch``
        filled). The directory is read live."""
        self._registry.mount(prefix, directory)
        return f"{self.mirror_url}{prefix}"

    # -- test knobs ---------------------------------------------------------------------------

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
        port = self.port
        with self._lock:
            return sum(f"https://{r.host}:{port}{r.path}".startswith(prefix) for r in self._log)

    def intercept(self, match: Match, handler: Handler, *, times: int | None = None) -> Rule:
        """Answer matching requests with ``handler`` instead of the normal answer.

        ``match`` is a path prefix (``"/api/v3/repos/o/r/commits"``), a URL prefix
        (``gh.api_url + "/repos"``) or a predicate over the :class:`RequestRecord`.
        ``handler`` is a :class:`Reply`, or a function of the record that returns one (or
        None for the normal answer; :meth:`route` gives it, to alter). Rules are tried in the
        order registered, before everything else (rate limits, static content, routes); with
        ``times`` a rule applies to that many requests only. Returns the :class:`Rule`.
        """
        rule = Rule(self, match, times)
        with self._lock:
            self._rules.append((rule, handler))
        return rule

    def drip(self, match: Match, *, chunk_size: int = 1, delay: float = 0.05,
             times: int | None = None) -> Rule:
        """Send the bodies of matching answers ``chunk_size`` bytes at a time with ``delay``
        seconds between chunks (a slow server: the pause is real, ended only by ``stop``)."""
        rule = Rule(self, match, times)
        with self._lock:
            self._rules.append((rule, Drip(chunk_size, delay)))
        return rule

    def fail_next(self, n: int, status: int = 503, path_prefix: str = "") -> None:
        """Answer ``status`` to the next ``n`` requests whose path starts with ``path_prefix``."""
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        self.intercept(path_prefix or "/", answers.error(status, phrase), times=n)

    def rate_limit(self, on: bool, reset_epoch: int | None = None, *, secondary: bool = False,
                   status: int = 403, retry_after: int = 60) -> None:
        """While on, answer every API request as GitHub does over a rate limit.

        Primary (default): ``status`` (403 or 429), ``x-ratelimit-remaining: 0`` and
        ``x-ratelimit-reset`` = ``reset_epoch`` (default: an hour from now). Secondary:
        the "secondary rate limit" message with ``retry-after: {retry_after}``.
        """
        reset = int(time.time()) + 3600 if reset_epoch is None else reset_epoch
        with self._lock:
            self._limit = _RateLimit(secondary, status, reset, retry_after) if on else None

    def truncate_archives(self, on: bool) -> None:
        """While on, archives are sent with their full Content-Length but half the body."""
        with self._lock:
            self._truncate = on
            if self._router is not None:
                self._router.truncate_archives = on

    def tamper_archive(self, sha: str, fn: Callable[[bytes], bytes] | None) -> None:
        """Serve ``fn(original zip)`` for commit ``sha``; ``None`` serves the original again."""
        self._registry.tamper(sha, fn)

    def replace_archive(self, sha: str, data: bytes | None) -> None:
        """Serve exactly ``data`` as the archive of commit ``sha``; ``None`` undoes it."""
        self._registry.replace(sha, data)

    def route(self, record: RequestRecord) -> Reply:
        """The normal answer to ``record`` (static content or the role's endpoints), without
        the knobs: for an intercept handler that alters what GitHub would say."""
        router = self._router
        if router is None:
            raise RuntimeError("GitHubStandIn is not started")
        if record.method not in ("GET", "HEAD"):
            return answers.not_found()
        static = self._registry.static(unquote(urlsplit(record.path).path))
        if static is not None:
            return Reply(200, static, (("Content-Type", "application/octet-stream"),))
        return router.route(record)

    # -- request handling ---------------------------------------------------------------------

    def _remove_rule(self, rule: Rule) -> None:
        with self._lock:
            self._rules = [(r, h) for r, h in self._rules if r is not rule]

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _pick(self, record: RequestRecord, port: int) -> tuple[Handler | None, Drip | None]:
        """Log the request; take the first matching intercept and drip rules."""
        with self._lock:
            self._log.append(record)
            rules = list(self._rules)
        handler: Handler | None = None
        drip: Drip | None = None
        for rule, action in rules:
            wanted = drip is None if isinstance(action, Drip) else handler is None
            if wanted and rule.matches(record, port):
                with self._lock:
                    taken = rule.take()
                    if rule._left == 0:
                        self._rules = [(r, a) for r, a in self._rules if r is not rule]
                if taken and isinstance(action, Drip):
                    drip = action
                elif taken:
                    handler = action  # type: ignore[assignment]
        return handler, drip

    def _answer(self, record: RequestRecord) -> Reply:
        """Log the request, apply the knobs, route it; never raises."""
        port = self._port or 0
        try:
            handler, drip = self._pick(record, port)
            reply = None
            if handler is not None:
                reply = handler if isinstance(handler, Reply) else handler(record)
            if reply is None:
                reply = self._limited(record) or self.route(record)
                if _is_rest(record):
                    reply = reply.with_headers(*self._rate_headers(record))
        except Exception:
            self._record_error(traceback.format_exc())
            reply = answers.error(500, "Server Error")
        return replace(reply, drip=drip) if drip is not None and reply.drip is None else reply

    def _rate_headers(self, record: RequestRecord, remaining: int | None = None
                      ) -> tuple[tuple[str, str], ...]:
        with self._lock:
            limit = self._limit
        quota = 5000 if record.authorization else 60
        if remaining is None:
            remaining = 0 if limit is not None and not limit.secondary else quota - 1
        reset = limit.reset if limit is not None else int(time.time()) + 3600
        return (("x-ratelimit-limit", str(quota)), ("x-ratelimit-remaining", str(remaining)),
                ("x-ratelimit-used", str(quota - remaining)), ("x-ratelimit-reset", str(reset)),
                ("x-ratelimit-resource", "core"))

    def _limited(self, record: RequestRecord) -> Reply | None:
        with self._lock:
            limit = self._limit
        if limit is None or not _is_rest(record):
            return None
        if limit.secondary:
            message = ("You have exceeded a secondary rate limit. Please wait a few minutes "
                       "before you try again. If you reach out to GitHub Support for help, "
                       "please include the request ID 0000:0000:0000000:0000000:00000000.")
            return answers.error(limit.status, message,
                                 f"{_RATE_DOCS}#about-secondary-rate-limits",
                                 (("retry-after", str(limit.retry_after)),))
        who = "user ID 1" if record.authorization else "127.0.0.1"
        message = f"API rate limit exceeded for {who}."
        if not record.authorization:
            message += (" (But here's the good news: Authenticated requests get a higher rate "
                        "limit. Check out the documentation for more details.)")
        return answers.error(limit.status, message,
                             f"{_RATE_DOCS}#exceeding-the-rate-limit")


def _is_rest(record: RequestRecord) -> bool:
    """Whether the request went to the REST API (the API host, under ``/api/v3``)."""
    path = urlsplit(record.path).path
    return record.role == "api" and (path == "/api/v3" or path.startswith("/api/v3/"))
