"""What the cache stores besides the trees: verdicts and per-repo records, checked on read.

Everything under the cache root can be rewritten by whoever can write the cache, so every
record read back is validated field by field (shas are 40-hex, digests ``sha256:`` + 64
hex, paths relative without ``..``); a record of the wrong shape is a ``ValueError`` that
the cache turns into an :class:`~safehub.errors.IntegrityError` or
:class:`~safehub.errors.CacheError`, never a path built from it.
"""

from __future__ import annotations

import re
import time
from typing import Any

from safehub._internal.frozen import Frozen, Mutable, field
from safehub.digest import MODE_EXEC, MODE_FILE, MODE_LINK, FileEntry, is_digest
from safehub.spec import FULL_REF, RepoSpec, is_full_sha

__all__ = ["FORMAT", "LEVELS", "CommitProof", "RefRecord", "RepoRecord", "Verdict"]

FORMAT = 1

class Verdict(Frozen):
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
            "format": FORMAT,
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
        if not isinstance(data, dict) or data.get("format") != FORMAT:
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



class RefRecord(Mutable):
    """A ref resolved before: the ref as asked, the commit it named."""

    ref: str
    commit: str
    full: str = ""
    """The branch or tag as ``refs/heads/NAME`` or ``refs/tags/NAME`` (policy ``refs``)."""


class CommitProof(Mutable):
    """A commit proven to be the repo's own: its tree, and how it was proven."""

    tree: str
    proof: str


class RepoRecord(Mutable):
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
            full = hit.get("full", "")
            if not (isinstance(full, str) and (not full or FULL_REF.fullmatch(full))):
                raise ValueError(f"malformed full name of ref {str(ref)[:80]!r}")
            record.refs[str(ref)] = RefRecord(hit["ref"], hit["commit"], full)
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
            "refs": {k: {"ref": v.ref, "commit": v.commit, **({"full": v.full} if v.full else {})}
                     for k, v in self.refs.items()},
            "commits": {k: {"tree": v.tree, "proof": v.proof} for k, v in self.commits.items()},
        }
        if self.moved_to:
            data["moved_to"] = self.moved_to
        if self.name:
            data["name"] = self.name
        return data
