"""Files of a verified tree, checked as the repo's code opens them.

A warm load does not stat every file of a cached tree: it checks that the tree's folders
are unchanged (no entry added, removed, renamed or replaced) and records the tree's
*sealed* time, the latest ctime of any entry right after it was verified. While the
repo's code runs, every file of the tree it opens for reading (its modules as Python
imports them, hubconf.py first) must still have a ctime no later than that, and no write
permission: any write, chmod or replacement since makes the ctime later, and ctime cannot
be set back. What native code reads directly is not seen here (``safehub cache verify``
re-hashes everything).
"""

from __future__ import annotations

import os

from safehub._internal import fixes
from safehub.errors import TamperedError

__all__ = ["PREFIXES", "check_read", "watch"]

#: Watched tree folders (each ending in a separator). Empty: reads cost nothing.
PREFIXES: tuple[str, ...] = ()
_SEALED: dict[str, tuple[int, str]] = {}  # folder -> (sealed time, repo)


def watch(prefixes: tuple[str, ...], sealed: int, repo: str) -> None:
    """Check reads under ``prefixes`` against ``sealed`` (ctime, ns) from now on, for the
    rest of the process: the repo's modules stay importable after its load returns, and a
    module imported later (lazily, from ``model.forward``) is checked as well."""
    global PREFIXES
    for prefix in prefixes:
        _SEALED[prefix] = (sealed, repo)
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


def check_read(path: str, repo: str = "") -> TamperedError | None:
    """The refusal if ``path``, in a watched tree, is not the file that was verified."""
    found = next((v for prefix, v in _SEALED.items() if path.startswith(prefix)), None)
    if found is None:
        return None
    sealed, repo = found[0], repo or found[1]
    try:
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
