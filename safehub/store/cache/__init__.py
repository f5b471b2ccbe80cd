"""The content-addressed cache of verified trees.

* :mod:`~safehub.store.cache.store` -- the cache root, its layout, locks, installs;
* :mod:`~safehub.store.cache.tree` -- a cached tree: the cheap scan and the full re-hash;
* :mod:`~safehub.store.cache.records` -- verdicts and per-repo records, checked on read.
"""

from __future__ import annotations

from safehub.store.cache.records import CommitProof, RefRecord, RepoRecord, Verdict
from safehub.store.cache.store import Cache
from safehub.store.cache.tree import CachedTree, scan_digest

__all__ = ["Cache", "CachedTree", "CommitProof", "RefRecord", "RepoRecord", "Verdict",
           "scan_digest"]
