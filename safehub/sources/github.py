"""The GitHub REST endpoints safehub uses (docs/architecture.md), and nothing else.

This client owns everything GitHub-specific: the API and web bases, the headers (the API
version, and ``GITHUB_TOKEN`` sent only to URLs under the API base), rate-limit answers,
renamed repos (an API redirect), and the shapes of the answers, each checked where it is
read (a wrong shape is a :class:`FetchError`, never a bare exception). It talks through a
:class:`~safehub.sources.transport.Transport` and knows nothing of caches or policies.

Every endpoint here answers in a size that does not grow with the commit: refs are read
with ``git/ref`` (exact names, never the API's short-name expansion), commits with
``git/commits`` and the ``application/vnd.github.sha`` media type, and ancestry with
``compare/{branch}...{sha}``, whose diff is empty when the sha is an ancestor.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote

from safehub._internal import fixes
from safehub._internal.urls import UrlError, read_url
from safehub.digest import blob_id
from safehub.errors import (
    FetchError,
    IntegrityError,
    NotFoundError,
    PinError,
    RateLimitError,
    RepoMovedError,
)
from safehub.sources.interface import RefTarget
from safehub.sources.transport import HTTPError, Progress, Reply, Transport
from safehub.spec import RepoSpec, is_full_sha

if TYPE_CHECKING:  # asked for only by a per-file check of an archive
    from safehub.verify.gitattributes.subst import CommitFacts

__all__ = ["MAX_REF_PAGES", "GitHub", "RefTarget", "sha_field"]  # GitHub is a Source

_JSON = "application/vnd.github+json"
_SHA_MEDIA = "application/vnd.github.sha"
MAX_REF_PAGES = 10
"""Most pages (of 100) read when listing a repo's branches or tags."""
_MAX_TAG_DEPTH = 5


def _field(data: Any, *path: str | int) -> Any:
    """``data[path[0]][path[1]]...`` or None, whatever the shape."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or not -len(data) <= part < len(data):
                return None
        elif not isinstance(data, dict):
            return None
        data = data[part] if isinstance(part, int) else data.get(part)
    return data


def sha_field(data: Any, what: str, *path: str | int) -> str:
    value = _field(data, *path)
    if not isinstance(value, str) or not is_full_sha(value):
        raise FetchError(f"unexpected answer for {what}: {'.'.join(map(str, path))} is not a "
                         f"40-hex sha ({str(value)[:60]!r})",
                         fix=fixes.say("the API (or whatever answers for it) is broken; retry "
                                       "later"))
    return value


class GitHub:
    """The endpoints safehub uses, as a :class:`~safehub.sources.interface.Source`."""

    def __init__(self, transport: Transport, *, api_url: str, web_url: str,
                 token: str | None = None) -> None:
        self.transport = transport
        self.api = api_url.rstrip("/")
        self.web = web_url.rstrip("/")
        self._token = token

    def headers(self, url: str) -> dict[str, str]:
        """Headers for one hop: the token only under the API base (its exact scheme, host
        and port, and its path), never elsewhere; both read as the transport reads them."""
        try:
            under = read_url(url).under(read_url(self.api))
        except UrlError:
            under = False
        if not under:
            return {}
        headers = {"X-GitHub-Api-Version": "2022-11-28"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    # -- plumbing ---------------------------------------------------------------------

    def _get(self, spec: RepoSpec, path: str, what: str, accept: str = _JSON) -> Reply:
        url = f"{self.api}/repos/{quote(spec.owner, safe='')}/{quote(spec.name, safe='')}{path}"
        try:
            reply = self.transport.get(url, what=what, accept=accept, headers=self.headers)
        except HTTPError as e:
            raise self._classify(e, what) from e
        if reply.redirected:
            self._moved(spec)
        return reply

    def _json(self, spec: RepoSpec, path: str, what: str) -> Any:
        return self._get(spec, path, what).json(what)

    def _classify(self, e: HTTPError, what: str) -> FetchError:
        limited = e.status in (403, 429) and (
            e.headers.get("x-ratelimit-remaining", e.headers.get("X-RateLimit-Remaining")) == "0"
            or "retry-after" in {k.lower() for k in e.headers}
            or "rate limit" in e.server_message.lower())
        if limited:
            reset = {k.lower(): v for k, v in e.headers.items()}.get("x-ratelimit-reset", "")
            when = ""
            if reset.isdigit() and len(reset) < 12:
                when = " until " + time.strftime("%H:%M:%S UTC", time.gmtime(int(reset)))
            fix = ("the token's hourly quota is spent; wait, or use another token"
                   if self._token else "set GITHUB_TOKEN (5,000 requests an hour instead of 60)")
            return RateLimitError(
                f"GitHub API rate limit exceeded{when} while fetching {what}",
                fix=fixes.say(f"{fix}; pinned loads (lockfile or 40-hex ref) that are cached need "
                              f"no API"))
        if e.status in (401, 403):
            return FetchError(f"{e.message}", fix=fixes.say("check GITHUB_TOKEN: it may be wrong, "
                                                            "expired or lack access to the repo"))
        if e.status == 422:
            return NotFoundError(e.message)
        return e

    def _moved(self, spec: RepoSpec) -> None:
        """The API redirected: the repo was renamed or transferred. Refuse, naming both."""
        new = self.full_name(spec)
        raise RepoMovedError(
            f"{spec.repo} has moved: GitHub now answers for {new}. The old name can be "
            "registered again by someone else (repo-jacking), so safehub does not follow",
            old=spec.key, new=new,
            fix=fixes.say(f"load it as {new!r}, or name {new} in an [[allow]] rule of the policy "
                          f"to follow the move"),
        )

    # -- endpoints --------------------------------------------------------------------

    def full_name(self, spec: RepoSpec) -> str:
        """``owner/name`` as GitHub spells it now (following a rename)."""
        url = f"{self.api}/repos/{quote(spec.owner, safe='')}/{quote(spec.name, safe='')}"
        data = self.transport.get(url, what="repo info", headers=self.headers).json("repo info")
        new = _field(data, "full_name")
        if isinstance(new, str):
            try:
                return RepoSpec.parse(new).repo
            except ValueError:
                pass
        raise FetchError(f"the API answered for {spec.repo} without a valid full_name")

    def repo_info(self, spec: RepoSpec) -> tuple[str, str]:
        """(default branch, full name) of the repo."""
        try:
            data = self._json(spec, "", f"repo {spec.repo}")
        except NotFoundError as e:
            raise NotFoundError(f"repo {spec.repo} does not exist at {self.api} (or it is "
                                "private and no token with access to it was sent)",
                                fix=fixes.say("check the owner and repo name; for a private "
                                              "repo set GITHUB_TOKEN")
                                ) from e
        branch, name = _field(data, "default_branch"), _field(data, "full_name")
        if not isinstance(branch, str) or not branch or not isinstance(name, str):
            raise FetchError(f"unexpected answer for repo {spec.repo}: no default_branch")
        try:
            spelled = RepoSpec.parse(name)
        except ValueError:
            spelled = None
        # The name goes into URLs, mirror paths and the lockfile: it must be this repo's
        # (a rename answers with a redirect, refused above), only spelled GitHub's way.
        if spelled is None or spelled.ref is not None or spelled.key != spec.key:
            raise FetchError(f"unexpected answer for repo {spec.repo}: full_name "
                             f"{name[:120]!r} names another repo",
                             fix=fixes.say("the API (or whatever answers for it) is broken; retry "
                                           "later"))
        return branch, spelled.repo

    def ref(self, spec: RepoSpec, kind: str, name: str) -> RefTarget | None:
        """The commit a branch (``heads``) or tag (``tags``) named exactly ``name`` points
        at (annotated tags peeled), or None if the repo has no such ref."""
        what = f"{'tag' if kind == 'tags' else 'branch'} {name!r} of {spec.repo}"
        asked = f"ref {name!r} of {spec.repo}"  # a tag or a branch: not known until it answers
        try:
            data = self._json(spec, f"/git/ref/{kind}/{quote(name, safe='/')}", asked)
        except NotFoundError:
            return None
        if not isinstance(data, dict) or _field(data, "ref") != f"refs/{kind}/{name}":
            return None  # not this exact ref (old servers matched prefixes)
        sha = sha_field(data, what, "object", "sha")
        kind_of = _field(data, "object", "type")
        for _ in range(_MAX_TAG_DEPTH):
            if kind_of == "commit":
                return RefTarget(f"refs/{kind}/{name}", sha)
            if kind_of != "tag":
                raise FetchError(f"{what} points at a {kind_of!r}, not a commit")
            tag = self._json(spec, f"/git/tags/{sha}", f"annotated {what}")
            sha, kind_of = sha_field(tag, what, "object", "sha"), _field(tag, "object", "type")
        raise FetchError(f"{what}: more than {_MAX_TAG_DEPTH} nested annotated tags")

    def expand(self, spec: RepoSpec, prefix: str) -> str | None:
        """The full sha of an abbreviated one (``commits/{prefix}``, sha media type)."""
        what = f"commit {prefix} of {spec.repo}"
        try:
            text = self._get(spec, f"/commits/{prefix}", what, accept=_SHA_MEDIA).body
        except NotFoundError:
            return None
        sha = text.decode("ascii", "replace").strip()
        if not is_full_sha(sha):
            raise FetchError(f"unexpected answer for {what}: {sha[:60]!r} is not a sha")
        return sha

    def commit_tree(self, spec: RepoSpec, sha: str) -> str:
        """The tree of commit ``sha`` (``git/commits``)."""
        what = f"commit {sha} of {spec.repo}"
        data = self._json(spec, f"/git/commits/{sha}", what)
        if sha_field(data, what, "sha") != sha:
            raise FetchError(f"the API answered for another commit when asked about {sha}")
        return sha_field(data, what, "tree", "sha")

    def commit(self, spec: RepoSpec, sha: str) -> CommitFacts:
        """Commit ``sha``'s tree, parents, author, committer and message (``git/commits``):
        what bounds its ``export-subst`` placeholders."""
        from safehub.verify.gitattributes.subst import CommitFacts, Person

        what = f"commit {sha} of {spec.repo}"
        data = self._json(spec, f"/git/commits/{sha}", what)
        if sha_field(data, what, "sha") != sha:
            raise FetchError(f"the API answered for another commit when asked about {sha}")
        parents = _field(data, "parents")
        message = _field(data, "message")
        people = []
        for role in ("author", "committer"):
            name, email, date = (_field(data, role, k) for k in ("name", "email", "date"))
            try:
                if not all(isinstance(v, str) for v in (name, email, date)):
                    raise ValueError(f"no {role}")
                people.append(Person.from_api(name, email, date))
            except ValueError as e:
                raise FetchError(f"unexpected answer for {what}: {e}") from e
        if not isinstance(parents, list) or not isinstance(message, str):
            raise FetchError(f"unexpected answer for {what}: no parents or message")
        return CommitFacts(sha, sha_field(data, what, "tree", "sha"),
                           tuple(sha_field(p, what, "sha") for p in parents),
                           people[0], people[1], message)

    def contains(self, spec: RepoSpec, ref: str, sha: str) -> str | None:
        """The tree of ``sha`` if it is ``ref`` or an ancestor (``compare/{ref}...{sha}``:
        ``behind`` or ``identical``, with ``sha`` as the merge base), else None."""
        what = f"comparison {ref}...{sha[:12]} of {spec.repo}"
        data = self._json(spec, f"/compare/{quote(ref, safe='/')}...{quote(sha, safe='/')}",
                          what)
        if not isinstance(data, dict) or not isinstance(data.get("status"), str):
            raise FetchError(f"unexpected answer for {what}: no status")
        if data["status"] not in ("behind", "identical"):
            return None
        base = data.get("merge_base_commit")
        if sha_field(base, "compare", "sha") != sha:
            raise PinError(f"the API's comparison for {sha} names another merge base")
        return sha_field(base, "compare", "commit", "tree", "sha")

    def refs(self, spec: RepoSpec, kind: str) -> Iterator[tuple[str, str]]:
        """(name, tip sha) of the repo's branches or tags (``kind``), at most
        :data:`MAX_REF_PAGES` pages of 100."""
        for page in range(1, MAX_REF_PAGES + 1):
            what = f"{kind} of {spec.repo}"
            data = self._json(spec, f"/{kind}?per_page=100&page={page}", what)
            if not isinstance(data, list):
                raise FetchError(f"unexpected answer listing {what}")
            for item in data[:100]:
                name = _field(item, "name")
                if not isinstance(name, str):
                    raise FetchError(f"unexpected answer listing {what}: an item has no name")
                yield name, sha_field(item, what, "commit", "sha")
            if len(data) < 100:
                return

    def tree_listing(self, spec: RepoSpec, tree: str) -> list[Mapping[str, object]]:
        """The recursive listing of a tree (used only by the ``.gitattributes`` fallback)."""
        what = f"tree {tree[:12]} of {spec.repo}"
        data = self._json(spec, f"/git/trees/{tree}?recursive=1", what)
        items = _field(data, "tree")
        if not isinstance(items, list):
            raise FetchError(f"unexpected answer for {what}")
        if _field(data, "truncated"):
            raise FetchError(f"GitHub truncated the listing of {what}; the per-file check "
                             "is impossible")
        return [item for item in items if isinstance(item, dict)]

    def top_level_file(self, spec: RepoSpec, tree: str, name: str) -> bytes | None:
        """A file at the root of ``tree`` (``git/trees`` then ``git/blobs``, the blob
        checked against its id), or None if the tree has no such file."""
        what = f"tree {tree[:12]} of {spec.repo}"
        items = _field(self._json(spec, f"/git/trees/{tree}", what), "tree")
        if not isinstance(items, list):
            raise FetchError(f"unexpected answer for {what}")
        for item in items:
            if _field(item, "path") == name and _field(item, "type") == "blob":
                return self.blob(spec, sha_field(item, what, "sha"))
        return None

    def blob(self, spec: RepoSpec, sha: str) -> bytes:
        """A blob's committed bytes (``git/blobs``), checked against its id."""
        what = f"blob {sha[:12]} of {spec.repo}"
        content = _field(self._json(spec, f"/git/blobs/{sha}", what), "content")
        try:
            data = base64.b64decode(content if isinstance(content, str) else "")
        except ValueError as e:
            raise FetchError(f"unexpected answer for {what}") from e
        if blob_id(data) != sha:
            raise IntegrityError(f"the API sent other bytes for {what}",
                                 fix=fixes.say("the API answer was altered; do not load it"))
        return data

    def signature_at(self, url: str) -> bytes | None:
        from safehub.verify.signatures.locate import MAX_SIGNATURE_BYTES

        try:
            return self.transport.get(url, what="signature", accept="application/octet-stream",
                                      headers=self.headers, max_bytes=MAX_SIGNATURE_BYTES).body
        except NotFoundError:
            return None

    def snapshot_signer(self, manifest: str) -> str:
        return ""  # GitHub serves no snapshots

    def archive_url(self, repo: str, commit: str) -> str:
        """The zipball URL, with owner and name spelled as GitHub spells them."""
        return f"{self.web}/{repo}/zipball/{commit}"

    def api_archive_url(self, repo: str, commit: str) -> str:
        """The REST zipball endpoint: it takes ``GITHUB_TOKEN``, so private repos work."""
        return f"{self.api}/repos/{repo}/zipball/{commit}"

    def download_archive(self, repo: str, commit: str, out: BinaryIO, *, max_bytes: int,
                         progress: Progress | None = None) -> None:
        """The zipball from the web host; for a private repo (404 there) with a token, the
        REST endpoint, which takes the token and redirects to a signed archive URL."""
        what = f"archive of {repo}@{commit[:12]}"
        try:
            self.transport.download(self.archive_url(repo, commit), out, what=what,
                                    max_bytes=max_bytes, headers=self.headers,
                                    progress=progress)
        except NotFoundError:
            if not self._token:
                raise
            out.seek(0)
            out.truncate()
            self.transport.download(self.api_archive_url(repo, commit), out, what=what,
                                    max_bytes=max_bytes, headers=self.headers,
                                    progress=progress)
