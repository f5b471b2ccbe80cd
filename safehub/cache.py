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
import re
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
    MODE_FILE,
    MODE_LINK,
    FileEntry,
    content_digest,
    git_tree_id,
    parents,
)
from safehub.errors import CacheError, IntegrityError
from safehub.records import is_digest
from safehub.spec import RepoSpec, is_full_sha

__all__ = ["Cache", "CachedTree", "CommitProof", "RefRecord", "RepoRecord", "Verdict"]

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
        """A verdict read back from disk, every field checked (a ValueError if not)."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError("unknown verdict format")
        if not (is_full_sha(data.get("commit")) and is_full_sha(data.get("tree"))
                and is_digest(data.get("digest")) and data.get("level") in LEVELS):
            raise ValueError("malformed commit, tree, digest or level")
        rows = data.get("files")
        if not isinstance(rows, list):
            raise ValueError("no file list")
        files = tuple(_file_entry(row) for row in rows)
        lists = {k: data.get(k, []) for k in ("unverified", "omitted", "empty_dirs")}
        for name, items in lists.items():
            if not isinstance(items, list) or not all(_safe_path(p) for p in items):
                raise ValueError(f"malformed {name}")
        return cls(
            commit=data["commit"], tree=data["tree"], digest=data["digest"],
            level=data["level"], files=files, unverified=tuple(lists["unverified"]),
            omitted=tuple(lists["omitted"]), empty_dirs=tuple(lists["empty_dirs"]),
            source=str(data.get("source", "")), created=str(data.get("created", "")),
        )


LEVELS = ("tree", "per-file")
_MODES = frozenset({MODE_FILE, MODE_EXEC, MODE_LINK})
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _safe_path(path: object) -> bool:
    """A relative POSIX path inside a tree: no absolute path, no '.' or '..' parts."""
    return (isinstance(path, str) and bool(path) and not path.startswith("/")
            and all(part not in ("", ".", "..") for part in path.split("/")))


def _file_entry(row: Any) -> FileEntry:
    if not (isinstance(row, list) and len(row) == 5):
        raise ValueError("malformed file row")
    path, mode, size, sha256, blob = row
    if not (_safe_path(path) and mode in _MODES and type(size) is int and size >= 0
            and isinstance(sha256, str) and _HEX64.fullmatch(sha256)
            and is_full_sha(blob)):
        raise ValueError(f"malformed file row for {str(path)[:80]!r}")
    return FileEntry(path, mode, size, sha256, blob)


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
        """The folder of ``commit``; only ever built from a validated 40-hex sha."""
        if not is_full_sha(commit):
            raise CacheError(f"refusing to use {commit!r} as a cache path: not a 40-hex sha",
                             hint="a cache or lockfile record is malformed; run `safehub "
                             "cache clear`")
        return self.base / "commits" / commit

    def repo_file(self, key: str) -> Path:
        spec = RepoSpec.parse(key)  # validated before it becomes a path
        return self.base / "repos" / spec.owner.lower() / f"{spec.name.lower()}.json"

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

    def staging_root(self) -> Path:
        """The cache's (writable) staging folder."""
        return self._writable_dir(self.base / "tmp")

    def staging(self, commit: str) -> Path:
        """A fresh staging folder for ``commit`` (call under that commit's lock).

        Leftovers of earlier crashed attempts at the same commit are removed first: the
        lock proves nobody else is using them.
        """
        tmp = self._writable_dir(self.base / "tmp")
        self.commit_dir(commit)  # validates the sha before it becomes a glob
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
        if not (isinstance(data, dict) and data.get("format") == _FORMAT
                and is_full_sha(data.get("commit")) and is_digest(data.get("digest"))
                and is_full_sha(data.get("tree")) and data.get("level") in LEVELS):
            raise _tamper(ffile, "is malformed")
        entry = CachedTree(d / "tree", data["commit"], data["digest"], data["tree"],
                           data["level"])
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
                             hint="delete it (it only saves API calls) or run `safehub cache "
                             "clear`") from e
        try:
            return RepoRecord.from_json(data)
        except (ValueError, TypeError, AttributeError) as e:
            raise CacheError(f"the cache record {str(path)!r} is malformed ({e})",
                             hint="delete it or run `safehub cache clear`") from e

    def write_repo(self, key: str, record: RepoRecord) -> None:
        """Atomically replace the repo's record (hold ``lock(f"repo-{key}")``)."""
        path = self.repo_file(key)
        self._writable_dir(path.parent)
        write_json(path, record.to_json())

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


@dataclass
class RefRecord:
    ref: str
    commit: str


@dataclass
class CommitProof:
    tree: str
    proof: str


@dataclass
class RepoRecord:
    """What the cache remembers about a repo (``repos/<owner>/<name>.json``)."""

    refs: dict[str, RefRecord] = field(default_factory=dict)
    commits: dict[str, CommitProof] = field(default_factory=dict)
    moved_to: str | None = None
    name: str = ""

    @classmethod
    def from_json(cls, data: Any) -> RepoRecord:
        if not isinstance(data, dict):
            raise ValueError("not an object")
        refs, commits = data.get("refs", {}), data.get("commits", {})
        if not isinstance(refs, dict) or not isinstance(commits, dict):
            raise ValueError("refs and commits must be objects")
        record = cls()
        for ref, hit in refs.items():
            if not (isinstance(hit, dict) and isinstance(hit.get("ref"), str)
                    and is_full_sha(hit.get("commit"))):
                raise ValueError(f"malformed ref {str(ref)[:80]!r}")
            record.refs[str(ref)] = RefRecord(hit["ref"], hit["commit"])
        for sha, proof in commits.items():
            if not (is_full_sha(sha) and isinstance(proof, dict)
                    and is_full_sha(proof.get("tree")) and isinstance(proof.get("proof"), str)):
                raise ValueError(f"malformed commit {str(sha)[:80]!r}")
            record.commits[sha] = CommitProof(proof["tree"], proof["proof"])
        moved, name = data.get("moved_to"), data.get("name", "")
        if moved is not None:
            if not isinstance(moved, str):
                raise ValueError("malformed moved_to")
            record.moved_to = RepoSpec.parse(moved).key  # a SpecError is a ValueError
        if name:
            record.name = RepoSpec.parse(name).repo
        return record

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "refs": {k: {"ref": v.ref, "commit": v.commit} for k, v in self.refs.items()},
            "commits": {k: {"tree": v.tree, "proof": v.proof} for k, v in self.commits.items()},
        }
        if self.moved_to:
            data["moved_to"] = self.moved_to
        if self.name:
            data["name"] = self.name
        return data
