"""The GitHub endpoints of the stand-in: one method per endpoint, answers from git.

Roles and their URL bases (see :class:`.server.GitHubStandIn`): ``api`` (REST, under
``/api/v3``), ``web`` (github.com, under ``/web``), ``codeload`` (archives, under
``/codeload``) and ``release_assets`` (release downloads). Owner and repo names are matched
case-insensitively, as GitHub does; URLs the stand-in writes spell them as registered.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from . import answers
from .answers import RepoUrls, error, not_found
from .gitview import ABBREV_SHA, GitView
from .registry import Registry, Repo
from .transport import Reply, RequestRecord

__all__ = ["Bases", "Router"]

_SHA_MEDIA = ("application/vnd.github.sha", "application/vnd.github.v3.sha")
_FILES_PER_PAGE = 300  # GitHub lists at most 300 files per commit page, with Link headers


@dataclass(frozen=True)
class Bases:
    """The URL bases of the roles (each on its own host)."""

    api: str
    web: str
    codeload: str
    release_assets: str


def _int_param(params: Mapping[str, list[str]], key: str, default: int) -> int:
    try:
        return int(params[key][0])
    except (KeyError, IndexError, ValueError):
        return default


def _segments(path: str) -> list[str]:
    """Path segments, each percent-decoded (so ``feature%2Fx`` stays one segment)."""
    return [unquote(part) for part in path.split("/")[1:]]


class Router:
    """Answers a request by its role, path and headers; knows nothing of the test knobs
    except ``truncate_archives`` (archives sent with half their body)."""

    def __init__(self, registry: Registry, bases: Bases, *, name_miss_status: int) -> None:
        self.registry = registry
        self.bases = bases
        self.name_miss_status = name_miss_status
        self.truncate_archives = False
        self._asset_key = secrets.token_bytes(16)

    def route(self, record: RequestRecord) -> Reply:
        target = urlsplit(record.path)
        path, query = target.path, target.query
        prefix = {"api": "/api/v3", "web": "/web", "codeload": "/codeload",
                  "release_assets": ""}.get(record.role)
        if prefix is None or not (path == prefix or path.startswith(prefix + "/")):
            return not_found()
        path = path[len(prefix) :]
        if record.role == "api":
            return self._api(path, query, record)
        if record.role == "web":
            return self._web(path, query)
        if record.role == "codeload":
            return self._codeload(path, query)
        return self._release_asset(path, query)

    def urls(self, repo: Repo) -> RepoUrls:
        return RepoUrls(f"{self.bases.api}/repos/{repo.url_name}",
                        f"{self.bases.web}/{repo.url_name}", repo.id)

    # -- REST API ---------------------------------------------------------------------------

    def _api(self, path: str, query: str, record: RequestRecord) -> Reply:
        raw = path.split("/")[1:]
        parts = _segments(path)
        if len(parts) >= 3 and parts[0] == "repos":
            found = self.registry.find(parts[1], parts[2])
            if found is None:
                return not_found()
            repo, tail = found[0], parts[3:]
            if found[1]:  # renamed: GitHub answers 301 to the repo's id
                rest = "".join(f"/{p}" for p in raw[3:]) + (f"?{query}" if query else "")
                location = f"{self.bases.api}/repositories/{repo.id}{rest}"
                body = {"message": "Moved Permanently", "url": location,
                        "documentation_url": answers.DOCS}
                return Reply.json(body, 301, (("Location", location),))
        elif len(parts) >= 2 and parts[0] == "repositories" and parts[1].isdigit():
            maybe = self.registry.by_id(int(parts[1]))
            if maybe is None:
                return not_found()
            repo, tail = maybe, parts[2:]
        else:
            return not_found()
        return self._repo_endpoint(repo, tail, query, record)

    def _repo_endpoint(self, repo: Repo, tail: list[str], query: str,
                       record: RequestRecord) -> Reply:
        if not tail:
            return Reply.json(self._repo_json(repo, full=True))
        kind, rest = tail[0], "/".join(tail[1:])
        view = self.registry.view(repo)
        if kind == "commits" and rest:
            return self._commit(repo, view, rest, query, record)
        if kind == "compare" and rest:
            return self._compare(repo, view, rest)
        if kind in ("branches", "tags") and len(tail) == 1:
            return self._ref_list(repo, view, kind, query)
        if kind == "git" and len(tail) >= 2:
            return self._git_data(repo, view, tail[1], "/".join(tail[2:]), query)
        if kind == "zipball":  # the REST archive endpoint (works for private repos)
            return self._zipball(repo, view, rest or "HEAD")
        return not_found()

    def _repo_json(self, repo: Repo, *, full: bool) -> dict[str, object]:
        u = self.urls(repo)
        payload: dict[str, object] = {
            "id": repo.id,
            "node_id": answers.node_id("Repository", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "owner": {"login": repo.owner, "type": "User",
                      "html_url": f"{self.bases.web}/{quote(repo.owner, safe='')}"},
            "private": False,
            "html_url": u.web,
            "fork": repo.parent is not None,
            "url": u.api,
            "default_branch": repo.default_branch,
            "visibility": "public",
            "archived": False,
            "disabled": False,
        }
        family = self.registry.parent_and_source(repo) if full else None
        if family is not None:
            payload["parent"] = self._repo_json(family[0], full=False)
            payload["source"] = self._repo_json(family[1], full=False)
        return payload

    def _commit_miss(self, ref: str) -> Reply:
        if self.name_miss_status == 404 and not ABBREV_SHA.fullmatch(ref):
            return not_found()
        return error(422, f"No commit found for SHA: {ref}")

    def _commit(self, repo: Repo, view: GitView, ref: str, query: str,
                record: RequestRecord) -> Reply:
        """``GET .../commits/{ref}``: the sha as text with the sha media type, else the
        commit with its diff to the first parent (``files``, 300 a page, and ``stats``)."""
        sha = view.resolve(ref)
        if sha is None:
            return self._commit_miss(ref)
        accept = (record.accept or "").lower()
        if any(media in accept for media in _SHA_MEDIA):
            if (record.header("If-None-Match") or "").strip('"W/ ') == sha:
                return Reply(304, b"", (("ETag", f'"{sha}"'),))
            headers = (("Content-Type", "application/vnd.github.sha; charset=utf-8"),
                       ("X-GitHub-Media-Type", "github.v3; param=sha"), ("ETag", f'"{sha}"'))
            return Reply(200, sha.encode(), headers)
        commit = view.commits([sha])[sha]
        page = max(_int_param(parse_qs(query), "page", 1), 1)
        start = (page - 1) * _FILES_PER_PAGE
        diff = view.diff(commit.parents[0] if commit.parents else None, sha,
                         _FILES_PER_PAGE, start)
        _, _, last = answers.page_window(diff.total_files, page, _FILES_PER_PAGE)
        url = f"{self.urls(repo).api}/commits/{quote(ref, safe='/')}"
        link = answers.link_header(url, page, last, None)
        headers = (("Link", link),) if link else ()
        return Reply.json(answers.commit(self.urls(repo), commit, diff), headers=headers)

    def _compare(self, repo: Repo, view: GitView, spec: str) -> Reply:
        """``GET .../compare/{base}...{head}``: three-dot semantics, files from the merge base."""
        base_ref, sep, head_ref = spec.partition("...")
        if not sep:
            return not_found()
        base, head = view.resolve(base_ref), view.resolve(head_ref)
        if base is None or head is None:
            return not_found()
        cmp = view.compare(base, head)
        if cmp is None:
            return error(404, f"No common ancestor between {base_ref} and {head_ref}.")
        commits = view.commits([base, cmp.merge_base, *cmp.commits])
        diff = view.diff(cmp.merge_base, head)
        payload = answers.comparison(self.urls(repo), spec, cmp, commits, base, head, diff)
        return Reply.json(payload)

    def _ref_list(self, repo: Repo, view: GitView, kind: str, query: str) -> Reply:
        """``GET .../branches`` or ``.../tags``: sorted by name, paged with ``Link``."""
        namespace = "refs/heads/" if kind == "branches" else "refs/tags/"
        items = [(r.name[len(namespace) :], r.commit) for r in view.refs(namespace)]
        params = parse_qs(query)
        per_page = min(max(_int_param(params, "per_page", 30), 1), 100)
        page = max(_int_param(params, "page", 1), 1)
        start, stop, last = answers.page_window(len(items), page, per_page)
        u = self.urls(repo)
        item = answers.branch_item if kind == "branches" else answers.tag_item
        payload = [item(u, name, sha) for name, sha in items[start:stop]]
        base = f"{self.bases.api}/repositories/{repo.id}/{kind}"
        link = answers.link_header(base, page, last, per_page)
        return Reply.json(payload, headers=(("Link", link),) if link else ())

    def _git_data(self, repo: Repo, view: GitView, kind: str, rest: str, query: str) -> Reply:
        """The git database: ``ref``, ``refs``, ``matching-refs``, ``tags``, ``commits``,
        ``trees``, ``blobs``. Objects are looked up by full sha in the fork network."""
        u = self.urls(repo)
        if kind == "ref" and rest:  # exact match only
            ref = view.ref(f"refs/{rest}")
            return Reply.json(answers.git_ref(u, ref)) if ref else not_found()
        if kind == "matching-refs":  # a prefix; an empty list when nothing matches
            return Reply.json([answers.git_ref(u, r) for r in view.refs(f"refs/{rest}")])
        if kind == "refs" and rest:  # the older form: one ref if exact, else the prefix list
            exact = view.ref(f"refs/{rest}")
            listed = view.refs(f"refs/{rest}")
            if exact is not None:
                return Reply.json(answers.git_ref(u, exact))
            return Reply.json([answers.git_ref(u, r) for r in listed]) if listed else not_found()
        if kind == "tags" and rest:
            tag = view.tag(rest)
            return Reply.json(answers.git_tag(u, tag)) if tag else not_found()
        if kind == "commits" and rest:
            if view.object_type(rest) != "commit":
                return not_found()
            return Reply.json(answers.git_commit(u, view.commits([rest])[rest]))
        if kind == "trees" and rest:
            tree = view.resolve(rest, "tree")
            if tree is None:
                return not_found()
            recursive = bool(parse_qs(query).get("recursive", [""])[0])
            return Reply.json(answers.tree(u, tree, view.tree_entries(tree, recursive=recursive)))
        if kind == "blobs" and rest:
            data = view.blob(rest)
            return Reply.json(answers.blob(u, rest, data)) if data is not None else not_found()
        return not_found()

    def _zipball(self, repo: Repo, view: GitView, ref: str) -> Reply:
        """Redirect an archive request to the codeload host, by resolved commit."""
        sha = view.resolve(ref)
        if sha is None:
            return not_found()
        return Reply.redirect(f"{self.bases.codeload}/{repo.url_name}/legacy.zip/{sha}")

    # -- github.com, codeload, release assets -----------------------------------------------

    def _web(self, path: str, query: str) -> Reply:
        parts = _segments(path)
        if len(parts) < 4:
            return not_found()
        found = self.registry.find(parts[0], parts[1])
        if found is None:
            return not_found()
        repo, moved = found
        if moved:
            rest = "/".join(path.split("/")[3:]) + (f"?{query}" if query else "")
            return Reply.redirect(f"{self.bases.web}/{repo.url_name}/{rest}", 301)
        kind, tail = parts[2], parts[3:]
        if kind == "zipball" and tail:
            return self._zipball(repo, self.registry.view(repo), "/".join(tail))
        if kind == "releases" and len(tail) >= 3 and tail[0] == "download":
            asset = self.registry.asset(repo.id, "/".join(tail[1:-1]), tail[-1])
            return self._asset_redirect(repo, asset.id, asset.name) if asset else not_found()
        return not_found()

    def _signature(self, repo_id: int, asset_id: int, expiry: str) -> str:
        message = f"{repo_id}/{asset_id}/{expiry}".encode()
        return hmac.new(self._asset_key, message, hashlib.sha256).hexdigest()

    def _asset_redirect(self, repo: Repo, asset_id: int, name: str) -> Reply:
        """302 to a signed, expiring URL on the release-assets host, as GitHub does since 2025."""
        now = datetime.datetime.now(datetime.timezone.utc)
        expiry = (now + datetime.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        query = urlencode({
            "sp": "r", "sv": "2018-11-09", "sr": "b", "spr": "https", "se": expiry,
            "rscd": f"attachment; filename={name}", "rsct": "application/octet-stream",
            "sig": self._signature(repo.id, asset_id, expiry),
        })
        base = f"{self.bases.release_assets}/github-production-release-asset"
        return Reply.redirect(f"{base}/{repo.id}/{asset_id}?{query}")

    def _release_asset(self, path: str, query: str) -> Reply:
        parts = _segments(path)
        if len(parts) != 3 or parts[0] != "github-production-release-asset" or not all(
                p.isdigit() for p in parts[1:]):
            return not_found()
        params = parse_qs(query)
        expiry, sig = params.get("se", [""])[0], params.get("sig", [""])[0]
        asset = self.registry.asset_by_id(int(parts[1]), int(parts[2]))
        if asset is None:
            return not_found()
        good = hmac.compare_digest(sig, self._signature(asset.repo_id, asset.id, expiry))
        if not good or expiry < datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"):
            body = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthenticationFailed'
                    b"</Code><Message>Server failed to authenticate the request.</Message></Error>")
            return Reply(403, body, (("Content-Type", "application/xml"),))
        headers = (("Content-Type", params.get("rsct", ["application/octet-stream"])[0]),
                   ("Content-Disposition", params.get("rscd", ["attachment"])[0]))
        return Reply(200, asset.data, headers)

    def _codeload(self, path: str, query: str) -> Reply:
        parts = _segments(path)
        if len(parts) < 4 or parts[2] != "legacy.zip":
            return not_found()
        found = self.registry.find(parts[0], parts[1])
        if found is None:
            return not_found()
        repo, moved = found
        if moved:
            rest = "/".join(path.split("/")[3:]) + (f"?{query}" if query else "")
            return Reply.redirect(f"{self.bases.codeload}/{repo.url_name}/{rest}", 301)
        sha = self.registry.view(repo).resolve("/".join(parts[3:]))
        if sha is None:
            return not_found()
        data = self.registry.archive(repo, sha)
        headers = (("Content-Type", "application/zip"),
                   ("Content-Disposition",
                    f"attachment; filename={quote(f'{repo.owner}-{repo.name}-{sha[:7]}')}.zip"))
        cut = len(data) // 2 if self.truncate_archives else None
        return Reply(200, data, headers, cut_after=cut)
