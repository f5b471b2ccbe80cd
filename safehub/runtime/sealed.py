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
_SEALED: dict[str, tuple[int, int]] = {}  # folder -> (sealed time, guards watching it)


def watch(prefixes: tuple[str, ...], sealed: int, on: bool) -> None:
    """Start or stop checking reads under ``prefixes`` against ``sealed`` (ctime, ns)."""
    global PREFIXES
    for prefix in prefixes:
        _, count = _SEALED.get(prefix, (sealed, 0))
        count += 1 if on else -1
        if count > 0:
            _SEALED[prefix] = (sealed, count)
        else:
            _SEALED.pop(prefix, None)
    PREFIXES = tuple(_SEALED)


def check_read(path: str, repo: str) -> TamperedError | None:
    """The refusal if ``path``, in a watched tree, is not the file that was verified."""
    sealed = next((s for prefix, (s, _) in _SEALED.items() if path.startswith(prefix)), None)
    if sealed is None:
        return None
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
