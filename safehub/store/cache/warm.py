"""What a process remembers between loads: the warm path's whole state, in one object.

A warm load (the repo already verified and cached) does no network request and re-hashes
nothing: it reuses what this process built or verified before. Everything so reused lives
in :data:`STATE`, and nothing else in safehub keeps state across loads. Each entry says
what it remembers, what makes it stale, and why reusing it is safe:

1. ``STATE.memos["hub"]``: the ``Hub`` the module-level ``safehub.load``/``list``/``help``
   use (policy merged, settings read, cache and records opened). *Stale* when anything it
   was built from differs: the environment, the working directory, whether stdin is a
   terminal, torch's hub dir (``set_dir``), and the **bytes** of every policy path searched
   and of the lockfile (bytes, not a stat: two writes of one size within a clock tick share
   an mtime). *Safe*: the key holds every input of ``Hub()``, compared whole on each call,
   so a policy edited between two loads is obeyed on the second.
2. ``STATE.memos["lockfile"]``: the parsed lockfile. *Stale* when its stat key changes
   (path, mtime in ns, size, inode); one file is kept. *Safe*: the Hub above is rebuilt
   when the lockfile's bytes change, and a lockfile replaced by a rename has a new inode;
   what is parsed is only a cache of the file, whose entries every step checks again
   (commit, tree, digest).
3. ``STATE.surveys``: (tree path, digest) -> the scan of a tree taken right after this
   process verified it. *Used* only where the user's records hold none (they cannot be
   written: a read-only data dir). *Stale*: never by itself; a cache hit's scan is compared
   with it and any difference re-hashes the tree. *Safe*: it is what this process itself
   saw right after verifying every byte, as the user's record would be.
4. ``STATE.watched`` and ``STATE.prefixes``: the verified trees whose files are checked as
   the repo's code opens them (folder + separator -> verified time, repo, tree folder and
   its identity), for the rest of the process; ``prefixes`` is their keys as a tuple, what
   the audit hook's fast path tests each opened path against. *Stale*: never (a tree is
   watched for the rest of the process); what changes is checked on each open: a file or
   folder whose ctime is later than the verified time, or a tree folder that is not the
   one verified (``st_dev``, ``st_ino``), is refused. *Safe*: ctime cannot be set by a
   user, and any write, chmod, rename or replacement moves it.
5. ``STATE.watcher``: the inotify watches of trees whose folder scan passed (see
   :mod:`safehub.store.cache.quiet`). *Stale* on any event (an entry created, deleted or
   moved, attributes changed, a watch dropped, the queue overflowing), on a tree folder
   that is not the one watched, and in a forked child. *Safe*: the watches are armed before
   the scan that vouches for them (a change before a watch makes the scan differ, one after
   is an event), on local filesystems only; a file written in place raises no event but is
   caught by 4 as the code opens it.

:func:`recall` is the one rule for the keyed entries (1 and 2).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    from safehub.store.cache.integrity import Survey

__all__ = ["STATE", "State", "Watched", "recall"]

T = TypeVar("T")


class Watched(NamedTuple):
    """A tree whose files are checked as they are opened (entry 4)."""

    verified_ns: int
    """The tree's verified time (ctime, ns)."""
    repo: str
    root: str
    """The tree folder."""
    ident: tuple[int, int] | None
    """The tree folder's ``(st_dev, st_ino)`` when it was verified."""


class State:
    """Everything a process remembers between loads (the module docstring, 1 to 5)."""

    __slots__ = ("memos", "prefixes", "surveys", "watched", "watcher")

    def __init__(self) -> None:
        self.memos: dict[str, tuple[Hashable, Any]] = {}
        self.surveys: dict[tuple[str, str], Survey] = {}
        self.watched: dict[str, Watched] = {}
        self.prefixes: tuple[str, ...] = ()
        self.watcher: Any = None
        """The inotify watcher (:class:`safehub.store.cache.quiet`), made on first use."""


STATE = State()


def recall(slot: str, key: Hashable, build: Callable[[], T]) -> T:
    """What ``slot`` holds if it was built from ``key``; else ``build()``, kept for the
    next call (the previous value is dropped: one per slot)."""
    held = STATE.memos.get(slot)
    if held is not None and held[0] == key:
        value: T = held[1]
        return value
    value = build()
    STATE.memos[slot] = (key, value)
    return value
