"""The load pipeline, sequenced once: every verb runs :func:`steps` with a :class:`Plan`.

Each step is a function of the :class:`~safehub.context.Context` and of the previous
step's typed result, and calls nothing above it:

- :func:`admit` (steps 2 to 4): the spec and the plan -> ``Admitted``;
- :func:`fetch_tree` (5, 6): ``Admitted`` -> ``CachedTree`` (None: a dry run, not cached);
- :func:`sign` (7): ``Admitted`` and the tree -> ``SignatureStatus``, whose ``kind`` says
  OK, UNSIGNED, MISSING, INVALID, NOT_ASKED or NOT_CHECKED as data;
- :func:`trust` (8): ``Admitted``, the tree and ``SignatureStatus`` -> ``Trusted``;
- :func:`run` (9): ``Prepared`` -> what the repo's code returned.

The audit line (10) is built by :class:`~safehub.outcome.Audited` from the last outcome
:func:`steps` noted, whether the sequence finished or a step raised. The verbs differ only
in their plan: ``load``/``list``/``help`` and ``trust`` run every step; ``check`` runs them
as a dry run (no fetch: a cached tree only; a signature refusal and the trust verdict come
back as data); ``lock`` resolves afresh and stops after the signature, as the fleet
verbs do (for locked specs only); ``lock --check``, ``verify`` and ``prefetch`` stop
earlier (:attr:`Plan.upto`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from safehub._internal import fixes, gcpause
from safehub._internal.frozen import Frozen
from safehub.errors import (
    HubconfError,
    IntegrityError,
    NoHubconfError,
    OfflineError,
    PinError,
    RepoMovedError,
    SafehubError,
    SpecError,
)
from safehub.outcome import Audited, Outcome, Prepared, local_verdict
from safehub.resolve import CALLERS_FIXES, moved_fix
from safehub.run import bytecode, environment, guards, hfroute, runtime, torchhub
from safehub.spec import RepoSpec, plain_text
from safehub.store.bytecode import BytecodeStore
from safehub.store.records import WeightPins
from safehub.trust import Subject, Verdict, check_trust_repo, pinned_weights
from safehub.verify.signatures.check import SignatureStatus

if TYPE_CHECKING:
    from safehub.admission import Admitted, Resolution
    from safehub.context import Context
    from safehub.policy import Decision
    from safehub.run.weights import WeightsGuard
    from safehub.store.cache import CachedTree

__all__ = ["Passed", "Plan", "Trusted", "admit", "drop_in", "fetch_tree", "prepare", "run",
           "sign", "steps", "trust"]

Upto = Literal["admit", "tree", "signature", "trust"]


class Plan(Frozen):
    """What a verb asks of the one sequence (the flags of :func:`steps`)."""

    entrypoint: str | None = None
    upto: Upto = "trust"
    """The last step to run (``admit``, ``tree``, ``signature``, ``trust``)."""
    resolution: Resolution = "normal"
    locked: bool | None = None
    """Whether a lockfile pin satisfies ``pin = "commit"`` (``lock``: it is about to)."""
    fetch: bool = True
    """False: no download, a cached tree only (``check``)."""
    pinned: bool = True
    """False: the tree is checked against the commit, not the lockfile's entry, and named
    as the source spells the repo (``lock`` writes that entry)."""
    must_be_locked: bool = False
    """Refuse a spec the lockfile does not pin, right after admission (the fleet verbs)."""
    dry_run: bool = False
    """A signature refusal and the trust verdict come back as data; nothing is recorded."""
    gate: bool = False
    """Hold the policy's ``environment_hook`` first (a load, ``check``)."""
    trust_repo: Any = "check"
    force: bool = False
    verbose: bool = True
    checked_on_open: bool = False
    nested: bool = False
    """A load the repo's own code asked for (never prompted)."""


class Trusted(Frozen):
    """Step 8's result: the decision after the signature, who agreed (a load) or the
    verdict asked without acting (a dry run)."""

    decision: Decision
    by: str = ""
    verdict: Verdict | None = None


class Passed(Frozen):
    """What the steps of a plan produced (those it did not run are None)."""

    admitted: Admitted
    tree: CachedTree | None = None
    signature: SignatureStatus | None = None
    trusted: Trusted | None = None

    @property
    def decision(self) -> Decision:
        """The decision that holds after the last step run."""
        if self.trusted is not None:
            return self.trusted.decision
        if self.signature is not None:
            return self.signature.weighed(self.admitted.decision)
        return self.admitted.decision

    def prepared(self) -> Prepared:
        """A load's result: every step passed."""
        assert self.tree is not None and self.signature is not None
        assert self.trusted is not None
        a = self.admitted
        return Prepared(a.spec, a.resolved, self.tree, self.trusted.decision, self.trusted.by,
                        self.signature.status, a.lock)


# -- the sequence ---------------------------------------------------------------------------


def prepare(ctx: Context, repo: str, *, entrypoint: str | None = None,
            trust_repo: Any = "check", force_reload: bool = False,
            verbose: bool = True) -> Prepared:
    """Every check on ``repo`` (audited); its verified tree; nothing is imported."""
    check_trust_repo(trust_repo)
    spec = RepoSpec.parse(repo)                                                   # 1. parse
    with Audited(ctx.audit, Outcome.asked(spec, entrypoint)) as seen, runtime.own_work(), \
            gcpause.paused():                                                     # 10. audit
        return steps(ctx, spec, _load_plan(ctx, entrypoint, trust_repo, force_reload,
                                           verbose), seen).prepared()


def drop_in(ctx: Context, repo_or_dir: str | os.PathLike[str], source: str,
            entrypoint: str | None, trust_repo: Any, force_reload: bool, verbose: bool,
            code: Callable[[Path], Any], *, nested: bool = False) -> Any:
    """``load``/``list``/``help``: every check, then the repo's code (step 9) under the
    guards; audited (step 10)."""
    target, source, entrypoint, force_reload, verbose = _call_args(
        repo_or_dir, source, entrypoint, force_reload, verbose)
    environment.gate(ctx.policy)
    if source == "local":
        return _run_local(ctx, Path(target), entrypoint, code)
    check_trust_repo(trust_repo)
    spec = RepoSpec.parse(target)                                                 # 1. parse
    plan = _load_plan(ctx, entrypoint, trust_repo, force_reload, verbose, nested)
    with Audited(ctx.audit, Outcome.asked(spec, entrypoint)) as seen:            # 10. audit
        with runtime.own_work(), gcpause.paused():  # safehub's own work, nested or not
            prepared = steps(ctx, spec, plan, seen).prepared()                   # 2 to 8
        return run(ctx, prepared, seen, code, nested)                            # 9


def _load_plan(ctx: Context, entrypoint: str | None, trust_repo: Any, force_reload: bool,
               verbose: bool, nested: bool = False) -> Plan:
    """A load's plan; in locked mode the spec must be in the lockfile (nested ones too)."""
    return Plan(entrypoint, trust_repo=trust_repo, force=force_reload, verbose=verbose,
                checked_on_open=True, nested=nested, must_be_locked=ctx.settings.locked)


def _run_local(ctx: Context, folder: Path, entrypoint: str | None,
               code: Callable[[Path], Any]) -> Any:
    """A folder on this machine: code you vouch for, run as torch.hub runs it (no fetch,
    no consent), if the policy's ``local_dirs`` admit it; audited like any load."""
    real = os.path.realpath(folder)
    with Audited(ctx.audit, Outcome.local_folder(real, entrypoint)) as seen:
        seen.outcome = seen.outcome._replace(local=local_verdict(ctx.admission, ctx.ran, real))
        return code(folder)


def _call_args(repo_or_dir: object, source: object, entrypoint: object, force_reload: object,
               verbose: object) -> tuple[str, str, str | None, bool, bool]:
    """The caller's arguments checked, as plain values."""
    kind = plain_text(source, "source").lower() if isinstance(source, str) else None
    if kind not in ("github", "local"):
        raise SpecError(f'Unknown source: "{source}". Allowed values: "github" | "local".',
                        fix=fixes.say("use source='github' for owner/name[:ref] or 'local' "
                                      "for a folder"))
    if kind == "local":
        folder = os.fspath(repo_or_dir) if isinstance(repo_or_dir, (str, os.PathLike)) else None
        if not isinstance(folder, str):
            raise SpecError(f"source='local' needs a folder path, not {repo_or_dir!r}",
                            fix=fixes.say("pass the folder as a str or pathlib.Path"))
        target = plain_text(folder, "the folder")
    elif isinstance(repo_or_dir, str):
        target = plain_text(repo_or_dir, "the repo")
    else:
        raise SpecError(f"{repo_or_dir!r} is not a repo: write it as 'owner/name[:ref]'",
                        fix=fixes.say("pass the repo as a string, e.g. "
                                      "'pytorch/vision:v0.19.0'"))
    name = plain_text(entrypoint, "model") if isinstance(entrypoint, str) else None
    return target, kind, name, bool(force_reload), bool(verbose)


def steps(ctx: Context, spec: RepoSpec, plan: Plan, seen: Audited | None = None) -> Passed:
    """Steps 2 to 8 in their one order, as far as ``plan.upto``; each product is noted in
    ``seen`` (the audit line is built from the last one)."""
    done = seen.outcome if seen is not None else Outcome.asked(spec, plan.entrypoint)

    def note(outcome: Outcome) -> Outcome:
        if seen is not None:
            seen.outcome = outcome
        return outcome

    if plan.gate:
        environment.gate(ctx.policy)
    try:
        admitted = admit(ctx, spec, plan)                                 # 2, 3, 4
        done = note(done._replace(admitted=admitted))
        if plan.upto == "admit":
            return Passed(admitted)
        tree = fetch_tree(ctx, admitted, plan)                            # 5, 6
    except OfflineError as e:
        raise ctx.offline(e, str(spec)) from e
    oci = admitted.lock.entry.oci if admitted.lock is not None else ""
    done = note(done._replace(tree=tree, fleet=ctx.snapshot_signer(oci) if oci else ""))
    if plan.upto == "tree":
        return Passed(admitted, tree)
    signature = sign(ctx, admitted, tree, plan)                           # 7
    done = note(done._replace(signature=signature))
    if plan.upto == "signature" or signature.error is not None:  # a dry run's refusal
        return Passed(admitted, tree, signature)
    trusted = trust(ctx, admitted, tree, signature, plan)                 # 8
    note(done._replace(decision=trusted.decision, trusted_by=trusted.by))
    return Passed(admitted, tree, signature, trusted)


# -- the steps ------------------------------------------------------------------------------


def admit(ctx: Context, spec: RepoSpec, plan: Plan) -> Admitted:
    """Steps 2 to 4: decide on the name, resolve once, decide on what was resolved."""
    resolution = plan.resolution
    if plan.force and resolution == "normal":
        resolution = "fresh"
    if plan.must_be_locked and ctx.admission.locked(spec) is None:  # before any request
        raise ctx.unlocked(spec)
    admitted = ctx.admission.admit(spec, entrypoint=plan.entrypoint, resolution=resolution,
                                   locked=plan.locked)
    if plan.must_be_locked and admitted.lock is None:
        raise ctx.unlocked(spec)
    return admitted


def fetch_tree(ctx: Context, admitted: Admitted, plan: Plan) -> CachedTree | None:
    """Steps 5 and 6: the verified tree of the admitted commit (a cache hit re-checked);
    without ``plan.fetch``, the cached tree or None."""
    r, lock = admitted.resolved, admitted.lock
    if not plan.pinned:
        r, lock = ctx.resolver.spelled(r), None  # the lockfile keeps the source's spelling
    if not plan.fetch:
        hit = ctx.cache.lookup(r.commit)
        return ctx.fetcher.check_cached(hit, r, lock) if hit is not None else None
    return ctx.fetcher.tree(r, lock, force=plan.force, verbose=plan.verbose,
                            checked_on_open=plan.checked_on_open)


def sign(ctx: Context, admitted: Admitted, tree: CachedTree | None,
         plan: Plan) -> SignatureStatus:
    """Step 7: the signature the policy asks for, as data (``kind``: OK, UNSIGNED,
    MISSING, INVALID, NOT_ASKED, NOT_CHECKED). A refusal raises, except in a dry run."""
    reqs, r = admitted.decision.requirements, admitted.resolved
    if reqs.signature == "none":
        return SignatureStatus.not_asked()
    if tree is None:
        return SignatureStatus.not_checked(reqs.signature)
    owner, _, name = r.url_name.partition("/")
    return ctx.signatures.check(
        repo=r.spec.repo, commit=r.commit, digest=tree.digest, tree=tree.path,
        signature=reqs.signature, sets=reqs.signer_sets,
        values={"owner": owner, "name": name, "repo": r.url_name, "ref": r.ref,
                "commit": r.commit},
        warn_only=admitted.decision.mode == "warn", refuse=not plan.dry_run)


def trust(ctx: Context, admitted: Admitted, tree: CachedTree | None,
          signature: SignatureStatus, plan: Plan) -> Trusted:
    """Step 8: who agrees to run this content (a dry run: who would, asked without
    acting)."""
    decision = signature.weighed(admitted.decision)
    r = admitted.resolved
    subject = Subject(r.spec.repo, r.spec.key, r.ref, r.commit,
                      tree.digest if tree is not None else "", signature.status,
                      pinned_weights(admitted.lock.entry if admitted.lock else None,
                                     WeightPins(ctx.settings.data_dir), r.spec.key))
    if plan.dry_run:
        return Trusted(decision, verdict=ctx.trust.verdict(subject, decision, "check"))
    return Trusted(decision, ctx.trust.decide(subject, decision, plan.trust_repo,
                                              nested=plan.nested))


def run(ctx: Context, prepared: Prepared, seen: Audited, code: Callable[[Path], Any],
        nested: bool = False) -> Any:
    """Step 9: the repo's code under the weights guard, the runtime guard and nested-load
    routing; the guard's report is noted for the audit line."""
    guard = guards.runtime_guard(  # the repo that runs: the new name after a rename
        prepared.resolved.location, prepared.decision, prepared.tree,
        mode=ctx.settings.runtime,
        own=lambda: guards.own_work(ctx.settings, prepared.decision, ctx.audit.path),
        noticed=ctx.settings.data_dir, confined=ctx.confined)
    entry = prepared.lock.entry if prepared.lock else None
    locked, entrypoint = ctx.locked_mode(), seen.outcome.entrypoint
    bound = _bound_weights(ctx, prepared)

    def weights_guard() -> WeightsGuard:  # at the repo's first request for a file
        held = guards.weights_guard(prepared.spec, prepared.decision, entry,
                                    data_dir=ctx.settings.data_dir,
                                    transport=ctx.weights_transport, locked=locked,
                                    entrypoint=entrypoint, bound=bound)
        held.fetched = guard.report.add_fetched  # weights safehub fetches for the repo
        held.blobs = ctx.snapshot_weights(entry)
        return held

    weights = guards.Weights(weights_guard)
    refused: list[SafehubError] = []
    handlers = {**_final(weights.handlers(), refused, (IntegrityError, PinError)),
                **_final(hfroute.handlers(weights.guard), refused, (IntegrityError,)),
                **{name: _nested(ctx, name) for name in torchhub.NESTED}}
    # The repo's code may call torch.hub after its load returns (model.forward, its
    # threads): those calls keep this load's routing.
    real = str(guard.tree)  # the tree's real path, as the guard holds it
    folders = (str(prepared.path) + os.sep, real + os.sep)
    torchhub.remember(folders, handlers)
    bytecode.serve(folders, BytecodeStore(ctx.settings.data_dir))  # compiled once per user
    ctx.ran[real] = prepared.spec.repo
    if not nested:  # the load the caller asked for, not one its repo made
        ctx.last_report = guard.report
    seen.outcome = seen.outcome._replace(runtime=guard.report)
    try:
        with torchhub.handling(handlers), hfroute.offline_during(ctx.settings.offline), \
                guard.active():
            try:
                result = code(prepared.path)
            except Exception as e:  # the repo's own error, after it caught a refusal
                if refused:
                    raise refused[0] from e
                raise
        if refused:  # the repo's code caught the refusal and went on (another downloader)
            raise refused[0]
        return result
    except HubconfError as e:  # name the repo, not the cache folder
        if repr(str(prepared.path)) not in e.message:
            raise
        r = prepared.resolved
        named = e.message.replace(repr(str(prepared.path)), f"{r.spec.repo} at {r.commit[:12]}")
        if isinstance(e, NoHubconfError):  # listing its entrypoints would fail the same
            raise NoHubconfError(named, fix=fixes.say(
                f"check the ref: it resolved to {r.proof}, commit {r.commit[:12]}, whose root "
                "has no hubconf.py (a repo may add it in a later tag or keep it on another "
                "branch; torch.hub loads only hubconf.py at the repo root)")) from e
        raise HubconfError(named, fix=fixes.run(f"safehub list {r.spec.repo}:{r.commit}",
                                                "to see its entrypoints")) from e


def _final(handlers: dict[str, Callable[..., Any]], refused: list[SafehubError],
           kinds: tuple[type[SafehubError], ...]) -> dict[str, Callable[..., Any]]:
    """``handlers`` whose refusals of ``kinds`` are final for the load: noted, so that the
    load fails with the first even where the repo's code catches it and fetches the file
    another way (yolov5's ``safe_download`` falls back to ``curl``). A file that is not the
    pinned one (``IntegrityError``) is final on every held path; a URL locked mode does not
    pin (``PinError``) on torch.hub's helpers (a Hub library may probe for optional files
    and go on without them). Other errors (a 404, offline) are the code's to handle."""

    def final(handler: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except kinds as e:
                refused.append(e)
                raise

        return call

    return {name: final(handler) for name, handler in handlers.items()}


def _bound_weights(ctx: Context, prepared: Prepared) -> dict[str, str]:
    """The weights the consent this load runs on binds (URL -> sha256; none where the
    policy, ``trust_repo`` or a fresh answer let it run)."""
    if prepared.trusted_by != "consent":
        return {}
    r = prepared.resolved
    found = ctx.consents.find(r.spec.key, r.commit, prepared.tree.digest)
    return dict(found.weights) if found is not None else {}


# -- loads the repo's own code asks for -----------------------------------------------------


def _nested(ctx: Context, name: str) -> Callable[..., Any]:
    """torch.hub.load/list/help called by a repo's code while it runs (with torch's
    signature): through this context, with this policy; a ``trust_repo`` the repo's code
    passes grants nothing."""
    signature = torchhub.signature(name)

    def nested(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs).arguments
        given = call.get("model")
        if name != "list" and not (isinstance(given, str) and given.isidentifier()):
            raise SpecError(f"model={given!r} is not the name of an entrypoint",
                            fix=fixes.say("pass the entrypoint's name as a string"))
        model = str(given)
        code: Callable[[Path], Any]
        if name == "load":
            positional, extra = tuple(call.get("args", ())), dict(call.get("kwargs", {}))

            def code(path: Path) -> Any:
                return torchhub.call_entrypoint(path, model, positional, extra)
        elif name == "list":
            code = torchhub.entrypoints
        else:
            def code(path: Path) -> Any:
                return torchhub.docstring(path, model)
        with _fixes_for_the_user():
            return drop_in(ctx, call.get("repo_or_dir", call.get("github", "")),
                           call.get("source", "github"), model if name != "list" else None,
                           "check", call.get("force_reload", False),
                           call.get("verbose", True), code, nested=True)
    return nested


@contextlib.contextmanager
def _fixes_for_the_user() -> Iterator[None]:
    """A load the repo's own code made: a refusal's fix is what the user can change (the
    policy), never the repo's call."""
    try:
        yield
    except RepoMovedError as e:
        raise RepoMovedError(f"{e.message} (the repo's code asked for {e.old})",
                             old=e.old, new=e.new, fix=moved_fix(e.new, nested=True)) from e
    except PinError as e:
        if e.fix not in CALLERS_FIXES:
            raise  # a fix of the lockfile or the policy: the user's to apply
        raise PinError(f"{e.message} (asked for by the code of the repo being loaded)",
                       fix=fixes.say("the call is in the repo's code, so what it asks for "
                                     "cannot be changed here and no setting makes this commit "
                                     "the repo's own: do not load the outer repo at this "
                                     "commit, or ask its authors to fix the call")) from e
