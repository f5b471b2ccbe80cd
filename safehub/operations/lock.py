"""``safehub lock`` and ``lock --check``: pinning specs to commits in the lockfile."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from safehub import pipeline
from safehub._internal import fixes
from safehub.errors import PinError, SafehubError, SpecError
from safehub.operations.common import Report
from safehub.spec import RepoSpec
from safehub.store.lockfile import LockEntry, Lockfile, spec_key
from safehub.store.records import WeightPins

if TYPE_CHECKING:
    from safehub.hub import Hub

__all__ = ["LockChange", "LockStatus", "lock", "lock_check"]

_LOCK = pipeline.Plan(upto="signature", resolution="fresh", locked=True, pinned=False,
                      verbose=False)
"""``lock``: resolved afresh, the tree checked against the commit (the entry is being
written), the policy's signature verified (its signer is pinned)."""
_ONLINE = pipeline.Plan(upto="admit", resolution="online")
"""``lock --check``: admission with the ref asked online, nothing recorded."""


@dataclass(frozen=True)
class LockChange(Report):
    spec: str
    commit: str
    change: str  # added, upgraded, unchanged, kept
    previous: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["from"] = data.pop("previous")
        return data


def lock(hub: Hub, specs: Sequence[str] = (), *, upgrade: bool = False,
         rewrite: bool = False) -> list[LockChange]:
    """Pin ``specs`` in the lockfile (fetching and verifying each); return what changed.

    Specs already locked are kept unless ``upgrade`` (which, with no specs, re-resolves
    every entry). ``rewrite`` starts the file afresh, without reading it (an invalid one
    too): only ``specs`` are in it afterwards. Policy denials still apply; nothing is
    trusted or run.
    """
    if rewrite and not specs:
        raise SpecError("--rewrite needs the specs to write", fix=fixes.run(
            "safehub lock --rewrite owner/name:ref ...",
            "with every spec the lockfile should pin"))
    lockfile = Lockfile(hub.lockfile_path) if rewrite else Lockfile.load(
        hub.lockfile_path, missing_ok=True)
    if rewrite:
        hub.forget_lockfile(instead=lockfile)  # admission must not read the old file either
    targets = list(specs) or (list(lockfile.entries) if upgrade else [])
    if not targets:
        raise SpecError("nothing to lock", fix=fixes.run("safehub lock owner/name:ref ..."))
    changes: list[LockChange] = []
    pins = WeightPins(hub.settings.data_dir)
    for text in targets:
        spec = RepoSpec.parse(text)
        old = lockfile.get(spec)
        if old is not None and not upgrade:
            lockfile.put(old.with_pins(pins.for_repo(spec.key)))
            changes.append(LockChange(old.spec, old.commit, "kept"))
            continue
        passed = pipeline.steps(hub.context, spec, _LOCK)
        tree, signed = passed.tree, passed.signature
        assert tree is not None and signed is not None
        r = hub.resolver.spelled(passed.admitted.resolved)  # as the tree was named
        signer = signed.signer
        entry = LockEntry(spec_key(spec), r.commit, r.tree, tree.digest, r.ref, r.proof,
                          tree.level, signer, repo=r.url_name, resolved_ref=r.full_ref)
        if old is not None and (old.commit, old.digest) == (entry.commit, entry.digest):
            entry = dataclasses.replace(entry, weights=old.weights, oci=old.oci)
        entry = entry.with_pins(pins.for_repo(spec.key))
        change = "added" if old is None else (
            "unchanged" if old.commit == entry.commit else "upgraded")
        lockfile.put(entry)
        changes.append(LockChange(entry.spec, entry.commit, change,
                                  old.commit if old is not None else None))
    lockfile.save()
    hub.forget_lockfile()
    return changes


@dataclass(frozen=True)
class LockStatus(Report):
    spec: str
    locked: str
    now: str | None
    ok: bool
    error: str | None = None
    fix: fixes.Fix | None = None

    def to_json(self) -> dict[str, Any]:  # the fix as text, as for `check`
        return {**super().to_json(), "fix": fixes.render(self.fix) if self.fix else None}


def lock_check(hub: Hub) -> list[LockStatus]:
    """Ask GitHub whether every locked ref still names its locked commit (and is the
    repo's own, and the policy still admits it); nothing is cached or changed."""
    lockfile = hub.lockfile
    if lockfile is None:
        raise PinError(f"no lockfile at {hub.lockfile_path}",
                       fix=fixes.run("safehub lock SPEC", "to create one"))
    results = []
    for key in sorted(lockfile.entries):
        entry = lockfile.entries[key]
        try:
            now = pipeline.steps(hub.context, RepoSpec.parse(entry.spec),
                                 _ONLINE).admitted.resolved
            where = now.url_name.lower()
            if entry.repo and entry.repo.lower() != where:
                # The entry locks code from another repo than the spec names today.
                results.append(LockStatus(key, entry.commit, None, False,
                                          f"locked to code from {entry.repo}, but {entry.spec} "
                                          f"is {now.url_name} now", fixes.run(
                                              f"safehub lock {shlex.quote(entry.spec)}",
                                              "after checking why")))
                continue
            ok = now.commit == entry.commit and now.tree == entry.tree
            results.append(LockStatus(key, entry.commit, now.commit, ok, fix=None if ok else (
                fixes.run(f"safehub lock --upgrade {shlex.quote(entry.spec)}",
                          "if the move is expected (review the new commit first)"))))
        except SafehubError as e:
            results.append(LockStatus(key, entry.commit, None, False,
                                      f"{type(e).__name__}: {e.message}", e.fix))
    return results
