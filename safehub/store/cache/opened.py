"""Files of a verified tree, checked as code opens them.

A warm load does not stat every file of a cached tree: it checks that the tree's folders
are unchanged (no entry added, removed, renamed or replaced) and records the tree's
*sealed* time, the latest ctime of any entry right after it was verified. From then on,
for the rest of the process, every file of the tree that is opened for reading (the repo's
modules as Python imports them, hubconf.py first; a data file read later) must still have
a ctime no later than that, and no write permission: any write, chmod or replacement
since makes the ctime later, and ctime cannot be set back.

The folders on the way are checked too, or a file could be swapped with the folder around
it: the tree folder must still be the one that was verified (same device and inode), and
it and every folder between it and the file must have a ctime no later than the sealed
time. What native code reads directly is not seen here (``safehub cache verify``
re-hashes everything).

Cost: the audit hook tests an absolute path against :data:`PREFIXES` and stops there for
a file outside every tree (a relative path is joined to the working directory, which is
looked up again only after a ``chdir``).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple

from safehub._internal import fixes
from safehub.errors import TamperedError

__all__ = ["PREFIXES", "changed_dir", "check_read", "refuse_bytecode", "refuse_bytecode_folder",
           "tree_path", "watch"]


class _Watched(NamedTuple):
    sealed: int  # the tree's sealed time (ctime, ns)
    repo: str
    root: str  # the tree folder
    ident: tuple[int, int] | None  # its (st_dev, st_ino) when it was verified


#: Watched tree folders (each ending in a separator). Empty: reads cost nothing.
PREFIXES: tuple[str, ...] = ()
_SEALED: dict[str, _Watched] = {}  # folder + separator -> what it was when verified
_cwd: str | None = None  # the working directory as last looked up (None: changed since)
_cwd_near = True  # a tree is at or below the working directory, or the reverse


def watch(prefixes: tuple[str, ...], sealed: int, repo: str,
          ident: tuple[int, int] | None = None) -> None:
    """Check reads under ``prefixes`` against ``sealed`` (ctime, ns) from now on, for the
    rest of the process. ``ident``: the tree folder's ``(st_dev, st_ino)`` when it was
    verified; without it, the folder's identity now."""
    global PREFIXES
    for prefix in prefixes:
        root = prefix.rstrip(os.sep) or os.sep
        here = ident
        if here is None:
            try:
                st = os.lstat(root)
            except OSError:
                here = None  # then every read under it is refused
            else:
                here = (st.st_dev, st.st_ino)
        _SEALED[prefix] = _Watched(sealed, repo, root, here)
    PREFIXES = tuple(_SEALED)
    changed_dir()


def changed_dir() -> None:
    """The working directory may have changed (an ``os.chdir`` event)."""
    global _cwd
    _cwd = None


def tree_path(name: object) -> str | None:
    """The absolute path ``name`` (an ``open`` event's first argument that is not a plain
    absolute ``str``) opens, if it may lie in a watched tree; else None."""
    global _cwd, _cwd_near
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    elif isinstance(name, os.PathLike):
        name = os.fspath(name)
        if isinstance(name, bytes):
            name = os.fsdecode(name)
    if not isinstance(name, str):
        return None  # an fd
    if not os.path.isabs(name):
        if _cwd is None:
            _cwd = os.path.join(os.getcwd(), "")
            _cwd_near = _cwd.startswith(PREFIXES) or any(p.startswith(_cwd) for p in PREFIXES)
        if not _cwd_near and ".." not in name:
            return None
        name = _cwd + name
    if "/." in name:  # "tree/../x" is not in the tree; "a/../tree/x" is
        name = os.path.normpath(name)
    return name if name.startswith(PREFIXES) else None


def refuse_bytecode_folder(args: tuple[object, ...]) -> None:
    """Python writes no bytecode into a watched tree, even as root: creating a
    ``__pycache__`` there fails (importlib then skips the write, as for any user who cannot
    write the read-only tree). A new entry would make its folder's ctime later than the
    sealed time, and every later read under that folder would be refused."""
    name = args[0] if args else None
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if isinstance(name, str) and name.endswith("__pycache__"):
        name = os.path.abspath(name)
        if name.startswith(PREFIXES):
            raise PermissionError(errno.EACCES, "safehub: a verified tree takes no bytecode",
                                  name)


def refuse_bytecode(path: str) -> None:
    """Bytecode in a verified tree never runs: committed or planted, the source it shows
    reviewers may differ (reading it fails, so importlib compiles the source)."""
    if path.endswith(".pyc"):
        raise PermissionError(errno.EACCES, "safehub: bytecode in a verified tree never "
                              "runs (the source it shows reviewers may differ)", path)


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
