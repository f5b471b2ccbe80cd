"""Loads from OCI registries (``SAFEHUB_OCI``): a locked spec's archive by manifest digest.

The registries are untrusted; the lockfile decides. :class:`OciSource` answers only what
a locked load asks of a source, the archive of a locked commit, and only from the
snapshot whose manifest digest the lockfile entry pins (``oci = "sha256:..."``): the
manifest's bytes hash to that digest and have exactly a snapshot's shape, its config
equals the lock entry, each layer's size and digest are checked as it streams (at most its
descriptor's size). The pipeline then checks the archive as it checks GitHub's (the
lockfile's content digest, the git tree). Every other question a source answers (refs,
commits, trees) is GitHub's, so this source refuses it with the fix: lock the spec where
GitHub is reachable. The first place that has the snapshot serves it; a place that fails
(unreachable, refusing, hostile) is reported and the next is tried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, BinaryIO, NoReturn, Protocol

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import FetchError, IntegrityError, PinError, SafehubError, SignatureError
from safehub.sources.interface import RefTarget
from safehub.sources.oci.artifact import (
    MAX_MANIFEST,
    SIGNATURE_URL,
    Descriptor,
    Snapshot,
    SnapshotConfig,
    canonical,
    parse_config,
    parse_manifest,
    sha256,
)
from safehub.sources.transport import Progress
from safehub.spec import RepoSpec

if TYPE_CHECKING:
    from safehub.verify.gitattributes.subst import CommitFacts

__all__ = ["OciSource", "Pin", "Place", "unpinned"]


def unpinned(lockfile: str, repo: str, commit: str) -> PinError:
    """The refusal of a load through ``SAFEHUB_OCI`` whose commit no lockfile entry pins
    by ``oci`` digest (a load and ``safehub check`` say the same)."""
    import shlex

    where = "where GitHub is reachable (it records the snapshot's digest in the lockfile)"
    return PinError(
        f"the lockfile {lockfile} pins no OCI snapshot (no `oci` digest) for commit "
        f"{commit} of {repo}, and with SAFEHUB_OCI set safehub loads only snapshots the "
        "lockfile names by digest (the registry or folder is untrusted)",
        fix=fixes.noted(fixes.either(
            fixes.run(f"safehub oci export --lockfile {shlex.quote(lockfile)} DIR", where),
            fixes.run(f"safehub prefetch --oci REGISTRY/REPOSITORY --lockfile "
                      f"{shlex.quote(lockfile)}", where)),
            after="\n    then load with that lockfile (SAFEHUB_OCI=oci:DIR for the folder); "
            "or unset SAFEHUB_OCI to load from GitHub"))


class Place(Protocol):
    """Where snapshots are read from: a registry repository or a layout folder."""

    def manifest(self, digest: str, *, max_bytes: int = ...) -> bytes: ...

    def blob(self, desc: Descriptor, out: IO[bytes]) -> None: ...

    def blob_bytes(self, desc: Descriptor) -> bytes: ...

    def referrers(self, digest: str) -> list[str]: ...


class Pin(Frozen):
    """What a lockfile entry says of a snapshot (the source knows no lockfile)."""

    spec: str
    repo: str
    commit: str
    tree: str
    digest: str
    manifest: str

    @property
    def config(self) -> SnapshotConfig:
        return SnapshotConfig(self.repo, self.commit, self.tree, self.digest)


class OciSource:
    """A :class:`~safehub.sources.interface.Source` of locked snapshots (module docstring)."""

    def __init__(self, places: Sequence[Place], pins: Callable[[str], Pin | None], *,
                 lockfile: Callable[[], str],
                 fleet: Sequence[tuple[str, Callable[[bytes, str, Mapping[str, Any]], str]]]
                 = ()) -> None:
        self.places = tuple(places)
        self._pins = pins
        self._lockfile = lockfile
        self._fleet = tuple(fleet)
        """Each ``[oci]`` signer set (its rule and file, its check): each must accept one of
        a snapshot's signatures."""
        self.signatures: dict[str, bytes] = {}
        """Signature bundles that came with a snapshot, by the URL the policy found them at
        (the signature step reads them here instead of asking GitHub)."""
        self.fleet_signers: dict[str, str] = {}
        """Who signed each snapshot loaded, by manifest digest (when ``[oci]`` requires it)."""
        self._snapshots: dict[tuple[str, str], Snapshot] = {}

    def _refuse(self, spec: RepoSpec | str) -> NoReturn:
        import shlex

        key = str(spec)
        raise PinError(
            f"{key} is not in the lockfile {self._lockfile()}, and with SAFEHUB_OCI set safehub "
            "loads only locked specs (the registry is untrusted: the lockfile's manifest "
            "digest decides what it may serve, and GitHub is not asked)",
            fix=fixes.either(
                fixes.noted(fixes.run(f"safehub prefetch --oci REGISTRY/REPOSITORY "
                                      f"{shlex.quote(key)}", "where GitHub is reachable (it "
                                      "locks the spec and pushes its snapshot)"),
                            after=", then ship the lockfile"),
                fixes.run("unset SAFEHUB_OCI", "to load from GitHub")))

    # -- the Source protocol: everything but the archive is GitHub's -------------------

    def repo_info(self, spec: RepoSpec) -> tuple[str, str]:
        self._refuse(spec)

    def ref(self, spec: RepoSpec, kind: str, name: str) -> RefTarget | None:
        self._refuse(spec)

    def expand(self, spec: RepoSpec, prefix: str) -> str | None:
        self._refuse(spec)

    def commit_tree(self, spec: RepoSpec, sha: str) -> str:
        self._refuse(spec)

    def commit(self, spec: RepoSpec, sha: str) -> CommitFacts:
        self._refuse(spec)

    def contains(self, spec: RepoSpec, ref: str, sha: str) -> str | None:
        self._refuse(spec)

    def refs(self, spec: RepoSpec, kind: str) -> Iterator[tuple[str, str]]:
        self._refuse(spec)

    def tree_listing(self, spec: RepoSpec, tree: str) -> list[Mapping[str, object]]:
        self._refuse(spec)

    def top_level_file(self, spec: RepoSpec, tree: str, name: str) -> bytes | None:
        self._refuse(spec)

    def blob(self, spec: RepoSpec, sha: str) -> bytes:
        self._refuse(spec)

    def download_archive(self, repo: str, commit: str, out: BinaryIO, *, max_bytes: int,
                         progress: Progress | None = None) -> None:
        """The locked snapshot's archive into ``out``, from the first place that has it."""
        pin = self._pins(commit)
        if pin is None:
            raise unpinned(self._lockfile(), repo, commit)
        def take(place: Place) -> bool:
            self._from(place, pin, out, max_bytes)
            return True

        _first_place(self.places, take, out, f"the snapshot {pin.manifest} of {pin.spec}")

    def weights(self, manifest: str, url: str, sha256_hex: str, out: IO[bytes]) -> bool:
        """The file the lockfile pins for ``url`` (``sha256_hex``), from the snapshot
        ``manifest`` into ``out``: the layer's digest must be the pin, its bytes are checked
        against it and its size as they arrive (:meth:`Place.blob`). False if the snapshot
        carries no file for ``url``; a place that fails is reported and the next tried."""
        def take(place: Place) -> bool:
            layer = self._snapshot(place, manifest).weight(url)
            if layer is None:
                return False
            if layer.digest != f"sha256:{sha256_hex}":
                raise IntegrityError(
                    f"the snapshot {manifest} in {place} carries {layer.digest} for {url}, "
                    f"but the lockfile pins sha256:{sha256_hex}; nothing was written",
                    fix=fixes.say("the lockfile's [[repo.weights]] changed after the "
                                  "snapshot was pushed: run `safehub prefetch --oci "
                                  "REGISTRY/REPOSITORY SPEC` again where the files' hosts "
                                  "are reachable"))
            place.blob(layer, out)
            return True

        return _first_place(self.places, take, out,
                            f"the file {url} of the snapshot {manifest}")

    def _snapshot(self, place: Place, manifest: str) -> Snapshot:
        """The snapshot ``manifest`` as ``place`` serves it, checked, read once."""
        key = (str(place), manifest)
        if key not in self._snapshots:
            self._snapshots[key] = parse_manifest(
                place.manifest(manifest)[:MAX_MANIFEST + 1], manifest, str(place))
        return self._snapshots[key]

    def signature_at(self, url: str) -> bytes | None:
        """Only what came with a snapshot: the registry is asked nothing else."""
        return self.signatures.get(url)

    def snapshot_signer(self, manifest: str) -> str:
        return self.fleet_signers.get(manifest, "")

    def _from(self, place: Place, pin: Pin, out: BinaryIO, max_bytes: int) -> None:
        where = str(place)
        snap = self._snapshot(place, pin.manifest)
        if snap.config.digest != sha256(canonical(pin.config.document())):
            # The lockfile's own config, as prefetch pushes it, is known by its digest in
            # the pinned manifest; a config in another byte form is read and compared.
            parse_config(place.blob_bytes(snap.config), pin.config, where, pin.manifest)
        if self._fleet:
            self.fleet_signers[pin.manifest] = self._fleet_signature(place, pin)
        if snap.archive.size > max_bytes:
            raise IntegrityError(
                f"the archive of {pin.spec} in {where} ({snap.archive.digest}) is "
                f"{snap.archive.size:,} bytes, over the {max_bytes:,}-byte limit; not read",
                fix=fixes.say("if it really is that large, raise SAFEHUB_MAX_ARCHIVE_BYTES"))
        signature = None
        if snap.signature is not None:
            from safehub.verify.signatures.locate import MAX_SIGNATURE_BYTES

            if snap.signature.size > MAX_SIGNATURE_BYTES:
                raise IntegrityError(f"the signature layer of {pin.manifest} in {where} is "
                                     "over its cap", fix=fixes.say("push the snapshot again"))
            signature = place.blob_bytes(snap.signature)
        place.blob(snap.archive, out)  # emptied again if it fails (_first_place)
        if signature is not None and snap.signature is not None:
            self.signatures[(snap.signature.annotations or {})[SIGNATURE_URL]] = signature

    def _fleet_signature(self, place: Place, pin: Pin) -> str:
        """Who signed the snapshot, for each ``[oci]`` signer set one of its referrers that
        signs it and that the set accepts. Each candidate is fetched by its own digest."""
        import shlex

        from safehub.sources.oci.referrers import MAX_REFERRER, fallback_tag, parse_referrer

        where, tag = str(place), fallback_tag(pin.manifest)
        bundles: list[tuple[str, bytes]] = []
        why: list[str] = []
        for digest in place.referrers(pin.manifest):
            try:
                layer = parse_referrer(place.manifest(digest, max_bytes=MAX_REFERRER),
                                       digest, pin.manifest, where)
                bundles.append((digest, place.blob_bytes(layer)))
            except SafehubError as e:
                why.append(f"{digest}: {e.message}")
        signers = []
        for source, check in self._fleet:
            refused = list(why)
            for digest, bundle in bundles:
                try:
                    signers.append(check(bundle, pin.manifest, pin.config.document()))
                    break
                except SafehubError as e:
                    refused.append(f"{digest}: {e.message}")
            else:
                found = "; ".join(refused) or f"it has none (no referrer, no fallback tag {tag})"
                raise SignatureError(
                    f"the snapshot {pin.manifest} of {pin.spec} in {where} carries no "
                    f"signature that {source} accepts: {found}",
                    fix=fixes.both(fixes.either(*(
                        fixes.run(f"safehub prefetch --oci REGISTRY/REPOSITORY {how} "
                                  f"{shlex.quote(pin.spec)}", "where it is published")
                        for how in ("--sign-key KEY", "--sign-keyless"))),
                        fixes.say(f"a copy must carry the referrers or the tag {tag} "
                                  "(`skopeo sync` copies tags)")))
        return ", ".join(dict.fromkeys(signers))


def _first_place(places: Iterable[Place], take: Callable[[Place], bool], out: IO[bytes],
                 what: str) -> bool:
    """``take`` from the first place that serves ``what`` (into ``out``, emptied again after
    a place that failed); one failure is raised as it was, several as one error that lists
    them (an IntegrityError if any place served other bytes than the pin)."""
    failures: list[SafehubError] = []
    for place in places:
        try:
            return take(place)
        except SafehubError as e:
            failures.append(e)
            out.seek(0)
            out.truncate()
    if len(failures) == 1:
        raise failures[0]
    cls = IntegrityError if any(isinstance(e, IntegrityError) for e in failures) else FetchError
    listed = "\n    ".join(e.message for e in failures)
    raise cls(f"no registry in SAFEHUB_OCI served {what}:\n    {listed}", fix=failures[-1].fix)
