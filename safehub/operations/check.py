"""``safehub check``: what a load of a spec would do, and why, asked without acting."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from safehub import pipeline
from safehub._internal import fixes
from safehub._internal.frozen import field
from safehub.admission import Admitted
from safehub.errors import FetchError, NotFoundError, OfflineError, PolicyDenied, SafehubError
from safehub.operations.common import Report
from safehub.spec import RepoSpec
from safehub.verify.signatures.signers import SignerSet

if TYPE_CHECKING:
    from safehub.context import Context
    from safehub.hub import Hub

__all__ = ["CheckReport", "check"]


class CheckReport(Report):
    """What a load of ``spec`` would do, and why (``safehub check``)."""

    spec: str
    repo: str
    entrypoint: str | None
    policy_files: list[str]
    outcome: str  # load, prompt, refuse, conditional (on a signature not yet checked), or
    # unknown (the network failed before anything decided: :func:`undecided`)
    why: str
    fix: fixes.Fix | None = None
    error: str | None = None
    ref: str | None = None
    commit: str | None = None
    proof: str | None = None
    policy: str | None = None
    reasons: list[str] = field(default_factory=list)
    requirements: dict[str, str | bool] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
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
    (``fix`` fetches the tree; a cached tree's signature is verified as a load would), or
    ``unknown``: the network failed before the policy or the repo answered (``error`` says
    how; not a verdict, ask again).
    The load's own steps run as a dry run (:func:`safehub.pipeline.steps`).
    """
    ctx = hub.context
    spec = RepoSpec.parse(repo)
    base: dict[str, Any] = {"spec": str(spec), "repo": spec.key, "entrypoint": entrypoint,
                            "policy_files": list(ctx.policy.files)}
    try:
        passed = pipeline.steps(ctx, spec, pipeline.Plan(
            entrypoint, fetch=False, dry_run=True, gate=True,
            must_be_locked=ctx.settings.locked))  # as a load in locked mode
    except SafehubError as e:  # a refusal before the signature (offline: the load's fix)
        return CheckReport(**base, outcome="unknown" if undecided(e) else "refuse",
                           why=e.message, fix=e.fix,
                           error=type(e).__name__,
                           policy="deny" if isinstance(e, PolicyDenied) else None,
                           reasons=list(e.reasons) if isinstance(e, PolicyDenied) else [])
    admitted, entry, signed = passed.admitted, passed.tree, passed.signature
    r = admitted.resolved
    assert signed is not None
    if signed.error is not None:  # MISSING or INVALID, said by the step as data
        return CheckReport(**base, outcome="refuse", why=signed.error.message,
                           fix=signed.error.fix, error=type(signed.error).__name__,
                           ref=r.ref, commit=r.commit, proof=r.proof,
                           policy=admitted.decision.verdict, cached=True,
                           digest=entry.digest if entry is not None else None,
                           signature=signed.kind)
    decision, wanted = passed.decision, admitted.decision.requirements.signature
    found, note = _entrypoint(ctx, admitted, entry, entrypoint)
    fix: fixes.Fix | None
    if found is False and note.endswith(_NO_HUBCONF):
        outcome, why, fix = "refuse", note, fixes.say(
            f"check the ref: it resolved to {r.proof}, commit {r.commit[:12]}, whose root has "
            "no hubconf.py (a repo may add it in a later tag or keep it on another branch)")
    elif found is False:
        outcome, why, fix = "refuse", note, fixes.say(f"safehub list {spec.repo}:{r.commit}")
    elif entry is None and ctx.settings.offline:
        outcome = "refuse"
        why = (f"offline mode ({ctx.settings.offline_source}) and the tree of {r.commit[:12]} "
               "is not in the cache: a load would fail")
        fix = ctx.settings.offline_fix(str(spec))
    elif entry is None and ctx.settings.oci and not _oci_pinned(ctx, r.commit):
        from safehub.sources.oci.source import unpinned

        refusal = unpinned(str(ctx.lockfile_path), spec.key, r.commit)  # as a load says
        outcome, why, fix = "refuse", refusal.message, refusal.fix
    elif entry is None and (fleet := _fleet_sets(ctx)) and decision.mode != "warn":
        outcome = "conditional"
        why = (f"{'LOAD' if decision.verdict == 'allow' else 'PROMPT'} only if the snapshot "
               f"in {', '.join(ctx.settings.oci)} carries a fleet signature by "
               f"{_signers(fleet)}: [oci] requires one, checked when the snapshot is "
               "downloaded")
        fix = _prefetch_fix(spec)
    elif wanted == "required" and entry is None and decision.mode != "warn":
        outcome = "conditional"
        why = (f"{'LOAD' if decision.verdict == 'allow' else 'PROMPT'} only if a valid "
               f"signature by {_signers(decision.requirements.signer_sets)} is "
               "found: the policy requires one, and it can be checked only on the "
               "downloaded tree")
        fix = _prefetch_fix(spec)
    else:  # the load's own trust step, asked without acting
        assert passed.trusted is not None and passed.trusted.verdict is not None
        trust = passed.trusted.verdict
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
        entrypoint_note=note if found is not False else "", signature=signed.status)


_NO_HUBCONF = " has no hubconf.py at its root (not a torch.hub repo there)"


def undecided(error: SafehubError) -> bool:
    """Whether ``error`` leaves the question open: the network failed on the way (a host
    that cannot be reached, a spent rate limit, server errors or cut answers until safehub
    gave up), so neither the policy nor the repo said no, and asking again later may answer
    it. Any other answer of the server (404: no such repo or ref; 401, 403) and offline mode
    (a load would fail the same) decide."""
    from safehub.errors import RateLimitError, UnreachableError
    from safehub.sources.transport import HTTPError

    if isinstance(error, RateLimitError | UnreachableError):
        return True
    if not isinstance(error, FetchError) or isinstance(error, NotFoundError | OfflineError):
        return False
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, HTTPError):
            return False  # the server's own answer
        cause = cause.__cause__
    return True


def _oci_pinned(ctx: Context, commit: str) -> bool:
    """Whether a lockfile entry pins ``commit``'s snapshot by ``oci`` digest (what a load
    through ``SAFEHUB_OCI`` needs)."""
    found = ctx.lockfile
    return any(e.commit == commit and e.oci
               for e in (found.entries.values() if found is not None else ()))


def _fleet_sets(ctx: Context) -> tuple[SignerSet, ...]:
    """The ``[oci]`` signer sets a load through ``SAFEHUB_OCI`` must satisfy (none
    without it)."""
    from safehub.policy.oci import fleet_signers

    return fleet_signers(ctx.policy) if ctx.settings.oci else ()


def _prefetch_fix(spec: RepoSpec) -> fixes.Fix:
    return fixes.run(f"safehub prefetch {shlex.quote(str(spec))}",
                     "(fetches and verifies the tree, runs nothing; then check again)")


def _signers(sets: Sequence[SignerSet]) -> str:
    """Who may sign, for a message: every set must be satisfied, by one of its signers."""
    named = [" or ".join([*(s.describe() for s in ss.signers),
                          *(k.describe() for k in ss.keys)]) or f"({ss.source}: none)"
             for ss in sets]
    return " and ".join(named) or "a signer the policy names"


def _entrypoint(ctx: Context, admitted: Admitted, entry: Any,
                entrypoint: str | None) -> tuple[bool | None, str]:
    """Whether hubconf.py defines ``entrypoint``, read without running any of it: from the
    cached tree, or fetched by blob id from the commit's tree."""
    from safehub._internal.hubconf_ast import entrypoints_of
    from safehub._internal.text import did_you_mean

    if entrypoint is None:
        return None, ""
    r = admitted.resolved
    try:
        if entry is not None:
            path = entry.path / "hubconf.py"
            source = path.read_bytes() if path.is_file() else None
        else:
            source = ctx.source().top_level_file(r.location, r.tree, "hubconf.py")
    except (SafehubError, OSError) as e:
        return None, f"cannot tell whether hubconf.py defines {entrypoint!r}: {e}"
    if source is None:
        return False, f"{r.spec.repo} at {r.commit[:12]}{_NO_HUBCONF}"
    found = entrypoints_of(source.decode("utf-8", "replace"))
    if entrypoint in found.names:
        return True, ""
    if not found.certain:
        return None, f"cannot tell whether hubconf.py defines {entrypoint!r}: {found.why}"
    listed = ", ".join(sorted(found.names)) or "none"
    return False, (f"hubconf.py of {r.spec.repo} at {r.commit[:12]} has no entrypoint "
                   f"{entrypoint!r}{did_you_mean(entrypoint, found.names)} (read from its "
                   f"syntax tree, nothing ran); it defines: {listed}")
