"""The content-addressed cache of verified trees.

Layout under the cache root (``SAFEHUB_CACHE_DIR``, default: the user cache dir)::

    v1/commits/<sha>/tree/          the verified files, read-only (handed to torch)
    v1/commits/<sha>/verdict.json   what was verified: hashes, stat fingerprints, level
    v1/repos/<owner>/<name>.json    refs resolved and commits proven to belong to the repo
    v1/locks/                       cross-process locks (filelock)
    v1/tmp/                         staging; a broken download never leaves it

A commit folder appears in one ``rename`` of a fully verified staging folder, under a
lock, so readers never see half a tree and any number of processes can load at once:
exactly one downloads. A cache hit re-checks what it serves: the folder must hold
exactly the recorded files, each with its recorded stat fingerprint, or else the same
bytes (re-hashed); anything else is an :class:`IntegrityError` naming the file. Nothing
in it is re-downloaded in silence.
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
from safehub.digest import MODE_LINK, FileEntry, content_digest, git_tree_id
from safehub.errors import CacheError, IntegrityError

__all__ = ["Cache", "CachedTree", "Verdict"]

_LAYOUT = "v1"
_VERDICT_FORMAT = 1


@dataclass(frozen=True)
class Verdict:
    """What was verified about one commit's files."""

    commit: str
    tree: str
    digest: str
    level: str
    files: tuple[FileEntry, ...]
    unverified: tuple[str, ...] = ()
    omitted: tuple[str, ...] = ()
    empty_dirs: tuple[str, ...] = ()
    source: str = ""
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def to_json(self, fingerprints: dict[str, list[int]]) -> dict[str, Any]:
        return {
            "format": _VERDICT_FORMAT,
            "commit": self.commit,
            "tree": self.tree,
            "digest": self.digest,
            "level": self.level,
            "unverified": list(self.unverified),
            "omitted": list(self.omitted),
            "empty_dirs": list(self.empty_dirs),
            "source": self.source,
            "created": self.created,
            "files": [
                [f.path, f.mode, f.size, f.sha256, f.blob, *fingerprints.get(f.path, [])]
                for f in self.files
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> tuple[Verdict, dict[str, list[int]]]:
        if not isinstance(data, dict) or data.get("format") != _VERDICT_FORMAT:
            raise ValueError("unknown verdict format")
        files: list[FileEntry] = []
        prints: dict[str, list[int]] = {}
        for row in data["files"]:
            path, mode, size, sha256, blob = row[:5]
            files.append(FileEntry(str(path), str(mode), int(size), str(sha256), str(blob)))
            prints[path] = [int(x) for x in row[5:]]
        verdict = cls(
            commit=str(data["commit"]),
            tree=str(data["tree"]),
            digest=str(data["digest"]),
            level=str(data["level"]),
            files=tuple(files),
            unverified=tuple(data.get("unverified", ())),
            omitted=tuple(data.get("omitted", ())),
            empty_dirs=tuple(data.get("empty_dirs", ())),
            source=str(data.get("source", "")),
            created=str(data.get("created", "")),
        )
        return verdict, prints


def _fingerprint(st: os.stat_result) -> list[int]:
    # ctime cannot be set by a user: any write or chmod after install changes it.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _tamper(path: Path, why: str) -> IntegrityError:
    return IntegrityError(
        f"cached file {str(path)!r} {why}; it changed after safehub verified it",
        hint="nothing was run. Inspect it, then `safehub cache clear` and load again, or "
        "load with force_reload=True to fetch and verify a fresh copy",
    )


@dataclass(frozen=True)
class CachedTree:
    """A verified tree in the cache and its verdict."""

    path: Path
    verdict: Verdict
    fingerprints: dict[str, list[int]]

    @property
    def commit(self) -> str:
        return self.verdict.commit

    def _scan(self) -> dict[str, os.stat_result]:
        """lstat every entry under the tree; refuse anything unexpected in structure."""
        found: dict[str, os.stat_result] = {}
        stack = [""]
        while stack:
            rel = stack.pop()
            base = self.path / rel if rel else self.path
            try:
                entries = list(os.scandir(base))
            except OSError as e:
                raise _tamper(base, f"cannot be listed ({e.strerror})") from e
            for entry in entries:
                sub = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(sub)
                    found.setdefault(sub + "/", st)
                else:
                    found[sub] = st
        return found

    def recheck(self) -> None:
        """The cheap check on every hit: structure, then stat fingerprints, then bytes.

        A file whose fingerprint differs (say, the cache was copied) is re-hashed; only
        different bytes are an error. The verdict's own list must still add up to its
        digest, so the digest that consent and lockfiles name covers these very files.
        """
        v = self.verdict
        if content_digest(v.files) != v.digest:
            raise _tamper(self.path.parent / "verdict.json", "does not add up to its digest")
        found = self._scan()
        expected = {f.path for f in v.files}
        dirs = {p for p in found if p.endswith("/")}
        for rel in found:
            if rel not in dirs and rel not in expected:
                raise _tamper(self.path / rel, "is not part of the verified tree")
        for f in v.files:
            st = found.get(f.path)
            if st is None:
                raise _tamper(self.path / f.path, "is missing")
            is_link = stat.S_ISLNK(st.st_mode)
            if is_link != (f.mode == MODE_LINK) or not (is_link or stat.S_ISREG(st.st_mode)):
                raise _tamper(self.path / f.path, "changed type")
            if self.fingerprints.get(f.path) == _fingerprint(st):
                continue
            self._check_bytes(f)
        allowed = {p + "/" for f in v.files for p in _parents(f.path)}
        allowed |= {p + "/" for d in v.empty_dirs for p in (d, *_parents(d))}
        if dirs - allowed:
            raise _tamper(self.path / min(dirs - allowed), "is a folder that was not in the tree")

    def _check_bytes(self, f: FileEntry) -> None:
        p = self.path / f.path
        if f.mode == MODE_LINK:
            data = os.readlink(p).encode()
        else:
            h = hashlib.sha256()
            try:
                with open(p, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
            except OSError as e:
                raise _tamper(p, f"cannot be read ({e.strerror})") from e
            if h.hexdigest() != f.sha256:
                raise _tamper(p, "has different content")
            if (f.mode == "100755") != bool(os.lstat(p).st_mode & 0o100):
                raise _tamper(p, "changed its executable bit")
            return
        if hashlib.sha256(data).hexdigest() != f.sha256:
            raise _tamper(p, "points somewhere else")

    def verify(self) -> None:
        """Full check: every byte re-hashed, digest and tree id recomputed."""
        v = self.verdict
        self.recheck()
        for f in v.files:
            self._check_bytes(f)
        if v.level == "tree" and git_tree_id(v.files) != v.tree:
            raise _tamper(self.path.parent / "verdict.json", "does not match its git tree id")


def _parents(path: str) -> Iterator[str]:
    parent = path.rpartition("/")[0]
    while parent:
        yield parent
        parent = parent.rpartition("/")[0]


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
        """The cached tree of ``commit``, or ``None``; a broken verdict is an error."""
        d = self.commit_dir(commit)
        vfile = d / "verdict.json"
        try:
            data = read_json(vfile)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as e:
            raise _tamper(vfile, f"cannot be read ({e})") from e
        try:
            verdict, prints = Verdict.from_json(data)
        except (KeyError, TypeError, ValueError) as e:
            raise _tamper(vfile, f"is malformed ({e})") from e
        if verdict.commit != commit:
            raise _tamper(vfile, f"names commit {verdict.commit}")
        return CachedTree(d / "tree", verdict, prints)

    def install(self, stage: Path, verdict: Verdict, *, replace: bool = False) -> CachedTree:
        """Move a verified staging folder (with ``tree/`` inside) into place atomically.

        Call under the commit's lock. With ``replace``, an existing entry is swapped out
        (``force_reload``); otherwise an existing entry wins and the stage is dropped.
        """
        final = self.commit_dir(verdict.commit)
        prints = {}
        tree = stage / "tree"
        for f in verdict.files:
            prints[f.path] = _fingerprint(os.lstat(tree / f.path))
        write_json(stage / "verdict.json", verdict.to_json(prints), mode=0o444)
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
        return CachedTree(final / "tree", verdict, prints)

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
