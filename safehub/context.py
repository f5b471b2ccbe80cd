"""The parts a load uses, built once: the context every step of the pipeline is given.

:class:`Context` holds the configuration (settings, policy) and the parts built from it
(the cache, the user's records, the audit log, the transport, the source, the lockfile),
plus the step objects made of those parts (admission, resolver, fetcher, signature check,
trust). The steps (:mod:`safehub.pipeline`) are functions of a context and of the previous
step's result; nothing a step calls reaches back up into :class:`~safehub.hub.Hub`, which
only owns a context. The transport, the source and the lockfile are built on first use (a
warm load needs none of the first two).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from safehub._internal.progress import terminal_progress
from safehub.admission import Admission
from safehub.audit import AuditLog
from safehub.config import Settings, say_ignored
from safehub.errors import OfflineError, PinError
from safehub.fetch import TreeFetcher
from safehub.policy import Policy, load_policy
from safehub.resolve import Resolver
from safehub.run import runtime
from safehub.store.cache import Cache, warm
from safehub.store.records import ConsentStore, SignatureRecords, VerifiedRecords
from safehub.trust import Trust
from safehub.verify.signatures.check import SignatureCheck

if TYPE_CHECKING:  # imported where first used: a warm load needs none of them
    from safehub.sources.github import GitHub
    from safehub.sources.interface import Source
    from safehub.sources.transport import Transport
    from safehub.spec import RepoSpec
    from safehub.store.lockfile import LockEntry, Lockfile

__all__ = ["Context", "load_lockfile"]

_RELOCATE = "point SAFEHUB_CACHE_DIR at a folder you can write"


class Context:
    """Settings, policy and every part a load uses, built once (module docstring)."""

    def __init__(self, settings: Settings | None = None, *, policy: Policy | None = None,
                 transport: Transport | None = None, source: Source | None = None,
                 **overrides: Any) -> None:
        self.policy = load_policy() if policy is None else policy
        base = settings or Settings.from_env(policy=self.policy)
        for name in ("cache_dir", "data_dir", "log_dir", "audit_log", "lockfile"):
            if overrides.get(name) is not None:
                overrides[name] = Path(overrides[name])
        self.settings = base.with_overrides(self.policy, **overrides) if overrides else base
        s = self.settings
        say_ignored(s.ignored)
        self.confined = confined = _confined()
        """The ruleset of ``safehub run --confine`` this process runs under, or None."""
        self.cache = Cache(s.cache_dir, lock_timeout=s.limits.lock_timeout,
                           relocate=s.how_to_set("cache_dir", _RELOCATE),
                           frozen=confined is not None and bool(confined.refuses(
                               "write", os.path.realpath(s.cache_dir))),
                           kept_by=s.cache_source if s.cache_source == "SAFEHUB_CACHE_DIR"
                           or s.cache_source.startswith("cache_dir in ") else "")
        self.consents = ConsentStore(s.data_dir)
        self.verified = VerifiedRecords(s.data_dir)
        audit = s.audit_path
        self.audit = AuditLog(audit, required=s.audit_log is not None,
                              policy_files=self.policy.files, around=runtime.own_work,
                              sink=_audit_sink(confined, audit))
        self._transport = transport
        self._weights_transport: Transport | None = None
        self._github: GitHub | None = None
        self._source = source
        self._lockfile: Lockfile | None = None
        self._no_lockfile = False
        self.ran: dict[str, str] = {}
        """Verified trees whose code ran in this context: real path -> repo."""
        self.last_report: runtime.RuntimeReport | None = None
        """What the repo's code did during the latest load (the runtime guard's record)."""
        # The step objects, each made of the parts above (none holds the context's owner).
        self.resolver = Resolver(self.cache, self.source, self.policy.names)
        self.admission = Admission(self.policy, self.resolver, self)
        self.fetcher = TreeFetcher(s, self.cache, self.verified, self.source, terminal_progress)
        self.signatures = SignatureCheck(SignatureRecords(s.data_dir), web_url=s.web_url,
                                         fetch=self._signature)
        self.trust = Trust(self.consents, noninteractive=s.noninteractive)

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
            self._source = self._oci_source()
        return self._source if self._source is not None else self.github()

    def github(self) -> GitHub:
        if self._github is None:
            from safehub.sources.github import GitHub

            s = self.settings
            self._github = GitHub(self.transport(), api_url=s.api_url, web_url=s.web_url,
                                  token=s.token)
        return self._github

    @contextlib.contextmanager
    def from_github(self) -> Iterator[None]:
        """Inside, code comes from GitHub (or its mirror) whatever ``SAFEHUB_OCI`` names: what
        ``safehub prefetch --oci`` and ``safehub oci export`` copy into a registry or a
        folder. Every other part (policy, cache, records, lockfile) stays this context's."""
        if not self.settings.oci:
            yield
            return
        kept, self._source = self._source, self.github()
        try:
            yield
        finally:
            self._source = kept

    @property
    def lockfile_path(self) -> Path:
        """``SAFEHUB_LOCKFILE`` / the policy's ``lockfile``, else ``./safehub.lock``."""
        return self.settings.lockfile_path

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

    def locked_mode(self) -> str:
        """Where locked mode was switched on, as messages say it ("" if it is off)."""
        s = self.settings
        return str(s.locked_source) if s.locked else ""

    def unlocked(self, spec: RepoSpec) -> PinError:
        """The refusal of a spec the lockfile does not pin, where it must (locked mode, the
        fleet verbs), with the command that pins it."""
        import shlex

        from safehub._internal import fixes
        from safehub.store.lockfile import spec_key

        why = f" (locked mode: {self.locked_mode()})" if self.settings.locked else ""
        return PinError(f"{spec} is not locked in {self.lockfile_path}{why}",
                        fix=fixes.run(f"safehub lock {shlex.quote(spec_key(spec))}"))

    def snapshot_signer(self, manifest: str) -> str:
        """Who signed the OCI snapshot ``manifest`` that a tree came from ("" if no source
        was needed: the tree was in the cache, or the source serves no snapshots)."""
        return self._source.snapshot_signer(manifest) if self._source is not None else ""

    def snapshot_weights(self, entry: LockEntry | None
                         ) -> Callable[[str, str, IO[bytes]], bool] | None:
        """Where a locked repo's pinned files come from on a fleet node: the layers of its
        OCI snapshot (``SAFEHUB_OCI``), for the weights guard; None elsewhere."""
        if not (self.settings.oci and entry is not None and entry.oci):
            return None  # a load without SAFEHUB_OCI imports nothing of it
        manifest = entry.oci

        def serve(url: str, sha256: str, out: IO[bytes]) -> bool:
            # The source is asked for at the first file: a warm load (its tree in the
            # cache) that fetches no pinned file builds none, nor imports it.
            from safehub.sources.oci import OciSource

            source = self.source()
            return isinstance(source, OciSource) and source.weights(manifest, url, sha256, out)

        return serve

    def offline(self, error: OfflineError, spec: str) -> OfflineError:
        """The offline refusal of a step, with the one fix for ``spec`` (the transport
        says what it refused; how to get the spec without the network is said here)."""
        return OfflineError(error.message, fix=self.settings.offline_fix(spec))

    # -- what the parts ask of each other -------------------------------------------------

    def _signature(self, url: str) -> bytes | None:
        """A signature named by URL, from the source (an OCI source: only what came with
        the snapshot); None if not found."""
        return self.source().signature_at(url)

    def _oci_source(self) -> Source:
        """The source of ``SAFEHUB_OCI``, pinned by the lockfile's ``oci`` digests."""
        from safehub.sources.oci import OciSource, Pin, places

        def pin(commit: str) -> Pin | None:
            found = self.lockfile
            for e in found.entries.values() if found is not None else ():
                if e.commit == commit and e.oci:
                    return Pin(e.spec, e.repo or e.repo_key, e.commit, e.tree, e.digest, e.oci)
            return None

        settings = self.settings
        return OciSource(places(settings.oci, self.transport(), hosts=settings.extra_hosts),
                         pin, lockfile=lambda: str(self.lockfile_path),
                         fleet=_fleet_checks(self.policy))


def _fleet_checks(policy: Policy) -> Sequence[tuple[str, Callable[..., str]]]:
    """The fleet signature's checks, one per ``[oci]`` signer set; its verifier is
    imported only where the policy asks for a signature."""
    from safehub.policy.oci import fleet_signers

    signers = fleet_signers(policy)
    if not signers:
        return ()
    from safehub.verify.signatures.snapshot import checkers

    return checkers(signers)


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


def load_lockfile(path: Path) -> Lockfile:
    """A parsed lockfile, kept per process until the file changes (its stat key: see
    :mod:`safehub.store.cache.warm`, 2)."""
    from safehub.store.lockfile import Lockfile

    try:
        st = path.stat()
    except FileNotFoundError:
        return Lockfile.load(path)  # raises, naming the path
    except OSError as e:
        from safehub._internal import fixes

        raise PinError(f"lockfile {path} cannot be read ({e}); no repo loads until then "
                       "(fail closed)", fix=fixes.either(
                           fixes.say("it must be a readable UTF-8 file: fix its permissions"),
                           fixes.run("safehub lock --rewrite SPEC...", "to write it afresh"))
                       ) from e
    key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    return warm.recall("lockfile", key, lambda: Lockfile.load(path))
