"""The content-addressed cache of verified trees (the cache root and its layout).

Layout under the cache root (``SAFEHUB_CACHE_DIR``, default: the user cache dir)::

    v1/commits/<sha>/tree/          the verified files, read-only (handed to torch)
    v1/commits/<sha>/verdict.json   what was verified: every file's hashes, the level
    v1/commits/<sha>/entry.json     commit, digest, tree and level (read on every hit)
    v1/repos/<owner>/<name>.json    refs resolved and commits proven to belong to the repo
    v1/locks/                       cross-process locks (safehub._internal.locks)
    v1/tmp/                         staging; a broken download never leaves it
    v1/SEALED                       written by :meth:`Cache.seal`: loads only read the cache

A commit folder appears in one ``rename`` of a fully verified staging folder, under a
lock, so readers never see half a tree and any number of processes can load at once:
exactly one downloads. Everything here can be rewritten by whoever can write the cache,
so a hit is trusted only against per-user records kept elsewhere (the fetcher checks that,
with :mod:`safehub.store.cache.integrity`, whose errors name the file). Nothing in it is
re-downloaded in silence.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from safehub._internal import fixes
from safehub._internal.fsutil import read_json, rmtree, write_json
from safehub.digest import is_digest
from safehub.errors import CacheError
from safehub.spec import RepoSpec, is_full_sha
from safehub.store.cache.integrity import tamper
from safehub.store.cache.records import FORMAT, LEVELS, RepoRecord, Verdict
from safehub.store.cache.tree import CachedTree, write_entry

__all__ = ["DEMO_PREFIX", "Cache"]

_LAYOUT = "v1"
_SEALED = "SEALED"

class Cache:
    """The cache root: lookups without locks, installs under a per-commit lock."""

    def __init__(self, root: Path, *, lock_timeout: float = 600.0,
                 relocate: str = "point SAFEHUB_CACHE_DIR at a folder you can write",
                 frozen: bool = False, kept_by: str = "") -> None:
        self.root = root
        self.kept_by = kept_by  # a lasting setting naming root (see _refuse_orphan)
        self.frozen = frozen
        """Read-only to this process: a job under ``safehub run --confine`` (the kernel
        refuses its writes here); a miss is fetched by ``safehub run`` itself."""
        self.relocate = relocate
        """How the user moves the cache (for messages; a final policy file may hold it)."""
        self.base = root / _LAYOUT
        self.lock_timeout = lock_timeout

    # -- paths ------------------------------------------------------------------------

    def commit_dir(self, commit: str) -> Path:
        """The folder of ``commit``; only ever built from a validated 40-hex sha."""
        if not is_full_sha(commit):
            raise CacheError(f"refusing to use {commit!r} as a cache path: not a 40-hex sha",
                             fix=fixes.noted(fixes.run("safehub cache clear"),
                                             "a cache or lockfile record is malformed; "))
        return self.base / "commits" / commit

    def repo_file(self, key: str) -> Path:
        spec = RepoSpec.parse(key)  # validated before it becomes a path
        return self.base / "repos" / spec.owner.lower() / f"{spec.name.lower()}.json"

    # -- locking and staging ----------------------------------------------------------

    @property
    def sealed(self) -> bool:
        """Sealed for sharing (:meth:`seal`): nothing writes here, root included (whom
        the folders' modes do not stop)."""
        return os.path.lexists(self.base / _SEALED)

    @property
    def read_only(self) -> bool:
        """Nothing is written here: sealed for sharing, or :attr:`frozen`."""
        return self.frozen or self.sealed

    def _writable_dir(self, path: Path) -> Path:
        if self.frozen:
            raise CacheError(
                f"the cache {str(self.root)!r} is read-only inside `safehub run --confine` "
                "(nothing a confined job writes is trusted by a later run), and it does not "
                "hold what this needs", fix=fixes.run("safehub prefetch SPEC", "before the job"))
        if self.sealed:
            raise CacheError(
                f"the cache {str(self.root)!r} is sealed for sharing (by `safehub prefetch "
                "--read-only`): loads only read it, and it does not hold what this needs",
                fix=fixes.either(
                    fixes.say("load what it holds (a lockfile with SAFEHUB_OFFLINE=1)"),
                    fixes.run("safehub prefetch --read-only --cache-dir "
                              f"{fixes.quote(str(self.root))} SPEC",
                              "as its owner, to add to it")))
        _refuse_orphan(self.root, self.kept_by)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheError(
                f"cannot create the cache folder {str(path)!r} ({e.strerror or e})",
                fix=self._relocate_or_share(),
            ) from e
        if not os.access(path, os.W_OK | os.X_OK):
            raise CacheError(
                f"the cache folder {str(path)!r} is not writable",
                fix=self._relocate_or_share(),
            )
        return path

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the cross-process lock ``name`` (a commit sha or a repo key)."""
        from safehub._internal.locks import LockTimeout, exclusive

        lock_dir = self._writable_dir(self.base / "locks")
        path = lock_dir / (name.replace("/", "--") + ".lock")
        held = contextlib.ExitStack()
        try:  # taking it: an error here is the lock's, not the block's
            held.enter_context(exclusive(str(path), self.lock_timeout))
        except (OSError, LockTimeout) as e:
            raise _not_locked(path, self.lock_timeout, e) from e
        with held:
            yield

    def _relocate_or_share(self) -> fixes.Fix:
        return fixes.either(fixes.say(self.relocate), fixes.say(
            "fill a shared cache with `safehub prefetch` so loads only read it"))

    def staging_root(self) -> Path:
        """The cache's (writable) staging folder."""
        return self._writable_dir(self.base / "tmp")

    def staging(self, commit: str) -> Path:
        """A fresh staging folder for ``commit`` (call under that commit's lock).

        Leftovers of earlier crashed attempts at the same commit are removed first: the
        lock proves nobody else is using them.
        """
        tmp = self._writable_dir(self.base / "tmp")
        self.commit_dir(commit)  # validates the sha before it names a leftover
        for old in [e.name for e in os.scandir(tmp) if e.name.startswith(f"{commit}-")]:
            rmtree(tmp / old)
        return Path(tempfile.mkdtemp(dir=tmp, prefix=f"{commit}-"))

    # -- commits ----------------------------------------------------------------------

    def lookup(self, commit: str) -> CachedTree | None:
        """The cached tree of ``commit``, or ``None``; a broken record is an error."""
        d = self.commit_dir(commit)
        ffile = d / "entry.json"
        try:
            data = read_json(ffile)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as e:
            raise tamper(ffile, f"cannot be read ({e})") from e
        if not (isinstance(data, dict) and data.get("format") == FORMAT
                and is_full_sha(data.get("commit")) and is_digest(data.get("digest"))
                and is_full_sha(data.get("tree")) and data.get("level") in LEVELS):
            raise tamper(ffile, "is malformed")
        entry = CachedTree(d / "tree", data["commit"], data["digest"], data["tree"],
                           data["level"])
        if entry.commit != commit:
            raise tamper(ffile, f"names commit {entry.commit}")
        return entry

    def install(self, stage: Path, verdict: Verdict, *, replace: bool = False) -> CachedTree:
        """Move a verified staging folder (with ``tree/`` inside) into place atomically.

        Call under the commit's lock. With ``replace``, an existing entry is swapped out
        (``force_reload``); otherwise an existing entry wins and the stage is dropped. A
        filesystem failure (a full disk, permissions) is a :class:`CacheError`.
        """
        try:
            return self._install(stage, verdict, replace)
        except OSError as e:
            raise CacheError(
                f"cannot install commit {verdict.commit} into the cache {str(self.root)!r} "
                f"({e.strerror or e})",
                fix=fixes.either(fixes.say("free space or fix permissions there"),
                                 fixes.say(self.relocate))) from e

    def _install(self, stage: Path, verdict: Verdict, replace: bool) -> CachedTree:
        final = self.commit_dir(verdict.commit)
        write_json(stage / "verdict.json", verdict.to_json(), mode=0o444)
        write_entry(CachedTree(stage / "tree", verdict.commit, verdict.digest, verdict.tree,
                                verdict.level))
        self._writable_dir(final.parent)
        if final.exists():
            if not replace:
                rmtree(stage)
                found = self.lookup(verdict.commit)
                assert found is not None
                return found
            old = Path(tempfile.mkdtemp(dir=stage.parent, prefix=f"{verdict.commit}-old-"))
            os.replace(final, old / "entry")
            os.replace(stage, final)
            rmtree(old)
        else:
            os.replace(stage, final)
        return CachedTree(final / "tree", verdict.commit, verdict.digest, verdict.tree,
                          verdict.level)  # as entry.json says (written above, not read back)

    def entries(self) -> Iterator[CachedTree]:
        """Every cached commit (for ``safehub cache ls|verify``)."""
        commits = self.base / "commits"
        if not commits.is_dir():
            return
        for d in sorted(commits.iterdir()):
            if not is_full_sha(d.name):
                continue  # not ours
            entry = self.lookup(d.name)
            if entry is not None:
                yield entry

    def remove(self, commit: str) -> None:
        with self.lock(commit):
            rmtree(self.commit_dir(commit))

    def seal(self) -> None:
        """Make the cache read-only for everyone, without touching any file's stat data.

        Trees and records are already read-only files; this drops write permission on
        the folders (and removes ``locks/`` and ``tmp/``), so nodes sharing the cache only
        read it. Running ``chmod -R a-w`` instead would change every file's ctime, and
        every load would then re-hash the tree once per process.
        """
        for part in ("locks", "tmp"):
            rmtree(self.base / part)
        marker = self.base / _SEALED
        if not os.path.lexists(marker):
            marker.write_text("sealed by `safehub prefetch --read-only`: safehub only reads "
                              "this cache (`safehub prefetch --read-only` adds to it)\n")
        for dirpath, dirnames, filenames in os.walk(self.base):
            if os.path.basename(dirpath) == "tree":
                dirnames[:] = []  # verified trees are read-only since install
            for name in filenames:
                path = os.path.join(dirpath, name)
                mode = os.lstat(path).st_mode
                if mode & 0o222 and not stat.S_ISLNK(mode):
                    os.chmod(path, mode & 0o555)
        for dirpath, _dirnames, _ in os.walk(self.base, topdown=False):
            if not self._in_tree(dirpath):
                os.chmod(dirpath, 0o555)

    def _in_tree(self, dirpath: str) -> bool:
        """``dirpath`` is a verified tree or inside one (``commits/<sha>/tree/...``)."""
        parts = Path(dirpath).relative_to(self.base).parts
        return len(parts) >= 3 and parts[0] == "commits" and parts[2] == "tree"

    def unseal(self) -> None:
        """Undo :meth:`seal` (the owner adding to a shared cache): folders outside the
        trees writable by the owner again, the marker removed."""
        try:
            for dirpath, _dirnames, _ in os.walk(self.base):
                if not self._in_tree(dirpath):
                    os.chmod(dirpath, 0o755)
            (self.base / _SEALED).unlink(missing_ok=True)
        except OSError as e:
            raise CacheError(f"cannot unseal the cache {str(self.root)!r} to add to it "
                             f"({e.strerror or e})",
                             fix=fixes.say("run this as the cache's owner")) from e

    def clear(self) -> None:
        """Remove everything safehub cached (locks stay, they may be held)."""
        if self.sealed:
            root = fixes.quote(str(self.root))
            raise CacheError(
                f"the cache {str(self.root)!r} is sealed for sharing (by `safehub prefetch "
                "--read-only`): safehub never clears or writes it",
                fix=fixes.either(
                    fixes.run(f"chmod -R u+w {root} && rm -rf {root}",
                              "as its owner, to remove it (its folders are read-only)"),
                    fixes.run(f"safehub prefetch --read-only --cache-dir {root} SPEC",
                              "as its owner, to add to it")))
        for part in ("commits", "repos", "tmp"):
            rmtree(self.base / part)

    # -- per-repo records -------------------------------------------------------------

    def read_repo(self, key: str) -> RepoRecord:
        """The repo's record: resolved refs and commits proven to be its own.

        Every field is checked; a malformed record is a :class:`CacheError` (it only saves
        API calls: deleting it is always safe).
        """
        path = self.repo_file(key)
        try:
            data = read_json(path)
        except (FileNotFoundError, NotADirectoryError):
            return RepoRecord()
        except (OSError, ValueError, RecursionError) as e:
            raise CacheError(f"the cache record {str(path)!r} cannot be read ({e})",
                             fix=fixes.either(fixes.say("delete it (it only saves API calls)"),
                                              fixes.run("safehub cache clear"))) from e
        try:
            return RepoRecord.from_json(data)
        except (ValueError, TypeError, AttributeError) as e:
            raise CacheError(f"the cache record {str(path)!r} is malformed ({e})",
                             fix=fixes.either(fixes.say("delete it"),
                                              fixes.run("safehub cache clear"))) from e

    def write_repo(self, key: str, record: RepoRecord) -> None:
        """Atomically replace the repo's record (hold ``lock(f"repo-{key}")``)."""
        path = self.repo_file(key)
        self._writable_dir(path.parent)
        try:
            write_json(path, record.to_json())
        except OSError as e:
            raise CacheError(f"cannot write the cache record {str(path)!r} ({e.strerror or e})",
                             fix=fixes.say("free space or fix permissions in the cache "
                                           "folder")) from e

    def repos_by_commit(self) -> dict[str, list[str]]:
        """Which repos' records name each cached commit (``safehub cache ls``)."""
        out: dict[str, list[str]] = {}
        repos = self.base / "repos"
        if repos.is_dir():
            for f in sorted(repos.glob("*/*.json")):
                key = f"{f.parent.name}/{f.stem}"
                try:
                    commits = self.read_repo(key).commits
                except (CacheError, ValueError):
                    continue
                for commit in commits:
                    out.setdefault(commit, []).append(key)
        return out


#: The folder ``safehub demo --serve`` keeps its cache, policy and keys in, removed when it
#: stops (while the export lines that name it may live on in a shell).
DEMO_PREFIX = "safehub-demo-serve-"


def _refuse_orphan(root: Path, kept_by: str) -> None:
    """A cache ``root`` named by a lasting setting (``kept_by``: ``SAFEHUB_CACHE_DIR``, a
    policy's ``cache_dir``) inside a stopped ``safehub demo --serve``'s folder is not made
    again: the setting is a leftover of the demo's export lines. Any other missing root is
    made, with its folders (a deleted cache folder too, quietly)."""
    if not kept_by or os.path.lexists(root):
        return
    missing = root
    while not os.path.lexists(missing.parent) and missing.parent != missing:
        missing = missing.parent
        if missing.name.startswith(DEMO_PREFIX):
            from safehub._internal import fixes

            raise CacheError(
                f"the cache {str(root)!r} ({kept_by}) is in {str(missing)!r}, the folder of a "
                "`safehub demo --serve` that has stopped and removed it; safehub does not make "
                "it again", fix=fixes.say(
                    f"unset {kept_by} (then the user cache dir is used); the demo's stop "
                    "message names every variable to unset" if kept_by == "SAFEHUB_CACHE_DIR"
                    else f"remove the cache_dir the demo's folder names ({kept_by})"))


def _not_locked(path: Path, timeout: float, error: Exception) -> CacheError:
    """Why the lock file ``path`` was not taken: another process held it for ``timeout``
    seconds, or it is not a file that may be locked (a link or a folder in its place)."""
    quoted = fixes.quote(str(path))
    if isinstance(error, OSError):
        return CacheError(
            f"cannot take the lock {str(path)!r} ({error.strerror or error})",
            fix=fixes.say(f"remove {quoted} (a lock file is a plain file safehub makes; "
                          "nothing else belongs there)"))
    return CacheError(
        f"waited {timeout:.0f}s for the lock {str(path)!r}",
        fix=fixes.say(f"another safehub process holds it (a very large download?): wait for "
                      f"it to end, or end it (`lsof {quoted}` names it); only a running "
                      "process holds a lock, so deleting the file frees nothing"))
