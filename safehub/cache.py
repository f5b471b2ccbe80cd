"""The content-addressed cache of verified trees.

Layout under the cache root (``SAFEHUB_CACHE_DIR``, default: the user cache dir)::

    v1/commits/<sha>/tree/          the verified files, read-only (handed to torch)
    v1/commits/<sha>/verdict.json   what was verified: every file's hashes, the level
    v1/commits/<sha>/entry.json     commit, digest, tree and level (read on every hit)
    v1/repos/<owner>/<name>.json    refs resolved and commits proven to belong to the repo
    v1/locks/                       cross-process locks (filelock)
    v1/tmp/                         staging; a broken download never leaves it

A commit folder appears in one ``rename`` of a fully verified staging folder, under a
lock, so readers never see half a tree and any number of processes can load at once:
exactly one downloads. Everything here can be rewritten by whoever can write the cache,
so a hit is trusted only against per-user records kept elsewhere (the hub checks that);
this module supplies the cheap scan (:func:`scan_digest`) and the full re-hash
(:meth:`CachedTree.verify`), whose errors name the file. Nothing in it is re-downloaded in
silence.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safehub._internal.fsutil import read_json, rmtree, write_json
from safehub.digest import (
    MODE_EXEC,
    MODE_LINK,
    FileEntry,
    content_digest,
    git_tree_id,
    parents,
)
from safehub.errors import CacheError, IntegrityError

__all__ = ["Cache", "CachedTree", "Verdict"]

_LAYOUT = "v1"
_FORMAT = 1


@dataclass(frozen=True)
class Verdict:
    """What was verified about one commit's files (``verdict.json``)."""

    commit: str
    tree: str
    digest: str
    level: str
    files: tuple[FileEntry, ...]
    unverified: tuple[str, ...] = ()
    omitted: tuple[str, ...] = ()
    empty_dirs: tuple[str, ...] = ()
    source: str = ""
    created: str = field(
        default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "commit": self.commit,
            "tree": self.tree,
            "digest": self.digest,
            "level": self.level,
            "unverified": list(self.unverified),
            "omitted": list(self.omitted),
            "empty_dirs": list(self.empty_dirs),
            "source": self.source,
            "created": self.created,
            "files": [[f.path, f.mode, f.size, f.sha256, f.blob] for f in self.files],
        }

    @classmethod
    def from_json(cls, data: Any) -> Verdict:
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError("unknown verdict format")
        files = tuple(
            FileEntry(str(p), str(m), int(n), str(h), str(b)) for p, m, n, h, b in data["files"]
        )
        return cls(
            commit=str(data["commit"]),
            tree=str(data["tree"]),
            digest=str(data["digest"]),
            level=str(data["level"]),
            files=files,
            unverified=tuple(data.get("unverified", ())),
            omitted=tuple(data.get("omitted", ())),
            empty_dirs=tuple(data.get("empty_dirs", ())),
            source=str(data.get("source", "")),
            created=str(data.get("created", "")),
        )


def scan_digest(root: Path) -> str:
    """One hash over every entry under ``root``: name, type, mode, size, times, inode.

    ctime cannot be set by a user: any write, chmod or replacement after install changes
    it, and so does any added, removed or renamed entry. Equal scans mean nothing was
    touched. Entries are taken in directory order, which is stable for an unchanged
    folder; if it ever differs, the full check runs and records the new scan.
    """
    h = hashlib.sha256()
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                name = entry.name.encode()
                if entry.is_dir(follow_symlinks=False):
                    h.update(b"d %s\0" % name)
                    stack.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
                h.update(b"f %s\0%d %d %d %d %d\n" % (
                    name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return h.hexdigest()


def _tamper(path: Path, why: str) -> IntegrityError:
    return IntegrityError(
        f"cached file {str(path)!r} {why}; it changed after safehub verified it",
        hint="nothing was run. Inspect it, then `safehub cache clear` and load again, or "
        "load with force_reload=True to fetch and verify a fresh copy",
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

    @property
    def entry_dir(self) -> Path:
        return self.path.parent

    def verdict(self) -> Verdict:
        """The full verdict; it must add up to the digest this entry is known by."""
        vfile = self.entry_dir / "verdict.json"
        try:
            verdict = Verdict.from_json(read_json(vfile))
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise _tamper(vfile, f"cannot be read ({e})") from e
        if (verdict.commit, verdict.digest, verdict.tree) != (
                self.commit, self.digest, self.tree) or content_digest(
            verdict.files
        ) != verdict.digest:
            raise _tamper(vfile, "does not add up to the digest it was installed with")
        return verdict

    def scan(self) -> str:
        """:func:`scan_digest` of the tree (an IntegrityError if it cannot be listed)."""
        try:
            return scan_digest(self.path)
        except OSError as e:
            raise _tamper(self.path, f"cannot be listed ({e.strerror})") from e

    def verify(self) -> None:
        """Full check: the set of files, every byte re-hashed, digest and tree id.

        ``__pycache__`` folders holding only ``.pyc`` files are removed first: Python
        writes them into read-only folders when run as root (for modules imported after a
        load returns), and they are never needed. Anything else extra is an error.
        """
        v = self.verdict()
        _remove_bytecode(self.path)
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
        expected = {f.path for f in v.files}
        dirs = {p for p in found if p.endswith("/")}
        for rel in sorted(found):
            if rel not in dirs and rel not in expected:
                raise _tamper(self.path / rel, "is not part of the verified tree")
        allowed = {p + "/" for f in v.files for p in parents(f.path)}
        allowed |= {p + "/" for d in v.empty_dirs for p in (d, *parents(d))}
        if dirs - allowed:
            raise _tamper(self.path / min(dirs - allowed), "is a folder that was not in the tree")
        for f in v.files:
            st = found.get(f.path)
            if st is None:
                raise _tamper(self.path / f.path, "is missing")
            is_link = stat.S_ISLNK(st.st_mode)
            if is_link != (f.mode == MODE_LINK) or not (is_link or stat.S_ISREG(st.st_mode)):
                raise _tamper(self.path / f.path, "changed type")
            self._check_bytes(f, st)
        if v.level == "tree" and git_tree_id(v.files) != v.tree:
            raise _tamper(self.entry_dir / "verdict.json", "does not match its git tree id")

    def _check_bytes(self, f: FileEntry, st: os.stat_result) -> None:
        p = self.path / f.path
        if f.mode == MODE_LINK:
            if hashlib.sha256(os.readlink(p).encode()).hexdigest() != f.sha256:
                raise _tamper(p, "points somewhere else")
            return
        h = hashlib.sha256()
        try:
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        except OSError as e:
            raise _tamper(p, f"cannot be read ({e.strerror})") from e
        if h.hexdigest() != f.sha256:
            raise _tamper(p, "has different content")
        if (f.mode == MODE_EXEC) != bool(st.st_mode & 0o100):
            raise _tamper(p, "changed its executable bit")


def _remove_bytecode(tree: Path) -> None:
    for dirpath, dirnames, _ in os.walk(tree):
        if "__pycache__" not in dirnames:
            continue
        cache = Path(dirpath) / "__pycache__"
        if cache.is_symlink():
            continue
        names = os.listdir(cache)
        if all(n.endswith(".pyc") and (cache / n).is_file() and not (cache / n).is_symlink()
               for n in names):
            with contextlib.suppress(OSError):
                rmtree(cache)


def _write_entry(entry: CachedTree) -> None:
    write_json(entry.entry_dir / "entry.json", {
        "format": _FORMAT, "commit": entry.commit, "digest": entry.digest,
        "tree": entry.tree, "level": entry.level,
    }, mode=0o444)



class Cache:
    """The cache root: lookups without locks, installs under a per-commit lock."""

    def __init__(self, root: Path, *, lock_timeout: float = 600.0) -> None:
        self.root = root
        self.base = root / _LAYOUT
        self.lock_timeout = lock_timeout

    # -- paths ------------------------------------------------------------------------

    def commit_dir(self, commit: str) -> Path:
        return self.base / "commits" / commit

    def repo_file(self, key: str) -> Path:
        owner, name = key.split("/")
        return self.base / "repos" / owner / f"{name}.json"

    # -- locking and staging ----------------------------------------------------------

    def _writable_dir(self, path: Path) -> Path:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheError(
                f"cannot create the cache folder {str(path)!r} ({e.strerror or e})",
                hint="point SAFEHUB_CACHE_DIR at a folder you can write, or fill a shared "
                "cache with `safehub prefetch` so loads only read it",
            ) from e
        if not os.access(path, os.W_OK | os.X_OK):
            raise CacheError(
                f"the cache folder {str(path)!r} is not writable",
                hint="point SAFEHUB_CACHE_DIR at a folder you can write, or fill a shared "
                "cache with `safehub prefetch` so loads only read it",
            )
        return path

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the cross-process lock ``name`` (a commit sha or a repo key)."""
        import filelock

        lock_dir = self._writable_dir(self.base / "locks")
        path = lock_dir / (name.replace("/", "--") + ".lock")
        try:
            with filelock.FileLock(str(path), timeout=self.lock_timeout):
                yield
        except filelock.Timeout as e:
            raise CacheError(
                f"waited {self.lock_timeout:.0f}s for the lock {str(path)!r}",
                hint="another safehub process holds it (a very large download?); if none "
                "is running, delete the lock file",
            ) from e

    def staging(self, commit: str) -> Path:
        """A fresh staging folder for ``commit`` (call under that commit's lock).

        Leftovers of earlier crashed attempts at the same commit are removed first: the
        lock proves nobody else is using them.
        """
        tmp = self._writable_dir(self.base / "tmp")
        for old in tmp.glob(f"{commit}-*"):
            rmtree(old)
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
            raise _tamper(ffile, f"cannot be read ({e})") from e
        try:
            if data["format"] != _FORMAT:
                raise ValueError("unknown format")
            entry = CachedTree(d / "tree", str(data["commit"]), str(data["digest"]),
                               str(data["tree"]), str(data["level"]))
        except (KeyError, TypeError, ValueError) as e:
            raise _tamper(ffile, f"is malformed ({e})") from e
        if entry.commit != commit:
            raise _tamper(ffile, f"names commit {entry.commit}")
        return entry

    def install(self, stage: Path, verdict: Verdict, *, replace: bool = False) -> CachedTree:
        """Move a verified staging folder (with ``tree/`` inside) into place atomically.

        Call under the commit's lock. With ``replace``, an existing entry is swapped out
        (``force_reload``); otherwise an existing entry wins and the stage is dropped.
        """
        final = self.commit_dir(verdict.commit)
        write_json(stage / "verdict.json", verdict.to_json(), mode=0o444)
        _write_entry(CachedTree(stage / "tree", verdict.commit, verdict.digest, verdict.tree,
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
        found = self.lookup(verdict.commit)
        assert found is not None
        return found

    def entries(self) -> Iterator[CachedTree]:
        """Every cached commit (for ``safehub cache ls|verify``)."""
        commits = self.base / "commits"
        if not commits.is_dir():
            return
        for d in sorted(commits.iterdir()):
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
        for dirpath, dirnames, filenames in os.walk(self.base):
            if os.path.basename(dirpath) == "tree":
                dirnames[:] = []  # verified trees are read-only since install
            for name in filenames:
                path = os.path.join(dirpath, name)
                mode = os.lstat(path).st_mode
                if mode & 0o222 and not stat.S_ISLNK(mode):
                    os.chmod(path, mode & 0o555)
        for dirpath, _dirnames, _ in os.walk(self.base, topdown=False):
            if "/tree" not in dirpath.removeprefix(str(self.base)):
                os.chmod(dirpath, 0o555)

    def clear(self) -> None:
        """Remove everything safehub cached (locks stay, they may be held)."""
        for part in ("commits", "repos", "tmp"):
            rmtree(self.base / part)

    # -- per-repo records -------------------------------------------------------------

    def read_repo(self, key: str) -> dict[str, Any]:
        """The repo's record: resolved refs and commits proven to be its own."""
        path = self.repo_file(key)
        try:
            data = read_json(path)
        except (FileNotFoundError, NotADirectoryError):
            return {"refs": {}, "commits": {}}
        except (OSError, ValueError) as e:
            raise CacheError(
                f"the cache record {str(path)!r} cannot be read ({e})",
                hint="delete it (it only saves API calls) or run `safehub cache clear`",
            ) from e
        if not isinstance(data, dict):
            raise CacheError(f"the cache record {str(path)!r} is malformed",
                             hint="delete it or run `safehub cache clear`")
        data.setdefault("refs", {})
        data.setdefault("commits", {})
        return data

    def write_repo(self, key: str, data: dict[str, Any]) -> None:
        """Atomically replace the repo's record (hold ``lock(f"repo-{key}")``)."""
        path = self.repo_file(key)
        self._writable_dir(path.parent)
        write_json(path, data)
