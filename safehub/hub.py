"""The load pipeline: one direction, every check before any hubconf.py runs.

:meth:`Hub.prepare` is the pipeline of the README's "What happens on a load", one call per
step; each step is one concern in its own module (admission, resolve, fetch, signatures,
trust, audit). The operations that are not loads (check, verify, lock, prefetch) live in
:mod:`safehub.operations` and share the same admission step.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safehub._internal import fixes, gcpause
from safehub._internal.progress import terminal_progress
from safehub.admission import Admission, Admitted
from safehub.audit import AuditLog
from safehub.config import Settings, say_ignored
from safehub.errors import (
    HubconfError,
    NotFoundError,
    OfflineError,
    PinError,
    RepoMovedError,
    SpecError,
)
from safehub.fetch import TreeFetcher
from safehub.outcome import Audited, Outcome, Prepared, local_verdict
from safehub.policy import Policy, load_policy
from safehub.resolve import CALLERS_FIXES, Resolver, moved_fix
from safehub.run import environment, guards, runtime, torchhub
from safehub.spec import RepoSpec, is_full_sha, looks_like_sha, plain_text
from safehub.store.cache import Cache, CachedTree
from safehub.store.records import Consent, ConsentStore, SignatureRecords, VerifiedRecords
from safehub.trust import Subject, Trust, check_trust_repo
from safehub.verify.signatures.check import SignatureCheck, SignatureStatus

if TYPE_CHECKING:  # imported where first used: a warm load needs none of them
    from safehub.sources.github import GitHub
    from safehub.sources.interface import Source
    from safehub.sources.transport import Transport
    from safehub.store.lockfile import Lockfile

__all__ = ["Hub", "Prepared"]

_RELOCATE = "point SAFEHUB_CACHE_DIR at a folder you can write"


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
                       hint="the call is in the repo's code, so what it asks for cannot be "
                       "changed here and no setting makes this commit the repo's own: do "
                       "not load the outer repo at this commit, or ask its authors to fix "
                       "the call") from e



def _confined() -> Any:
    """The ruleset this process runs under (``safehub run --confine``), or None."""
    if "SAFEHUB_CONFINED" not in os.environ:
        return None
    from safehub.run.confine.ruleset import current

    return current()


def _audit_sink(confined: Any, path: Path) -> Callable[[dict[str, Any]], None] | None:
    """In a confined job whose audit log is read-only: its ``safehub run`` appends."""
    if confined is None or not confined.refuses("write", os.path.realpath(path)):
        return None
    from safehub._internal import broker

    if not broker.available():
        return None
    def send(record: dict[str, Any]) -> None:
        broker.ask({"op": "audit", "record": record})

    return send

class Hub:
    """safehub with explicit configuration.

    The module-level functions (``safehub.load`` ...) build a ``Hub`` from the
    environment and the policy files on each call; build one yourself to set things in
    code::

        hub = safehub.Hub(cache_dir="/shared/hub-cache", offline=True)
        model = hub.load("org/repo:v1", "model")

    Keyword arguments are :class:`~safehub.config.Settings` fields; ``policy`` replaces
    the policy files (``Policy.from_text(...)`` or :func:`safehub.policy.load_policy`);
    ``transport`` the HTTPS transport (:class:`safehub.sources.transport.Transport`);
    ``source`` where code comes from (a :class:`~safehub.sources.interface.Source`; GitHub).
    """

    def __init__(self, settings: Settings | None = None, *, policy: Policy | None = None,
                 transport: Transport | None = None, source: Source | None = None,
                 surface: str = "api", **overrides: Any) -> None:
        self.policy = load_policy() if policy is None else policy
        self._ran: dict[str, str] = {}  # verified trees whose code ran: real path -> repo
        base = settings or Settings.from_env(policy=self.policy)
        for name in ("cache_dir", "data_dir", "log_dir", "audit_log", "lockfile"):
            if overrides.get(name) is not None:
                overrides[name] = Path(overrides[name])
        self.settings = base.with_overrides(self.policy, **overrides) if overrides else base
        s = self.settings
        say_ignored(s.ignored)
        confined = _confined()
        self.cache = Cache(s.cache_dir, lock_timeout=s.limits.lock_timeout,
                           relocate=s.how_to_set("cache_dir", _RELOCATE),
                           frozen=confined is not None and bool(confined.refuses(
                               "write", os.path.realpath(s.cache_dir))))
        self.consents = ConsentStore(s.data_dir)
        self.verified = VerifiedRecords(s.data_dir)
        audit = s.audit_log or s.log_dir / "audit.jsonl"
        self.audit = AuditLog(audit, required=s.audit_log is not None,
                              policy_files=self.policy.files, around=runtime.own_work,
                              sink=_audit_sink(confined, audit))
        self._transport = transport
        self._weights_transport: Transport | None = None
        self._github: GitHub | None = None
        self._source = source
        self.last_report: runtime.RuntimeReport | None = None
        """What the repo's code did during the latest load (the runtime guard's record)."""
        self._lockfile: Lockfile | None = None
        self._no_lockfile = False
        self.resolver = Resolver(self.cache, self.source, self.policy.names)
        self.admission = Admission(self.policy, self.resolver, lambda: self.lockfile,
                                   lambda: self.lockfile_path)
        self.fetcher = TreeFetcher(s, self.cache, self.verified, self.source, terminal_progress)
        self.signatures = SignatureCheck(SignatureRecords(s.data_dir), web_url=s.web_url,
                                         fetch=_signature_fetcher(self))
        self.trust_step = Trust(self.consents, noninteractive=s.noninteractive,
                                surface=surface)

    # -- parts built on first use ---------------------------------------------------------

    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = self.settings.transport()
        return self._transport

    def weights_transport(self) -> Transport:
        """The transport for weights downloads: any https host (the weights guard checks
        every hop against the policy), with a longer deadline for large files."""
        if self._weights_transport is None:
            self._weights_transport = self.settings.transport(weights=True)
        return self._weights_transport

    def source(self) -> Source:
        """The ``source`` given, else ``SAFEHUB_OCI``'s (locked specs only), else GitHub."""
        if self._source is None and self.settings.oci:
            self._source = _oci_source(self)
        return self._source if self._source is not None else self.github()

    def github(self) -> GitHub:
        if self._github is None:
            from safehub.sources.github import GitHub

            s = self.settings
            self._github = GitHub(self.transport(), api_url=s.api_url, web_url=s.web_url,
                                  token=s.token)
        return self._github

    @property
    def lockfile_path(self) -> Path:
        """``SAFEHUB_LOCKFILE`` / the policy's ``lockfile``, else ``./safehub.lock``."""
        return self.settings.lockfile or Path.cwd() / "safehub.lock"

    @property
    def lockfile(self) -> Lockfile | None:
        """The lockfile in force, or None. An explicitly named one must exist."""
        if self._lockfile is None and not self._no_lockfile:
            path = self.lockfile_path
            if self.settings.lockfile is None and not path.exists():
                self._no_lockfile = True
                return None
            self._lockfile = load_lockfile(path)
        return self._lockfile

    def forget_lockfile(self, instead: Lockfile | None = None) -> None:
        """Read the lockfile again at the next use (or use ``instead``, unread: --rewrite)."""
        self._lockfile, self._no_lockfile = instead, False

    # -- the pipeline ---------------------------------------------------------------------

    def prepare(self, repo: str, *, entrypoint: str | None = None, trust_repo: Any = "check",
                force_reload: bool = False, verbose: bool = True) -> Prepared:
        """Run every check on ``repo`` and return its verified tree; nothing is imported."""
        check_trust_repo(trust_repo)
        spec = RepoSpec.parse(repo)                                               # 1. parse
        asked = Outcome.asked(spec, entrypoint)
        with Audited(self.audit, asked) as line, runtime.own_work(), gcpause.paused():  # 10.
            return line.follow(self._steps(asked, spec, trust_repo, force_reload, verbose))

    def _steps(self, asked: Outcome, spec: RepoSpec, trust_repo: Any, force_reload: bool,
               verbose: bool, nested: bool = False) -> Generator[Outcome, None, Prepared]:
        """Steps 2 to 8, each yielding what the load has produced so far (the audit line
        is built from the last one, whether the next step succeeds or raises)."""
        try:
            admitted = self.admission.admit(                              # 2, 3, 4
                spec, entrypoint=asked.entrypoint,
                resolution="fresh" if force_reload else "normal")
            yield (done := asked._replace(admitted=admitted))
            tree = self.fetcher.tree(admitted.resolved, admitted.lock,    # 5, 6
                                     force=force_reload, verbose=verbose,
                                     checked_on_open=True)
        except OfflineError as e:
            raise OfflineError(e.message, fix=self.settings.offline_fix(str(spec))) from e
        signers = getattr(self._source, "fleet_signers", {})  # who signed an OCI snapshot
        oci = admitted.lock.entry.oci if admitted.lock is not None else ""
        yield (done := done._replace(tree=tree, fleet=signers.get(oci, "")))
        signature = self.signature(admitted, tree)                        # 7
        yield (done := done._replace(signature=signature))
        decision = signature.weighed(admitted.decision)
        trusted_by = self.trust_step.decide(                              # 8. trust
            self._subject(admitted, tree, signature.status), decision, trust_repo,
            nested=nested)
        yield done._replace(decision=decision, trusted_by=trusted_by)
        return Prepared(spec, admitted.resolved, tree, decision, trusted_by, signature.status,
                        admitted.lock)

    def signature(self, admitted: Admitted, tree: CachedTree) -> SignatureStatus:
        """Step 7: the signature the policy asks for (verdicts cached per user)."""
        reqs, resolved = admitted.decision.requirements, admitted.resolved
        owner, _, name = resolved.url_name.partition("/")
        return self.signatures.check(
            repo=resolved.spec.repo, commit=resolved.commit, digest=tree.digest,
            tree=tree.path, signature=reqs.signature, sets=reqs.signer_sets,
            values={"owner": owner, "name": name, "repo": resolved.url_name,
                    "ref": resolved.ref, "commit": resolved.commit},
            warn_only=admitted.decision.mode == "warn")

    def _subject(self, admitted: Admitted, tree: CachedTree, signature: str) -> Subject:
        r = admitted.resolved
        return Subject(r.spec.repo, r.spec.key, r.ref, r.commit, tree.digest, signature)

    # -- the drop-in functions ------------------------------------------------------------

    def load(self, repo_or_dir: str | os.PathLike[str], model: str, *args: Any,
             source: str = "github", trust_repo: Any = "check", force_reload: bool = False,
             verbose: bool = True, skip_validation: bool = False, **kwargs: Any) -> Any:
        """Like ``torch.hub.load``, with every check first (see :meth:`prepare`)."""
        if not isinstance(model, str) or not model.isidentifier():
            raise SpecError(f"model={model!r} is not the name of an entrypoint",
                            hint="pass the entrypoint's name as a string, e.g. 'resnet18'")
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
        """Prepare, then run the repo's code (step 9) under the guards; audit (step 10)."""
        target, source, entrypoint, force_reload, verbose = _call_args(
            repo_or_dir, source, entrypoint, force_reload, verbose)
        environment.gate(self.policy)
        if source == "local":
            return self._run_local(Path(target), entrypoint, run)
        check_trust_repo(trust_repo)
        spec = RepoSpec.parse(target)                                             # 1. parse
        asked = Outcome.asked(spec, entrypoint)
        with Audited(self.audit, asked) as line:                                 # 10. audit
            with runtime.own_work(), gcpause.paused():  # safehub's own work, nested or not
                prepared = line.follow(self._steps(asked, spec, trust_repo, force_reload,
                                                   verbose, nested))
            return line.follow(self._delegate(prepared, line.outcome, run, nested))  # 9

    def _run_local(self, folder: Path, entrypoint: str | None,
                   run: Callable[[Path], Any]) -> Any:
        """A folder on this machine: code you vouch for, run as torch.hub runs it (no fetch,
        no consent), if the policy's ``local_dirs`` admit it; audited like any load."""
        real = os.path.realpath(folder)
        with Audited(self.audit, Outcome.local_folder(real, entrypoint)) as line:
            line.follow(self._local(line.outcome, real))
            return run(folder)

    def _local(self, asked: Outcome, real: str) -> Generator[Outcome, None, None]:
        yield asked._replace(local=local_verdict(self.admission, self._ran, real))

    def _delegate(self, prepared: Prepared, done: Outcome, run: Callable[[Path], Any],
                  nested: bool = False) -> Generator[Outcome, None, Any]:
        """Run the repo's code under the weights guard, the runtime guard and nested-load
        routing; yields the outcome with the guard's report (what the code did, for the
        audit line), returns what the code returned."""
        weights = guards.weights_guard(
            prepared.spec, prepared.decision, prepared.lock.entry if prepared.lock else None,
            data_dir=self.settings.data_dir, transport=self.weights_transport)
        handlers = {**weights.handlers(),
                    **{name: self._nested(name) for name in ("load", "list", "help")}}
        guard = guards.runtime_guard(
            prepared.spec, prepared.decision, prepared.tree, mode=self.settings.runtime,
            own=lambda: guards.own_work(self.settings, prepared.decision, self.audit.path))
        weights.fetched = guard.report.add_fetched  # weights safehub fetches for the repo
        # The repo's code may call torch.hub after its load returns (model.forward, its
        # threads): those calls keep this load's routing.
        real = str(guard.tree)  # the tree's real path, as the guard holds it
        torchhub.remember((str(prepared.path) + os.sep, real + os.sep), handlers)
        self._ran[real] = prepared.spec.repo
        if not nested:  # the load the caller asked for, not one its repo made
            self.last_report = guard.report
        yield done._replace(runtime=guard.report)
        try:
            with torchhub.handling(handlers), guard.active():
                return run(prepared.path)
        except HubconfError as e:  # name the repo, not the cache folder
            if repr(str(prepared.path)) not in e.message:
                raise
            r = prepared.resolved
            raise HubconfError(
                e.message.replace(repr(str(prepared.path)), f"{r.spec.repo} at "
                                  f"{r.commit[:12]}"),
                fix=fixes.run(f"safehub list {r.spec.repo}:{r.commit}",
                               "to see its entrypoints")) from e

    def _nested(self, name: str) -> Callable[..., Any]:
        """torch.hub.load/list/help called by a repo's code while it runs (with torch's
        signature): through this hub, with this policy; a ``trust_repo`` the repo's code
        passes grants nothing."""
        signature = torchhub.signature(name)

        def nested(*args: Any, **kwargs: Any) -> Any:
            call = signature.bind(*args, **kwargs).arguments
            given = call.get("model")
            if name != "list" and not (isinstance(given, str) and given.isidentifier()):
                raise SpecError(f"model={given!r} is not the name of an entrypoint",
                                hint="pass the entrypoint's name as a string")
            model = str(given)
            run: Callable[[Path], Any]
            if name == "load":
                positional, extra = tuple(call.get("args", ())), dict(call.get("kwargs", {}))

                def run(path: Path) -> Any:
                    return torchhub.call_entrypoint(path, model, positional, extra)
            elif name == "list":
                run = torchhub.entrypoints
            else:
                def run(path: Path) -> Any:
                    return torchhub.docstring(path, model)
            with _fixes_for_the_user():
                return self._run(call.get("repo_or_dir", call.get("github", "")),
                                 call.get("source", "github"),
                                 model if name != "list" else None, "check",
                                 call.get("force_reload", False), call.get("verbose", True),
                                 run, nested=True)
        return nested

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


def _oci_source(hub: Hub) -> Source:
    """The source of ``SAFEHUB_OCI``, pinned by the lockfile's ``oci`` digests."""
    from safehub.sources.oci import OciSource, Pin, places

    settings = hub.settings

    def pin(commit: str) -> Pin | None:
        found = hub.lockfile
        for e in found.entries.values() if found is not None else ():
            if e.commit == commit and e.oci:
                return Pin(e.spec, e.repo or e.repo_key, e.commit, e.tree, e.digest, e.oci)
        return None

    from safehub.policy.oci import fleet_signers
    from safehub.verify.signatures.snapshot import checkers

    return OciSource(places(settings.oci, hub.transport(), hosts=settings.extra_hosts), pin,
                     lockfile=lambda: str(hub.lockfile_path),
                     fleet=checkers(fleet_signers(hub.policy)))


_LOCKFILES: dict[tuple[str, int, int, int], Lockfile] = {}


def load_lockfile(path: Path) -> Lockfile:
    """A parsed lockfile, kept per process until the file changes."""
    from safehub.store.lockfile import Lockfile

    try:
        st = path.stat()
    except FileNotFoundError:
        return Lockfile.load(path)  # raises, naming the path
    except OSError as e:
        raise PinError(f"lockfile {path} cannot be read ({e})",
                       hint="it must be a readable UTF-8 file: fix its permissions, or "
                       "write it afresh with `safehub lock --rewrite SPEC...`; no repo "
                       "loads until then (fail closed)") from e
    key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _LOCKFILES.get(key)
    if hit is None:
        hit = Lockfile.load(path)
        _LOCKFILES.clear()
        _LOCKFILES[key] = hit
    return hit


def _call_args(repo_or_dir: object, source: object, entrypoint: object, force_reload: object,
               verbose: object) -> tuple[str, str, str | None, bool, bool]:
    """The caller's arguments checked, as plain values."""
    kind = plain_text(source, "source").lower() if isinstance(source, str) else None
    if kind not in ("github", "local"):
        raise SpecError(f'Unknown source: "{source}". Allowed values: "github" | "local".',
                        hint="use source='github' for owner/name[:ref] or 'local' for a folder")
    if kind == "local":
        folder = os.fspath(repo_or_dir) if isinstance(repo_or_dir, (str, os.PathLike)) else None
        if not isinstance(folder, str):
            raise SpecError(f"source='local' needs a folder path, not {repo_or_dir!r}",
                            hint="pass the folder as a str or pathlib.Path")
        target = plain_text(folder, "the folder")
    elif isinstance(repo_or_dir, str):
        target = plain_text(repo_or_dir, "the repo")
    else:
        raise SpecError(f"{repo_or_dir!r} is not a repo: write it as 'owner/name[:ref]'",
                        hint="pass the repo as a string, e.g. 'pytorch/vision:v0.19.0'")
    name = plain_text(entrypoint, "model") if isinstance(entrypoint, str) else None
    return target, kind, name, bool(force_reload), bool(verbose)


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


def _signature_fetcher(hub: Hub) -> Callable[[str], bytes | None]:
    """How the signature step fetches a signature by URL: from the snapshot it came with
    (an OCI source), else over the transport with GitHub's headers; None if not found."""
    def fetch(url: str) -> bytes | None:
        from safehub.verify.signatures.locate import MAX_SIGNATURE_BYTES

        if hub.settings.oci and hub._source is not None:  # what came with the snapshot
            return getattr(hub._source, "signatures", {}).get(url)
        try:
            return hub.transport().get(url, what="signature",
                                       accept="application/octet-stream",
                                       headers=hub.github().headers,
                                       max_bytes=MAX_SIGNATURE_BYTES).body
        except NotFoundError:
            return None

    return fetch
