"""The Hugging Face Hub cache as huggingface_hub lays it out, for :mod:`safehub.run.hfhub`:
a repo's folder (``models--org--name``) holds ``blobs/`` named by their etag,
``snapshots/COMMIT/PATH`` links to them and ``refs/REVISION`` files naming a commit, so the
library's own cache lookups (``try_to_load_from_cache``, its offline mode) find what safehub
downloaded. Links and refs are written atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub._internal.urls import UrlError, read_url
from safehub.run.weightfile import stat_key

if TYPE_CHECKING:
    from safehub.run.weights import WeightsGuard

__all__ = ["KINDS", "Where", "check_hub_file", "link", "listing_bytes", "listing_path", "new_file",
           "pinned_commit", "pinned_sha256", "place", "read_listing", "write_listing", "write_ref"]

KINDS = {"model": "", "dataset": "datasets/", "space": "spaces/"}
"""The repo kinds held, and the prefix of their repo ids in URLs and pin keys."""


class Where(Frozen):
    """Where one call's files come from and go to."""

    endpoint: str
    cache_dir: str | os.PathLike[str] | None
    local_files_only: bool
    token: bool | str | None
    headers: dict[str, str] | None

    def storage(self, repo_id: str, kind: str) -> Path:
        from huggingface_hub import constants

        root = Path(self.cache_dir or constants.HF_HUB_CACHE).expanduser()
        return root / f"{kind}s--{repo_id.replace('/', '--')}"

    def resolve_url(self, repo_id: str, kind: str, at: str, path: str) -> str:
        return (f"{self.endpoint}/{KINDS[kind]}{repo_id}/resolve/{quote(at, safe='')}/"
                f"{quote(path)}")

    def auth(self, hop: str) -> Mapping[str, str]:
        """The Hub's headers (its token) for the endpoint's own hops only: those whose
        origin, as :func:`~safehub._internal.urls.read_url` reads both, is the endpoint's."""
        try:
            if read_url(hop, http=True).origin != read_url(self.endpoint, http=True).origin:
                return {}
        except UrlError:
            return {}
        token = self.token
        if token is None or token is True:  # as the library finds it (HF_TOKEN, its file);
            from huggingface_hub import get_token  # not build_hf_headers: its user agent

            token = get_token()  # asks the Hub which agent runs it (a request of its own)
        sent = dict(self.headers or {})
        if isinstance(token, str) and token:
            sent["Authorization"] = f"Bearer {token}"
        return sent


def link(snapshot: Path, blob: Path) -> None:
    """``snapshot`` -> ``blob``, relative, as huggingface_hub links them (atomic)."""
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    tmp = snapshot.with_name(f".{snapshot.name}.{os.getpid()}.link")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(os.path.relpath(blob, snapshot.parent), tmp)
    os.replace(tmp, snapshot)


def write_ref(storage: Path, revision: str, commit: str) -> None:
    """The cache's ref for a revision (huggingface_hub's own offline lookup reads it)."""
    from safehub._internal.fsutil import within

    ref = storage / "refs" / revision
    if not within(os.path.normpath(ref), os.path.normpath(storage / "refs")):
        return
    with contextlib.suppress(OSError):
        _replace(ref, commit.encode())


def place(file: Path, local_dir: str | os.PathLike[str] | None, path: str) -> Path:
    """The checked file, or its copy at ``local_dir/path`` if the code asked for one."""
    if local_dir is None:
        return file
    target = Path(local_dir).expanduser().resolve() / path
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        shutil.copyfile(file, tmp)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


def new_file(folder: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """A new file in ``folder`` (its descriptor, open for reading and writing, and path),
    made with the mode huggingface_hub's own files get (``0o644`` under the umask): no
    ``chmod`` afterwards, which a confined job may not make."""
    import secrets

    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{secrets.token_hex(8)}{suffix}")
        try:
            return os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC
                           | os.O_NOFOLLOW, 0o644), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no new file name is free in {folder}")


def _replace(path: Path, data: bytes) -> None:
    """``path`` holds ``data``, written beside it and moved in (atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_file(path.parent, f".{path.name}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def listing_path(storage: Path, commit: str) -> Path:
    """Where the file list of a repo at ``commit`` is kept (safehub's, beside the library's
    folders: a snapshot's listing is pinned like a file)."""
    return storage / ".safehub" / f"{commit}.json"


def write_listing(storage: Path, commit: str, paths: list[str]) -> Path:
    """The listing written as one canonical text (the same files, the same sha256)."""
    path = listing_path(storage, commit)
    _replace(path, listing_bytes(paths))
    return path


def listing_bytes(paths: list[str]) -> bytes:
    """A listing's one canonical text, whoever writes it (its sha256 is its pin).

    >>> listing_bytes(["b", "a", "b"])
    b'["a", "b"]\\n'
    """
    return (json.dumps(sorted(set(paths))) + "\n").encode()


def read_listing(path: Path, key: str) -> list[str]:
    from safehub.errors import IntegrityError

    try:
        listed = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        listed = e
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        with contextlib.suppress(OSError):
            path.unlink()
        raise IntegrityError(f"the kept listing of {key} ({path}) is not a list of files; "
                             "it was removed", fix=fixes.say("load again"))
    return listed


# -- a Hub file's pin, held by the weights guard ------------------------------------------------


def pinned_commit(guard: WeightsGuard, key: str) -> str | None:
    """The commit a Hub file's revision was pinned to (the lockfile's, else the user's
    where it pins the same content as the lockfile)."""
    seen = guard.records.get(key) if guard.records is not None else None
    if seen and key in guard.locked and seen["sha256"] != guard.locked[key]:
        seen = None
    commit = guard.commits.get(key) or (seen.get("commit") if seen else None)
    return commit if isinstance(commit, str) and commit else None

def pinned_sha256(guard: WeightsGuard, key: str) -> str | None:
    """The sha256 a Hub file is pinned to (the lockfile's, else the user's)."""
    seen = guard.records.get(key) if guard.records is not None else None
    return guard.locked.get(key) or (str(seen["sha256"]) if seen else None)

def check_hub_file(guard: WeightsGuard, key: str, path: Path, commit: str,
                   size: int | None) -> None:
    """:meth:`WeightsGuard.check_file` for a Hub file; its pin keeps the commit its
    revision was at."""
    digest = guard.check_file(key, path)
    if guard.told is not None:
        guard.told(key, digest, path.stat().st_size, commit)
    seen = guard.records.get(key) if guard.records is not None else None
    if seen is not None and seen.get("commit") != commit:
        from safehub.run.runtime import own_work

        assert guard.records is not None
        with own_work():  # the digest check_file just checked and recorded
            guard.records.put(key, str(seen["sha256"]), path,
                             lambda p: stat_key(p.stat()), repo=guard.repo_key,
                             kind=str(seen.get("format", "")), commit=commit, size=size)
