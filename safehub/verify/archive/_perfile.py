"""The per-file check: the extracted files, path by path, as ``git archive`` writes the
commit's tree under its own ``.gitattributes`` (:func:`check`). Imported only when the git
tree ids differ: an exact archive needs none of it (nor the attribute modules)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from safehub._internal import fixes
from safehub.digest import MODE_LINK, FileEntry, blob_id
from safehub.errors import IntegrityError
from safehub.verify.archive._expected import Expected, TreeEntry, expected_archive, parse_listing
from safehub.verify.archive._extract import Extracted
from safehub.verify.archive._types import Difference, Reason, TreeCheck, refuse
from safehub.verify.gitattributes import Attributes
from safehub.verify.gitattributes.export import Export, lfs_pointer
from safehub.verify.gitattributes.subst import CommitFacts, Template, Unbounded

__all__ = ["check"]

_KINDS = {"tree": "a folder", "commit": "a submodule", "blob": "a file"}


class _Blobs:
    """Committed blobs, fetched once each and checked against their ids."""

    def __init__(self, fetch: Callable[[str], bytes] | None) -> None:
        self._fetch = fetch
        self._cache: dict[str, bytes] = {}

    def get(self, sha: str, why: str) -> bytes:
        if sha not in self._cache:
            if self._fetch is None:
                raise refuse(f"{why}, which needs the committed blob {sha}, and no way to "
                             "fetch it was given")
            data = self._fetch(sha)
            if blob_id(data) != sha:
                raise IntegrityError(f"the API sent other bytes for blob {sha}",
                                     fix=fixes.say("retry later; the API or a proxy is broken"))
            self._cache[sha] = data
        return self._cache[sha]


class _Commit:
    """What is known of the archived commit: its id and tree, and its details from the API
    (fetched once, only for a placeholder they bound)."""

    def __init__(self, sha: str, tree: str, fetch: Callable[[], CommitFacts] | None) -> None:
        self._fetch = fetch
        self._facts = CommitFacts(sha, tree)
        self._fetched = fetch is None

    def facts(self, template: Template) -> CommitFacts:
        if not self._fetched and template.wants_commit:
            assert self._fetch is not None
            facts = self._fetch()
            if (facts.sha, facts.tree) != (self._facts.sha, self._facts.tree):
                raise IntegrityError(f"the API described another commit than {self._facts.sha}",
                                     fix=fixes.say("retry later; the API or a proxy is broken"))
            self._facts, self._fetched = facts, True
        return self._facts


def _read(root: Path, f: FileEntry) -> bytes:
    if f.mode == MODE_LINK:
        return os.readlink(root / f.path).encode()
    return (root / f.path).read_bytes()


def _attribute_files(ext: Extracted, entries: Mapping[str, TreeEntry],
                     blobs: _Blobs) -> dict[str, bytes]:
    """Every ``.gitattributes`` blob of the commit (from the archive where it is intact)."""
    ours = {f.path: f for f in ext.files}
    found = {}
    for e in entries.values():
        if e.kind != "blob" or e.path.rpartition("/")[2] != ".gitattributes":
            continue
        mine = ours.get(e.path)
        if mine is not None and mine.blob == e.sha:
            found[e.path] = _read(ext.root, mine)
        else:
            found[e.path] = blobs.get(e.sha, f"the archive lacks {e.path!r} as committed")
    return found


def _compare_paths(ext: Extracted, entries: Mapping[str, TreeEntry], want: Expected) -> None:
    for f in ext.files:
        e = want.files.get(f.path)
        if e is None:
            if f.path in want.omitted:
                raise refuse(f"the archive has {f.path!r}, but `git archive` leaves it out "
                             f"(export-ignore, by {want.omitted[f.path].where()})")
            listed = entries.get(f.path)
            where = f" (it is {_KINDS[listed.kind]} there)" if listed is not None else ""
            raise refuse(f"the archive has {f.path!r}, which is not a file of the commit's "
                         f"tree{where}")
        if e.mode != f.mode:
            raise refuse(f"{f.path!r} has mode {f.mode} in the archive but {e.mode} in "
                         "the commit")
    have = {f.path for f in ext.files}
    for path in want.files:
        if path not in have:
            raise refuse(f"the archive lacks {path!r}, and no export-ignore rule of the "
                         "commit covers it")
    for d in ext.empty_dirs:
        if d not in want.leaves:
            listed = entries.get(d)
            why = ("an empty tree, for which `git archive` writes nothing"
                   if listed is not None and listed.kind == "tree" else
                   "export-ignore'd" if listed is not None else "not in the commit's tree")
            raise refuse(f"the archive has an empty folder {d!r}, which the commit does not "
                         f"explain ({why})")
    for d, why in want.leaves.items():
        if d not in ext.empty_dirs:
            raise refuse(f"the archive lacks the empty folder {d!r} that `git archive` "
                         f"writes for {why}")


def _explain(root: Path, f: FileEntry, sha: str, attrs: Attributes, blobs: _Blobs,
             commit: _Commit) -> list[Difference]:
    """The differences that turn the committed blob ``sha`` into the file ``f``, or refuse."""
    path = f.path
    export = Export.of(attrs.lookup(path))
    if not export.changes_content:
        raise refuse(f"{path!r} differs from the commit's blob {sha} and no .gitattributes "
                     "rule of the commit explains it (none that changes bytes in `git "
                     "archive` applies to it)")
    if export.lfs is not None:
        pointer = lfs_pointer(blobs.get(sha, f"{path!r} is an LFS file"))
        if pointer is not None and (pointer.oid, pointer.size) == (f.sha256, f.size):
            return [Difference(path, Reason.LFS, export.lfs.where(),
                               f"the LFS object {pointer.oid[:12]}, {pointer.size:,} bytes")]
    data = _read(root, f)
    blob = next(export.blob_candidates(data, sha), None)
    if blob is None:
        blob = blobs.get(sha, f"{path!r} differs from its blob")
    steps = export.apply(blob, sha)
    if steps is None:
        assert export.encoding is not None
        raise refuse(f"{path!r} differs from the commit's blob {sha}, and safehub cannot "
                     f"reproduce working-tree-encoding={export.encoding.value} (by "
                     f"{export.encoding.where()})")
    converted, changes = steps
    found = [Difference(path, Reason(reason), rule.where()) for reason, rule in changes]
    if export.subst is not None:
        template = Template.of(converted)
        try:
            filled = template.match(data, commit.facts(template))
        except Unbounded as e:
            raise refuse(f"{path!r} differs from the commit's blob {sha} in its export-subst "
                         f"placeholders (by {export.subst.where()}): {e}") from None
        if filled:
            shown = ", ".join(f"{fmt} -> {text[:60].decode(errors='replace')!r}"
                              for fmt, text in filled[:3])
            return [*found, Difference(path, Reason.EXPORT_SUBST, export.subst.where(),
                                       shown, verified=False)]
        if filled == []:
            return found
    elif converted == data:
        return found
    elif export.encoding is not None:
        before = export.apply(blob, sha, encode=False)
        if before is not None and export.decodes_to(data, before[0]):
            return [*(d for d in found if d.reason is not Reason.ENCODING),
                    Difference(path, Reason.ENCODING, export.encoding.where(),
                               "decodes to the committed text")]
    why = ("; ".join(f"{d.reason} by {d.rule}" for d in found) if found
           else "its attributes leave it unchanged")
    raise refuse(f"{path!r} differs from the commit's blob {sha}: `git archive` would write "
                 f"other bytes ({why}), and no .gitattributes rule of the commit explains it")


def _check_files(ext: Extracted, want: Expected, attrs: Attributes, blobs: _Blobs,
                 commit: _Commit) -> tuple[list[Difference], list[str]]:
    found: list[Difference] = []
    unverified: list[str] = []
    for f in ext.files:
        sha = want.files[f.path].sha
        if f.blob == sha:
            continue
        if f.mode == MODE_LINK:
            raise refuse(f"the symlink {f.path!r} points elsewhere than the commit's "
                         f"(blob {sha}); git never converts links")
        diffs = _explain(ext.root, f, sha, attrs, blobs, commit)
        found += diffs
        if any(not d.verified for d in diffs):
            unverified.append(f.path)
    return found, unverified


def _per_file(ext: Extracted, entries: Mapping[str, TreeEntry], attrs: Attributes,
              blobs: _Blobs, commit: _Commit) -> TreeCheck:
    want = expected_archive(entries, attrs)
    _compare_paths(ext, entries, want)
    content, unverified = _check_files(ext, want, attrs, blobs, commit)
    differences = sorted([*want.differences, *content], key=lambda d: d.path.encode())
    return TreeCheck("per-file", tuple(sorted(unverified)), tuple(sorted(want.omitted)),
                     tuple(differences))


def _legacy(ext: Extracted, entries: Mapping[str, TreeEntry], files: Mapping[str, bytes],
            blobs: _Blobs, commit: _Commit) -> TreeCheck | None:
    try:
        return _per_file(ext, entries, Attributes(files, legacy=True), blobs, commit)
    except IntegrityError:
        return None


def check(ext: Extracted, tree_id: str, listing: Iterable[Mapping[str, object]], *,
          mismatch: str, allow_fallback: bool, fetch_blob: Callable[[str], bytes] | None,
          fetch_commit: Callable[[], CommitFacts] | None) -> TreeCheck:
    """The per-file check of :func:`safehub.verify.archive.check_tree` (its docstring),
    once the tree ids differ (``mismatch`` says how) and the API's ``listing`` was given."""
    entries = parse_listing(listing, tree_id)
    blobs = _Blobs(fetch_blob)
    commit = _Commit(ext.commit, tree_id, fetch_commit)
    files = _attribute_files(ext, entries, blobs)
    attrs = Attributes(files)
    try:
        found = _per_file(ext, entries, attrs, blobs, commit)
    except IntegrityError:
        # A pattern that git before 2.52 read otherwise: was the archive made by one?
        legacy = _legacy(ext, entries, files, blobs, commit) if attrs.version_sensitive else None
        if legacy is None:
            raise
        found = legacy
    if not allow_fallback and any(d.from_attributes for d in found.differences):
        raise IntegrityError(
            f"{mismatch}; the per-file fallback for repos whose .gitattributes rewrites "
            "exports is forbidden by policy. It differs in:\n" + found.describe(),
            fix=fixes.say("ask the publisher to drop export-ignore/export-subst rules, or allow "
                          "the fallback (tree_fallback = true)"),
        )
    return found
