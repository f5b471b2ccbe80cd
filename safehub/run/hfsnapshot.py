"""A pinned Hugging Face Hub file served from a fleet node's snapshot, with no request to
the Hub, for :mod:`safehub.run.hfhub`.

``safehub prefetch --oci`` pushes each file a lock entry pins as a layer of the repo's
snapshot, Hub files too (annotated with their ``hf://REPO@REVISION/PATH`` key, the digest
their pin). On a node with ``SAFEHUB_OCI`` (:attr:`WeightsGuard.blobs`), a Hub file the
lockfile pins, with the commit its revision was locked at, is written from that layer into
the Hub cache as a download would leave it: ``blobs/SHA256`` (the LFS oid, the name the
Hub's etag gives an LFS file; a small file kept in git is named so too, the snapshot does
not carry its git blob id), ``snapshots/COMMIT/PATH`` linked to it and ``refs/REVISION``;
then checked like any Hub file (:func:`~safehub.run.hfcache.check_hub_file`). A layer the
registry lies about is refused as it arrives, and nothing is left in the Hub cache.

A snapshot's listing (``snapshot_download``'s ``hf://REPO@REVISION/`` pin: the repo's file
names at the commit, as one canonical text, :func:`~safehub.run.hfcache.listing_bytes`) is
pushed as a layer too, whose digest is its pin; a node serves it into the Hub cache where
safehub keeps listings (:func:`listing_from_snapshot`), then each listed file the lockfile
pins from its own layer: ``snapshot_download`` asks the Hub nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from safehub.run.hfcache import link, listing_path, new_file, write_ref

if TYPE_CHECKING:
    from safehub.run.weights import WeightsGuard

__all__ = ["from_snapshot", "listing_from_snapshot"]

_HEX40 = re.compile(r"[0-9a-f]{40}")


def from_snapshot(guard: WeightsGuard, key: str, storage: Path, revision: str, path: str,
                  checked: Callable[[str, Path, str], None]) -> Path | None:
    """The Hub file ``key`` (``path`` of the repo kept in ``storage``) from the node's
    snapshot, linked in the Hub cache and ``checked``; None where the node has no snapshot,
    the lockfile does not pin the file with its commit, or the snapshot lacks it (it is
    then asked of the Hub as any other)."""
    pinned, commit = guard.locked.get(key), guard.commits.get(key)
    if guard.blobs is None or pinned is None or commit is None or not _HEX40.fullmatch(
            commit):
        return None
    blob = _write_blob(guard, key, pinned, storage / "blobs" / pinned)
    if blob is None:
        return None
    snapshot = storage / "snapshots" / commit / path
    link(snapshot, blob)
    checked(key, snapshot, commit)  # a refusal removes the link and the blob
    if not _HEX40.fullmatch(revision) and revision != commit:
        write_ref(storage, revision, commit)
    return snapshot


def listing_from_snapshot(guard: WeightsGuard, key: str, storage: Path, revision: str,
                          checked: Callable[[str, Path, str], None]) -> Path | None:
    """The listing ``key`` (``hf://REPO@REVISION/``) from the node's snapshot, kept where
    safehub keeps a listing for the commit it is pinned at and ``checked``; None where the
    node has no snapshot, the lockfile does not pin the listing with its commit, or the
    snapshot lacks it (it is then asked of the Hub)."""
    pinned, commit = guard.locked.get(key), guard.commits.get(key)
    if guard.blobs is None or pinned is None or commit is None or not _HEX40.fullmatch(
            commit):
        return None
    kept = _write_blob(guard, key, pinned, listing_path(storage, commit))
    if kept is None:
        return None
    checked(key, kept, commit)  # a refusal removes it
    if not _HEX40.fullmatch(revision) and revision != commit:
        write_ref(storage, revision, commit)
    return kept


def _write_blob(guard: WeightsGuard, key: str, pinned: str, target: Path) -> Path | None:
    """The pinned bytes from the snapshot into ``target``: written beside it, checked as
    they arrive, then moved in (a refusal leaves nothing)."""
    from safehub.run.runtime import own_work

    assert guard.blobs is not None
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_file(folder, f".{pinned}.", ".incomplete")  # as the library's blobs
    try:
        with os.fdopen(fd, "w+b") as out, own_work():
            if not guard.blobs(key, pinned, out):
                return None
        os.replace(tmp, target)
        return target
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
