"""Resolving a ref to one commit and proving the commit belongs to the repo.

GitHub serves every commit of a fork network under every repo of that network, so
``owner/repo:<sha>`` may name code the owner never saw. safehub therefore accepts a
commit only with a proof that it is the repo's own:

* a branch or tag *name* is resolved by ``GET /repos/{o}/{r}/commits/{ref}``; names
  resolve among the repo's own refs only (``refs/pull/...`` is refused by the spec);
* a commit *sha* must be an ancestor of (or equal to) the default branch, checked with
  ``GET /repos/{o}/{r}/compare/{sha}...{branch}`` (status ``ahead`` or ``identical``),
  or else of another branch or tag of the repo (listed, then compared, at most
  :data:`MAX_COMPARES` times). A commit found only in forks is refused.

Requests per cold resolution: a name costs 1; no ref costs 2 (repo, then commit); a full
sha costs 2 (repo, compare) when it is on the default branch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from safehub._internal.http import Http, Reply
from safehub.errors import FetchError, IntegrityError, NotFoundError, PinError, RepoMovedError
from safehub.spec import RepoSpec, is_full_sha, looks_like_sha

__all__ = ["MAX_COMPARES", "GitHub", "Resolved"]

MAX_COMPARES = 30
"""Most extra ``compare`` calls spent proving an old commit that is off the default branch."""


@dataclass(frozen=True)
class Resolved:
    """A spec turned into one commit, with the evidence that it is the repo's own."""

    spec: RepoSpec
    ref: str
    commit: str
    tree: str
    proof: str
    moved_to: RepoSpec | None = None
    """Where the repo lives now, if it was renamed and the policy names the new name."""

    @property
    def location(self) -> RepoSpec:
        """The repo to fetch from."""
        return self.moved_to or self.spec


def _sha(data: Any, what: str) -> tuple[str, str]:
    try:
        sha = str(data["sha"])
        tree = str(data["commit"]["tree"]["sha"])
    except (KeyError, TypeError) as e:
        raise FetchError(f"unexpected answer for {what}: no commit sha and tree") from e
    if not (is_full_sha(sha) and is_full_sha(tree)):
        raise FetchError(f"unexpected answer for {what}: malformed sha {sha!r} or tree {tree!r}")
    return sha, tree


class GitHub:
    """The GitHub REST endpoints safehub uses (see DESIGN.md), nothing else."""

    def __init__(self, http: Http) -> None:
        self.http = http  # also used for signatures named by URL
        self.api = http.settings.api_url
        self.web = http.settings.web_url

    # -- endpoints --------------------------------------------------------------------

    def _get(self, spec: RepoSpec, path: str, what: str) -> Reply:
        url = f"{self.api}/repos/{spec.owner}/{spec.name}{path}"
        reply = self.http.get_json(url, what)
        if reply.redirected:
            self._moved(spec)
        return reply

    def _moved(self, spec: RepoSpec) -> None:
        """The API redirected: the repo was renamed or transferred. Refuse, naming both."""
        info = self.http.get_json(f"{self.api}/repos/{spec.owner}/{spec.name}", "repo info")
        new = str(info.data.get("full_name", "")) if isinstance(info.data, dict) else ""
        if not new or "/" not in new:
            raise FetchError(f"the API redirected requests for {spec.repo} but did not say "
                             "where the repo went")
        raise RepoMovedError(
            f"{spec.repo} has moved: GitHub now answers for {new}. The old name can be "
            "registered again by someone else (repo-jacking), so safehub does not follow",
            old=spec.key, new=new,
            hint=f"load it as {new!r}, or name {new} in an [[allow]] rule of the policy to "
            "follow the move",
        )

    def repo_info(self, spec: RepoSpec) -> dict[str, Any]:
        try:
            data = self._get(spec, "", f"repo {spec.repo}").data
        except NotFoundError as e:
            raise NotFoundError(
                f"repo {spec.repo} not found at {self.api}",
                hint="check the spelling; for a private repo set GITHUB_TOKEN",
            ) from e
        if not isinstance(data, dict) or not isinstance(data.get("default_branch"), str):
            raise FetchError(f"unexpected answer for repo {spec.repo}: no default_branch")
        return data

    def commit(self, spec: RepoSpec, ref: str) -> tuple[str, str]:
        """``ref`` -> (commit sha, tree sha) via ``commits/{ref}``."""
        what = f"ref {ref!r} of {spec.repo}"
        try:
            reply = self._get(spec, f"/commits/{quote(ref, safe='/')}", what)
        except NotFoundError as e:
            raise NotFoundError(
                f"{spec.repo} has no branch, tag or commit {ref!r} (or the repo does not exist)",
                hint="check the ref and the repo name; for a private repo set GITHUB_TOKEN",
            ) from e
        except FetchError as e:
            if "422" in e.message or "No commit found" in e.message:
                raise NotFoundError(
                    f"{spec.repo} has no commit {ref!r}",
                    hint="check the sha; commits of forks must be loaded from the fork",
                ) from e
            raise
        return _sha(reply.data, what)

    def compare(self, spec: RepoSpec, base: str, head: str) -> dict[str, Any]:
        what = f"comparison {base[:12]}...{head} of {spec.repo}"
        path = f"/compare/{quote(base, safe='/')}...{quote(head, safe='/')}"
        data = self._get(spec, path, what).data
        if not isinstance(data, dict) or "status" not in data:
            raise FetchError(f"unexpected answer for {what}: no status")
        return data

    def refs(self, spec: RepoSpec, kind: str) -> Iterator[tuple[str, str]]:
        """(name, tip sha) of every branch or tag (``kind`` is ``branches`` or ``tags``)."""
        page = 1
        while True:
            data = self._get(
                spec, f"/{kind}?per_page=100&page={page}", f"{kind} of {spec.repo}"
            ).data
            if not isinstance(data, list) or not data:
                return
            for item in data:
                try:
                    yield str(item["name"]), str(item["commit"]["sha"])
                except (KeyError, TypeError) as e:
                    raise FetchError(f"unexpected answer listing {kind} of {spec.repo}") from e
            if len(data) < 100:
                return
            page += 1

    def tree_listing(self, spec: RepoSpec, tree: str) -> list[dict[str, Any]]:
        """The recursive listing of a tree (used only by the ``.gitattributes`` fallback)."""
        what = f"tree {tree[:12]} of {spec.repo}"
        data = self._get(spec, f"/git/trees/{tree}?recursive=1", what).data
        if not isinstance(data, dict) or not isinstance(data.get("tree"), list):
            raise FetchError(f"unexpected answer for {what}")
        if data.get("truncated"):
            raise FetchError(
                f"GitHub truncated the listing of {what}; the per-file check is impossible"
            )
        return [item for item in data["tree"] if isinstance(item, dict)]

    def blob(self, spec: RepoSpec, sha: str) -> bytes:
        """A blob's committed bytes (``git/blobs``), checked against its id."""
        import base64

        from safehub.digest import blob_id

        what = f"blob {sha[:12]} of {spec.repo}"
        data = self._get(spec, f"/git/blobs/{sha}", what).data
        try:
            content = base64.b64decode(data["content"])
        except (KeyError, TypeError, ValueError) as e:
            raise FetchError(f"unexpected answer for {what}") from e
        if blob_id(content) != sha:
            raise IntegrityError(f"the API sent other bytes for {what}",
                                 hint="the API answer was altered; do not load it")
        return content

    def archive_url(self, spec: RepoSpec, commit: str) -> str:
        """The zipball URL; the name is case-folded so mirrors need one copy per repo."""
        return f"{self.web}/{spec.key}/zipball/{commit}"

    def api_archive_url(self, spec: RepoSpec, commit: str) -> str:
        """The REST zipball endpoint: it takes ``GITHUB_TOKEN``, so private repos work."""
        return f"{self.api}/repos/{spec.key}/zipball/{commit}"

    # -- resolution -------------------------------------------------------------------

    def resolve(self, spec: RepoSpec) -> Resolved:
        """Turn ``spec`` into one commit of the repo itself, or raise."""
        ref = spec.ref
        default: str | None = None
        if ref is None:
            default = str(self.repo_info(spec)["default_branch"])
            sha, tree = self.commit(spec, default)
            return Resolved(spec, default, sha, tree, f"head of default branch {default}")
        if is_full_sha(ref):
            return self._prove(spec, ref, None)
        sha, tree = self.commit(spec, ref)
        if looks_like_sha(ref) and sha.startswith(ref.lower()):
            return self._prove(spec, sha, ref)
        return Resolved(spec, ref, sha, tree, f"{ref} names it in {spec.repo}")

    def _prove(self, spec: RepoSpec, sha: str, asked: str | None) -> Resolved:
        """Prove that commit ``sha`` is reachable from one of the repo's own refs."""
        ref = asked or sha
        default = str(self.repo_info(spec)["default_branch"])
        candidates: list[str] = [default]
        tree: str | None = None
        seen_tips = False
        tried = 0
        while candidates:
            branch = candidates.pop(0)
            tried += 1
            try:
                cmp = self.compare(spec, sha, branch)
            except NotFoundError as e:
                raise NotFoundError(
                    f"{spec.repo} has no commit {sha}",
                    hint="check the sha; commits of forks must be loaded from the fork",
                ) from e
            base_sha, tree = _sha(cmp.get("base_commit"), f"commit {sha} of {spec.repo}")
            if base_sha != sha:
                raise FetchError(f"the API compared {base_sha} when asked about {sha}")
            if cmp["status"] in ("ahead", "identical"):
                return Resolved(spec, ref, sha, tree, f"ancestor of {branch}")
            if not seen_tips:
                seen_tips = True
                names: list[str] = []
                for kind in ("branches", "tags"):
                    for name, tip in self.refs(spec, kind):
                        if tip == sha:
                            return Resolved(spec, ref, sha, tree, f"tip of {kind[:-1]} {name}")
                        if name != default:
                            names.append(name)
                        if len(names) >= MAX_COMPARES:
                            break  # bounded API cost: never page through thousands of refs
                    if len(names) >= MAX_COMPARES:
                        break
                candidates.extend(names)
            if tried > MAX_COMPARES:
                raise PinError(
                    f"could not prove that commit {sha} belongs to {spec.repo}: it is not on "
                    f"{default} and {MAX_COMPARES} other branches and tags were checked",
                    hint="load it by the branch or tag that contains it",
                )
        raise PinError(
            f"commit {sha} is not in the history of any branch or tag of {spec.repo}; "
            "GitHub serves commits of forks under the parent's name, so it may come from a fork",
            hint="if it is a fork's commit, load it from the fork ('owner/fork:sha') after "
            "reviewing that fork",
        )
