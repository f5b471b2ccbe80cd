"""A verified tree in the cache: the cheap scan and the full re-hash."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from safehub._internal import fixes
from safehub._internal.fsutil import read_json, rmtree, write_json
from safehub.digest import MODE_EXEC, MODE_LINK, FileEntry, content_digest, git_tree_id, parents
from safehub.errors import IntegrityError
from safehub.store.cache.records import FORMAT, Verdict

__all__ = ["CachedTree", "Survey", "dir_scan", "scan_digest", "survey", "tamper"]


def _folder_line(top: str, st: os.stat_result) -> bytes:
    return b"d %s\0%d %d %d %d\n" % (
        top.encode(), st.st_mode, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@functools.lru_cache(maxsize=16)
def _heads(base: str, folders: tuple[str, ...]) -> tuple[bytes, ...]:
    """Each folder's line up to its stat data (``d PATH\\0``), made once per tree."""
    return tuple(b"d %s\0" % (os.path.join(base, rel) if rel else base).encode()
                 for rel in folders)


def dir_scan(root: Path, folders: Sequence[str] | None = None) -> str:
    """One hash over the folders under ``root``: their names, modes, times and inodes.

    Adding, removing, renaming or replacing any entry changes its folder's mtime and ctime,
    so equal scans mean the tree has the same entries. It costs one ``lstat`` per folder,
    not per file; what a file holds is checked as it is opened (see
    the sealed time). Entries are taken in directory order, stable for an unchanged
    folder.

    ``folders``: the folders :func:`survey` found when the tree was verified (relative,
    in its order). Then the folders are not listed at all, only ``lstat``-ed, and the hash
    is the same as long as they are unchanged: any entry added, removed or replaced
    anywhere changes a folder of that list (its parent's), and a listed folder that is
    gone or replaced changes the hash.
    """
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


@dataclass(frozen=True)
class Survey:
    """What a verified tree looks like on disk, taken in one walk (see :func:`survey`)."""

    scan: str
    """:func:`scan_digest`: every entry's stat data."""
    dirs: str
    """:func:`dir_scan`: every folder's stat data."""
    folders: tuple[str, ...]
    """The folders, relative (``""`` is the tree), in the order :func:`dir_scan` takes them."""
    sealed: int
    """The latest ctime (ns) of any entry, taken right after verification: ctime cannot be
    set back, so a file opened later with a ctime at or before it is the file verified."""
    ident: tuple[int, int]
    """The tree folder's ``(st_dev, st_ino)``: what the runtime check holds it to."""


def survey(root: Path) -> Survey:
    """:func:`scan_digest`, :func:`dir_scan`, its folder list and the sealed time of
    ``root``, in one walk (one ``lstat`` per entry)."""
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


def scan_digest(root: Path) -> str:
    """One hash over every entry under ``root``: name, type, mode, size, times, inode.

    ctime cannot be set by a user: any write, chmod or replacement after install changes
    it, and so does any added, removed or renamed entry. Equal scans mean nothing was
    touched. Entries are taken in directory order, which is stable for an unchanged
    folder; if it ever differs, the full check runs and records the new scan.
    """
    return survey(root).scan


def tamper(path: Path, why: str) -> IntegrityError:
    return IntegrityError(
        f"cached file {str(path)!r} {why}; it changed after safehub verified it",
        hint="nothing was run from it; inspect it, then " + fixes.clear_cache(path),
    )


@dataclass(frozen=True)
class CachedTree:
    """A verified tree in the cache, as its small ``entry.json`` describes it.

    Whether a hit may be served without re-hashing is decided by the caller, against a
    record *it* trusts (see :meth:`safehub.hub.Hub` and docs/digest.md): anything stored in
    the cache folder can be rewritten by whoever can write the cache.
    """

    path: Path
    commit: str
    digest: str
    tree: str
    level: str
    sealed: int | None = None
    """The latest ctime of any entry right after this user verified it (set by the fetcher)."""
    ident: tuple[int, int] | None = None
    """The tree folder's ``(st_dev, st_ino)`` as the fetcher checked it (set with ``sealed``)."""

    @property
    def entry_dir(self) -> Path:
        return self.path.parent

    def verdict(self) -> Verdict:
        """The full verdict; it must add up to the digest this entry is known by."""
        vfile = self.entry_dir / "verdict.json"
        try:
            verdict = Verdict.from_json(read_json(vfile))
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise tamper(vfile, f"cannot be read ({e})") from e
        if (verdict.commit, verdict.digest, verdict.tree) != (
                self.commit, self.digest, self.tree) or content_digest(
            verdict.files
        ) != verdict.digest:
            raise tamper(vfile, "does not add up to the digest it was installed with")
        return verdict

    def scan(self) -> str:
        """:func:`scan_digest` of the tree (an IntegrityError if it cannot be listed)."""
        try:
            return scan_digest(self.path)
        except OSError as e:
            raise tamper(self.path, f"cannot be listed ({e.strerror})") from e

    def verify(self) -> None:
        """Full check: the set of files, every byte re-hashed, digest and tree id.

        ``__pycache__`` folders holding only ``.pyc`` files are removed first: Python
        writes them into read-only folders when run as root (for modules imported after a
        load returns), and they are never needed. Anything else extra is an error.
        """
        v = self.verdict()
        expected = {f.path for f in v.files}
        _remove_bytecode(self.path, expected)
        found: dict[str, os.stat_result] = {}
        for dirpath, dirnames, filenames in os.walk(self.path):
            rel = os.path.relpath(dirpath, self.path)
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
                raise tamper(self.path / rel, "is not part of the verified tree")
        allowed = {p + "/" for f in v.files for p in parents(f.path)}
        allowed |= {p + "/" for d in v.empty_dirs for p in (d, *parents(d))}
        if dirs - allowed:
            raise tamper(self.path / min(dirs - allowed), "is a folder that was not in the tree")
        for f in v.files:
            st = found.get(f.path)
            if st is None:
                raise tamper(self.path / f.path, "is missing")
            is_link = stat.S_ISLNK(st.st_mode)
            if is_link != (f.mode == MODE_LINK) or not (is_link or stat.S_ISREG(st.st_mode)):
                raise tamper(self.path / f.path, "changed type")
            self._check_bytes(f, st)
        if v.level == "tree" and git_tree_id(v.files) != v.tree:
            raise tamper(self.entry_dir / "verdict.json", "does not match its git tree id")

    def _check_bytes(self, f: FileEntry, st: os.stat_result) -> None:
        p = self.path / f.path
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


def write_entry(entry: CachedTree) -> None:
    write_json(entry.entry_dir / "entry.json", {
        "format": FORMAT, "commit": entry.commit, "digest": entry.digest,
        "tree": entry.tree, "level": entry.level,
    }, mode=0o444)


