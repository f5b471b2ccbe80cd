"""Writing a checked archive: one pass that inflates, hashes and writes each file."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, replace
from safehub.digest import (
    MODE_LINK,
    FileEntry,
    content_digest,
    git_tree_id,
    parents,
)
from safehub.errors import CacheError, IntegrityError
from safehub.verify.archive._plan import Plan, fail, plan
from safehub.verify.archive._stream import decoded
from safehub.verify.archive._zipfile import read_central, read_end

if TYPE_CHECKING:  # only its fields are read: no import of the settings layer
    from safehub.limits import Limits

__all__ = ["Extracted", "drop_empty_dirs", "extract"]

_T = TypeVar("_T")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Extracted(Frozen):
    """What :func:`extract` wrote: the files (sorted by path) and their hashes.

    ``empty_dirs`` are the folders with nothing at all below them (``git archive`` writes
    one for each submodule, and for a folder whose files are all ``export-ignore``\\ d);
    :func:`~safehub.verify.archive.check_tree` accepts only those the commit explains.
    """

    root: Path
    files: tuple[FileEntry, ...]
    empty_dirs: tuple[str, ...]
    tree_id: str
    digest: str
    commit: str = ""


class _Writer:
    """Creates the tree below one open folder through folder descriptors: no path is
    resolved through anything but folders this writer made, so no link is followed."""

    def __init__(self, root_fd: int) -> None:
        self._open: list[tuple[tuple[str, ...], int]] = [((), root_fd)]

    def folder(self, parts: tuple[str, ...]) -> int:
        """The descriptor of the folder ``parts`` (made if needed; entries come sorted)."""
        while parts[:len(self._open[-1][0])] != self._open[-1][0]:
            self._close_top()
        done, fd = self._open[-1]
        for name in parts[len(done):]:
            os.mkdir(name, 0o700, dir_fd=fd)
            fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            done = (*done, name)
            self._open.append((done, fd))
        return fd

    def _close_top(self) -> None:
        _, fd = self._open.pop()
        os.fchmod(fd, 0o555)
        os.close(fd)

    def close(self) -> None:
        while len(self._open) > 1:
            self._close_top()


#: The fix for an archive that could not be read: fetch it again.
_RETRY = fixes.noted(fixes.call("force_reload", "True"), "retry with ")

def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write(f: BinaryIO, zip_path: Path, checked: Plan, root_fd: int,
           dest: Path) -> list[FileEntry]:
    """Create the tree, in path order; file bytes come decoded and hashed (one pass)."""
    items, links = checked.items, checked.links
    ordered = sorted(items, key=lambda i: i.path.split("/"))
    pieces = decoded(f, zip_path, [i for i in ordered if i.kind in ("file", "exec")])
    writer = _Writer(root_fd)
    files: list[FileEntry] = []
    item = None
    try:
        for item in ordered:
            parts = tuple(item.path.split("/"))
            if item.kind == "dir":
                writer.folder(parts)
                continue
            parent = writer.folder(parts[:-1])
            if item.kind == "link":
                os.symlink(links[item.path], parts[-1], dir_fd=parent)
                files.append(FileEntry.from_bytes(item.path, MODE_LINK,
                                                  links[item.path].encode()))
                continue
            fd = os.open(parts[-1], _NEW_FILE, 0o600, dir_fd=parent)
            try:
                for piece in pieces:
                    _write_all(fd, piece.data)
                    if piece.entry is not None:
                        files.append(piece.entry)
                        break
                os.fchmod(fd, 0o555 if item.kind == "exec" else 0o444)
            finally:
                os.close(fd)
    except OSError as e:
        what = item.path if item is not None else "the tree"
        if e.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.EEXIST, errno.ENOTDIR,
                       errno.EILSEQ):
            raise fail(what, f"cannot be written as named ({os.strerror(e.errno or 0)})") from e
        raise CacheError(f"cannot write {what!r} below {dest}: {e}",
                         fix=fixes.say("check the free space and permissions "
                                       "of the cache folder")) from e
    finally:
        writer.close()
        pieces.close()
    return files


def _guard(what: Path, action: Callable[[], _T]) -> _T:
    """Run a filesystem action on the staging folder; its errors become CacheErrors."""
    try:
        return action()
    except OSError as e:
        raise CacheError(f"cannot write the staging folder {what}: {e}",
                         fix=fixes.say("check the free space and permissions "
                                       "of the cache folder")) from e


def extract(zip_path: Path, dest: Path, *, commit: str, limits: Limits) -> Extracted:
    """Check ``zip_path`` fully, then write its files read-only into ``dest`` (created;
    its parent must exist). Nothing is written outside ``dest``.

    ``commit`` is the 40-hex commit the archive must name in its zip comment. Every
    failure is a :class:`~safehub.errors.SafehubError`: an :class:`IntegrityError` for
    what the archive holds, a :class:`CacheError` if ``dest`` cannot be written.
    """
    try:
        f = open(zip_path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise IntegrityError(f"the download is not a valid zip archive ({e})",
                             fix=_RETRY) from e
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            end = read_end(f, size)
            comment = end.comment.decode("ascii", "replace").strip()
            if comment != commit:
                raise IntegrityError(
                    f"the archive says it is commit {comment or '(nothing)'!r}, but {commit} "
                    "was asked for",
                    fix=fixes.say("the server (or a mirror) answered with another commit's "
                                  "archive; do not load it"),
                )
            if end.entries > limits.max_files:
                raise IntegrityError(
                    f"the archive has {end.entries:,} entries, more than the limit of "
                    f"{limits.max_files:,}",
                    fix=fixes.say("if the repo really is that large, raise SAFEHUB_MAX_FILES"),
                )
            checked = plan(f, read_central(f, end), limits, os.fspath(dest))
        except OSError as e:
            raise IntegrityError(f"cannot read the downloaded archive: {e}",
                                 fix=_RETRY) from e
        _guard(dest, dest.mkdir)
        root_fd = _guard(dest, lambda: os.open(dest, _DIR_FLAGS))
        try:
            files = _write(f, zip_path, checked, root_fd, dest)
            _guard(dest, lambda: os.fchmod(root_fd, 0o555))
        finally:
            os.close(root_fd)
    files.sort(key=lambda e: e.path.encode())
    below = {p for i in checked.items for p in parents(i.path)}
    empty = tuple(sorted(i.path for i in checked.items if i.kind == "dir" and i.path not in below))
    return Extracted(dest, tuple(files), empty, git_tree_id(files), content_digest(files), commit)


def drop_empty_dirs(ext: Extracted) -> Extracted:
    """Remove every folder of ``ext`` that has no file below it.

    For a caller that ties the files to the commit by their digest alone (a lockfile):
    the digest covers files, not folders, so the tree installed is then exactly its files.
    """
    keep = {p for f in ext.files for p in parents(f.path)}
    doomed = {d for e in ext.empty_dirs for d in (e, *parents(e)) if d not in keep}
    try:
        for d in sorted(doomed, key=lambda p: -p.count("/")):
            parent = (ext.root / d).parent
            os.chmod(parent, 0o755)
            try:
                os.rmdir(ext.root / d)
            finally:
                os.chmod(parent, 0o555)
    except OSError as e:
        raise CacheError(f"cannot remove the empty folders of {ext.root}: {e}",
                         fix=fixes.say("check the permissions of the cache folder")) from e
    return replace(ext, empty_dirs=())
