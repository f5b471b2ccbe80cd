"""``Hub``: the public owner of one :class:`~safehub.context.Context`, and the drop-in
``load``/``list``/``help``.

Everything a load does is in :mod:`safehub.pipeline` (the steps, sequenced once, as
functions of the context); a ``Hub`` builds the context from its arguments and calls the
pipeline. The operations that are not loads (check, verify, lock, prefetch) live in
:mod:`safehub.operations` and run the same steps with other flags.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safehub import pipeline
from safehub._internal import fixes, gcpause
from safehub.context import Context
from safehub.errors import NotFoundError, SpecError
from safehub.outcome import Prepared
from safehub.run import torchhub
from safehub.spec import RepoSpec, is_full_sha, looks_like_sha

if TYPE_CHECKING:
    from safehub.admission import Admission, Admitted
    from safehub.audit import AuditLog
    from safehub.config import Settings
    from safehub.fetch import TreeFetcher
    from safehub.policy import Policy
    from safehub.resolve import Resolver
    from safehub.run import runtime
    from safehub.sources.github import GitHub
    from safehub.sources.interface import Source
    from safehub.sources.transport import Transport
    from safehub.store.cache import Cache, CachedTree
    from safehub.store.lockfile import Lockfile
    from safehub.store.records import Consent, ConsentStore, VerifiedRecords
    from safehub.trust import Trust
    from safehub.verify.signatures.check import SignatureCheck, SignatureStatus

__all__ = ["Hub", "Prepared"]


class Hub:
    """safehub with explicit configuration.

    The module-level functions (``safehub.load`` ...) build a ``Hub`` from the
    environment and the policy files on each call; build one yourself to set things in
    code::

        hub = safehub.Hub(cache_dir="/shared/hub-cache", offline=True)
        model = hub.load("org/repo:v1", "model")

    Keyword arguments are :class:`safehub.Settings` fields; ``policy`` replaces the policy
    files (``safehub.Policy.from_text(...)`` or :func:`safehub.load_policy`); ``transport``
    the HTTPS transport (:class:`safehub.Transport`); ``source`` where code comes from (a
    :class:`safehub.Source`; GitHub).
    """

    def __init__(self, settings: Settings | None = None, *, policy: Policy | None = None,
                 transport: Transport | None = None, source: Source | None = None,
                 cache_dir: str | os.PathLike[str] | None = None, offline: bool | None = None,
                 **overrides: Any) -> None:
        """``cache_dir``: where fetched code and weights are kept (default
        ``SAFEHUB_CACHE_DIR``, the policy's ``cache_dir``, then the user cache dir);
        ``offline``: True fetches nothing and loads only what is cached (default
        ``SAFEHUB_OFFLINE`` or the policy's ``offline``). None keeps what the environment
        and policy say. Other keyword arguments are :class:`safehub.Settings` fields."""
        if cache_dir is not None:
            overrides["cache_dir"] = cache_dir
        if offline is not None:
            overrides["offline"] = offline
        with gcpause.paused():  # safehub's own work: the collector's pass is the program's
            self.context = Context(settings, policy=policy, transport=transport,
                                   source=source, **overrides)
        """The parts, built once; the pipeline's steps are functions of it."""

    # -- the context's parts, by their names here -----------------------------------------

    @property
    def policy(self) -> Policy:
        return self.context.policy

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def cache(self) -> Cache:
        return self.context.cache

    @property
    def consents(self) -> ConsentStore:
        return self.context.consents

    @property
    def verified(self) -> VerifiedRecords:
        return self.context.verified

    @property
    def audit(self) -> AuditLog:
        return self.context.audit

    @property
    def resolver(self) -> Resolver:
        return self.context.resolver

    @property
    def admission(self) -> Admission:
        return self.context.admission

    @property
    def fetcher(self) -> TreeFetcher:
        return self.context.fetcher

    @property
    def signatures(self) -> SignatureCheck:
        return self.context.signatures

    @property
    def trust_step(self) -> Trust:
        return self.context.trust

    @property
    def last_report(self) -> runtime.RuntimeReport | None:
        """What the repo's code did during the latest load (the runtime guard's record)."""
        return self.context.last_report

    def transport(self) -> Transport:
        return self.context.transport()

    def weights_transport(self) -> Transport:
        """The transport for weights downloads (see :meth:`Context.weights_transport`)."""
        return self.context.weights_transport()

    def source(self) -> Source:
        """The ``source`` given, else ``SAFEHUB_OCI``'s (locked specs only), else GitHub."""
        return self.context.source()

    def github(self) -> GitHub:
        return self.context.github()

    @property
    def lockfile_path(self) -> Path:
        """``SAFEHUB_LOCKFILE`` / the policy's ``lockfile``, else ``./safehub.lock``."""
        return self.context.lockfile_path

    @property
    def lockfile(self) -> Lockfile | None:
        """The lockfile in force, or None. An explicitly named one must exist."""
        return self.context.lockfile

    def forget_lockfile(self, instead: Lockfile | None = None) -> None:
        """Read the lockfile again at the next use (or use ``instead``, unread: --rewrite)."""
        self.context.forget_lockfile(instead)

    # -- the pipeline ---------------------------------------------------------------------

    def prepare(self, repo: str, *, entrypoint: str | None = None, trust_repo: Any = "check",
                force_reload: bool = False, verbose: bool = True) -> Prepared:
        """Run every check on ``repo`` and return its verified tree; nothing is imported."""
        return pipeline.prepare(self.context, repo, entrypoint=entrypoint,
                                trust_repo=trust_repo, force_reload=force_reload,
                                verbose=verbose)

    def signature(self, admitted: Admitted, tree: CachedTree) -> SignatureStatus:
        """Step 7: the signature the policy asks for (verdicts cached per user)."""
        return pipeline.sign(self.context, admitted, tree, pipeline.Plan())

    # -- the drop-in functions ------------------------------------------------------------

    def load(self, repo_or_dir: str | os.PathLike[str], model: str, *args: Any,
             source: str = "github", trust_repo: Any = "check", force_reload: bool = False,
             verbose: bool = True, skip_validation: bool = False, **kwargs: Any) -> Any:
        """Like ``torch.hub.load``, with every check first (see :meth:`prepare`)."""
        if not isinstance(model, str) or not model.isidentifier():
            raise SpecError(f"model={model!r} is not the name of an entrypoint",
                            fix=fixes.say("pass the entrypoint's name as a string, e.g. "
                                          "'resnet18'"))
        return self._run(repo_or_dir, source, model, trust_repo, force_reload, verbose,
                         lambda path: torchhub.call_entrypoint(path, model, args, kwargs))

    def list(self, github: str, force_reload: bool = False, skip_validation: bool = False,
             trust_repo: Any = "check", verbose: bool = True) -> list[str]:
        result: list[str] = self._run(github, "github", None, trust_repo, force_reload, verbose,
                                      torchhub.entrypoints)
        return result

    def help(self, github: str, model: str, force_reload: bool = False,
             skip_validation: bool = False, trust_repo: Any = "check") -> str | None:
        result: str | None = self._run(github, "github", model, trust_repo, force_reload, True,
                                       lambda path: torchhub.docstring(path, model))
        return result

    def _run(self, repo_or_dir: str | os.PathLike[str], source: str, entrypoint: str | None,
             trust_repo: Any, force_reload: bool, verbose: bool,
             run: Callable[[Path], Any], *, nested: bool = False) -> Any:
        """Every check, then the repo's code (step 9) under the guards; audited."""
        return pipeline.drop_in(self.context, repo_or_dir, source, entrypoint, trust_repo,
                                force_reload, verbose, run, nested=nested)

    # -- consent without loading -----------------------------------------------------------

    def trust(self, repo: str, *, force_reload: bool = False) -> Prepared:
        """Fetch and verify ``repo`` and record consent for its content (no code runs)."""
        prepared = self.prepare(repo, trust_repo=True, force_reload=force_reload,
                                verbose=False)
        r = prepared.resolved
        self.consents.record(r.spec.key, r.commit, prepared.tree.digest, "safehub trust")
        return prepared

    def untrust(self, repo: str) -> int:
        """Forget consent for ``repo`` (one commit if the spec names a resolvable ref)."""
        spec = RepoSpec.parse(repo)
        commit = None
        if spec.ref is not None:
            locked = self.admission.locked(spec)
            hit = self.resolver.cached(spec) if locked is None else None
            commit = locked.entry.commit if locked else hit.commit if hit else spec.ref
            commit = _trusted_commit(commit, self.consents.list(spec.key), spec)
        return self.consents.remove(spec.key, commit)


def _trusted_commit(commit: str, consents: Sequence[Consent], spec: RepoSpec) -> str:
    """The full commit ``untrust`` forgets: ``commit`` itself, or the one commit trusted
    for the repo that it abbreviates. ``untrust`` asks no server (forgetting needs none)."""
    if is_full_sha(commit):
        return commit
    matches: list[str] = sorted({c.commit for c in consents if looks_like_sha(commit)
                      and c.commit.startswith(commit.lower())})
    if len(matches) == 1:
        return matches[0]
    trusted = ", ".join(sorted({c.commit[:12] for c in consents})) or "none"
    raise NotFoundError(
        f"{spec} names no commit this machine knows: untrust asks no server, so a ref must "
        "be in the lockfile or resolved here before, and an abbreviated sha must start "
        f"exactly one trusted commit of {spec.repo} (trusted: {trusted})",
        fix=fixes.either(fixes.say(f"name one of the commits above: safehub untrust "
                                    f"{spec.repo}:COMMIT"),
                          fixes.run(f"safehub untrust {spec.repo}", "to forget every commit "
                                    "of the repo")))
