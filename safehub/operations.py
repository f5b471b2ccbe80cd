"""What safehub does besides loading: check, verify, lock, prefetch, the cache.

Each operation admits a spec exactly as a load does (:mod:`safehub.admission`) and returns
typed, frozen reports; the CLI only formats them (text, or JSON through ``to_json``).
Nothing here runs a repo's code.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safehub._internal import fixes
from safehub.admission import Admitted
from safehub.errors import (
    CacheError,
    IntegrityError,
    OfflineError,
    PinError,
    PolicyDenied,
    SafehubError,
    SignatureError,
    SpecError,
)
from safehub.run import environment, runtime
from safehub.spec import RepoSpec
from safehub.store.cache import integrity
from safehub.store.lockfile import LockEntry, Lockfile, spec_key
from safehub.store.records import WeightPins
from safehub.trust import Subject
from safehub.verify.signatures.check import verify_complete
from safehub.verify.signatures.signers import SignerSet

if TYPE_CHECKING:
    from safehub.hub import Hub

__all__ = ["CacheCheck", "CacheEntryInfo", "CheckReport", "LockChange", "LockStatus",
           "Prefetched", "VerifyReport", "cache_entries", "cache_verify", "check", "lock",
           "lock_check", "prefetch", "verify"]


class _Report:
    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]


@dataclass(frozen=True)
class CheckReport(_Report):
    """What a load of ``spec`` would do, and why (``safehub check``)."""

    spec: str
    repo: str
    entrypoint: str | None
    policy_files: list[str]
    outcome: str  # load, prompt, refuse, or conditional (on a signature not yet checked)
    why: str
    fix: fixes.Fix | None = None
    error: str | None = None
    ref: str | None = None
    commit: str | None = None
    proof: str | None = None
    policy: str | None = None
    reasons: list[str] = dataclasses.field(default_factory=list)
    requirements: dict[str, str | bool] = dataclasses.field(default_factory=dict)
    violations: list[str] = dataclasses.field(default_factory=list)
    cached: bool = False
    digest: str | None = None
    entrypoint_found: bool | None = None
    """Whether hubconf.py defines ``entrypoint`` (read from its syntax tree; None: cannot
    tell, see ``entrypoint_note``)."""
    entrypoint_note: str = ""
    signature: str = ""
    """What the signature step found (``not checked ...`` when no tree was at hand)."""

    def to_json(self) -> dict[str, Any]:  # the fix as the command prints it
        return {**super().to_json(), "fix": fixes.render(self.fix) if self.fix else None}


def check(hub: Hub, repo: str, *, entrypoint: str | None = None) -> CheckReport:
    """What a load would do, without downloading an archive or running code.

    ``outcome`` is ``load`` (allowed, or this content was trusted), ``prompt`` (a terminal
    user would be asked), ``refuse`` (with ``error`` and ``fix``), or ``conditional``: the
    policy requires a signature and the tree is not cached, so it could not be checked
    (``fix`` fetches the tree; a cached tree's signature is verified as a load would).
    """
    spec = RepoSpec.parse(repo)
    base: dict[str, Any] = {"spec": str(spec), "repo": spec.key, "entrypoint": entrypoint,
                            "policy_files": list(hub.policy.files)}
    try:
        environment.gate(hub.policy)
        admitted = hub.admission.admit(spec, entrypoint=entrypoint)
    except SafehubError as e:  # offline: the load's own fix, for this spec
        said = hub.settings.offline_fix(str(spec)) if isinstance(e, OfflineError) else e.fix
        return CheckReport(**base, outcome="refuse", why=e.message, fix=said,
                           error=type(e).__name__,
                           policy="deny" if isinstance(e, PolicyDenied) else None,
                           reasons=list(e.reasons) if isinstance(e, PolicyDenied) else [])
    r, decision = admitted.resolved, admitted.decision
    entry = hub.cache.lookup(r.commit)
    if entry is not None:
        entry = hub.fetcher.check_cached(entry, r, admitted.lock)
    wanted = decision.requirements.signature
    signature = f"not checked (signature = {wanted!r}: the tree is not cached)"
    if wanted == "none":
        signature = "not checked (no policy asks for one)"
    elif entry is not None:
        try:
            status = hub.signature(admitted, entry)
        except SignatureError as e:
            return CheckReport(**base, outcome="refuse", why=e.message, fix=e.fix,
                               error=type(e).__name__, ref=r.ref, commit=r.commit,
                               proof=r.proof, policy=decision.verdict, cached=True,
                               digest=entry.digest,
                               signature="MISSING" if "has no signature" in e.message
                               else "INVALID")
        signature = status.status
        if status.failed:  # mode = "warn": a violation, as in a load
            decision = dataclasses.replace(decision, verdict="prompt", violations=(
                *decision.violations, status.failed))
    found, note = _entrypoint(hub, admitted, entry, entrypoint)
    fix: fixes.Fix | None
    if found is False:
        outcome, why, fix = "refuse", note, fixes.say(f"safehub list {spec.repo}:{r.commit}")
    elif entry is None and hub.settings.offline:
        outcome = "refuse"
        why = (f"offline mode ({hub.settings.offline_source}) and the tree of {r.commit[:12]} "
               "is not in the cache: a load would fail")
        fix = hub.settings.offline_fix(str(spec))
    elif wanted == "required" and entry is None and decision.mode != "warn":
        outcome = "conditional"
        why = (f"{'LOAD' if decision.verdict == 'allow' else 'PROMPT'} only if a valid "
               f"signature by {_signers(decision.requirements.signer_sets)} is "
               "found: the policy requires one, and it can be checked only on the "
               "downloaded tree")
        fix = fixes.run(f"safehub prefetch {shlex.quote(str(spec))}",
                        "(fetches and verifies the tree, runs nothing; then check again)")
    else:  # the load's own trust step, asked without acting
        trust = hub.trust_step.verdict(Subject(spec.repo, spec.key, r.ref, r.commit,
                                               entry.digest if entry else "", signature),
                                       decision, "check")
        outcome, why, fix = {
            "allow": ("load", trust.why, None), "consent": ("load", trust.why, None),
            "ask": ("prompt", "not trusted yet: you would be asked", None),
        }.get(trust.kind) or ("refuse", "not trusted, and nobody can be asked",
                              trust.error.fix if trust.error else None)
    return CheckReport(
        **base, outcome=outcome, why=why, fix=fix, ref=r.ref, commit=r.commit, proof=r.proof,
        policy=decision.verdict, reasons=list(decision.reasons),
        requirements={"pin": decision.requirements.pin,
                      "signature": decision.requirements.signature},
        violations=list(decision.violations), cached=entry is not None,
        digest=entry.digest if entry is not None else None, entrypoint_found=found,
        entrypoint_note=note if found is not False else "", signature=signature)


def _signers(sets: Sequence[SignerSet]) -> str:
    """Who may sign, for a message: every set must be satisfied, by one of its signers."""
    named = [" or ".join([*(s.describe() for s in ss.signers),
                          *(k.describe() for k in ss.keys)]) or f"({ss.source}: none)"
             for ss in sets]
    return " and ".join(named) or "a signer the policy names"


def _entrypoint(hub: Hub, admitted: Admitted, entry: Any,
                entrypoint: str | None) -> tuple[bool | None, str]:
    """Whether hubconf.py defines ``entrypoint``, read without running any of it: from the
    cached tree, or fetched by blob id from the commit's tree."""
    from safehub._internal.hubconf_ast import entrypoints_of

    if entrypoint is None:
        return None, ""
    r = admitted.resolved
    try:
        if entry is not None:
            path = entry.path / "hubconf.py"
            source = path.read_bytes() if path.is_file() else None
        else:
            source = hub.source().top_level_file(r.location, r.tree, "hubconf.py")
    except (SafehubError, OSError) as e:
        return None, f"cannot tell whether hubconf.py defines {entrypoint!r}: {e}"
    if source is None:
        return False, f"{r.spec.repo} at {r.commit[:12]} has no hubconf.py (not a hub repo)"
    found = entrypoints_of(source.decode("utf-8", "replace"))
    if entrypoint in found.names:
        return True, ""
    if not found.certain:
        return None, f"cannot tell whether hubconf.py defines {entrypoint!r}: {found.why}"
    listed = ", ".join(sorted(found.names)) or "none"
    return False, (f"hubconf.py of {r.spec.repo} at {r.commit[:12]} has no entrypoint "
                   f"{entrypoint!r} (read from its syntax tree, nothing ran); it defines: "
                   f"{listed}")


@dataclass(frozen=True)
class VerifyReport(_Report):
    target: str
    signer: str
    files: int
    uncovered: list[str]
    commit: str | None = None
    digest: str | None = None
    valid: bool = True


def verify(hub: Hub, target: str, sets: Sequence[SignerSet] = ()) -> VerifyReport:
    """Verify the signature of a local folder or a spec (fetched and verified first).

    ``sets`` (signer sets) default to the policy's for a spec. Raises
    :class:`SignatureError` if the signature is missing, invalid, or leaves files
    uncovered; nothing is trusted or run.
    """
    folder = Path(target)
    commit = digest = None
    if folder.is_dir():
        tree_path = folder
        found = hub.signatures.find(folder, (), {})
    else:
        admitted = hub.admission.admit(RepoSpec.parse(target))
        tree = _tree(hub, admitted)
        tree_path, commit, digest = tree.path, admitted.commit, tree.digest
        sets = sets or admitted.decision.requirements.signer_sets
        r = admitted.resolved
        owner, _, name = r.url_name.partition("/")
        found = hub.signatures.find(tree.path, sets, {
            "owner": owner, "name": name, "repo": r.url_name, "ref": r.ref,
            "commit": r.commit})
    if not sets:
        raise SpecError("no signers to verify against",
                        hint="give --key, or --identity and --issuer, or a policy rule with "
                        "signers or keys for the repo")
    if found is None:
        raise SignatureError(f"no signature found for {target}",
                             hint="sign it with `safehub sign DIR --key KEY` or "
                             "`model_signing sign`, or set signature_url in the policy")
    result = verify_complete(target, tree_path, found, sets)
    return VerifyReport(target, result.signer, len(result.files), list(result.uncovered),
                        commit, digest)


def _tree(hub: Hub, admitted: Admitted) -> Any:
    return hub.fetcher.tree(admitted.resolved, admitted.lock, verbose=False)


@dataclass(frozen=True)
class LockChange(_Report):
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
        raise SpecError("--rewrite needs the specs to write", hint="safehub lock --rewrite "
                        "owner/name:ref ... (every spec the lockfile should pin)")
    lockfile = Lockfile(hub.lockfile_path) if rewrite else Lockfile.load(
        hub.lockfile_path, missing_ok=True)
    if rewrite:
        hub.forget_lockfile(instead=lockfile)  # admission must not read the old file either
    targets = list(specs) or (list(lockfile.entries) if upgrade else [])
    if not targets:
        raise SpecError("nothing to lock", hint="safehub lock owner/name:ref ...")
    changes: list[LockChange] = []
    pins = WeightPins(hub.settings.data_dir)
    for text in targets:
        spec = RepoSpec.parse(text)
        old = lockfile.get(spec)
        if old is not None and not upgrade:
            lockfile.put(old.with_pins(pins.for_repo(spec.key)))
            changes.append(LockChange(old.spec, old.commit, "kept"))
            continue
        admitted = hub.admission.admit(spec, resolution="fresh", locked=True)
        r = hub.resolver.spelled(admitted.resolved)  # the lockfile keeps GitHub's spelling
        tree = hub.fetcher.tree(r, None, verbose=False)
        signer = hub.signature(admitted, tree).signer
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
class LockStatus(_Report):
    spec: str
    locked: str
    now: str | None
    ok: bool
    error: str | None = None
    fix: str | None = None


def lock_check(hub: Hub) -> list[LockStatus]:
    """Ask GitHub whether every locked ref still names its locked commit (and is the
    repo's own, and the policy still admits it); nothing is cached or changed."""
    lockfile = hub.lockfile
    if lockfile is None:
        raise PinError(f"no lockfile at {hub.lockfile_path}",
                       hint="create one with `safehub lock SPEC`")
    results = []
    for key in sorted(lockfile.entries):
        entry = lockfile.entries[key]
        try:
            now = hub.admission.admit(RepoSpec.parse(entry.spec), resolution="online").resolved
            where = now.url_name.lower()
            if entry.repo and entry.repo.lower() != where:
                # The entry locks code from another repo than the spec names today.
                results.append(LockStatus(key, entry.commit, None, False,
                                          f"locked to code from {entry.repo}, but {entry.spec} "
                                          f"is {now.url_name} now; run `safehub lock "
                                          f"{entry.spec}` after checking why"))
                continue
            ok = now.commit == entry.commit and now.tree == entry.tree
            results.append(LockStatus(key, entry.commit, now.commit, ok, fix=None if ok else (
                f"safehub lock --upgrade {shlex.quote(entry.spec)}   (if the move is "
                "expected: review the new commit first)")))
        except SafehubError as e:
            results.append(LockStatus(key, entry.commit, None, False,
                                      f"{type(e).__name__}: {e.message}", e.hint))
    return results


@dataclass(frozen=True)
class Prefetched(_Report):
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
                        hint="safehub prefetch owner/name:ref ..., or `safehub lock` first")
    was_sealed = hub.cache.sealed
    if read_only and was_sealed:
        hub.cache.unseal()  # adding to a shared cache: sealed again below, whatever happens
    done = []
    try:
        for spec in items:
            admitted = hub.admission.admit(spec)
            tree = _tree(hub, admitted)
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
                         hint="choose a --mirror folder you can write") from e
    tmp = target.with_name(f".{target.name}.partial")
    hub.fetcher.download(r, tmp, verbose=False)
    if hub.fetcher.archive_digest(tmp, r.commit) != digest:
        os.unlink(tmp)
        raise IntegrityError(
            f"the archive downloaded for the mirror of {r.url_name} does not hold the "
            f"verified content {digest}",
            hint="the server changed what it serves; do not publish this mirror")
    os.replace(tmp, target)
    return target


@dataclass(frozen=True)
class CacheEntryInfo(_Report):
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
    specs: list[str] = dataclasses.field(default_factory=list)
    """The lockfile's specs pinned to this commit, where the lockfile is known."""


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
    for entry in hub.cache.entries():
        v = entry.verdict()
        named = repos.get(v.commit, [])
        out.append(CacheEntryInfo(v.commit, named, v.digest, v.tree,
                                  v.level, len(v.files), sum(f.size for f in v.files),
                                  list(v.unverified), str(entry.path),
                                  repo=v.source or (named[0] if named else ""),
                                  specs=sorted(specs.get(v.commit, []))))
    return out


@dataclass(frozen=True)
class CacheCheck(_Report):
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
    hex digits); returns the commits removed (all of them: every cached commit)."""
    bad = [p for p in prefixes if not re.fullmatch(r"[0-9a-fA-F]{4,40}", p)]
    if bad:
        raise SpecError(f"{bad[0]!r} is not a commit prefix (4 to 40 hex digits)",
                        hint="`safehub cache ls` lists the cached commits; `safehub cache "
                        "clear` with no argument removes them all")
    if not prefixes:
        removed = [entry.commit for entry in hub.cache.entries()]
        hub.cache.clear()
        return removed
    wanted = [p.lower() for p in prefixes]
    removed = [entry.commit for entry in list(hub.cache.entries())
               if any(entry.commit.startswith(p) for p in wanted)]
    if not removed:
        raise CacheError(f"no cached commit starts with {' or '.join(prefixes)}",
                         hint="`safehub cache ls` lists the cached commits")
    for commit in removed:
        hub.cache.remove(commit)
    return removed
