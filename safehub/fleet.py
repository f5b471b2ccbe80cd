"""Fleets: verified snapshots through the OCI registries a team already runs (issue 19).

``safehub prefetch --oci REGISTRY/REPOSITORY SPEC...`` (:func:`publish`) runs the whole
pipeline for each spec (policy, resolve, prove, fetch, verify, signature), then pushes one
snapshot per (repo, commit) (:mod:`safehub.sources.oci.artifact`) and records its manifest
digest in the spec's lockfile entry (``oci = "sha256:..."``); a spec not yet locked is
locked first. ``safehub oci export`` (:func:`export`) writes the lockfile's snapshots into
an OCI image layout folder, rebuilt from wherever the load would read them and checked
against the lockfile's digests; ``safehub oci import`` (:func:`import_layout`) pushes a
layout's snapshots to a registry. Loads read them with ``SAFEHUB_OCI`` (see
:mod:`safehub.sources.oci.source`): the registry is untrusted, the lockfile decides.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safehub import pipeline
from safehub._internal import fixes
from safehub._internal.frozen import Frozen, asdict, field, replace
from safehub.errors import IntegrityError, PinError, SpecError
from safehub.sources.oci import Layout, Registry, place
from safehub.sources.oci.artifact import (
    MANIFEST_TYPE,
    SIGNATURE_TYPE,
    Descriptor,
    SnapshotConfig,
    build,
    parse_config,
    parse_manifest,
    sha256,
)
from safehub.spec import RepoSpec
from safehub.store.lockfile import LockEntry, Lockfile

if TYPE_CHECKING:
    from safehub.hub import Hub

__all__ = ["Published", "Signing", "export", "import_layout", "publish"]


class Published(Frozen):
    """One snapshot pushed (or exported): where, its manifest digest, how each blob went."""

    spec: str
    commit: str
    digest: str
    manifest: str
    target: str
    tag: str
    blobs: list[str] = field(default_factory=list)
    signature: str = ""
    """The referrer carrying the fleet signature, when one was made (its manifest digest)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Built(Frozen):
    spec: str
    commit: str
    digest: str
    manifest: bytes
    config: bytes
    archive: Path
    signature: bytes | None
    tag: str
    weights: tuple[tuple[Descriptor, Path], ...] = ()
    """Each pinned file's layer, and the file holding its bytes."""


def tag_for(spec: str) -> str:
    """A human-readable tag for a spec (``acme/tiny:v1`` -> ``acme-tiny-v1``); loads never
    use tags."""
    text = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.replace("/", "-").replace(":", "-"))
    return (text.strip(".-") or "snapshot")[:128]


_SNAPSHOT = pipeline.Plan(upto="signature", must_be_locked=True, verbose=False)
"""A snapshot: a locked spec's tree and the policy's signature, checked as a load does."""


def _build(hub: Hub, text: str, work: Path) -> _Built:
    """The snapshot of a locked spec: every check of a load, then canonical bytes."""
    spec = RepoSpec.parse(text)
    passed = pipeline.steps(hub.context, spec, _SNAPSHOT)  # a load's checks, no trust
    admitted, tree = passed.admitted, passed.tree
    assert tree is not None and admitted.lock is not None
    r = admitted.resolved
    archive = work / f"{r.commit}.zip"
    hub.fetcher.download(r, archive, verbose=False)
    if hub.fetcher.archive_digest(archive, r.commit) != tree.digest:
        raise IntegrityError(f"the archive of {spec} downloaded again does not hold the "
                             f"verified content {tree.digest}",
                             fix=fixes.say("the server changed what it serves; nothing was "
                                           "pushed"))
    signature = _signature_outside_tree(hub, admitted, tree.path)
    lock = admitted.lock.entry
    config = SnapshotConfig(lock.repo or lock.repo_key, lock.commit, lock.tree, lock.digest)
    weights = _weight_layers(hub, lock, work)
    manifest, config_bytes = build(config, _descriptor(archive), signature,
                                   tuple(d for d, _ in weights))
    return _Built(lock.spec, lock.commit, lock.digest, manifest, config_bytes, archive,
                  signature[0] if signature else None, tag_for(lock.spec), weights)


def _weight_layers(hub: Hub, lock: LockEntry, work: Path
                   ) -> tuple[tuple[Descriptor, Path], ...]:
    """Each file the entry pins, as a layer whose digest is its pin: from the snapshot a
    ``SAFEHUB_OCI`` node reads, else the user's records or the file's own URL (held to the
    policy's weights patterns), its bytes checked against the pin. A Hub snapshot's
    listing (``hf://REPO@REV/``) is one too: its canonical text, asked of the Hub at its
    pinned commit where no record holds it."""
    from safehub.operations.pinned import fetch_pinned
    from safehub.sources.oci.artifact import weights_layer

    from_snapshot = hub.context.snapshot_weights(lock) if hub.settings.oci else None
    layers = []
    for pin in lock.weights:
        path = work / f"weights-{pin.sha256}"
        with open(path, "w+b") as out:
            if from_snapshot is None or not from_snapshot(pin.url, pin.sha256, out):
                fetch_pinned(hub, lock, pin, out)
            size = out.seek(0, 2)
        layers.append((weights_layer(pin.url, pin.sha256, size), path))
    return tuple(layers)


def _descriptor(path: Path) -> Descriptor:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    from safehub.sources.oci.artifact import ARCHIVE_TYPE

    return Descriptor(ARCHIVE_TYPE, "sha256:" + h.hexdigest(), path.stat().st_size)


def _signature_outside_tree(hub: Hub, admitted: Any, tree: Path) -> tuple[bytes, str] | None:
    """The signature bundle the policy found outside the tree (a release asset, a URL),
    to travel as its own layer; one in the tree travels inside the archive."""
    reqs, r = admitted.decision.requirements, admitted.resolved
    if reqs.signature == "none" or not reqs.signer_sets:
        return None
    owner, _, name = r.url_name.partition("/")
    found = hub.signatures.find(tree, reqs.signer_sets, {
        "owner": owner, "name": name, "repo": r.url_name, "ref": r.ref, "commit": r.commit})
    if found is None or found.in_tree is not None or not found.where.startswith("https://"):
        return None
    return found.data, found.where


class Signing(Frozen):
    """How ``--sign-key`` / ``--sign-keyless`` sign each snapshot's manifest digest."""

    key: Path | None = None
    keyless: bool = False

    def referrer(self, built: _Built, offline: bool) -> tuple[bytes, bytes]:
        """(referrer manifest, bundle) signing the snapshot ``built``."""
        from safehub.sources.oci.referrers import build_referrer
        from safehub.verify.signatures import snapshot

        digest = sha256(built.manifest)
        config = _config_of(built.config, "the snapshot built here", digest)
        payload = snapshot.statement(digest, config.document())
        bundle = (snapshot.sign_keyless(payload, offline=offline) if self.key is None
                  else snapshot.sign_with_key(self.key, payload))
        subject = Descriptor(MANIFEST_TYPE, digest, len(built.manifest))
        return build_referrer(bundle, subject), bundle


def _push(registry: Registry, built: _Built) -> list[str]:
    snap = parse_manifest(built.manifest, sha256(built.manifest), str(registry.target))
    how = [registry.push_blob(built.config, snap.config.digest, snap.config.size)]
    how.append(registry.push_blob(built.archive, snap.archive.digest, snap.archive.size))
    if built.signature is not None and snap.signature is not None:
        how.append(registry.push_blob(built.signature, snap.signature.digest,
                                      snap.signature.size))
    how += [registry.push_blob(path, layer.digest, layer.size) for layer, path in built.weights]
    registry.push_manifest(built.manifest, snap.digest)
    registry.push_manifest(built.manifest, built.tag)
    return how


def publish(hub: Hub, specs: Sequence[str], target: str, *, tag: bool = True,
            sign: Signing | None = None) -> list[Published]:
    """Push one snapshot per spec to ``target`` and record its digest in the lockfile.

    The pipeline runs against GitHub (or its mirror) as a load without ``SAFEHUB_OCI``
    does, whatever the registries this machine's loads would read.
    """
    _plain_only_if_listed(hub, target)
    with hub.context.from_github():
        return _publish(hub, specs, target, tag, sign)


def _publish(hub: Hub, specs: Sequence[str], target: str, tag: bool,
             sign: Signing | None) -> list[Published]:
    from safehub.operations import lock

    if not specs:
        lockfile = hub.lockfile
        specs = sorted(lockfile.entries) if lockfile is not None else []
    if not specs:
        raise SpecError("nothing to publish: no specs given and no lockfile entries",
                        fix=fixes.run("safehub prefetch --oci REGISTRY/REPOSITORY "
                                      "owner/name:ref ..."))
    registry = place(target, hub.transport(), hosts=hub.settings.extra_hosts, push=True)
    if not isinstance(registry, Registry):
        raise SpecError(f"--oci {target}: an OCI layout is written with `safehub oci export`",
                        fix=fixes.either(
                            fixes.noted(fixes.run(
                                f"safehub oci export --lockfile {hub.lockfile_path} {target[4:]}",
                                "(it records each snapshot's digest in the lockfile)"),
                                "lock the specs (`safehub lock SPEC`), then "),
                            fixes.say("give --oci REGISTRY/REPOSITORY")))
    current = hub.lockfile
    unlocked = [s for s in specs if current is None or
                current.get(RepoSpec.parse(s)) is None]
    if unlocked:
        lock(hub, unlocked)
    done = []
    with tempfile.TemporaryDirectory(dir=hub.cache.staging_root(), prefix="oci-") as d:
        for text in specs:
            built = _build(hub, text, Path(d))
            digest = sha256(built.manifest)
            # Signed before anything is pushed: a signature that cannot be made leaves the
            # registry and the lockfile as they were.
            signature = sign.referrer(built, hub.settings.offline) if sign else None
            how = _push(registry, built)
            signed = ""
            if signature is not None:
                how.append(registry.push_referrer(*signature, digest))
                signed = sha256(signature[0])
            lockfile = Lockfile.load(hub.lockfile_path)
            entry = lockfile.entries[built.spec]
            lockfile.put(replace(entry, oci=digest))
            lockfile.save()
            hub.forget_lockfile()
            done.append(Published(built.spec, built.commit, built.digest, digest,
                                  str(registry.target), built.tag if tag else "", how, signed))
    return done


def export(hub: Hub, folder: Path, *, sign: Signing | None = None) -> list[Published]:
    """Write every locked snapshot into the OCI image layout ``folder``, each rebuilt with
    every check of a load and equal to the lockfile's ``oci`` digest where it has one.

    An entry without one gets the digest written (as ``prefetch --oci`` records it): the
    snapshot is a function of the entry's commit, tree and content digest, all checked
    here, so a node that loads from the layout with this lockfile needs no registry."""
    lockfile = hub.lockfile
    if lockfile is None or not lockfile.entries:
        raise PinError(f"nothing to export: no lockfile entries at {hub.lockfile_path}",
                       fix=fixes.run("safehub prefetch --oci REGISTRY/REPOSITORY SPEC ...",
                                     "first"))
    layout = Layout(folder)
    done = []
    with tempfile.TemporaryDirectory(dir=hub.cache.staging_root(), prefix="oci-") as d:
        for key in sorted(lockfile.entries):
            want = lockfile.entries[key].oci
            # An entry without an oci digest is built from GitHub, as publish builds it.
            with contextlib.nullcontext() if want else hub.context.from_github():
                built = _build(hub, key, Path(d))
            digest = sha256(built.manifest)
            if want and digest != want:
                raise IntegrityError(
                    f"the snapshot of {key} rebuilt here is {digest}, but "
                    f"{hub.lockfile_path} pins {want}",
                    fix=fixes.noted(fixes.either(
                        fixes.say("check how its oci field was written"),
                        fixes.run(f"safehub prefetch --oci REGISTRY/REPOSITORY {key}", "again")),
                        "the lockfile decides: "))
            if not want:
                # The lockfile, re-read under its own save, gets the digest it now decides.
                fresh = Lockfile.load(hub.lockfile_path)
                fresh.put(replace(fresh.entries[key], oci=digest))
                fresh.save()
                hub.forget_lockfile()
            snap = parse_manifest(built.manifest, digest, str(layout))
            layout.write_blob(built.config, snap.config.digest)
            layout.write_blob(built.archive, snap.archive.digest)
            if built.signature is not None and snap.signature is not None:
                layout.write_blob(built.signature, snap.signature.digest)
            for layer, path in built.weights:
                layout.write_blob(path, layer.digest)
            layout.write_manifest(built.manifest, built.tag)
            signed = ""
            if sign is not None:
                referrer, bundle = sign.referrer(built, hub.settings.offline)
                layout.write_referrer(referrer, bundle, digest)
                signed = sha256(referrer)
            done.append(Published(key, built.commit, built.digest, digest, str(layout),
                                  built.tag, signature=signed))
    return done


def import_layout(hub: Hub, folder: Path, target: str) -> list[Published]:
    """Push every snapshot of the layout ``folder`` to ``target`` (each checked on read:
    its manifest by digest and shape, its config's shape, every blob by digest)."""
    layout = Layout(folder)
    _plain_only_if_listed(hub, target)
    registry = place(target, hub.transport(), hosts=hub.settings.extra_hosts, push=True)
    if not isinstance(registry, Registry):
        raise SpecError(f"{target}: import pushes to a registry",
                        fix=fixes.say("give REGISTRY/REPOSITORY; to copy folders, copy the "
                                      "folder"))
    entries = layout.index()
    if not entries:
        raise PinError(f"{layout} has no snapshots (no index.json entries)",
                       fix=fixes.run("safehub oci export --lockfile FILE DIR",
                                     "to write one"))
    done = []
    with tempfile.TemporaryDirectory(dir=hub.cache.staging_root(), prefix="oci-") as d:
        for entry in entries:
            if entry.get("mediaType", MANIFEST_TYPE) != MANIFEST_TYPE or \
                    entry.get("artifactType") == SIGNATURE_TYPE:
                continue  # a fallback tag's index, a signature: they go with their snapshot
            digest = str(entry.get("digest", ""))
            manifest = layout.manifest(digest)
            if _signature_manifest(manifest):
                continue  # listed without its artifactType (skopeo writes index.json so)
            snap = parse_manifest(manifest, digest, str(layout))
            config_bytes = layout.blob_bytes(snap.config)
            config = _config_of(config_bytes, str(layout), digest)
            parse_config(config_bytes, config, str(layout), digest)
            how = [registry.push_blob(config_bytes, snap.config.digest, snap.config.size)]
            for layer in (snap.archive, snap.signature, *snap.weights):
                if layer is None:
                    continue
                path = Path(d) / layer.digest.removeprefix("sha256:")
                with open(path, "w+b") as f:
                    layout.blob(layer, f)
                how.append(registry.push_blob(path, layer.digest, layer.size))
            registry.push_manifest(manifest, digest)
            tag = str((entry.get("annotations") or {}).get(
                "org.opencontainers.image.ref.name", "")) if type(
                entry.get("annotations")) is dict else ""
            if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", tag):
                registry.push_manifest(manifest, tag)
            signed = _carry_referrers(layout, registry, digest, how)
            done.append(Published(f"{config.repo}@{config.commit[:12]}", config.commit,
                                  config.digest, digest, str(registry.target), tag, how,
                                  signed))
    return done


def _signature_manifest(data: bytes) -> bool:
    import json

    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return False  # refused as a snapshot, with the reason
    return type(doc) is dict and doc.get("artifactType") == SIGNATURE_TYPE


def _carry_referrers(layout: Layout, registry: Registry, digest: str, how: list[str]) -> str:
    """Push the signatures the layout keeps for the snapshot ``digest`` (each one checked
    to sign it; the others are not carried); the last one's digest."""
    from safehub.errors import SafehubError
    from safehub.sources.oci.referrers import MAX_REFERRER, parse_referrer

    signed = ""
    for candidate in layout.referrers(digest):
        try:
            referrer = layout.manifest(candidate, max_bytes=MAX_REFERRER)
            bundle = layout.blob_bytes(parse_referrer(referrer, candidate, digest, str(layout)))
        except SafehubError:
            continue
        how.append(registry.push_referrer(referrer, bundle, digest))
        signed = candidate
    return signed


def _plain_only_if_listed(hub: Hub, target: str) -> None:
    if target.startswith("http://") and target not in hub.settings.oci:
        raise SpecError(f"{target} speaks plain HTTP, which only a registry a policy file "
                        "names may do",
                        fix=fixes.either(fixes.say(f'add oci = ["{target}"] to [safehub] in a '
                                                   "policy file"),
                                         fixes.say("give the registry TLS")))


def _config_of(data: bytes, where: str, digest: str) -> SnapshotConfig:
    import json

    try:
        doc = json.loads(data)
        return SnapshotConfig(str(doc["repo"]), str(doc["commit"]), str(doc["tree"]),
                              str(doc["digest"]))
    except (ValueError, KeyError, TypeError) as e:
        raise IntegrityError(f"the config of {digest} in {where} is not a snapshot's",
                             fix=fixes.say("export the layout again")) from e
