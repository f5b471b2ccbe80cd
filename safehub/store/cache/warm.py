"""What a process remembers between loads, and why reusing it is safe: the warm path.

A warm load (the repo already verified and cached) makes no network request and re-hashes
nothing: it reuses what this process built or verified before. Everything so reused lives
in one object, :data:`STATE`, and the one function that decides whether a cached tree may
be served without re-hashing it, :func:`unchanged`, reads top to bottom with the reason for
each shortcut beside it. The entries of :data:`STATE`:

1. ``memos["hub"]``: the ``Hub`` the module-level ``safehub.load``/``list``/``help`` use
   (policy merged, settings read, cache and records opened). *Stale* when anything it was
   built from differs: the environment, the working directory, whether stdin is a
   terminal, torch's hub dir (``set_dir``), and the **bytes** of every policy path searched
   and of the lockfile (bytes, not a stat: two writes of one size within a clock tick share
   an mtime). *Safe*: the key holds every input of ``Hub()``, compared whole on each call,
   so a policy edited between two loads is obeyed on the second.
2. ``memos["lockfile"]``: the parsed lockfile. *Stale* when its stat key changes (path,
   mtime in ns, size, inode); one file is kept. *Safe*: the Hub above is rebuilt when the
   lockfile's bytes change, and a lockfile replaced by a rename has a new inode; what is
   parsed is only a cache of the file, whose entries every step checks again (commit,
   tree, digest).
3. ``surveys``: (tree path, digest) -> the scan of a tree taken right after this process
   verified it. *Used* only where the user's records hold none (they cannot be written: a
   read-only data dir). *Stale*: never by itself; :func:`unchanged` compares a cache hit's
   scan with it, and any difference re-hashes the tree. *Safe*: it is what this process
   itself saw right after verifying every byte, as the user's record would be.
4. ``watched`` and ``prefixes``: the verified trees whose files are checked as the repo's
   code opens them (folder + separator -> verified time, repo, tree folder and its
   identity), for the rest of the process; ``prefixes`` is their keys as a tuple (each
   ends in a separator, so ``startswith`` is "inside that folder"), what the audit hook's
   fast path tests each opened path against; ``cwd``: the working directory the hook joins
   a relative path to, looked up again after an ``os.chdir`` event. *Stale*: never (a tree
   is watched for the rest of the process); what changes is checked on each open
   (:func:`check_opened`): a file or folder whose ctime is later than the verified time, or
   a tree folder that is not the one verified (``st_dev``, ``st_ino``), is refused. *Safe*:
   ctime cannot be set by a user, and any write, chmod, rename or replacement moves it.
5. ``watcher``: the inotify watches of trees whose folder scan passed
   (:mod:`safehub.store.cache.quiet`). *Stale* on any event (an entry created, deleted or
   moved, attributes changed, a watch dropped, the queue overflowing), on a tree folder
   that is not the one watched, and in a forked child. *Safe*: the watches are armed before
   the scan that vouches for them (a change before a watch makes the scan differ, one after
   is an event), on local filesystems only; a file written in place raises no event but is
   caught by 4 as the code opens it.

:func:`recall` is the one rule for the keyed entries (1 and 2).

Other process-wide state in safehub, and why it is not here (none of it lets a load skip a
check; tests/test_architecture.py finds each module-level memo and asks that it be named
here):

- ``safehub.policy.files`` keeps each policy file parsed, keyed by its stat data (path,
  mtime, size, inode, ctime: a rewrite moves ctime, which cannot be set back), and each
  merge of such keys: a parse cache under entry 1, which rebuilds the Hub on any byte.
- ``safehub.policy.places`` keeps the user's policy path, worked out again when a variable
  it is made from changes; ``safehub.policy.held`` which notices were printed (once each).
- ``safehub.run.bytecode`` keeps which verified trees' modules are imported with their
  compiled code from the user's store (and which store): how a module is compiled, not
  whether a tree is trusted; the code it serves is keyed by the very bytes read, and
  those reads are checked as any other (entry 4).
- ``safehub.run.hygiene`` keeps what it listed of ``sys.path`` folders and verified trees,
  keyed by each folder's stat data: where modules are found, not whether a tree is trusted.
- ``safehub.run.torchhub`` keeps what ``install()`` replaced in torch.hub (to put it back)
  and the handlers of the loads running now, and ``safehub.run.hfroute`` huggingface_hub's
  own functions it routes (to call them outside a load); ``safehub.run.runtime._hook`` the guard
  stacks of the loads running now, per thread, and whether its audit hook is installed
  (an audit hook cannot be removed); ``safehub.run.confine.ruleset`` the ruleset the
  kernel holds this process to. They are the state of what is running, not memories of a
  load.
- ``safehub._internal.inotify``, ``safehub.run.confine._landlock`` and
  ``safehub.run.confine._seccomp`` keep the C library they loaded;
  ``safehub._internal.gcpause`` how deeply the collector is paused; ``safehub.__init__`` a
  reference to :data:`STATE`, imported on the first call.
- Pure functions memoised with ``functools.lru_cache``, bounded: glob patterns compiled
  (``safehub._internal.globs``), the folder lines of a scan
  (``safehub.store.cache.integrity``), the real paths of the folders a guard holds and
  this Python's install folders (``safehub.run.runtime.guard``), a tree's two spellings
  (``safehub.run.hygiene``), a key file's hash keyed by its stat data
  (``safehub.verify.signatures.signers``), and the Sigstore trusted root per trust config
  (``safehub.verify.signatures.verify``: a file named by the policy, read once a process),
  the user and host names an audit line carries (``safehub.audit``), a URL's reading
  (``safehub.sources.oci.registry``).
- ``safehub.sources.connections`` keeps a TLS context per CA bundle, keyed by the bundle's
  path, mtime and size (loading certifi's costs ~20 ms): what is trusted for TLS, not a
  verdict; a bundle rewritten or a variable pointed elsewhere makes another; and the pool
  classes whose connections hand their sockets to a request's deadline.
  ``safehub.sources.deadline`` keeps the deadlines of the requests running now and its
  watchdog thread: the state of what is running.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from safehub._internal import fixes
from safehub.errors import TamperedError
from safehub.store.cache import integrity
from safehub.store.cache.integrity import Survey

if TYPE_CHECKING:
    from safehub.store.cache import quiet

__all__ = ["STATE", "State", "Watched", "changed_dir", "check_opened", "recall",
           "refuse_bytecode", "refuse_bytecode_folder", "tree_path", "unchanged", "watch"]

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

    __slots__ = ("cwd", "cwd_near", "memos", "prefixes", "surveys", "watched", "watcher")

    def __init__(self) -> None:
        self.memos: dict[str, tuple[Hashable, Any]] = {}
        self.surveys: dict[tuple[str, str], Survey] = {}
        self.watched: dict[str, Watched] = {}
        self.prefixes: tuple[str, ...] = ()
        self.cwd: str | None = None
        """The working directory (with a final separator) as last looked up; None: an
        ``os.chdir`` since."""
        self.cwd_near = True
        """A watched tree is at or below the working directory, or the reverse."""
        self.watcher: quiet.Watcher | None = None
        """The inotify watcher, made on first use."""


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


# -- 3 and 5: may a cached tree be served without re-hashing it? ---------------------------

def unchanged(root: Path, recorded: Survey, *, checked_on_open: bool) -> bool:
    """True if the cached tree ``root`` is as ``recorded`` right after it was verified (the
    user's record of it, else :data:`STATE`'s ``surveys``): then it is served without a
    re-hash. False: the caller re-hashes every byte (:func:`integrity.rehash`).

    ``checked_on_open``: a load, whose files are each checked as the repo's code opens them
    (:func:`check_opened`); otherwise (check, verify, lock, prefetch) nothing checks the
    files later, so every entry's stat data is compared here.
    """
    if not checked_on_open:
        # Every entry: name, type, mode, size, times, inode. ctime cannot be set by a user
        # and any write, chmod, rename or replacement moves it: equal scans, same files.
        return recorded.scan == integrity.scan_entries(root)
    # A load. What a file holds is checked as it is opened (4), so only the set of entries
    # matters here: the folders' stat data (an entry added, removed, renamed or replaced
    # anywhere moves its folder's mtime and ctime).
    if not recorded.folders:  # a record without its folder list: list them all
        return recorded.dirs == integrity.scan_folders(root, None)
    from safehub.store.cache import quiet  # a cached tree's check (a cold load has none)

    base = str(root)
    if STATE.watcher is None:
        STATE.watcher = quiet.Watcher()
    watcher = STATE.watcher
    # Shortcut: inotify has watched every folder since a scan that passed, and reports no
    # event (nor a different tree folder, nor a fork since): nothing was added, removed,
    # moved or re-permissioned. One read instead of an lstat a folder.
    if quiet.quiet(watcher, base, recorded.dirs):
        return True
    # Arm the watches *before* the scan: a change before a watch is set makes the scan
    # differ; a change after it is an event the next load sees. On a network or FUSE
    # filesystem, or out of watches, arming fails and every load scans.
    armed = quiet.arm(watcher, base, recorded.dirs, recorded.folders)
    same = recorded.dirs == integrity.scan_folders(root, recorded.folders)
    if same and armed:
        # Only now do the watches vouch for the tree: no event from here on means no change.
        quiet.settle(watcher, base, recorded.dirs)
    return same


# -- 4. the check on open: what the audit hook asks of STATE.watched ------------------------


def watch(prefixes: tuple[str, ...], verified_ns: int, repo: str,
          ident: tuple[int, int] | None = None) -> None:
    """Check reads under ``prefixes`` against ``verified_ns`` (ctime, ns) from now on, for the
    rest of the process. ``ident``: the tree folder's ``(st_dev, st_ino)`` when it was
    verified; without it, the folder's identity now."""
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
        STATE.watched[prefix] = Watched(verified_ns, repo, root, here)
    STATE.prefixes = tuple(STATE.watched)
    changed_dir()


def changed_dir() -> None:
    """The working directory may have changed (an ``os.chdir`` event)."""
    STATE.cwd = None


def tree_path(name: object) -> str | None:
    """The absolute path ``name`` (an ``open`` event's first argument that is not a plain
    absolute ``str``) opens, if it may lie in a watched tree; else None."""
    state = STATE
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    elif isinstance(name, os.PathLike):
        name = os.fspath(name)
        if isinstance(name, bytes):
            name = os.fsdecode(name)
    if not isinstance(name, str):
        return None  # an fd
    if not os.path.isabs(name):
        cwd = state.cwd
        if cwd is None:
            cwd = state.cwd = os.path.join(os.getcwd(), "")
            prefixes = state.prefixes
            state.cwd_near = cwd.startswith(prefixes) or any(p.startswith(cwd) for p in prefixes)
        if not state.cwd_near and ".." not in name:
            return None
        name = cwd + name
    if "/." in name:  # "tree/../x" is not in the tree; "a/../tree/x" is
        name = os.path.normpath(name)
    return name if name.startswith(state.prefixes) else None


def refuse_bytecode_folder(args: tuple[object, ...]) -> None:
    """Python writes no bytecode into a watched tree, even as root: creating a
    ``__pycache__`` there fails (importlib then skips the write, as for any user who cannot
    write the read-only tree). A new entry would make its folder's ctime later than the
    verified time, and every later read under that folder would be refused."""
    name = args[0] if args else None
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if isinstance(name, str) and name.endswith("__pycache__"):
        name = os.path.abspath(name)
        if name.startswith(STATE.prefixes):
            raise PermissionError(errno.EACCES, "safehub: a verified tree takes no bytecode",
                                  name)


def refuse_bytecode(path: str) -> None:
    """Bytecode in a verified tree never runs: committed or planted, the source it shows
    reviewers may differ (reading it fails, so importlib compiles the source)."""
    if path.endswith(".pyc"):
        raise PermissionError(errno.EACCES, "safehub: bytecode in a verified tree never "
                              "runs (the source it shows reviewers may differ)", path)


def check_opened(path: str, repo: str = "") -> TamperedError | None:
    """The refusal if ``path``, in a watched tree, is not the file that was verified."""
    watched = STATE.watched
    found = next((p for p in watched if path.startswith(p)), None)
    if found is None:
        return None
    verified_ns, repo_, folder, ident = watched[found]
    repo = repo or repo_
    try:
        st = os.lstat(folder)
        if (st.st_dev, st.st_ino) != ident or st.st_ctime_ns > verified_ns:
            return _folder_changed(folder, path, repo, (st.st_dev, st.st_ino) != ident)
        for name in path[len(found):].split(os.sep)[:-1]:
            if name:
                folder += os.sep + name
                st = os.lstat(folder)
                if st.st_ctime_ns > verified_ns or not stat.S_ISDIR(st.st_mode):
                    return _folder_changed(folder, path, repo)
        st = os.stat(path)
    except OSError:
        return None  # the open fails on its own
    if st.st_ctime_ns <= verified_ns and not st.st_mode & 0o222:
        return None
    return TamperedError(
        f"cached file {path!r} changed after safehub verified it (found as {repo}'s code "
        "opened it)",
        fix=_cleared(path), action="read", target=path, repo=repo, key="integrity")


def _folder_changed(folder: str, path: str, repo: str, swapped: bool = False
                    ) -> TamperedError:
    what = ("is not the folder safehub verified (it, or a folder above it, was swapped "
            "since)" if swapped else "changed after safehub verified it (it was replaced, "
            "or an entry was added, removed or renamed)")
    return TamperedError(
        f"cached folder {folder!r} {what}; found as {repo}'s code opened {path!r}",
        fix=_cleared(path), action="read", target=path, repo=repo, key="integrity")


def _cleared(path: str) -> fixes.Fix:
    return fixes.noted(fixes.clear_cache(path), "nothing more ran from it; inspect it, then ")
