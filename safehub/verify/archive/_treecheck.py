"""Tying extracted files to the commit's tree: exactly, or path by path as git archives it
(:mod:`safehub.verify.archive._perfile`, imported only then)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from safehub.verify.archive._extract import Extracted
from safehub.verify.archive._types import TreeCheck, refuse

if TYPE_CHECKING:  # the attribute modules are imported only by the per-file check
    from safehub.verify.gitattributes.subst import CommitFacts

__all__ = ["check_tree"]


def check_tree(
    ext: Extracted,
    tree_id: str,
    listing: Iterable[Mapping[str, object]] | None,
    *,
    allow_fallback: bool,
    fetch_blob: Callable[[str], bytes] | None = None,
    fetch_commit: Callable[[], CommitFacts] | None = None,
) -> TreeCheck:
    """Tie the extracted files to the commit's tree, or raise :class:`IntegrityError`.

    The exact check compares git tree ids (and then allows no empty folder: the commit
    has none). When they differ, ``listing`` (the API's recursive listing of the commit's
    tree, fetched by the caller only then) permits the per-file check: the listing must
    add up to ``tree_id``; the archive must then be, path by path, what ``git archive``
    makes of that tree under the commit's own ``.gitattributes`` (see docs/digest.md):
    the same files with the same modes, the same empty folders (submodules), nothing
    else; each file byte for byte its blob, or the blob converted as its attributes ask
    (undone exactly; ``export-subst`` expansions are held to what git can write for the
    commit, :mod:`safehub.verify.gitattributes.subst`, and stay "unverified"). Where the only
    differences are submodules and empty trees, the files are exact and no permission is
    needed; otherwise ``allow_fallback`` must be true. ``fetch_blob`` returns a blob's
    committed bytes (for ``.gitattributes`` files the archive lacks, LFS pointers, and
    files whose conversion cannot be undone from the archive alone); ``fetch_commit`` the
    commit's details (parents, people, dates, message) that bound some placeholders; without
    it only the commit id (``ext.commit``) and ``tree_id`` are known, and a placeholder of
    the author, committer or message is refused.
    """
    if ext.tree_id == tree_id:
        if ext.empty_dirs:
            raise refuse(f"the archive has an empty folder {ext.empty_dirs[0]!r}, which the "
                         "commit does not have (its files match the commit's tree exactly)")
        return TreeCheck("tree")
    mismatch = (f"the archive's files do not match the commit's tree (git tree "
                f"{ext.tree_id}, expected {tree_id})")
    if listing is None:
        raise refuse(mismatch)
    from safehub.verify.archive import _perfile

    return _perfile.check(ext, tree_id, listing, mismatch=mismatch,
                          allow_fallback=allow_fallback, fetch_blob=fetch_blob,
                          fetch_commit=fetch_commit)
