"""Steps 2 to 4 of a load, shared by every operation: may this spec load, and as what.

One admission serves load, list, help, check, trust, lock, lock --check, verify SPEC and
prefetch, so a rename, a default branch or a denial gets the same verdict everywhere:

1. decide on the name as asked (a deny rule, or ``unknown_repos = "deny"``, stops here,
   before any request);
2. resolve the ref to one commit proven to be the repo's own (lockfile, cache, API;
   a rename is followed only where the policy names the new repo);
3. decide again on what was resolved: the new name's rules after a rename, the default
   branch's name for a spec without a ref.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub._internal.warn import warn
from safehub.errors import PinError, PolicyDenied
from safehub.policy import Decision, Policy
from safehub.resolve import Resolved, Resolver
from safehub.spec import RepoSpec

if TYPE_CHECKING:  # the lockfile module is imported where a lockfile is read
    from safehub.store.lockfile import Locked, Lockfile

__all__ = ["Admission", "Admitted", "Lockfiles"]

Resolution = Literal["normal", "fresh", "online"]


class Admitted(Frozen):
    """A spec the policy admits, resolved to one commit, with the decision that holds."""

    spec: RepoSpec
    resolved: Resolved
    decision: Decision
    lock: Locked | None
    """The spec's lockfile entry and its file, if it is locked (looked up once, here)."""

    @property
    def commit(self) -> str:
        return self.resolved.commit


class Lockfiles(Protocol):
    """Where admission finds the lockfile in force (the context: read once, on first use)."""

    @property
    def lockfile(self) -> Lockfile | None: ...

    @property
    def lockfile_path(self) -> Path: ...


class Admission:
    """The policy and the resolver, applied in one order for every operation."""

    def __init__(self, policy: Policy, resolver: Resolver, lockfiles: Lockfiles) -> None:
        self.policy = policy
        self.resolver = resolver
        self.lockfiles = lockfiles
        """The lockfile in force, and its path for the one message with no entry to name
        it (a lockfile that is named but missing)."""

    def locked(self, spec: RepoSpec) -> Locked | None:
        """The lockfile's entry of ``spec`` with its file, or None."""
        lockfile = self.lockfiles.lockfile
        return lockfile.locked(spec) if lockfile is not None else None

    def decide(self, spec: RepoSpec, *, entrypoint: str | None = None, ref: str | None = None,
               locked: bool = False, warn_violations: bool = True,
               full_ref: str = "", resolved: bool = False) -> Decision:
        """The policy's answer; a denial raises :class:`PolicyDenied`."""
        decision = self.policy.decide(spec, entrypoint=entrypoint, ref=ref, locked=locked,
                                      full_ref=full_ref, resolved=resolved)
        return _held(decision, str(spec), warn_violations)

    def decide_local(self, folder: str) -> Decision:
        """The policy's answer on a ``source="local"`` folder (``local_dirs``); a denial
        raises :class:`PolicyDenied`."""
        return _held(self.policy.decide_local(folder), f"a local load of {folder}")

    def admit(self, spec: RepoSpec, *, entrypoint: str | None = None,
              resolution: Resolution = "normal", locked: bool | None = None) -> Admitted:
        """Decide, resolve, decide again (see the module docstring).

        ``resolution``: ``normal`` (lockfile, cache, then API), ``fresh`` (API, recorded:
        ``force_reload`` and ``safehub lock``), ``online`` (API, nothing recorded:
        ``safehub lock --check``). ``locked`` overrides whether a lockfile pin satisfies
        ``pin = "commit"`` (``safehub lock`` is about to pin it).
        """
        missing: PinError | None = None
        try:
            lock = self.locked(spec)
        except PinError as e:
            if not e.missing_lockfile:
                raise
            lock, missing = None, e  # said after the policy: what is wrong first comes first
        is_locked = lock is not None if locked is None else locked
        self.decide(spec, entrypoint=entrypoint, locked=is_locked, warn_violations=False)
        if missing is not None and locked is None:
            from safehub.store.lockfile import spec_key

            where = fixes.quote(str(self.lockfiles.lockfile_path))  # the file named, wherever from
            raise PinError(missing.message, fix=fixes.either(
                fixes.run(f"safehub lock {fixes.quote(spec_key(spec))} --lockfile {where}"),
                fixes.say("fix SAFEHUB_LOCKFILE or the policy's lockfile"))) from None
        if resolution == "online":
            resolved = self.resolver.online(spec)
        else:
            resolved = self.resolver.resolve(
                spec, lock if locked is None else None, force=resolution == "fresh")
        decision = self.decide(resolved.location, entrypoint=entrypoint, ref=resolved.ref,
                               locked=is_locked, full_ref=resolved.full_ref, resolved=True)
        return Admitted(spec, resolved, decision, lock)


def _held(decision: Decision, what: str, warn_violations: bool = True) -> Decision:
    """``decision``, if it lets ``what`` load; a denial is :class:`PolicyDenied` (the one
    place a decision becomes one), and ``mode = "warn"`` violations are warned about."""
    if decision.verdict == "deny":
        denied = PolicyDenied(f"policy refuses {what}: " + "; ".join(decision.reasons),
                              fix=decision.fix or fixes.say("see `safehub policy show` for "
                                                            "the rules that apply"))
        denied.reasons = decision.reasons
        raise denied
    if decision.violations and warn_violations:
        warn(f"policy violation for {what} (mode = 'warn', loading anyway): "
             + "; ".join(decision.violations))
    return decision
