"""``safehub prefetch`` and the ``cache`` verbs: filling, listing, re-hashing and clearing
the cache (and a mirror folder)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.frozen import field
from safehub.admission import Admitted
from safehub.errors import CacheError, IntegrityError, SafehubError, SpecError
from safehub.operations.common import Report, verified_tree
from safehub.run import runtime
from safehub.spec import RepoSpec
from safehub.store.bytecode import BytecodeStore
from safehub.store.cache import integrity
from safehub.store.lockfile import spec_key

if TYPE_CHECKING:
    from safehub.hub import Hub

__all__ = ["CacheCheck", "CacheEntryInfo", "Prefetched", "cache_clear", "cache_entries",
           "cache_verify", "prefetch"]


class Prefetched(Report):
    spec: str
    commit: str
    digest: str
    path: str
    mirror: str | None = None


def prefetch(hub: Hub, specs: Sequence[str] = (), *, mirror: Path | None = None,
             read_only: bool = False) -> list[Prefetched]:
    """Fill the cache (and optionally a mirror folder) for offline or fleet use.

    Without ``specs`` every lockfile entry is fetched. Each tree is verified as in a load
    (against the lockfile where locked); nothing is trusted or run. A mirror is laid out
    like the archive endpoint (``<mirror>/<Owner>/<Name>/zipball/<sha>``, names as GitHub
    spells them) so any static server can serve it as ``SAFEHUB_GITHUB_URL``.
    ``read_only`` seals the cache afterwards for sharing.
    """
    lockfile = hub.lockfile
    if specs:
        items = [RepoSpec.parse(t) for t in specs]
    elif lockfile is not None and lockfile.entries:
        items = [RepoSpec.parse(k) for k in sorted(lockfile.entries)]
    else:
        raise SpecError(f"nothing to prefetch: no specs given and no lockfile at "
                        f"{hub.lockfile_path}",
                        fix=fixes.either(
                            fixes.run("safehub prefetch owner/name:ref ..."),
                            fixes.run("safehub lock owner/name:ref ...",
                                      "first (then prefetch reads the lockfile)")))
    was_sealed = hub.cache.sealed
    if read_only and was_sealed:
        hub.cache.unseal()  # adding to a shared cache: sealed again below, whatever happens
    done = []
    try:
        for spec in items:
            admitted, tree = verified_tree(hub, spec)
            where = str(_mirror(hub, admitted, tree.digest, mirror)) if mirror else None
            done.append(Prefetched(spec_key(spec), admitted.commit, tree.digest,
                                   str(tree.path), where))
    finally:
        if read_only and (was_sealed or done):
            hub.cache.seal()
    return done


def _mirror(hub: Hub, admitted: Admitted, digest: str, mirror: Path) -> Path:
    """Download the archive into the mirror, verified to hold exactly ``digest``."""
    r = hub.resolver.spelled(admitted.resolved)  # static servers match names exactly
    target = mirror / r.url_name / "zipball" / r.commit
    if target.is_file() and hub.fetcher.archive_digest(target, r.commit) == digest:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheError(f"cannot write the mirror folder {target.parent} ({e.strerror or e})",
                         fix=fixes.say("choose a --mirror folder you can write")) from e
    tmp = target.with_name(f".{target.name}.partial")
    hub.fetcher.download(r, tmp, verbose=False)
    if hub.fetcher.archive_digest(tmp, r.commit) != digest:
        os.unlink(tmp)
        raise IntegrityError(
            f"the archive downloaded for the mirror of {r.url_name} does not hold the "
            f"verified content {digest}",
            fix=fixes.say("the server changed what it serves; do not publish this mirror"))
    os.replace(tmp, target)
    return target


class CacheEntryInfo(Report):
    commit: str
    repos: list[str]
    digest: str
    tree: str
    level: str
    files: int
    bytes: int
    unverified: list[str]
    path: str
    repo: str = ""
    """The repo it was verified for (its name as the load, lock or prefetch wrote it)."""
    specs: list[str] = field(default_factory=list)
    """The lockfile's specs pinned to this commit, where the lockfile is known."""
    last_used: str = ""
    """When it was last loaded, as the audit log of this user says (UTC, ISO 8601; empty:
    no load there, such as a tree only prefetched)."""


def cache_entries(hub: Hub) -> list[CacheEntryInfo]:
    """Every cached commit: its repo, the repos naming it, locked specs (``cache ls``)."""
    repos = hub.cache.repos_by_commit()
    try:
        lockfile = hub.lockfile
    except SafehubError:  # an unreadable lockfile only hides the specs here
        lockfile = None
    specs: dict[str, list[str]] = {}
    for pinned in (lockfile.entries.values() if lockfile is not None else ()):
        specs.setdefault(pinned.commit, []).append(pinned.spec)
    out = []
    used = last_loads(hub.settings.audit_path)
    for entry in hub.cache.entries():
        v = entry.verdict()
        named = repos.get(v.commit, [])
        out.append(CacheEntryInfo(v.commit, named, v.digest, v.tree,
                                  v.level, len(v.files), sum(f.size for f in v.files),
                                  list(v.unverified), str(entry.path),
                                  repo=v.source or (named[0] if named else ""),
                                  specs=sorted(specs.get(v.commit, [])),
                                  last_used=used.get(v.commit, "")))
    return out


#: The audit decisions that ran a commit's code (a load, list or help that went ahead).
_RAN = frozenset({"allow", "consent", "trust_repo", "prompt-yes", "warn"})
_TAIL = 8 << 20  # how much of the end of the audit log cache ls reads


def last_loads(log: Path) -> dict[str, str]:
    """Commit to the time of its last load in the audit log ``log`` (its last
    :data:`_TAIL` bytes; a log that cannot be read says nothing)."""
    import json

    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL))
            tail = f.read()
    except OSError:
        return {}
    last: dict[str, str] = {}
    for line in tail.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the first, cut line; or one that is not JSON
        if isinstance(record, dict) and record.get("decision") in _RAN and \
                isinstance(record.get("commit"), str) and isinstance(record.get("time"), str):
            last[record["commit"]] = max(last.get(record["commit"], ""), record["time"])
    return last


class CacheCheck(Report):
    commit: str
    ok: bool
    error: str | None = None


def cache_verify(hub: Hub, prefixes: Sequence[str] = ()) -> list[CacheCheck]:
    """Re-hash cached trees fully (all, or those whose commit starts with a prefix)."""
    results = []
    for entry in hub.cache.entries():
        if prefixes and not any(entry.commit.startswith(p) for p in prefixes):
            continue
        try:
            with runtime.own_work():  # safehub reads the files to check them
                integrity.rehash(entry)
            results.append(CacheCheck(entry.commit, True))
        except SafehubError as e:
            results.append(CacheCheck(entry.commit, False, e.message))
    return results


def cache_clear(hub: Hub, prefixes: Sequence[str] = ()) -> list[str]:
    """Remove cached trees (all, or those whose commit starts with a prefix of 4 to 40
    hex digits); returns the commits removed (all of them: every cached commit). The
    user's store of compiled modules (:mod:`safehub.store.bytecode`) is emptied too."""
    bad = [p for p in prefixes if not re.fullmatch(r"[0-9a-fA-F]{4,40}", p)]
    if bad:
        raise SpecError(f"{bad[0]!r} is not a commit prefix (4 to 40 hex digits)",
                        fix=fixes.either(
                            fixes.run("safehub cache ls", "to list the cached commits"),
                            fixes.run("safehub cache clear", "to remove them all")))
    if not prefixes:
        removed = [entry.commit for entry in hub.cache.entries()]
        hub.cache.clear()
        BytecodeStore(hub.settings.data_dir).clear()
        return removed
    wanted = [p.lower() for p in prefixes]
    removed = [entry.commit for entry in list(hub.cache.entries())
               if any(entry.commit.startswith(p) for p in wanted)]
    if not removed:
        raise CacheError(f"no cached commit starts with {' or '.join(prefixes)}",
                         fix=fixes.run("safehub cache ls", "to list the cached commits"))
    for commit in removed:
        hub.cache.remove(commit)
    BytecodeStore(hub.settings.data_dir).clear()  # keyed by content: what was removed is not known
    return removed
