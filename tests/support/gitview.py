"""What the GitHub stand-in knows about a repo, read from git itself.

A :class:`GitView` looks at one served repo: its own refs, and the objects of its whole fork
network (GitHub keeps one object store per network, so a fork's commit is reachable by sha
under the parent's name). The sharing is done without touching the repos: object queries
run in an empty scratch git dir whose object store is the repo's own plus, for the network
view, the others' as alternates (``GIT_OBJECT_DIRECTORY``, ``GIT_ALTERNATE_OBJECT_DIRECTORIES``).
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .gitrepo import EMPTY_TREE, run_git

__all__ = [
    "ABBREV_SHA",
    "FULL_SHA",
    "Commit",
    "Comparison",
    "Diff",
    "FileChange",
    "GitView",
    "Identity",
    "Ref",
    "TagObject",
    "ref_is_safe",
]

FULL_SHA = re.compile(r"[0-9a-f]{40}")
#: git's own shortest abbreviation (MINIMUM_ABBREV) is 4 hex digits.
ABBREV_SHA = re.compile(r"[0-9a-fA-F]{4,40}")
_IDENTITY = re.compile(rb"(.*) <(.*)> (\d+) [+-]\d{4}")
_FORBIDDEN_IN_REF = ("..", "~", "^", ":", "@{", "\\", "?", "*", "[")
_STATUS = {"A": "added", "D": "removed", "M": "modified", "R": "renamed", "C": "copied",
           "T": "changed"}


def ref_is_safe(ref: str) -> bool:
    """Whether ``ref`` may be given to git as a name (no revision syntax, no option)."""
    if not ref or ref.startswith("-") or ref == "@":
        return False
    if any(token in ref for token in _FORBIDDEN_IN_REF):
        return False
    return all(ch.isprintable() and not ch.isspace() for ch in ref)


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    date: str  # ISO 8601, UTC, as GitHub writes it


@dataclass(frozen=True)
class Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    message: str
    author: Identity
    committer: Identity


@dataclass(frozen=True)
class TagObject:
    """An annotated tag object (what ``git/tags/{sha}`` describes)."""

    sha: str
    tag: str
    object_sha: str
    object_type: str
    message: str
    tagger: Identity


@dataclass(frozen=True)
class Ref:
    """A ref of the repo: ``target`` is what it points to directly, ``commit`` its peel."""

    name: str  # full name, e.g. refs/heads/main
    target: str
    target_type: str  # "commit" or "tag" (annotated)
    commit: str


@dataclass(frozen=True)
class FileChange:
    """One entry of a diff, as GitHub lists it under ``files``."""

    filename: str
    status: str
    sha: str
    additions: int
    deletions: int
    patch: str | None
    previous_filename: str | None = None


@dataclass(frozen=True)
class Diff:
    files: tuple[FileChange, ...]  # at most the limit asked for
    total_files: int
    additions: int  # over every file, not only those listed
    deletions: int


@dataclass(frozen=True)
class Comparison:
    """``base...head`` as GitHub's compare endpoint sees it (head relative to base)."""

    status: str
    ahead_by: int
    behind_by: int
    merge_base: str
    commits: tuple[str, ...]  # head-only commits, oldest first, at most 250


def _identity(raw: bytes) -> Identity:
    match = _IDENTITY.fullmatch(raw)
    if match is None:
        return Identity(raw.decode(errors="replace"), "", "")
    when = datetime.datetime.fromtimestamp(int(match.group(3)), datetime.timezone.utc)
    return Identity(match.group(1).decode(errors="replace"),
                    match.group(2).decode(errors="replace"), when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _headers(raw: bytes) -> tuple[dict[bytes, list[bytes]], str]:
    head, _, message = raw.partition(b"\n\n")
    fields: dict[bytes, list[bytes]] = {}
    for line in head.split(b"\n"):
        if line.startswith(b" "):  # continuation of a multi-line header (gpgsig, mergetag)
            continue
        key, _, value = line.partition(b" ")
        fields.setdefault(key, []).append(value)
    return fields, message.decode(errors="replace")


class GitView:
    """Ref and object queries for one repo, answered by the ``git`` command.

    ``git_dir`` holds the repo's refs; ``objects`` is its object store and ``network`` the
    object stores of the other repos in its fork network. ``scratch`` is an empty bare git
    dir (no refs) where object-only commands run.
    """

    def __init__(self, git_dir: Path, objects: Path, network: Sequence[Path], scratch: Path,
                 default_branch: str) -> None:
        self.git_dir = git_dir
        self.default_branch = default_branch
        self._own = {"GIT_DIR": str(scratch), "GIT_OBJECT_DIRECTORY": str(objects)}
        self._net = dict(self._own)
        if network:
            self._net["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = os.pathsep.join(map(str, network))

    def _git(self, args: Sequence[str], *, network: bool = True, stdin: bytes | None = None,
             refs: bool = False, check: bool = True) -> bytes:
        env: Mapping[str, str] = {"GIT_DIR": str(self.git_dir)} if refs else (
            self._net if network else self._own)
        return run_git(args, env=env, stdin=stdin, check=check).stdout

    # -- refs -------------------------------------------------------------------------------

    def refs(self, prefix: str) -> list[Ref]:
        """The repo's refs whose full name starts with ``prefix`` (e.g. ``refs/tags/``)."""
        fmt = "%(refname)%00%(objectname)%00%(objecttype)%00%(*objectname)"
        out = self._git(["for-each-ref", f"--format={fmt}"], refs=True)
        found = []
        for line in out.decode(errors="replace").splitlines():
            name, target, kind, peeled = line.split("\0")
            if name.startswith(prefix) and not name.startswith("refs/remotes/"):
                found.append(Ref(name, target, kind, peeled or target))
        return sorted(found, key=lambda r: r.name)

    def ref(self, name: str) -> Ref | None:
        """The ref called exactly ``name`` (a full name), if the repo has it."""
        return next((r for r in self.refs(name) if r.name == name), None)

    # -- resolution -------------------------------------------------------------------------

    def resolve(self, ref: str, peel: str = "commit") -> str | None:
        """Resolve ``ref`` to a ``peel`` object ("commit" or "tree") as GitHub would.

        A full sha names an object of the network. Otherwise names come first, in git's
        order among the repo's own refs (``refs/NAME``, ``refs/tags/NAME``, ``refs/heads/NAME``;
        ``HEAD`` is the default branch); then a hex string of 4+ digits resolves as an
        abbreviated object name in the network (own objects win where the network is
        ambiguous). Revision syntax (``~``, ``^``, ``..``, ``@{``) resolves to nothing.
        """
        if not ref_is_safe(ref):
            return None
        if FULL_SHA.fullmatch(ref.lower()):
            return self._peel(ref.lower(), peel, network=True)
        names = [f"refs/heads/{self.default_branch}"] if ref == "HEAD" else [
            *([ref] if ref.startswith("refs/") else []),
            f"refs/{ref}", f"refs/tags/{ref}", f"refs/heads/{ref}"]
        names = [n for n in names if not n.startswith("refs/remotes/")]
        wanted = "".join(f"{name}^{{{peel}}}\n" for name in names).encode()
        out = self._git(["cat-file", "--batch-check=%(objectname)"], refs=True, stdin=wanted,
                        check=False)
        for line in out.decode(errors="replace").splitlines():
            if FULL_SHA.fullmatch(line):
                return line
        if ABBREV_SHA.fullmatch(ref):
            for network in (True, False):
                sha = self._peel(ref.lower(), peel, network=network)
                if sha is not None:
                    return sha
        return None

    def _peel(self, name: str, peel: str, *, network: bool) -> str | None:
        out = self._git(["rev-parse", "--verify", "--quiet", f"{name}^{{{peel}}}"],
                        network=network, check=False).decode().strip()
        return out if FULL_SHA.fullmatch(out) else None

    def object_type(self, sha: str) -> str | None:
        """``commit``, ``tree``, ``blob`` or ``tag`` for a full sha in the network, else None."""
        if not FULL_SHA.fullmatch(sha):
            return None
        out = self._git(["cat-file", "-t", sha], check=False).decode().strip()
        return out or None

    # -- objects ----------------------------------------------------------------------------

    def _batch(self, shas: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        unique = list(dict.fromkeys(shas))
        out = self._git(["cat-file", "--batch"], stdin="".join(f"{s}\n" for s in unique).encode())
        found: dict[str, tuple[str, bytes]] = {}
        pos = 0
        for sha in unique:
            end = out.index(b"\n", pos)
            header = out[pos:end].decode().split()
            if len(header) != 3:  # "<sha> missing"
                pos = end + 1
                continue
            size = int(header[2])
            found[sha] = (header[1], out[end + 1 : end + 1 + size])
            pos = end + 1 + size + 1
        return found

    def commits(self, shas: Sequence[str]) -> dict[str, Commit]:
        """Parse commit objects of the network with one git call; raise if one is missing."""
        found = {}
        for sha, (kind, raw) in self._batch(shas).items():
            if kind == "commit":
                fields, message = _headers(raw)
                found[sha] = Commit(
                    sha=sha, tree=fields[b"tree"][0].decode(),
                    parents=tuple(p.decode() for p in fields.get(b"parent", [])),
                    message=message.rstrip("\n"),
                    author=_identity(fields.get(b"author", [b""])[0]),
                    committer=_identity(fields.get(b"committer", [b""])[0]))
        missing = [s for s in shas if s not in found]
        if missing:
            raise LookupError(f"not commits in this network: {', '.join(missing)}")
        return found

    def tag(self, sha: str) -> TagObject | None:
        """The annotated tag object ``sha`` (full sha), or None if it is no tag object."""
        raw = self._batch([sha]).get(sha) if FULL_SHA.fullmatch(sha) else None
        if raw is None or raw[0] != "tag":
            return None
        fields, message = _headers(raw[1])
        return TagObject(sha=sha, tag=fields[b"tag"][0].decode(errors="replace"),
                         object_sha=fields[b"object"][0].decode(),
                         object_type=fields[b"type"][0].decode(), message=message,
                         tagger=_identity(fields.get(b"tagger", [b""])[0]))

    def blob(self, sha: str) -> bytes | None:
        """A blob's bytes by full sha, or None if there is no such blob in the network."""
        raw = self._batch([sha]).get(sha) if FULL_SHA.fullmatch(sha) else None
        return raw[1] if raw is not None and raw[0] == "blob" else None

    def tree_entries(self, tree: str, *, recursive: bool) -> list[tuple[str, ...]]:
        """``(path, mode, type, sha, size)`` of each entry, as ``git ls-tree --long`` says."""
        args = ["ls-tree", "--long", "-z", *(["-r", "-t"] if recursive else []), tree]
        entries = []
        for raw in self._git(args).split(b"\0"):
            if raw:
                meta, _, name = raw.partition(b"\t")
                entries.append((name.decode(errors="replace"), *meta.decode().split()))
        return entries

    def archive(self, sha: str, prefix: str) -> bytes:
        """``git archive --format=zip`` of commit ``sha`` under folder ``prefix``."""
        return self._git(["archive", "--format=zip", f"--prefix={prefix}", sha])

    # -- history ----------------------------------------------------------------------------

    def compare(self, base: str, head: str, limit: int = 250) -> Comparison | None:
        """GitHub's three-dot comparison of two commits; None if they share no history."""
        found = self._git(["merge-base", base, head], check=False).decode().strip()
        if not FULL_SHA.fullmatch(found):
            return None
        marked = self._git(["rev-list", "--left-right", "--reverse", f"{base}...{head}"])
        sides = marked.decode().split()
        new = tuple(line[1:] for line in sides if line.startswith(">"))
        ahead, behind = len(new), len(sides) - len(new)
        status = ("identical" if not ahead and not behind else "ahead" if not behind
                  else "behind" if not ahead else "diverged")
        return Comparison(status, ahead, behind, found, new[:limit])

    def diff(self, old: str | None, new: str, limit: int = 300, offset: int = 0) -> Diff:
        """The changes from ``old`` (None: the empty tree) to ``new``, with rename detection.

        Lists at most ``limit`` files from ``offset``, each with its patch (GitHub's
        ``patch``: the hunks, without the ``diff --git`` header; none for binary files).
        Patches are made for the listed files only.
        """
        args = ["diff-tree", "-r", "-M", "--no-commit-id", old or EMPTY_TREE, new]
        changes = _parse_raw(self._git([*args, "--raw", "-z"]).split(b"\0"))
        stats = _parse_numstat(self._git([*args, "--numstat", "-z"]).split(b"\0"))
        if len(stats) != len(changes):
            raise RuntimeError("git diff-tree --raw and --numstat disagree")
        page = changes[offset : offset + limit]
        paths = [f":(literal){p}" for _, _, path, old_path in page
                 for p in (path, old_path) if p is not None]
        patches = _split_patch(self._git([*args, "-p", "--no-color", "--full-index", "--",
                                          *paths])) if page else []
        if len(patches) != len(page):  # a name git could not take back: no patches
            patches = [None] * len(page)
        files = []
        for i, (status, sha, path, old_path) in enumerate(page):
            adds, dels = stats[offset + i]
            files.append(FileChange(path, status, sha, adds, dels, patches[i], old_path))
        return Diff(tuple(files), len(changes), sum(a for a, _ in stats),
                    sum(d for _, d in stats))


def _parse_raw(tokens: list[bytes]) -> list[tuple[str, str, str, str | None]]:
    """(status, blob sha, path, previous path) from ``diff-tree --raw -z`` output."""
    changes = []
    i = 0
    while i < len(tokens) and tokens[i].startswith(b":"):
        _, _, old_sha, new_sha, code = tokens[i][1:].decode().split(" ")
        letter = code[0]
        if letter in "RC":
            old_path, path = tokens[i + 1].decode(errors="replace"), tokens[i + 2]
            i += 3
        else:
            old_path, path = None, tokens[i + 1]
            i += 2
        sha = old_sha if letter == "D" else new_sha
        changes.append((_STATUS.get(letter, "changed"), sha, path.decode(errors="replace"),
                        old_path))
    return changes


def _parse_numstat(tokens: list[bytes]) -> list[tuple[int, int]]:
    """(additions, deletions) per file from ``--numstat -z`` (binary files count 0)."""
    stats = []
    i = 0
    while i < len(tokens) and tokens[i]:
        adds, dels, path = tokens[i].decode(errors="replace").split("\t", 2)
        i += 1 if path else 3  # a rename: empty path, then the old and the new path
        stats.append((int(adds) if adds.isdigit() else 0, int(dels) if dels.isdigit() else 0))
    return stats


def _split_patch(out: bytes) -> list[str | None]:
    """One patch per file of ``diff-tree -p`` output: the hunks only, None when binary."""
    sections: list[list[bytes]] = []
    for line in out.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            sections.append([])
        elif sections:
            sections[-1].append(line)
    patches: list[str | None] = []
    for lines in sections:
        start = next((i for i, line in enumerate(lines) if line.startswith(b"@@")), None)
        patches.append(None if start is None else
                       b"".join(lines[start:]).decode(errors="replace").rstrip("\n"))
    return patches
