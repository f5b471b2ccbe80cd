"""Files of a verified tree, checked as the repo's code opens them.

A warm load does not stat every file of a cached tree: it checks that the tree's folders
are unchanged (no entry added, removed, renamed or replaced) and records the tree's
*sealed* time, the latest ctime of any entry right after it was verified. While the
repo's code runs, every file of the tree it opens for reading (its modules as Python
imports them, hubconf.py first) must still have a ctime no later than that, and no write
permission: any write, chmod or replacement since makes the ctime later, and ctime cannot
be set back.

The folders on the way are checked too, or a file could be swapped with the folder around
it: the tree folder must still be the one that was verified (same device and inode: a
commit folder, or any folder above it, renamed away and replaced by a copy prepared
earlier, with old ctimes, is another inode), and it and every folder between it and the
file must have a ctime no later than the sealed time (a folder renamed into place, or one
whose entries changed, has a later one). What native code reads directly is not seen here
(``safehub cache verify`` re-hashes everything).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple

from safehub._internal import fixes
from safehub.errors import TamperedError

__all__ = ["PREFIXES", "check_read", "refuse_bytecode_folder", "watch"]


class _Watched(NamedTuple):
    sealed: int  # the tree's sealed time (ctime, ns)
    repo: str
    root: str  # the tree folder
    ident: tuple[int, int] | None  # its (st_dev, st_ino) when it was verified


#: Watched tree folders (each ending in a separator). Empty: reads cost nothing.
PREFIXES: tuple[str, ...] = ()
_SEALED: dict[str, _Watched] = {}  # folder + separator -> what it was when verified


def watch(prefixes: tuple[str, ...], sealed: int, repo: str,
          ident: tuple[int, int] | None = None) -> None:
    """Check reads under ``prefixes`` against ``sealed`` (ctime, ns) from now on, for the
    rest of the process: the repo's modules stay importable after its load returns, and a
    module imported later (lazily, from ``model.forward``) is checked as well.

    ``ident``: the tree folder's ``(st_dev, st_ino)`` when it was verified (each prefix
    names that folder); without it, the folder's identity now.
    """
    global PREFIXES
    for prefix in prefixes:
        root = prefix.rstrip(os.sep) or os.sep
        if ident is None:
            try:
                st = os.lstat(root)
            except OSError:
                here: tuple[int, int] | None = None  # then every read under it is refused
            else:
                here = (st.st_dev, st.st_ino)
        _SEALED[prefix] = _Watched(sealed, repo, root, ident if ident is not None else here)
    PREFIXES = tuple(_SEALED)


def opened(args: tuple[object, ...]) -> str | None:
    """The path an ``open`` audit event reads under a watched tree, or None.

    Only reads: writes are the guard's. Relative and bytes paths are made absolute, so
    ``chdir`` into the tree and ``open(b"file")`` are seen too.
    """
    name, mode, flags = (*args, None, None, None)[:3]
    if isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT
                                           | os.O_TRUNC):
        return None
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return None
    if type(name) is bytes:
        name = os.fsdecode(name)
    if type(name) is not str:
        return None  # an fd, or an object the guard does not read
    if not name.startswith(PREFIXES) or "/." in name:
        name = os.path.abspath(name)  # relative, or "tree/../x" (which is not in the tree)
        if not name.startswith(PREFIXES):
            return None
    return name


def refuse_bytecode_folder(args: tuple[object, ...]) -> None:
    """Python writes no bytecode into a watched tree, even as root: creating a
    ``__pycache__`` there fails (importlib then skips the write, as for any user who cannot
    write the read-only tree). A new entry would make its folder's ctime later than the
    sealed time, and every later read under that folder would be refused."""
    name = args[0] if args else None
    if type(name) is bytes:
        name = os.fsdecode(name)
    if type(name) is str and name.endswith("__pycache__"):
        name = os.path.abspath(name)
        if name.startswith(PREFIXES) and os.path.basename(name) == "__pycache__":
            raise PermissionError(errno.EACCES, "safehub: a verified tree takes no bytecode",
                                  name)


def check_read(path: str, repo: str = "") -> TamperedError | None:
    """The refusal if ``path``, in a watched tree, is not the file that was verified."""
    found = next((p for p in _SEALED if path.startswith(p)), None)
    if found is None:
        return None
    sealed, repo_, folder, ident = _SEALED[found]
    repo = repo or repo_
    try:
        st = os.lstat(folder)
        if (st.st_dev, st.st_ino) != ident or st.st_ctime_ns > sealed:
            return _folder_changed(folder, path, repo, (st.st_dev, st.st_ino) != ident)
        for name in path[len(found):].split(os.sep)[:-1]:
            if name:
                folder += os.sep + name
                st = os.lstat(folder)
                if st.st_ctime_ns > sealed or not stat.S_ISDIR(st.st_mode):
                    return _folder_changed(folder, path, repo)
        st = os.stat(path)
    except OSError:
        return None  # the open fails on its own
    if st.st_ctime_ns <= sealed and not st.st_mode & 0o222:
        return None
    return TamperedError(
        f"cached file {path!r} changed after safehub verified it (found as {repo}'s code "
        "opened it)",
        hint="nothing more ran from it; inspect it, then " + fixes.clear_cache(path),
        action="read", target=path, repo=repo, key="integrity")


def _folder_changed(folder: str, path: str, repo: str, swapped: bool = False
                    ) -> TamperedError:
    what = ("is not the folder safehub verified (it, or a folder above it, was swapped "
            "since)" if swapped else "changed after safehub verified it (it was replaced, "
            "or an entry was added, removed or renamed)")
    return TamperedError(
        f"cached folder {folder!r} {what}; found as {repo}'s code opened {path!r}",
        hint="nothing more ran from it; inspect it, then " + fixes.clear_cache(path),
        action="read", target=path, repo=repo, key="integrity")
