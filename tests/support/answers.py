"""The JSON shapes of GitHub's REST answers, built from what :mod:`.gitview` reads.

Field names and nesting follow GitHub's published REST description
(github/rest-api-description, schemas ``full-repository``, ``commit``, ``diff-entry``,
``commit-comparison``, ``git-ref``, ``git-tag``, ``git-commit``, ``git-tree``, ``blob``,
``short-branch``, ``tag``); fields that describe people and permissions are left out or null.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from .gitview import Commit, Comparison, Diff, FileChange, Identity, Ref, TagObject
from .transport import Reply

__all__ = ["DOCS", "RepoUrls", "error", "link_header", "page_window"]

DOCS = "https://docs.github.com/rest"


@dataclass(frozen=True)
class RepoUrls:
    """Where a repo's resources live: ``api`` = ``{api_url}/repos/{Owner}/{Name}``,
    ``web`` = ``{web_url}/{Owner}/{Name}``."""

    api: str
    web: str
    repo_id: int


def error(status: int, message: str, documentation_url: str = DOCS,
          headers: Sequence[tuple[str, str]] = ()) -> Reply:
    """GitHub's error body: ``{"message", "documentation_url", "status"}``."""
    payload = {"message": message, "documentation_url": documentation_url, "status": str(status)}
    return Reply.json(payload, status, headers)


def not_found() -> Reply:
    return error(404, "Not Found")


def node_id(kind: str, *parts: object) -> str:
    """An opaque, stable id in the style of GitHub's legacy global node ids."""
    return base64.b64encode(f"0{len(kind)}:{kind}{':'.join(map(str, parts))}".encode()).decode()


def person(who: Identity) -> dict[str, str]:
    return {"name": who.name, "email": who.email, "date": who.date}


_UNSIGNED = {"verified": False, "reason": "unsigned", "signature": None, "payload": None,
             "verified_at": None}


def commit(u: RepoUrls, c: Commit, diff: Diff | None = None) -> dict[str, object]:
    """The ``commit`` schema (``GET .../commits/{ref}``), with ``files`` and ``stats``."""
    payload: dict[str, object] = {
        "sha": c.sha,
        "node_id": node_id("Commit", u.repo_id, c.sha),
        "url": f"{u.api}/commits/{c.sha}",
        "html_url": f"{u.web}/commit/{c.sha}",
        "comments_url": f"{u.api}/commits/{c.sha}/comments",
        "commit": {
            "url": f"{u.api}/git/commits/{c.sha}",
            "author": person(c.author),
            "committer": person(c.committer),
            "message": c.message,
            "comment_count": 0,
            "tree": {"sha": c.tree, "url": f"{u.api}/git/trees/{c.tree}"},
            "verification": dict(_UNSIGNED),
        },
        "author": None,  # the GitHub accounts behind the emails: unknown here
        "committer": None,
        "parents": [
            {"sha": p, "url": f"{u.api}/commits/{p}", "html_url": f"{u.web}/commit/{p}"}
            for p in c.parents
        ],
    }
    if diff is not None:
        payload["stats"] = {"total": diff.additions + diff.deletions,
                            "additions": diff.additions, "deletions": diff.deletions}
        payload["files"] = [diff_entry(u, c.sha, f) for f in diff.files]
    return payload


def diff_entry(u: RepoUrls, at: str, f: FileChange) -> dict[str, object]:
    """The ``diff-entry`` schema; ``at`` is the commit the URLs point into."""
    path = quote(f.filename)
    entry: dict[str, object] = {
        "sha": f.sha,
        "filename": f.filename,
        "status": f.status,
        "additions": f.additions,
        "deletions": f.deletions,
        "changes": f.additions + f.deletions,
        "blob_url": f"{u.web}/blob/{at}/{path}",
        "raw_url": f"{u.web}/raw/{at}/{path}",
        "contents_url": f"{u.api}/contents/{path}?ref={at}",
    }
    if f.patch is not None:
        entry["patch"] = f.patch
    if f.previous_filename is not None:
        entry["previous_filename"] = f.previous_filename
    return entry


def git_commit(u: RepoUrls, c: Commit) -> dict[str, object]:
    """The ``git-commit`` schema (``GET .../git/commits/{sha}``)."""
    return {
        "sha": c.sha,
        "node_id": node_id("Commit", u.repo_id, c.sha),
        "url": f"{u.api}/git/commits/{c.sha}",
        "html_url": f"{u.web}/commit/{c.sha}",
        "author": person(c.author),
        "committer": person(c.committer),
        "tree": {"sha": c.tree, "url": f"{u.api}/git/trees/{c.tree}"},
        "message": c.message,
        "parents": [
            {"sha": p, "url": f"{u.api}/git/commits/{p}", "html_url": f"{u.web}/commit/{p}"}
            for p in c.parents
        ],
        "verification": dict(_UNSIGNED),
    }


def git_ref(u: RepoUrls, r: Ref) -> dict[str, object]:
    """The ``git-ref`` schema: ``object`` is a ``commit``, or a ``tag`` when annotated."""
    kind = "tags" if r.target_type == "tag" else "commits"
    return {
        "ref": r.name,
        "node_id": node_id("Ref", u.repo_id, r.name),
        "url": f"{u.api}/git/{quote(r.name)}",
        "object": {"sha": r.target, "type": r.target_type,
                   "url": f"{u.api}/git/{kind}/{r.target}"},
    }


def git_tag(u: RepoUrls, t: TagObject) -> dict[str, object]:
    """The ``git-tag`` schema (``GET .../git/tags/{sha}``)."""
    kind = {"commit": "commits", "tag": "tags", "tree": "trees", "blob": "blobs"}
    return {
        "node_id": node_id("Tag", u.repo_id, t.sha),
        "tag": t.tag,
        "sha": t.sha,
        "url": f"{u.api}/git/tags/{t.sha}",
        "message": t.message,
        "tagger": person(t.tagger),
        "object": {"sha": t.object_sha, "type": t.object_type,
                   "url": f"{u.api}/git/{kind.get(t.object_type, 'commits')}/{t.object_sha}"},
        "verification": dict(_UNSIGNED),
    }


def comparison(u: RepoUrls, spec: str, cmp: Comparison, commits: dict[str, Commit],
               base: str, head: str, diff: Diff) -> dict[str, object]:
    """The ``commit-comparison`` schema; ``files`` is the diff from the merge base to head."""
    quoted = quote(spec, safe="/.")
    return {
        "url": f"{u.api}/compare/{quoted}",
        "html_url": f"{u.web}/compare/{quoted}",
        "permalink_url": f"{u.web}/compare/{base}...{head}",
        "diff_url": f"{u.web}/compare/{quoted}.diff",
        "patch_url": f"{u.web}/compare/{quoted}.patch",
        "base_commit": commit(u, commits[base]),
        "merge_base_commit": commit(u, commits[cmp.merge_base]),
        "status": cmp.status,
        "ahead_by": cmp.ahead_by,
        "behind_by": cmp.behind_by,
        "total_commits": cmp.ahead_by,
        "commits": [commit(u, commits[sha]) for sha in cmp.commits],
        "files": [diff_entry(u, head, f) for f in diff.files],
    }


def branch_item(u: RepoUrls, name: str, sha: str) -> dict[str, object]:
    """The ``short-branch`` schema of ``GET .../branches``."""
    return {"name": name, "commit": {"sha": sha, "url": f"{u.api}/commits/{sha}"},
            "protected": False}


def tag_item(u: RepoUrls, name: str, sha: str) -> dict[str, object]:
    """The ``tag`` schema of ``GET .../tags``."""
    return {"name": name, "commit": {"sha": sha, "url": f"{u.api}/commits/{sha}"},
            "zipball_url": f"{u.api}/zipball/refs/tags/{quote(name)}",
            "tarball_url": f"{u.api}/tarball/refs/tags/{quote(name)}",
            "node_id": node_id("Ref", u.repo_id, f"refs/tags/{name}")}


def tree(u: RepoUrls, sha: str, entries: Sequence[tuple[str, ...]]) -> dict[str, object]:
    """The ``git-tree`` schema; ``entries`` as :meth:`GitView.tree_entries` gives them."""
    items: list[dict[str, object]] = []
    for path, mode, kind, obj, size in entries:
        item: dict[str, object] = {"path": path, "mode": mode, "type": kind, "sha": obj}
        if kind == "blob":
            item["size"] = int(size)
            item["url"] = f"{u.api}/git/blobs/{obj}"
        elif kind == "tree":
            item["url"] = f"{u.api}/git/trees/{obj}"
        items.append(item)
    return {"sha": sha, "url": f"{u.api}/git/trees/{sha}", "tree": items, "truncated": False}


def blob(u: RepoUrls, sha: str, data: bytes) -> dict[str, object]:
    """The ``blob`` schema: content base64-encoded."""
    return {"sha": sha, "node_id": node_id("Blob", u.repo_id, sha), "size": len(data),
            "url": f"{u.api}/git/blobs/{sha}", "encoding": "base64",
            "content": base64.b64encode(data).decode()}


def page_window(total: int, page: int, per_page: int) -> tuple[int, int, int]:
    """(start, stop, last page) of page ``page`` (1-based) of ``total`` items."""
    last = max(1, math.ceil(total / per_page))
    return (page - 1) * per_page, page * per_page, last


def link_header(base: str, page: int, last: int, per_page: int | None) -> str | None:
    """GitHub's ``Link`` header (``prev``, ``next``, ``last``, ``first``) or None on one page."""
    links = []
    if page > 1:
        links.append((min(page - 1, last), "prev"))
    if page < last:
        links += [(page + 1, "next"), (last, "last")]
    if page > 1:
        links.append((1, "first"))
    sep = "&" if "?" in base else "?"
    size = f"per_page={per_page}&" if per_page is not None else ""
    return ", ".join(f'<{base}{sep}{size}page={p}>; rel="{r}"' for p, r in links) or None
