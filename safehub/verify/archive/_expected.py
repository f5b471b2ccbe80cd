"""What ``git archive`` makes of a commit's tree: which files, which folders (archive.c).

git walks the tree in order. A folder is asked about as ``folder/``; if ``export-ignore``
is set for it, nothing below it is archived. Otherwise it is written as an entry just
before the first non-folder entry below it, so a folder with nothing but (ignored) folders
below it, or an empty tree, is not written at all, but a folder whose files are all
``export-ignore``\\ d is written, empty. A submodule (gitlink) is asked about as
``path/``, and written as an empty folder. A file or a symlink is written unless
``export-ignore`` is set for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, Mutable, field
from safehub.digest import EMPTY_TREE, MODE_GITLINK, parents, tree_id
from safehub.errors import IntegrityError
from safehub.verify.archive._types import Difference, Reason
from safehub.verify.gitattributes import Assignment, Attributes

__all__ = ["Expected", "TreeEntry", "expected_archive", "parse_listing"]

_SHA = re.compile(r"[0-9a-f]{40}")
_MODES = {"blob": ("100644", "100755", "120000"), "tree": ("040000", "40000"),
          "commit": (MODE_GITLINK,)}


class TreeEntry(Frozen):
    """One entry of the API's recursive listing of the commit's tree."""

    path: str
    mode: str
    kind: str  # "blob", "tree" or "commit"
    sha: str


def _listing_error(why: str) -> IntegrityError:
    return IntegrityError(
        f"the API's listing of the commit's tree cannot be used: {why}",
        fix=fixes.say("retry later; if it persists, the API (or what stands for it) is broken"),
    )


def parse_listing(listing: Iterable[Mapping[str, object]], tree: str) -> dict[str, TreeEntry]:
    """The entries of ``listing``, which must describe exactly the tree ``tree``."""
    entries: dict[str, TreeEntry] = {}
    for item in listing:
        path, mode, kind, sha = (item.get(k) for k in ("path", "mode", "type", "sha"))
        if not (isinstance(path, str) and isinstance(mode, str) and isinstance(kind, str)
                and isinstance(sha, str)):
            raise _listing_error(f"an entry of the wrong shape ({item!r:.200})")
        if (kind not in _MODES or mode not in _MODES[kind] or not _SHA.fullmatch(sha)
                or not path or "" in path.split("/")):
            raise _listing_error(f"an entry of the wrong shape ({item!r:.200})")
        if path in entries:
            raise _listing_error(f"{path!r} is listed twice")
        entries[path] = TreeEntry(path, mode, kind, sha)
    leaves = [(e.path, e.mode, e.sha) for e in entries.values() if e.kind != "tree"]
    empty = [e.path for e in entries.values() if e.kind == "tree" and e.sha == EMPTY_TREE]
    if tree_id(leaves, empty) != tree:
        raise _listing_error(f"its entries do not add up to the tree {tree} (truncated?)")
    return entries


class Expected(Mutable):
    """The archive git makes: its files, its empty folders, and what it leaves out."""

    files: dict[str, TreeEntry] = field(default_factory=dict)
    leaves: dict[str, str] = field(default_factory=dict)
    """Empty folders git writes, and why."""
    omitted: dict[str, Assignment] = field(default_factory=dict)
    """Files (blobs) left out, and the export-ignore that left them out."""
    differences: list[Difference] = field(default_factory=list)


def _ignored(attrs: Attributes, path: str, isdir: bool) -> Assignment | None:
    found = attrs.lookup(path, isdir=isdir).get("export-ignore")
    return found if found is not None and found.value is True else None


def expected_archive(entries: Mapping[str, TreeEntry], attrs: Attributes) -> Expected:
    """Walk the tree as ``git archive`` does."""
    children: dict[str, list[TreeEntry]] = {}
    for e in entries.values():
        children.setdefault(e.path.rpartition("/")[0], []).append(e)
    out = Expected()
    written: set[str] = set()
    gitlinks: list[str] = []
    pending: list[tuple[str, Assignment | None]] = [("", None)]
    while pending:
        folder, ignored_by = pending.pop()
        for e in children.get(folder, ()):
            isdir = e.kind != "blob"
            rule = ignored_by or _ignored(attrs, e.path, isdir)
            if rule is not None and ignored_by is None:
                label = f"{e.path}/" if isdir else e.path
                out.differences.append(Difference(label, Reason.EXPORT_IGNORE, rule.where()))
            if e.kind == "tree":
                pending.append((e.path, rule))
                continue
            if ignored_by is None:
                _add_folders(written, folder)
            if rule is not None:
                if e.kind == "blob":
                    out.omitted[e.path] = rule
            elif e.kind == "blob":
                out.files[e.path] = e
            else:
                gitlinks.append(e.path)
                out.leaves[e.path] = f"the submodule at {e.sha[:12]}"
                out.differences.append(Difference(e.path + "/", Reason.SUBMODULE,
                                                  detail=f"commit {e.sha[:12]}"))
    full: set[str] = set()
    for p in (*out.files, *gitlinks):
        _add_folders(full, p.rpartition("/")[0])
    for d in sorted(written - full):
        out.leaves[d] = "a folder whose content is all export-ignore'd"
    # A tree with nothing but trees below it leaves no trace in an archive.
    filled: set[str] = set()
    for e in entries.values():
        if e.kind != "tree":
            _add_folders(filled, e.path.rpartition("/")[0])
    ignored = {d.path.rstrip("/") for d in out.differences if d.reason is Reason.EXPORT_IGNORE}
    tops = filled | {""}
    for e in entries.values():
        if (e.kind == "tree" and e.path not in filled and e.path.rpartition("/")[0] in tops
                and not any(p in ignored for p in (e.path, *parents(e.path)))):
            out.differences.append(Difference(e.path + "/", Reason.EMPTY_TREE))
    return out


def _add_folders(found: set[str], folder: str) -> None:
    """Add ``folder`` and the folders above it (stopping at one already there)."""
    while folder and folder not in found:
        found.add(folder)
        folder = folder.rpartition("/")[0]
