"""Cache integrity: the three checks that a cached tree is still what was verified.

Everything under the cache root can be rewritten by whoever can write the cache, so a
tree is served, and its files read, only after the check that fits the moment. This
module holds the mechanisms; when each runs, and what a process remembers between loads
to skip work, is one module's: :mod:`safehub.store.cache.warm`.

1. **The scan**, on every cache hit (``warm.unchanged``), against the :class:`Survey` taken
   right after the tree was verified. A load compares the *folder scan*
   (:func:`scan_folders`: one ``lstat`` per folder; no entry added, removed, renamed or
   replaced anywhere), because each file is checked as it is opened (3). The operations
   that read files without that check (check, verify, lock, prefetch) compare the *entry
   scan* (:func:`scan_entries`: every entry's stat data). Within one process, a folder
   scan that passed with the kernel watching the folders (inotify, :mod:`.quiet`) is not
   repeated while no change is reported: one ``read`` instead of an ``lstat`` a folder.
2. **The re-hash** (:func:`rehash`): the set of files, every byte, the digest and the tree
   id, against the verdict. ``safehub cache verify`` runs it, and so does a hit the scan
   cannot vouch for (no record, or a scan that differs).
3. **The check on open** (``warm.watch``, ``warm.check_opened``): from a load on, every
   file of the tree opened for reading (the repo's modules as Python imports them, a data
   file read later) must still have a ctime no later than the tree's *verified* time, the
   latest ctime of any entry right after it was verified, and no write permission: any
   write, chmod or replacement since makes the ctime later, and ctime cannot be set back.
   The folders on the way are checked too, or a file could be swapped with the folder
   around it: the tree folder must still be the one that was verified (same device and
   inode), and it and every folder between it and the file must have a ctime no later
   than the verified time. What native code reads directly is not seen here (``safehub
   cache verify`` re-hashes everything). Cost: the audit hook tests an absolute path
   against the watched trees' prefixes and stops there for a file outside every tree (a
   relative path is joined to the working directory, which is looked up again only after
   a ``chdir``).

Every failure is an :class:`~safehub.errors.IntegrityError` that names the file
(:func:`tamper`; on open, a :class:`~safehub.errors.TamperedError`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub._internal.fsutil import rmtree
from safehub.digest import MODE_EXEC, MODE_LINK, FileEntry, git_tree_id, parents
from safehub.errors import IntegrityError

if TYPE_CHECKING:
    from safehub.store.cache.tree import CachedTree

__all__ = ["Survey", "rehash", "scan_entries", "scan_folders", "survey", "tamper", "tree_ident"]


def tamper(path: Path, why: str) -> IntegrityError:
    """The error for a cached file that is not what was verified."""
    return IntegrityError(
        f"cached file {str(path)!r} {why}; it changed after safehub verified it",
        fix=fixes.noted(fixes.clear_cache(path), "nothing was run from it; inspect it, then "),
    )


def _unlisted(root: Path, e: OSError) -> IntegrityError:
    return tamper(root, f"cannot be listed ({e.strerror})")


# -- 1. the scan --------------------------------------------------------------------------

def _folder_line(top: str, st: os.stat_result) -> bytes:
    return b"d %s\0%d %d %d %d\n" % (
        top.encode(), st.st_mode, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@functools.lru_cache(maxsize=16)
def _heads(base: str, folders: tuple[str, ...]) -> tuple[bytes, ...]:
    """Each folder's line up to its stat data (``d PATH\\0``), made once per tree."""
    return tuple(b"d %s\0" % (os.path.join(base, rel) if rel else base).encode()
                 for rel in folders)


def scan_folders(root: Path, folders: Sequence[str] | None = None) -> str:
    """One hash over the folders under ``root``: their names, modes, times and inodes.

    Adding, removing, renaming or replacing any entry changes its folder's mtime and ctime,
    so equal scans mean the tree has the same entries. It costs one ``lstat`` per folder,
    not per file; what a file holds is checked as it is opened (3). Entries are taken in
    directory order, stable for an unchanged folder.

    A tree that cannot be listed (gone, or swapped for a link) is an IntegrityError.

    ``folders``: the folders :func:`survey` found when the tree was verified (relative,
    in its order). Then the folders are not listed at all, only ``lstat``-ed, and the hash
    is the same as long as they are unchanged: any entry added, removed or replaced
    anywhere changes a folder of that list (its parent's), and a listed folder that is
    gone or replaced changes the hash.
    """
    try:
        return _scan_folders(root, folders)
    except OSError as e:
        raise _unlisted(root, e) from e


def _scan_folders(root: Path, folders: Sequence[str] | None) -> str:
    h = hashlib.sha256()
    if folders is not None:
        base = str(root)
        # The tree must be there and be a folder, not a link to one (else an OSError);
        # the folders are looked up relative to it, so its path is walked once.
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            tree_st = os.fstat(fd)
            lines = []
            for rel, head in zip(folders, _heads(base, tuple(folders)), strict=True):
                try:
                    st = os.stat(rel, dir_fd=fd, follow_symlinks=False) if rel else tree_st
                except (FileNotFoundError, NotADirectoryError):
                    lines.append(b"gone " + head[2:-1] + b"\n")
                    continue
                lines.append(head + b"%d %d %d %d\n" % (
                    st.st_mode, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        finally:
            os.close(fd)
        h.update(b"".join(lines))
        return h.hexdigest()
    stack = [str(root)]
    while stack:
        top = stack.pop()
        h.update(_folder_line(top, os.lstat(top)))
        with os.scandir(top) as it:
            stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
    return h.hexdigest()


class Survey(Frozen):
    """What a verified tree looks like on disk, taken in one walk (see :func:`survey`)."""

    scan: str
    """:func:`scan_entries`: every entry's stat data."""
    dirs: str
    """:func:`scan_folders`: every folder's stat data."""
    folders: tuple[str, ...]
    """The folders, relative (``""`` is the tree), in the order :func:`scan_folders` takes
    them."""
    verified_ns: int
    """The latest ctime (ns) of any entry, taken right after verification: ctime cannot be
    set back, so a file opened later with a ctime at or before it is the file verified."""
    ident: tuple[int, int] | None = None
    """The tree folder's ``(st_dev, st_ino)``: what the check on open holds it to (None in
    a survey read back from the user's records, which do not keep it)."""


def survey(root: Path) -> Survey:
    """What ``root`` looks like right after it was verified, recorded for its later scans:
    :func:`scan_entries`, :func:`scan_folders`, the folder list and the verified time, in
    one walk (one ``lstat`` per entry)."""
    try:
        return _survey(root)
    except OSError as e:
        raise _unlisted(root, e) from e


def _survey(root: Path) -> Survey:
    scan, dirs = hashlib.sha256(), hashlib.sha256()
    base = str(root)
    folders: list[str] = []
    latest = 0
    stack = [base]
    ident = (0, 0)
    while stack:
        top = stack.pop()
        st = os.lstat(top)
        if top is base:
            ident = (st.st_dev, st.st_ino)
        dirs.update(_folder_line(top, st))
        latest = max(latest, st.st_ctime_ns)
        folders.append(top[len(base) + 1:])  # "" for the tree itself
        with os.scandir(top) as it:
            for entry in it:
                name = entry.name.encode()
                if entry.is_dir(follow_symlinks=False):
                    scan.update(b"d %s\0" % name)
                    stack.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
                latest = max(latest, st.st_ctime_ns)
                scan.update(b"f %s\0%d %d %d %d %d\n" % (
                    name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return Survey(scan.hexdigest(), dirs.hexdigest(), tuple(folders), latest, ident)


def tree_ident(root: Path) -> tuple[int, int]:
    """The tree folder's ``(st_dev, st_ino)``, taken before its scan: a folder swapped after
    this is refused as the repo's code reads it; one swapped before makes the scan differ."""
    try:
        st = os.lstat(root)
    except OSError as e:
        raise _unlisted(root, e) from e
    return (st.st_dev, st.st_ino)


def scan_entries(root: Path) -> str:
    """One hash over every entry under ``root``: name, type, mode, size, times, inode.

    ctime cannot be set by a user: any write, chmod or replacement after install changes
    it, and so does any added, removed or renamed entry. Equal scans mean nothing was
    touched. Entries are taken in directory order, which is stable for an unchanged
    folder; if it ever differs, the re-hash runs and records the new scan.
    """
    return survey(root).scan


# -- 2. the re-hash -----------------------------------------------------------------------

def rehash(tree: CachedTree) -> None:
    """The re-hash: the set of files, every byte re-hashed, digest and tree id.

    ``__pycache__`` folders holding only ``.pyc`` files are removed first: Python
    writes them into read-only folders when run as root (for modules imported after a
    load returns), and they are never needed. Anything else extra is an error.
    """
    v = tree.verdict()
    expected = {f.path for f in v.files}
    _remove_bytecode(tree.path, expected)
    found: dict[str, os.stat_result] = {}
    for dirpath, dirnames, filenames in os.walk(tree.path):
        rel = os.path.relpath(dirpath, tree.path)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        for name in dirnames:
            if os.path.islink(os.path.join(dirpath, name)):
                filenames.append(name)
            else:
                found[prefix + name + "/"] = os.lstat(os.path.join(dirpath, name))
        for name in filenames:
            found[prefix + name] = os.lstat(os.path.join(dirpath, name))
    dirs = {p for p in found if p.endswith("/")}
    for rel in sorted(found):
        if rel not in dirs and rel not in expected:
            raise tamper(tree.path / rel, "is not part of the verified tree")
    allowed = {p + "/" for f in v.files for p in parents(f.path)}
    allowed |= {p + "/" for d in v.empty_dirs for p in (d, *parents(d))}
    if dirs - allowed:
        raise tamper(tree.path / min(dirs - allowed), "is a folder that was not in the tree")
    for f in v.files:
        st = found.get(f.path)
        if st is None:
            raise tamper(tree.path / f.path, "is missing")
        is_link = stat.S_ISLNK(st.st_mode)
        if is_link != (f.mode == MODE_LINK) or not (is_link or stat.S_ISREG(st.st_mode)):
            raise tamper(tree.path / f.path, "changed type")
        _check_bytes(tree.path / f.path, f, st)
    if v.level == "tree" and git_tree_id(v.files) != v.tree:
        raise tamper(tree.entry_dir / "verdict.json", "does not match its git tree id")


def _check_bytes(p: Path, f: FileEntry, st: os.stat_result) -> None:
    if f.mode == MODE_LINK:
        if hashlib.sha256(os.readlink(p).encode()).hexdigest() != f.sha256:
            raise tamper(p, "points somewhere else")
        return
    h = hashlib.sha256()
    try:
        with open(p, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError as e:
        raise tamper(p, f"cannot be read ({e.strerror})") from e
    if h.hexdigest() != f.sha256:
        raise tamper(p, "has different content")
    if (f.mode == MODE_EXEC) != bool(st.st_mode & 0o100):
        raise tamper(p, "changed its executable bit")


def _remove_bytecode(tree: Path, committed: set[str]) -> None:
    """Remove bytecode Python (or someone) wrote into the tree; bytecode the commit holds
    is the tree's, kept (and never run: the runtime guard refuses to read it)."""
    for dirpath, dirnames, _ in os.walk(tree):
        if "__pycache__" not in dirnames:
            continue
        cache = Path(dirpath) / "__pycache__"
        if cache.is_symlink():
            continue
        rel = cache.relative_to(tree).as_posix() + "/"
        names = os.listdir(cache)
        if any(rel + n in committed for n in names):
            continue  # the commit's own folder: anything extra in it is reported as such
        if all(n.endswith(".pyc") and (cache / n).is_file() and not (cache / n).is_symlink()
               for n in names):
            with contextlib.suppress(OSError):
                rmtree(cache)
