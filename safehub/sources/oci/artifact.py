"""safehub's OCI artifact: one hub snapshot (repo, commit) as an image manifest.

The manifest's ``artifactType`` is :data:`ARTIFACT_TYPE`; its config (:data:`CONFIG_TYPE`)
names the repo, commit, tree id and content digest; its first layer is the archive exactly
as GitHub served it (:data:`ARCHIVE_TYPE`); a second layer, present when the policy found a
signature outside the tree, is that signature bundle (:data:`SIGNATURE_TYPE`), with the
URL it was found at as an annotation. Each file the lockfile entry pins for the repo's
code to fetch (``[[repo.weights]]``) follows as a layer of its own (:data:`WEIGHTS_TYPE`),
its digest the pin itself (``sha256:PIN``, so a registry can serve only the pinned bytes)
and the pin's URL as an annotation (:data:`WEIGHTS_URL`). Every document is canonical
JSON (sorted keys, no spaces, ASCII, no timestamps), so two admins who push the same
snapshot get the same manifest digest.

Reading is strict: a manifest or config that is not exactly this shape is refused, and
the config must equal the lockfile entry it is loaded for.

>>> cfg = SnapshotConfig("acme/tiny", "a" * 40, "b" * 40, "sha256:" + "c" * 64)
>>> canonical(cfg.document())[:24]
b'{"commit":"aaaaaaaaaaaaa'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import IntegrityError

__all__ = ["ARCHIVE_TYPE", "ARTIFACT_TYPE", "CONFIG_TYPE", "MANIFEST_TYPE", "MAX_CONFIG",
           "MAX_MANIFEST", "MAX_WEIGHTS", "SIGNATURE_TYPE", "WEIGHTS_TYPE", "WEIGHTS_URL",
           "Descriptor", "Snapshot", "SnapshotConfig", "build", "canonical", "parse_config",
           "parse_manifest", "sha256", "weights_layer"]

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.safehub.snapshot.v1"
CONFIG_TYPE = "application/vnd.safehub.snapshot.config.v1+json"
ARCHIVE_TYPE = "application/vnd.safehub.archive.v1.zip"
SIGNATURE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
SIGNATURE_URL = "dev.safehub.signature.url"
WEIGHTS_TYPE = "application/vnd.safehub.weights.v1"
WEIGHTS_URL = "dev.safehub.weights.url"
MAX_WEIGHTS = 1024
"""The most pinned files one snapshot carries."""
TITLE = "org.opencontainers.image.title"

MAX_MANIFEST = 4 * 1024 * 1024
"""The most bytes a manifest may have (the distribution spec's own recommendation)."""
MAX_CONFIG = 64 * 1024

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_SHA = re.compile(r"[0-9a-f]{40}")


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The one byte form of a document: sorted keys, no spaces, ASCII only."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Descriptor(Frozen):
    """A blob as a manifest names it."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] | None = None

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest,
                               "size": self.size}
        if self.annotations:
            doc["annotations"] = dict(self.annotations)
        return doc


class SnapshotConfig(Frozen):
    """What the artifact claims to be: compared with the lockfile entry on every load."""

    repo: str
    commit: str
    tree: str
    digest: str

    def document(self) -> dict[str, Any]:
        return {"schema": 1, "repo": self.repo, "commit": self.commit, "tree": self.tree,
                "digest": self.digest}


class Snapshot(Frozen):
    """A manifest read and checked: its digest, config descriptor and layers."""

    digest: str
    config: Descriptor
    archive: Descriptor
    signature: Descriptor | None
    weights: tuple[Descriptor, ...] = ()
    """The pinned files it carries, each with its URL (:data:`WEIGHTS_URL`)."""

    def weight(self, url: str) -> Descriptor | None:
        """The layer carrying the file pinned for ``url``, or None."""
        return next((w for w in self.weights if (w.annotations or {}).get(WEIGHTS_URL) == url),
                    None)


def weights_layer(url: str, sha256_hex: str, size: int) -> Descriptor:
    """The layer of one pinned file: its digest is the pin."""
    return Descriptor(WEIGHTS_TYPE, f"sha256:{sha256_hex}", size, {WEIGHTS_URL: url})


def build(config: SnapshotConfig, archive: bytes | Descriptor,
          signature: tuple[bytes, str] | None = None,
          weights: tuple[Descriptor, ...] = ()) -> tuple[bytes, bytes]:
    """(manifest bytes, config bytes) for a snapshot; ``archive`` is its bytes or its
    descriptor; ``signature`` is (bundle bytes, where the policy found it); ``weights``
    the pinned files' layers (:func:`weights_layer`), sorted by URL here."""
    config_bytes = canonical(config.document())
    layer = archive if isinstance(archive, Descriptor) else Descriptor(
        ARCHIVE_TYPE, sha256(archive), len(archive))
    layers = [Descriptor(ARCHIVE_TYPE, layer.digest, layer.size,
                         {TITLE: f"{config.repo.replace('/', '-')}-{config.commit[:12]}.zip"})]
    if signature is not None:
        data, where = signature
        layers.append(Descriptor(SIGNATURE_TYPE, sha256(data), len(data),
                                 {SIGNATURE_URL: where, TITLE: "signature.sigstore.json"}))
    layers += sorted(weights, key=lambda w: (w.annotations or {}).get(WEIGHTS_URL, ""))
    manifest = {
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": ARTIFACT_TYPE,
        "config": Descriptor(CONFIG_TYPE, sha256(config_bytes), len(config_bytes)).document(),
        "layers": [d.document() for d in layers]}
    return canonical(manifest), config_bytes


def _bad(where: str, digest: str, why: str) -> IntegrityError:
    return IntegrityError(
        f"the manifest {digest} from {where} is not a safehub snapshot: {why}",
        fix=fixes.say("the registry serves something else under that digest; nothing was "
        "installed. Push the snapshot again with `safehub prefetch --oci REGISTRY/REPOSITORY SPEC` "
                      "where GitHub is reachable, or remove this registry from SAFEHUB_OCI"))


def _descriptor(doc: Any, types: tuple[str, ...], where: str, digest: str,
                what: str) -> Descriptor:
    if type(doc) is not dict or not {"mediaType", "digest", "size"} <= set(doc) or \
            not set(doc) <= {"mediaType", "digest", "size", "annotations"}:
        raise _bad(where, digest, f"{what} is not a descriptor (mediaType, digest, size)")
    media, blob, size, notes = (doc["mediaType"], doc["digest"], doc["size"],
                                doc.get("annotations", {}))
    if media not in types:
        raise _bad(where, digest, f"{what} has media type {str(media)[:80]!r}, expected "
                   + " or ".join(types))
    if type(blob) is not str or not DIGEST.fullmatch(blob):
        raise _bad(where, digest, f"{what} has digest {str(blob)[:80]!r}, not sha256:<64 hex>")
    if type(size) is not int or size < 0:
        raise _bad(where, digest, f"{what} has size {size!r}, not a whole number")
    if type(notes) is not dict or not all(type(k) is str and type(v) is str
                                          for k, v in notes.items()):
        raise _bad(where, digest, f"{what} has annotations that are not strings")
    return Descriptor(media, blob, size, notes or None)


def parse_manifest(data: bytes, digest: str, where: str) -> Snapshot:
    """Check ``data`` is the manifest ``digest`` names and a snapshot's shape, exactly."""
    got = sha256(data)
    if got != digest:
        raise IntegrityError(
            f"{where} answered the manifest {digest} with other bytes (sha256 {got})",
            fix=fixes.say("the registry is broken or hostile; nothing was installed. Remove it "
                          "from SAFEHUB_OCI or push the snapshot again"))
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _bad(where, digest, f"not JSON ({type(e).__name__})") from e
    allowed = {"schemaVersion", "mediaType", "artifactType", "config", "layers", "annotations"}
    if type(doc) is not dict or not set(doc) <= allowed:
        raise _bad(where, digest, "unexpected fields " + ", ".join(
            sorted(set(doc) - allowed)) if type(doc) is dict else "not a JSON object")
    if doc.get("schemaVersion") != 2 or doc.get("mediaType") != MANIFEST_TYPE:
        raise _bad(where, digest, f"mediaType {str(doc.get('mediaType'))[:80]!r} "
                   f"(schemaVersion {doc.get('schemaVersion')!r}), expected {MANIFEST_TYPE}")
    if doc.get("artifactType") != ARTIFACT_TYPE:
        raise _bad(where, digest, f"artifactType {str(doc.get('artifactType'))[:80]!r}, "
                   f"expected {ARTIFACT_TYPE}")
    config = _descriptor(doc.get("config"), (CONFIG_TYPE,), where, digest, "the config")
    if config.size > MAX_CONFIG:
        raise _bad(where, digest, f"the config is {config.size:,} bytes, over the "
                   f"{MAX_CONFIG:,}-byte cap")
    layers = doc.get("layers")
    if type(layers) is not list or not 1 <= len(layers) <= 2 + MAX_WEIGHTS:
        raise _bad(where, digest, "it must have one archive layer, at most one signature "
                   f"and at most {MAX_WEIGHTS} pinned files")
    archive = _descriptor(layers[0], (ARCHIVE_TYPE,), where, digest, "layer 0")
    signature = None
    rest = layers[1:]
    if rest and type(rest[0]) is dict and rest[0].get("mediaType") == SIGNATURE_TYPE:
        signature = _descriptor(rest.pop(0), (SIGNATURE_TYPE,), where, digest, "layer 1")
    if signature is not None and not (signature.annotations or {}).get(SIGNATURE_URL):
        raise _bad(where, digest, f"the signature layer has no {SIGNATURE_URL} annotation")
    weights = _weights(rest, where, digest, len(layers) - len(rest))
    return Snapshot(digest, config, archive, signature, weights)


def _weights(layers: list[Any], where: str, digest: str, first: int
             ) -> tuple[Descriptor, ...]:
    """The pinned files' layers: each names its URL, once."""
    found: list[Descriptor] = []
    for i, doc in enumerate(layers, first):
        if type(doc) is dict and doc.get("mediaType") in (ARCHIVE_TYPE, SIGNATURE_TYPE):
            raise _bad(where, digest, f"layer {i}: it must have one archive layer, then at "
                       "most one signature, then pinned files")
        w = _descriptor(doc, (WEIGHTS_TYPE,), where, digest, f"layer {i}")
        url = (w.annotations or {}).get(WEIGHTS_URL)
        if not url:
            raise _bad(where, digest, f"layer {i} has no {WEIGHTS_URL} annotation")
        if any((f.annotations or {}).get(WEIGHTS_URL) == url for f in found):
            raise _bad(where, digest, f"layer {i} carries {url[:200]!r} a second time")
        found.append(w)
    return tuple(found)


def parse_config(data: bytes, expected: SnapshotConfig, where: str, digest: str) -> None:
    """Check the config blob says exactly what the lockfile entry says."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _bad(where, digest, f"its config is not JSON ({type(e).__name__})") from e
    want = expected.document()
    if type(doc) is not dict or set(doc) != set(want):
        raise _bad(where, digest, "its config does not have exactly the fields "
                   + ", ".join(sorted(want)))
    for name, value in want.items():
        same = (doc[name].lower() == value.lower() if name == "repo" and
                type(doc[name]) is str else doc[name] == value)
        if not same:
            raise IntegrityError(
                f"the snapshot {digest} from {where} is for {name} {str(doc[name])[:80]!r}, "
                f"but the lockfile entry says {value!r}",
                fix=fixes.say("the lockfile decides: nothing was installed. The registry serves "
                              "another snapshot under this digest (or the lockfile's oci field was "
                "edited); push again with `safehub prefetch --oci REGISTRY/REPOSITORY SPEC`"))
