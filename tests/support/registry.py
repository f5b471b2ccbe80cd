"""What the GitHub stand-in serves: repos (with renames and fork networks), release assets,
archives (with the knobs that replace or alter them) and static files. Thread-safe."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from .gitrepo import run_git
from .gitview import GitView

__all__ = ["Asset", "Registry", "Repo"]


@dataclass(frozen=True)
class Repo:
    id: int
    owner: str
    name: str
    git_dir: Path
    objects_dir: Path
    default_branch: str
    network: int
    parent: int | None

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def url_name(self) -> str:
        """``Owner/Name`` as it goes into URLs (percent-encoded, case as registered)."""
        return f"{quote(self.owner, safe='')}/{quote(self.name, safe='')}"


@dataclass(frozen=True)
class Asset:
    id: int
    repo_id: int
    tag: str
    name: str
    data: bytes


class Registry:
    """Repos by name and id, fork networks, release assets, archives and static content."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._repos: dict[int, Repo] = {}
        self._names: dict[tuple[str, str], int] = {}
        self._moved: dict[tuple[str, str], int] = {}
        self._networks: dict[int, list[int]] = {}
        self._assets: dict[tuple[int, str, str], Asset] = {}
        self._static: dict[str, bytes] = {}
        self._mounts: dict[str, Path] = {}
        self._archives: dict[tuple[str, str], bytes] = {}
        self._archive_locks: dict[tuple[str, str], threading.Lock] = {}
        self._tampers: dict[str, Callable[[bytes], bytes]] = {}
        self._replacements: dict[str, bytes] = {}
        self._scratch: Path | None = None

    def close(self) -> None:
        """Remove the scratch git dir (it is made again if needed)."""
        with self._lock:
            scratch, self._scratch = self._scratch, None
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    # -- repos ----------------------------------------------------------------------------

    def add_repo(self, owner: str, name: str, git_dir: Path, *, default_branch: str,
                 fork_of: tuple[str, str] | None, repo_id: int | None) -> Repo:
        for part in (owner, name):
            if not part or "/" in part or part in (".", ".."):
                raise ValueError(f"bad owner or repo name: {owner!r}/{name!r}")
        found = run_git(
            ["rev-parse", "--absolute-git-dir", "--path-format=absolute", "--git-path", "objects"],
            cwd=git_dir, env={"GIT_CEILING_DIRECTORIES": str(git_dir.resolve().parent)},
            check=False)
        lines = found.stdout.decode().splitlines()
        if found.returncode != 0 or len(lines) != 2:
            raise ValueError(f"{git_dir} is not a git repository")
        key = (owner.lower(), name.lower())
        with self._lock:
            if key in self._names:
                raise ValueError(f"repo {owner}/{name} is already served")
            if repo_id is None:
                repo_id = max([1000, *self._repos]) + 1
            elif repo_id in self._repos:
                raise ValueError(f"repo id {repo_id} is already used")
            parent, network = None, repo_id
            if fork_of is not None:
                parent = self._names.get((fork_of[0].lower(), fork_of[1].lower()))
                if parent is None:
                    raise ValueError(f"fork_of names an unknown repo: {fork_of[0]}/{fork_of[1]}")
                network = self._repos[parent].network
            repo = Repo(repo_id, owner, name, Path(lines[0]), Path(lines[1]), default_branch,
                        network, parent)
            self._repos[repo_id] = repo
            self._names[key] = repo_id
            self._moved.pop(key, None)
            self._networks.setdefault(network, []).append(repo_id)
            return repo

    def rename_repo(self, old: tuple[str, str], new: tuple[str, str]) -> None:
        old_key, new_key = (old[0].lower(), old[1].lower()), (new[0].lower(), new[1].lower())
        with self._lock:
            repo_id = self._names.get(old_key)
            if repo_id is None:
                raise ValueError(f"unknown repo {old[0]}/{old[1]}")
            if new_key in self._names and new_key != old_key:
                raise ValueError(f"repo {new[0]}/{new[1]} is already served")
            del self._names[old_key]
            self._names[new_key] = repo_id
            self._moved.pop(new_key, None)
            if new_key != old_key:
                self._moved[old_key] = repo_id
            self._repos[repo_id] = dataclasses.replace(
                self._repos[repo_id], owner=new[0], name=new[1])

    def repo_id(self, owner: str, name: str) -> int:
        with self._lock:
            found = self._names.get((owner.lower(), name.lower()))
        if found is None:
            raise ValueError(f"unknown repo {owner}/{name}")
        return found

    def find(self, owner: str, name: str) -> tuple[Repo, bool] | None:
        """The repo now or formerly called owner/name (any case), and whether it moved."""
        key = (owner.lower(), name.lower())
        with self._lock:
            if key in self._names:
                return self._repos[self._names[key]], False
            if key in self._moved:
                return self._repos[self._moved[key]], True
        return None

    def by_id(self, repo_id: int) -> Repo | None:
        with self._lock:
            return self._repos.get(repo_id)

    def parent_and_source(self, repo: Repo) -> tuple[Repo, Repo] | None:
        with self._lock:
            if repo.parent is None:
                return None
            return self._repos[repo.parent], self._repos[repo.network]

    def view(self, repo: Repo) -> GitView:
        """A :class:`GitView` of ``repo`` that sees its whole fork network's objects."""
        with self._lock:
            others = [self._repos[i].objects_dir for i in self._networks[repo.network]
                      if i != repo.id]
        return GitView(repo.git_dir, repo.objects_dir, others, self._scratch_dir(),
                       repo.default_branch)

    def _scratch_dir(self) -> Path:
        with self._lock:
            if self._scratch is None:
                root = Path(tempfile.mkdtemp(prefix="safehub-standin-"))
                run_git(["init", "-q", "--bare", str(root / "scratch.git")])
                self._scratch = root
            return self._scratch / "scratch.git"

    # -- assets and static files ----------------------------------------------------------

    def add_asset(self, repo_id: int, tag: str, name: str, data: bytes) -> Asset:
        with self._lock:
            old = self._assets.get((repo_id, tag, name))
            asset_id = old.id if old else 100_000 + len(self._assets) + 1
            asset = Asset(asset_id, repo_id, tag, name, bytes(data))
            self._assets[(repo_id, tag, name)] = asset
            return asset

    def asset(self, repo_id: int, tag: str, name: str) -> Asset | None:
        with self._lock:
            return self._assets.get((repo_id, tag, name))

    def asset_by_id(self, repo_id: int, asset_id: int) -> Asset | None:
        with self._lock:
            return next((a for a in self._assets.values()
                         if a.id == asset_id and a.repo_id == repo_id), None)

    def add_static(self, path: str, data: bytes) -> None:
        if not path.startswith("/"):
            raise ValueError(f"static path must start with '/': {path!r}")
        with self._lock:
            self._static[path] = bytes(data)

    def mount(self, prefix: str, directory: Path) -> None:
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise ValueError(f"mount prefix must start and not end with '/': {prefix!r}")
        if not directory.is_dir():
            raise ValueError(f"{directory} is not a directory")
        with self._lock:
            self._mounts[prefix] = directory

    def static(self, path: str) -> bytes | None:
        """Bytes served at ``path`` (percent-decoded, without query): exact static paths
        first, then files under a mounted directory, matched case-sensitively."""
        with self._lock:
            data = self._static.get(path)
            mounts = sorted(self._mounts.items(), key=lambda m: -len(m[0]))
        if data is not None:
            return data
        for prefix, directory in mounts:
            if path.startswith(prefix + "/"):
                return _read_exact(directory, path[len(prefix) + 1 :].split("/"))
        return None

    # -- archives -------------------------------------------------------------------------

    def tamper(self, sha: str, fn: Callable[[bytes], bytes] | None) -> None:
        with self._lock:
            if fn is None:
                self._tampers.pop(sha.lower(), None)
            else:
                self._tampers[sha.lower()] = fn

    def replace(self, sha: str, data: bytes | None) -> None:
        with self._lock:
            if data is None:
                self._replacements.pop(sha.lower(), None)
            else:
                self._replacements[sha.lower()] = bytes(data)

    def archive(self, repo: Repo, sha: str) -> bytes:
        """The zip GitHub would serve for ``sha`` under ``repo``, after the test knobs."""
        with self._lock:
            replaced = self._replacements.get(sha)
            tamper = self._tampers.get(sha)
            key = (repo.full_name, sha)
            lock = self._archive_locks.setdefault(key, threading.Lock())
        if replaced is not None:
            return replaced
        with lock:  # one git archive per (name, commit), however many clients ask at once
            with self._lock:
                data = self._archives.get(key)
            if data is None:
                data = self.view(repo).archive(sha, f"{repo.owner}-{repo.name}-{sha[:7]}/")
                with self._lock:
                    self._archives[key] = data
        return tamper(data) if tamper is not None else data


def _read_exact(directory: Path, parts: list[str]) -> bytes | None:
    """The file at ``parts`` under ``directory`` if every name matches exactly (case too)."""
    current = directory
    for part in parts:
        if part in ("", ".", "..") or not current.is_dir() or part not in os.listdir(current):
            return None
        current = current / part
        if current.is_symlink():
            return None
    return current.read_bytes() if current.is_file() else None
