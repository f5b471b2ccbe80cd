"""What safehub does besides loading: check, verify, lock, prefetch, the cache.

Each operation admits a spec exactly as a load does (:mod:`safehub.admission`) and returns
typed, frozen reports; the CLI only formats them (text, or JSON through ``to_json``).
Nothing here runs a repo's code, except ``lock --entrypoint``, which runs it as
``safehub load`` would, in a child process (:func:`lock_entrypoint`).
"""

from __future__ import annotations

from safehub.operations.cache import (
    CacheCheck,
    CacheEntryInfo,
    Prefetched,
    cache_clear,
    cache_entries,
    cache_verify,
    prefetch,
)
from safehub.operations.check import CheckReport, check
from safehub.operations.lock import (
    EntrypointFetches,
    LockChange,
    LockStatus,
    lock,
    lock_check,
    lock_check_weights,
    lock_entrypoint,
)
from safehub.operations.verify import VerifyReport, verify

__all__ = ["CacheCheck", "CacheEntryInfo", "CheckReport", "EntrypointFetches", "LockChange",
           "LockStatus", "Prefetched", "VerifyReport", "cache_clear", "cache_entries",
           "cache_verify", "check", "lock", "lock_check", "lock_check_weights",
           "lock_entrypoint", "prefetch", "verify"]
