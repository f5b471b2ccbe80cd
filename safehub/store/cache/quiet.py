"""Folder scans this process need not repeat: the kernel's inotify says nothing changed.

A warm load checks that a cached tree's folders are as they were verified (one ``lstat``
per folder, :func:`safehub.store.cache.integrity.scan_folders`): about 2 us a folder, the
largest part of a warm load of a big repo. Here the process asks the kernel to report any
change to those folders instead, once the scan has passed with the watches already in
place, so a later load in the same process makes one ``read`` that finds no event.

- **Armed before the scan.** Each folder is watched top-down (a folder's parent is watched
  before the folder, so a move of it is seen) and then the full scan runs: a change before
  a watch makes the scan differ; a change after it is an event. The tree folder's
  ``(st_dev, st_ino)``, looked up by its path, must still be the one watched, or a folder
  above it was swapped.
- **What counts as a change**: an entry created, deleted, moved in or out, a folder's or a
  child's attributes (mode, owner, times), a watched folder deleted or moved, the watch
  dropped, the event queue overflowing. Any of them sends the next load back to the full
  scan (and the watches are set again if it passes). A file's content written in place
  raises no event, as it changes no folder: the check on open catches it.
- **Only local filesystems** (ext2/3/4, XFS, Btrfs, tmpfs, F2FS): on a network or FUSE
  filesystem another machine's change raises no event here, so those trees are scanned
  on every load, as is every tree where inotify is unavailable, out of instances or
  watches, or where this process was forked from the one that set the watches.
- **Bounded**: one inotify instance per process; at most :data:`MAX_WATCHES` watches.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence

from safehub._internal import inotify
from safehub._internal.frozen import Mutable, field

__all__ = ["LOCAL_FILESYSTEMS", "MAX_WATCHES", "Watcher", "arm", "forget", "quiet", "settle"]

LOCAL_FILESYSTEMS = frozenset({
    0xEF53,      # ext2, ext3, ext4
    0x58465342,  # XFS
    0x9123683E,  # Btrfs
    0x01021994,  # tmpfs
    0xF2F52010,  # F2FS
})
MAX_WATCHES = 8192


class _Tree(Mutable):
    """One watched tree: the scan it passed, its folder's identity, its watches."""

    key: str
    ident: tuple[int, int]
    wds: set[int] = field(default_factory=set)
    settled: bool = False
    """The full scan passed after the watches were set: no event since means unchanged."""


class Watcher:
    """One process's inotify instance and the trees it watches (kept in
    :data:`safehub.store.cache.warm.STATE`, entry 5)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = -1
        self.fd: int | None = None
        self.broken = False  # no inotify here: never try again in this process
        self.trees: dict[str, _Tree] = {}
        self.by_wd: dict[int, str] = {}
        self.remote: set[str] = set()  # trees on a filesystem whose events are not all seen

    def _fd(self) -> int | None:
        if self.pid != os.getpid():  # forked: the parent's queue is not this process's
            if self.fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self.fd)  # this process's copy; the parent's stays open
            self.pid, self.fd, self.trees, self.by_wd = os.getpid(), None, {}, {}
            self.remote = set()
        if self.fd is None and not self.broken:
            try:
                self.fd = inotify.init()
            except OSError:
                self.fd = None
            self.broken = self.fd is None
        return self.fd

    def drain(self, fd: int) -> None:
        """Read every waiting event; a tree any of them touches is no longer settled."""
        for wd, mask in inotify.events(fd):
            if mask & inotify.OVERFLOW:
                for tree in self.trees.values():
                    tree.settled = False
                continue
            root = self.by_wd.get(wd)
            if root is not None and root in self.trees:
                self.trees[root].settled = False
            if mask & inotify.IGNORED:
                self.by_wd.pop(wd, None)
                if root in self.trees:
                    self.trees[root].wds.discard(wd)


def quiet(w: Watcher, root: str, key: str) -> bool:
    """True if ``root`` passed the folder scan ``key`` with its watches set, and nothing
    has changed since (its folder is the one watched, and no event is waiting)."""
    tree = w.trees.get(root)
    if tree is None or tree.key != key or w.pid != os.getpid():
        return False
    try:
        st = os.lstat(root)
    except OSError:
        return False
    with w.lock:
        fd = w._fd()
        if fd is None:
            return False
        w.drain(fd)
        return tree.settled and (st.st_dev, st.st_ino) == tree.ident


def arm(w: Watcher, root: str, key: str, folders: Sequence[str]) -> bool:
    """Set the watches on ``root``'s ``folders`` (relative, the tree first), before the
    folder scan that is to vouch for them; True if they are all set (then call
    :func:`settle` once the scan passed)."""
    with w.lock:
        fd = w._fd()
        if fd is None or not folders or folders[0] != "":
            return False
        if root in w.remote:
            return False
        if inotify.fs_type(root) not in LOCAL_FILESYSTEMS:
            w.remote.add(root)
            return False
        w.drain(fd)
        _drop(w, root)
        if len(w.by_wd) + len(folders) > MAX_WATCHES:
            return False
        try:
            st = os.lstat(root)
            tree = _Tree(key, (st.st_dev, st.st_ino))
            w.trees[root] = tree
            for rel in folders:  # in the survey's order: each parent before its folders
                wd = inotify.add_watch(fd, os.path.join(root, rel) if rel else root)
                tree.wds.add(wd)
                w.by_wd[wd] = root
        except OSError:  # gone, a link, out of watches: scan on every load
            _drop(w, root)
            return False
        return True


def settle(w: Watcher, root: str, key: str) -> None:
    """The folder scan ``key`` of ``root`` passed after :func:`arm`: from now on, no event
    means no change."""
    with w.lock:
        tree = w.trees.get(root)
        if tree is not None and tree.key == key:
            tree.settled = True


def forget(w: Watcher, root: str | None = None) -> None:
    """Stop trusting the watches of ``root`` (every tree if None): its next load scans."""
    with w.lock:
        for each in ([root] if root is not None else list(w.trees)):
            _drop(w, each)


def _drop(w: Watcher, root: str) -> None:
    tree = w.trees.pop(root, None)
    if tree is None:
        return
    for wd in tree.wds:
        if w.by_wd.get(wd) == root:
            del w.by_wd[wd]
    # The kernel's watches stay (removing them costs a call each); their events name no
    # tree now and are read and dropped. Arming the tree again reuses them.
