"""Steps 5, 6 and 9 of a load: fetch the archive by commit, verify it, install it.

A cache hit is served only if it is what this user verified (or what the lockfile pins):
the cheap path compares a stat scan of the tree with the user's own record; anything else
re-hashes every file. A miss downloads under the commit's lock (exactly one process
downloads), verifies in a staging folder, and installs with one atomic rename.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.frozen import replace
from safehub._internal.fsutil import rmtree
from safehub._internal.text import printable
from safehub._internal.warn import warn
from safehub.errors import CacheError, IntegrityError
from safehub.store.cache import Cache, CachedTree, Verdict, integrity, warm

if TYPE_CHECKING:
    from safehub.config import Settings
    from safehub.resolve import Resolved
    from safehub.sources.interface import Source
    from safehub.sources.transport import Progress
    from safehub.store.lockfile import Locked
    from safehub.store.records import VerifiedRecords

__all__ = ["TreeFetcher"]



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

    def tree(self, resolved: Resolved, locked: Locked | None, *, force: bool = False,
             verbose: bool = True, checked_on_open: bool = False) -> CachedTree:
        """The verified tree of ``resolved.commit`` (downloaded and installed if needed).

        ``checked_on_open``: the caller checks each file as the repo's code opens it (the
        runtime guard, with the tree's ``verified_ns``), so a cache hit's scan is the
        folder scan; otherwise it is every entry's (see :func:`warm.unchanged`).
        """
        if not force:
            hit = self.cache_hit(resolved, locked, checked_on_open=checked_on_open)
            if hit is not None:
                return hit
        commit = resolved.commit
        if self.cache.frozen and not force:  # a confined job: safehub run fetches it
            return self._through_broker(resolved, locked, checked_on_open)
        with self.cache.lock(commit):
            if not force:
                hit = self.cache_hit(resolved, locked, checked_on_open=checked_on_open)
                if hit is not None:  # another process installed it meanwhile
                    return hit
            stage = self.cache.staging(commit)
            try:
                verdict = self._download_and_verify(resolved, locked, stage, verbose)
                tree = self.cache.install(stage, verdict, replace=force)
            finally:
                rmtree(stage)  # gone after install; after a failure nothing may stay
        return self._remember(tree)

    def _through_broker(self, resolved: Resolved, locked: Locked | None,
                        checked_on_open: bool) -> CachedTree:
        """A miss in a confined job's read-only cache: ``safehub run`` (outside the
        sandbox) fetches and verifies the spec into the cache; then it is a hit."""
        from safehub._internal import broker

        spec = str(resolved.spec)
        if not broker.available():
            raise CacheError(
                f"{spec} ({resolved.commit[:12]}) is not in the cache, which is read-only "
                "inside `safehub run --confine`",
                fix=fixes.run(f"safehub prefetch {fixes.quote(spec)}", "before the job"))
        broker.ask({"op": "prefetch", "spec": spec, "commit": resolved.commit})
        hit = self.cache_hit(resolved, locked, checked_on_open=checked_on_open)
        if hit is None:
            raise CacheError(f"safehub run fetched {spec} for the job, yet the cache does "
                             "not hold it", fix=fixes.run(f"safehub prefetch {fixes.quote(spec)}"))
        return hit

    def _remember(self, tree: CachedTree) -> CachedTree:
        """Record what this user verified (scans, verified time); the tree with ``verified_ns``."""
        found = integrity.survey(tree.path)
        self.verified.record(tree.commit, tree.digest, tree.tree, str(tree.path), found)
        warm.STATE.surveys[(str(tree.path), tree.digest)] = found  # see warm, 3
        return replace(tree, verified_ns=found.verified_ns, ident=found.ident)

    def cache_hit(self, resolved: Resolved, locked: Locked | None, *,
                  checked_on_open: bool = False) -> CachedTree | None:
        hit = self.cache.lookup(resolved.commit)
        if hit is not None:
            hit = self.check_cached(hit, resolved, locked, checked_on_open=checked_on_open)
        return hit

    def check_cached(self, hit: CachedTree, resolved: Resolved, locked: Locked | None, *,
                     checked_on_open: bool = False) -> CachedTree:
        """Serve a cached tree only if it is what this user (or the lockfile) verified.

        Fast path: the tree's scan (:func:`warm.unchanged`) equals this user's record
        of it (or, where there is none, this process's). Otherwise every file is re-hashed
        against the verdict (:func:`integrity.rehash`), and the content must be the one
        this user verified before, or the lockfile's, or (first sight, no lockfile) the
        commit's tree as resolved.
        """
        path = str(hit.path)
        known = self.verified.get(hit.commit)
        recorded = ((known.at(path) if known.digest == hit.digest else None)
                    if known is not None else warm.STATE.surveys.get((path, hit.digest)))
        ident = integrity.tree_ident(hit.path)
        fast = recorded.verified_ns if recorded is not None and warm.unchanged(
            hit.path, recorded, checked_on_open=checked_on_open) else None
        if fast is None:
            integrity.rehash(hit)  # under a guard, the own-work marker covers these reads
            if known is not None and known.digest != hit.digest:
                raise IntegrityError(
                    f"the cached tree of {hit.commit} has digest {hit.digest}, but you "
                    f"verified {known.digest} for that commit before: the cache was rewritten",
                    fix=fixes.noted(fixes.run(f"safehub cache clear {hit.commit}"),
                                    "nothing ran; inspect the cache, then "))
            if known is None and locked is None and hit.tree != resolved.tree:
                raise IntegrityError(
                    f"the cached tree of {hit.commit} claims git tree {hit.tree}, but the "
                    f"commit's tree is {resolved.tree}",
                    fix=fixes.noted(fixes.run(f"safehub cache clear {hit.commit}"),
                                    "nothing ran; "))
        if locked is not None and hit.digest != locked.entry.digest:
            raise IntegrityError(
                f"the cached tree of {hit.commit} has digest {hit.digest}, but {locked.file} "
                f"pins {locked.entry.digest}",
                fix=fixes.noted(fixes.either(fixes.run(f"safehub cache clear {hit.commit}"),
                                             fixes.say("check how the lockfile was made")),
                                "nothing ran; "))
        if fast is not None:
            return replace(hit, verified_ns=fast, ident=ident)
        return self._remember(hit)

    def download(self, resolved: Resolved, out_path: Path, *, verbose: bool) -> None:
        """Download the archive of ``resolved.commit`` to ``out_path`` (not verified)."""
        what = f"archive of {resolved.location.repo}@{resolved.commit[:12]}"
        progress = self._progress(what) if verbose else None
        with open(out_path, "wb") as out:
            self._source().download_archive(
                resolved.url_name, resolved.commit, out,
                max_bytes=self.settings.limits.max_archive_bytes, progress=progress)

    def _download_and_verify(self, resolved: Resolved, locked: Locked | None, stage: Path,
                             verbose: bool) -> Verdict:
        from safehub.verify.archive import check_tree, drop_empty_dirs, extract  # cold path

        spec, commit = resolved.spec, resolved.commit
        zip_path = stage / "archive.zip"
        if verbose and not self.settings.offline:  # offline, the fetch is refused instead
            where = self.cache.commit_dir(commit) / "tree"
            sys.stderr.write(printable(f"safehub: downloading {resolved.url_name}@"
                                       f"{commit[:12]} to {where}") + "\n")
        self.download(resolved, zip_path, verbose=verbose)
        ext = extract(zip_path, stage / "tree", commit=commit,
                              limits=self.settings.limits)
        os.unlink(zip_path)
        if locked is not None:
            lock = locked.entry
            # The lockfile's digest was taken when the commit was verified against its
            # tree; the same digest means the very same files. No API call is needed. The
            # digest does not cover folders: the archive must have only the folders the
            # tree implies (an exact match), or empty ones are dropped.
            if ext.digest != lock.digest:
                raise IntegrityError(
                    f"the archive of {lock.spec} at {commit} has digest {ext.digest}, but "
                    f"{locked.file} pins {lock.digest}",
                    fix=fixes.say("the server or mirror sent other content; nothing ran. "
                                  "Check the mirror, or how the lockfile was made"))
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
            unverified = (f"  not tied byte for byte (export-subst): "
                          f"{', '.join(check.unverified)}" if check.unverified else "")
            warn(f"{spec.repo}@{commit[:12]}: the archive differs from the commit's tree as "
                 "its .gitattributes say (each difference checked):",
                 details=[*check.lines(), *([unverified] if unverified else [])])
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
