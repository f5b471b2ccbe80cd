"""Git helpers for tests: repos with fixed identities and dates, isolated from the user's git.

Every command runs with an environment that ignores the user's and the system's git config,
so the same calls make the same shas on every machine::

    sha = make_repo(tmp / "repo", {"hubconf.py": "dependencies = []\\n"})
    later = commit_files(tmp / "repo", {"README.md": "hi\\n"}, "docs")
    git(tmp / "repo", "tag", "v1")
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

__all__ = [
    "BASE_EPOCH",
    "EMPTY_TREE",
    "GIT_USER_EMAIL",
    "GIT_USER_NAME",
    "GitCommandError",
    "commit_files",
    "git",
    "git_env",
    "make_repo",
    "run_git",
]

#: Author/committer identity of every commit the helpers make.
GIT_USER_NAME = "Safehub Test"
GIT_USER_EMAIL = "test@safehub.invalid"
#: Date of a root commit made by :func:`commit_files` (2024-01-01T00:00:00Z); each later
#: commit is one minute after its parent, so shas are the same on every run.
BASE_EPOCH = 1_704_067_200
#: The id of the empty tree, which git knows without storing it.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

_GIT_CONFIG = (
    f"user.name={GIT_USER_NAME}",
    f"user.email={GIT_USER_EMAIL}",
    "init.defaultBranch=main",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.autocrlf=false",
    "core.symlinks=true",
    "core.fileMode=true",
    "core.quotePath=false",
    f"core.attributesFile={os.devnull}",
    f"core.excludesFile={os.devnull}",
    f"core.hooksPath={os.devnull}",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
)

_NO_LINKS: Mapping[str, str] = MappingProxyType({})


class GitCommandError(subprocess.CalledProcessError):
    """A git command exited non-zero; ``str()`` includes the command's stderr."""

    def __str__(self) -> str:
        stderr = self.stderr
        text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else str(stderr or "")
        return f"{super().__str__()}\n{text.strip()}"


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return an environment for git that ignores the user's and the system's git config.

    Every inherited ``GIT_*`` variable is dropped; identity and dates are fixed so that the
    same commands make the same shas on every machine. ``extra`` entries are added last.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=GIT_USER_NAME,
        GIT_AUTHOR_EMAIL=GIT_USER_EMAIL,
        GIT_COMMITTER_NAME=GIT_USER_NAME,
        GIT_COMMITTER_EMAIL=GIT_USER_EMAIL,
        GIT_AUTHOR_DATE=f"{BASE_EPOCH} +0000",
        GIT_COMMITTER_DATE=f"{BASE_EPOCH} +0000",
        LC_ALL="C",
    )
    if extra:
        env.update(extra)
    return env


def run_git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git -c ... <args>`` isolated from user config; raise GitCommandError if asked.

    ``env`` adds to :func:`git_env` (e.g. ``GIT_DIR``); stdout and stderr are captured.
    """
    argv = ["git"]
    for item in _GIT_CONFIG:
        argv += ["-c", item]
    argv += args
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=git_env(env),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise GitCommandError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc


def git(cwd: Path, *args: str) -> str:
    """Run ``git <args>`` in ``cwd`` with the isolated environment; return stripped stdout.

    Raises :class:`GitCommandError` (a ``subprocess.CalledProcessError``) on failure, e.g.
    ``git(repo, "rev-parse", "HEAD")`` returns the 40-hex sha of the checked-out commit.
    """
    return run_git(args, cwd=cwd).stdout.decode().strip()


def commit_files(
    path: Path,
    files: Mapping[str, bytes | str],
    message: str,
    *,
    executable: Iterable[str] = (),
    symlinks: Mapping[str, str] = _NO_LINKS,
    delete: Iterable[str] = (),
) -> str:
    """Write ``files`` into the work tree at ``path``, commit everything, return the new sha.

    ``files`` maps a ``/``-separated path to its content (``str`` is written as UTF-8, no
    newline translation); ``executable`` names paths to mark ``0o755``; ``symlinks`` maps a
    link path to its target; ``delete`` names paths to remove. The commit is made on the
    checked-out branch even if nothing changed, dated one minute after its parent.
    """
    for rel in delete:
        target = path / rel
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
    for rel, content in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    for rel in executable:
        (path / rel).chmod(0o755)
    for rel, link_target in symlinks.items():
        link = path / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(link_target)
    last = run_git(["log", "-1", "--format=%ct"], cwd=path, check=False)
    epoch = int(last.stdout) + 60 if last.returncode == 0 and last.stdout.strip() else BASE_EPOCH
    date = f"{epoch} +0000"
    run_git(["add", "-A"], cwd=path)
    run_git(
        ["commit", "-q", "--allow-empty", "-m", message],
        cwd=path,
        env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
    )
    return git(path, "rev-parse", "HEAD")


def make_repo(
    path: Path,
    files: Mapping[str, bytes | str],
    *,
    message: str = "initial",
    executable: Iterable[str] = (),
    symlinks: Mapping[str, str] = _NO_LINKS,
) -> str:
    """Create a git repo at ``path`` (branch ``main``) if there is none, commit ``files``.

    Returns the sha of the new commit. See :func:`commit_files` for the arguments.
    """
    path.mkdir(parents=True, exist_ok=True)
    if not (path / ".git").exists():
        git(path, "init", "-q", "-b", "main")
    return commit_files(path, files, message, executable=executable, symlinks=symlinks)
