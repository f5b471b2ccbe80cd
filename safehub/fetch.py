"""Steps 5, 6 and 9 of a load: fetch the archive by commit, verify it, install it.

A cache hit is served only if it is what this user verified (or what the lockfile pins):
the cheap path compares a stat scan of the tree with the user's own record; anything else
re-hashes every file. A miss downloads under the commit's lock (exactly one process
downloads), verifies in a staging folder, and installs with one atomic rename.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.fsutil import rmtree
from safehub._internal.warn import warn
from safehub.errors import IntegrityError
from safehub.store.cache import Cache, CachedTree, Verdict
from safehub.store.cache.tree import Survey, dir_scan, survey, tamper

if TYPE_CHECKING:
    from safehub.config import Settings
    from safehub.resolve import Resolved
    from safehub.sources.interface import Source
    from safehub.sources.transport import Progress
    from safehub.store.lockfile import LockEntry
    from safehub.store.records import VerifiedRecords

__all__ = ["TreeFetcher"]

# (tree path, digest) -> what this process found right after verifying the tree: served
# again without re-hashing even where the user's records cannot be written.
_SEEN: dict[tuple[str, str], Survey] = {}


def _dirs(tree: CachedTree, folders: tuple[str, ...] | None) -> str:
    """The folder scan, taking only the recorded ``folders`` where there is a record."""
    try:
        return dir_scan(tree.path, folders or None)
    except OSError as e:
        raise tamper(tree.path, f"cannot be listed ({e.strerror})") from e


def _ident(tree: CachedTree) -> tuple[int, int]:
    """The tree folder's identity, taken before its scan: a folder swapped after this is
    refused as the repo's code reads it; one swapped before makes the scan differ."""
    try:
        st = os.lstat(tree.path)
    except OSError as e:
        raise tamper(tree.path, f"cannot be listed ({e.strerror})") from e
    return (st.st_dev, st.st_ino)


def _survey(tree: CachedTree) -> Survey:
    try:
        return survey(tree.path)
    except OSError as e:
        raise tamper(tree.path, f"cannot be listed ({e.strerror})") from e


class TreeFetcher:
    """Verified trees of commits, from the cache or the network."""

    def __init__(self, settings: Settings, cache: Cache, verified: VerifiedRecords,
                 source: Callable[[], Source],
                 progress: Callable[[str], Progress | None]) -> None:
        self.settings = settings
        self.cache = cache
        self.verified = verified
        self._source = source
        self._progress = progress

    def tree(self, resolved: Resolved, lock: LockEntry | None, *, force: bool = False,
             verbose: bool = True, lockfile: str = "", lazy: bool = False) -> CachedTree:
        """The verified tree of ``resolved.commit`` (downloaded and installed if needed).

        ``lazy``: the caller checks each file as the repo's code opens it (the runtime
        guard, with the tree's ``sealed`` time), so a cache hit only needs its folders
        unchanged; otherwise every entry's stat data is compared.
        """
        if not force:
            hit = self.cache_hit(resolved, lock, lockfile=lockfile, lazy=lazy)
            if hit is not None:
                return hit
        commit = resolved.commit
        with self.cache.lock(commit):
            if not force:
                hit = self.cache_hit(resolved, lock, lockfile=lockfile, lazy=lazy)
                if hit is not None:  # another process installed it meanwhile
                    return hit
            stage = self.cache.staging(commit)
            try:
                verdict = self._download_and_verify(resolved, lock, stage, verbose, lockfile)
                tree = self.cache.install(stage, verdict, replace=force)
            finally:
                rmtree(stage)  # gone after install; after a failure nothing may stay
        return self._remember(tree)

    def _remember(self, tree: CachedTree) -> CachedTree:
        """Record what this user verified (scans and sealed time); the tree with ``sealed``."""
        found = _survey(tree)
        self.verified.record(tree.commit, tree.digest, tree.tree, str(tree.path),
                             scan=found.scan, dirs=found.dirs, sealed=found.sealed,
                             folders=found.folders)
        _SEEN[(str(tree.path), tree.digest)] = found
        return dataclasses.replace(tree, sealed=found.sealed, ident=found.ident)

    def cache_hit(self, resolved: Resolved, lock: LockEntry | None, *, lockfile: str = "",
                  lazy: bool = False) -> CachedTree | None:
        hit = self.cache.lookup(resolved.commit)
        if hit is not None:
            hit = self.check_cached(hit, resolved, lock, lockfile=lockfile, lazy=lazy)
        return hit

    def check_cached(self, hit: CachedTree, resolved: Resolved, lock: LockEntry | None, *,
                     lockfile: str = "", lazy: bool = False) -> CachedTree:
        """Serve a cached tree only if it is what this user (or the lockfile) verified.

        Fast path: the folders' stat scan (``lazy``) or every entry's stat scan equals this
        user's record. Otherwise every file is re-hashed against the verdict, and the
        content must be the one this user verified before, or the lockfile's, or (first
        sight, no lockfile) the commit's tree as resolved.
        """
        path = str(hit.path)
        known = self.verified.get(hit.commit)
        seen = _SEEN.get((path, hit.digest))
        fast: int | None = None
        ident = _ident(hit)
        if known is not None and known.digest == hit.digest and path in known.sealed:
            same = (known.dirs.get(path) == _dirs(hit, known.folders.get(path)) if lazy
                    else known.scans.get(path) == hit.scan())
            if same:
                fast = known.sealed[path]
        elif known is None and seen is not None and (
                seen.dirs == _dirs(hit, seen.folders) if lazy else seen.scan == hit.scan()):
            fast = seen.sealed
        if fast is None:
            hit.verify()  # under a guard, the load's own-work marker covers these reads
            if known is not None and known.digest != hit.digest:
                raise IntegrityError(
                    f"the cached tree of {hit.commit} has digest {hit.digest}, but you "
                    f"verified {known.digest} for that commit before: the cache was rewritten",
                    hint="nothing ran; inspect the cache, then "
                    + fixes.run(f"safehub cache clear {hit.commit}"))
            if known is None and lock is None and hit.tree != resolved.tree:
                raise IntegrityError(
                    f"the cached tree of {hit.commit} claims git tree {hit.tree}, but the "
                    f"commit's tree is {resolved.tree}",
                    hint="nothing ran; " + fixes.run(f"safehub cache clear {hit.commit}"))
        if lock is not None and hit.digest != lock.digest:
            raise IntegrityError(
                f"the cached tree of {hit.commit} has digest {hit.digest}, but {lockfile} "
                f"pins {lock.digest}",
                hint="nothing ran; " + fixes.either(
                    fixes.run(f"safehub cache clear {hit.commit}"),
                    fixes.say("check how the lockfile was made")))
        if fast is not None:
            return dataclasses.replace(hit, sealed=fast, ident=ident)
        return self._remember(hit)

    def download(self, resolved: Resolved, out_path: Path, *, verbose: bool) -> None:
        """Download the archive of ``resolved.commit`` to ``out_path`` (not verified)."""
        what = f"archive of {resolved.location.repo}@{resolved.commit[:12]}"
        progress = self._progress(what) if verbose else None
        with open(out_path, "wb") as out:
            self._source().download_archive(
                resolved.url_name, resolved.commit, out,
                max_bytes=self.settings.limits.max_archive_bytes, progress=progress)

    def _download_and_verify(self, resolved: Resolved, lock: LockEntry | None, stage: Path,
                             verbose: bool, lockfile: str) -> Verdict:
        from safehub.verify.archive import check_tree, drop_empty_dirs, extract  # cold path

        spec, commit = resolved.spec, resolved.commit
        zip_path = stage / "archive.zip"
        if verbose:
            sys.stderr.write(f"safehub: downloading {resolved.url_name}@{commit[:12]} to "
                             f"{self.cache.commit_dir(commit) / 'tree'}\n")
        self.download(resolved, zip_path, verbose=verbose)
        ext = extract(zip_path, stage / "tree", commit=commit,
                              limits=self.settings.limits)
        os.unlink(zip_path)
        if lock is not None:
            # The lockfile's digest was taken when the commit was verified against its
            # tree; the same digest means the very same files. No API call is needed. The
            # digest does not cover folders: the archive must have only the folders the
            # tree implies (an exact match), or empty ones are dropped.
            if ext.digest != lock.digest:
                raise IntegrityError(
                    f"the archive of {lock.spec} at {commit} has digest {ext.digest}, but "
                    f"{lockfile} pins {lock.digest}",
                    hint="the server or mirror sent other content; nothing ran. Check the "
                    "mirror, or how the lockfile was made")
            if ext.tree_id == lock.tree:
                check_tree(ext, lock.tree, None, allow_fallback=False)
            else:
                ext = drop_empty_dirs(ext)
            return Verdict(commit=commit, tree=lock.tree, digest=ext.digest, level=lock.level,
                           files=ext.files, empty_dirs=ext.empty_dirs, source=spec.key)
        source = self._source()
        listing = None
        if ext.tree_id != resolved.tree:
            listing = source.tree_listing(resolved.location, resolved.tree)
        check = check_tree(
            ext, resolved.tree, listing, allow_fallback=self.settings.tree_fallback,
            fetch_blob=lambda sha: source.blob(resolved.location, sha),
            fetch_commit=lambda: source.commit(resolved.location, commit))
        if any(d.from_attributes for d in check.differences):
            unverified = (f"; not tied byte for byte (export-subst): "
                          f"{', '.join(check.unverified)}" if check.unverified else "")
            warn(f"{spec.repo}@{commit[:12]}: the archive differs from the commit's tree as "
                 f"its .gitattributes say (each difference checked):\n{check.describe()}"
                 + unverified)
        return Verdict(
            commit=commit, tree=resolved.tree, digest=ext.digest, level=check.level,
            files=ext.files, unverified=check.unverified, omitted=check.omitted,
            empty_dirs=ext.empty_dirs, source=spec.key)

    def archive_digest(self, zip_path: Path, commit: str) -> str:
        """The content digest of a downloaded archive, fully checked (for mirrors)."""
        from safehub.verify.archive import extract

        with tempfile.TemporaryDirectory(dir=self.cache.staging_root(), prefix="mirror-") as d:
            try:
                return extract(zip_path, Path(d) / "tree", commit=commit,
                                       limits=self.settings.limits).digest
            finally:
                rmtree(Path(d) / "tree")
