"""The content-addressed cache of verified trees.

* :mod:`~safehub.store.cache.store` -- the cache root, its layout, locks, installs;
* :mod:`~safehub.store.cache.tree` -- a cached tree, as its ``entry.json`` describes it;
* :mod:`~safehub.store.cache.integrity` -- the three checks that a cached tree is what was
  verified: the scan, the re-hash, the check of a file as it is opened;
* :mod:`~safehub.store.cache.records` -- verdicts and per-repo records, checked on read.
"""

from __future__ import annotations

from safehub.store.cache.records import CommitProof, RefRecord, RepoRecord, Verdict
from safehub.store.cache.store import Cache
from safehub.store.cache.tree import CachedTree

__all__ = ["Cache", "CachedTree", "CommitProof", "RefRecord", "RepoRecord", "Verdict"]
