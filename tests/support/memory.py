"""An in-memory :class:`safehub.sources.interface.Source` for fast tests of resolution and
admission (python-tuf tests its updater against an in-memory repository simulator the
same way); the loopback server in this package stays for end-to-end tests.

Repos live in *networks*, as on GitHub: a fork shares its parent's commits, so a commit
made only in a fork is found by the parent's commit lookups, but not in the history of
any of the parent's own refs. Every call is logged (``source.calls``).

>>> source = MemorySource()
>>> repo = source.repo("acme/models")
>>> first = repo.commit(branch="main")
>>> repo.tag("v1", first)
>>> source.ref(RepoSpec.parse("acme/models"), "tags", "v1").commit == first
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from safehub.errors import FetchError, NotFoundError, RepoMovedError
from safehub.sources.interface import RefTarget
from safehub.sources.transport import Progress
from safehub.spec import RepoSpec
from safehub.verify.gitattributes.subst import CommitFacts, Person

__all__ = ["MemoryRepo", "MemorySource"]


@dataclass
class _Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    message: str


@dataclass
class _Network:
    commits: dict[str, _Commit] = field(default_factory=dict)
    counter: int = 0


@dataclass
class MemoryRepo:
    """One repo: its name as the source spells it, default branch, branches and tags."""

    name: str
    network: _Network
    default: str = "main"
    heads: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    archives: dict[str, bytes] = field(default_factory=dict)

    def commit(self, *, branch: str | None = None, parents: tuple[str, ...] | None = None,
               message: str = "change") -> str:
        """A new commit (on top of ``branch``'s tip, or of ``parents``); moves the branch."""
        net = self.network
        net.counter += 1
        sha = hashlib.sha1(f"{self.name} {net.counter}".encode()).hexdigest()
        tree = hashlib.sha1(f"tree {sha}".encode()).hexdigest()
        if parents is None:
            tip = self.heads.get(branch or "")
            parents = (tip,) if tip else ()
        net.commits[sha] = _Commit(sha, tree, parents, message + "\n")
        if branch is not None:
            self.heads[branch] = sha
        return sha

    def tag(self, name: str, sha: str) -> None:
        self.tags[name] = sha

    def tree_of(self, sha: str) -> str:
        return self.network.commits[sha].tree


class MemorySource:
    """Repos by lower-case key; ``moved`` maps an old key to a new name (a rename)."""

    def __init__(self) -> None:
        self.repos: dict[str, MemoryRepo] = {}
        self.moved: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.signature_files: dict[str, bytes] = {}
        """Signature bundles by URL (what a release asset or ``signature_url`` serves)."""

    def repo(self, name: str, *, fork_of: MemoryRepo | None = None) -> MemoryRepo:
        network = fork_of.network if fork_of is not None else _Network()
        repo = MemoryRepo(name, network)
        if fork_of is not None:
            repo.heads, repo.tags = dict(fork_of.heads), dict(fork_of.tags)
        self.repos[name.lower()] = repo
        return repo

    def _repo(self, spec: RepoSpec, call: str) -> MemoryRepo:
        self.calls.append((call, spec.key))
        if spec.key in self.moved:
            raise RepoMovedError(f"{spec.repo} has moved to {self.moved[spec.key]}",
                                 old=spec.key, new=self.moved[spec.key])
        repo = self.repos.get(spec.key)
        if repo is None:
            raise NotFoundError(f"{spec.repo} does not exist")
        return repo

    def _commit(self, repo: MemoryRepo, sha: str) -> _Commit:
        found = repo.network.commits.get(sha)
        if found is None:
            raise NotFoundError(f"{repo.name} has no commit {sha}")
        return found

    # -- the Source protocol -------------------------------------------------------------

    def repo_info(self, spec: RepoSpec) -> tuple[str, str]:
        repo = self._repo(spec, "repo_info")
        return repo.default, repo.name

    def ref(self, spec: RepoSpec, kind: str, name: str) -> RefTarget | None:
        repo = self._repo(spec, "ref")
        sha = (repo.heads if kind == "heads" else repo.tags).get(name)
        return None if sha is None else RefTarget(f"refs/{kind}/{name}", sha)

    def expand(self, spec: RepoSpec, prefix: str) -> str | None:
        repo = self._repo(spec, "expand")
        found = [s for s in repo.network.commits if s.startswith(prefix)]
        return found[0] if len(found) == 1 else None

    def commit_tree(self, spec: RepoSpec, sha: str) -> str:
        return self._commit(self._repo(spec, "commit_tree"), sha).tree

    def commit(self, spec: RepoSpec, sha: str) -> CommitFacts:
        c = self._commit(self._repo(spec, "commit"), sha)
        who = Person.from_api("A U Thor", "author@example.com", "2026-01-01T00:00:00Z")
        return CommitFacts(c.sha, c.tree, c.parents, who, who, c.message)

    def contains(self, spec: RepoSpec, ref: str, sha: str) -> str | None:
        repo = self._repo(spec, "contains")
        kind, _, name = ref.partition("/")
        tip = (repo.heads if kind == "heads" else repo.tags).get(name)
        if tip is None:
            raise NotFoundError(f"{repo.name} has no ref {ref}")
        target = self._commit(repo, sha)
        todo, seen = [tip], set()
        while todo:
            current = todo.pop()
            if current == sha:
                return target.tree
            if current not in seen:
                seen.add(current)
                todo.extend(repo.network.commits[current].parents)
        return None

    def refs(self, spec: RepoSpec, kind: str) -> Iterator[tuple[str, str]]:
        repo = self._repo(spec, "refs")
        yield from sorted((repo.heads if kind == "branches" else repo.tags).items())

    def tree_listing(self, spec: RepoSpec, tree: str) -> list[Mapping[str, object]]:
        raise FetchError("the in-memory source keeps no tree listings")

    def top_level_file(self, spec: RepoSpec, tree: str, name: str) -> bytes | None:
        self._repo(spec, "top_level_file")
        return None

    def blob(self, spec: RepoSpec, sha: str) -> bytes:
        raise FetchError("the in-memory source keeps no blobs")

    def download_archive(self, repo: str, commit: str, out: BinaryIO, *, max_bytes: int,
                         progress: Progress | None = None) -> None:
        found = self._repo(RepoSpec.parse(repo), "download_archive").archives.get(commit)
        if found is None:
            raise NotFoundError(f"no archive of {repo}@{commit[:12]} in memory")
        out.write(found[:max_bytes])

    def signature_at(self, url: str) -> bytes | None:
        self.calls.append(("signature_at", url))
        return self.signature_files.get(url)

    def snapshot_signer(self, manifest: str) -> str:
        return ""
