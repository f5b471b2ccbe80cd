"""Signatures attached to a snapshot as OCI 1.1 referrers, and the fallback tag.

A signature is a manifest of its own whose ``subject`` is the snapshot's manifest, whose
``artifactType`` and one layer are a Sigstore bundle (what cosign's bundle format also
writes), and whose config is the empty descriptor. A registry with the referrers API
lists it at ``/v2/<repo>/referrers/<digest>``; for one without it (CNCF Distribution 2.8),
the pusher keeps an image index under the tag ``sha256-<hex>`` listing them, which any
tag copy (``skopeo sync``, a pull-through cache) carries along.

Either list is only a list of candidates: copies rewrite fallback indexes, and a registry
may list what it likes. Each candidate is fetched by its own digest and must name the
snapshot as its subject; the bundle then has to verify on its own.

>>> fallback_tag("sha256:" + "ab" * 32)[:12]
'sha256-ababa'
"""

from __future__ import annotations

import json
from typing import Any

from safehub._internal import fixes
from safehub.errors import IntegrityError
from safehub.sources.oci.artifact import (
    DIGEST,
    MANIFEST_TYPE,
    SIGNATURE_TYPE,
    Descriptor,
    canonical,
    sha256,
)

__all__ = ["EMPTY", "EMPTY_TYPE", "INDEX_TYPE", "MAX_BUNDLE", "MAX_CANDIDATES", "MAX_REFERRER",
           "build_referrer", "candidates", "fallback_tag", "parse_referrer", "with_referrer"]

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
MAX_BUNDLE = 1024 * 1024
"""The most bytes a signature bundle may have (a keyless one is a few KiB)."""
MAX_REFERRER = 64 * 1024
"""The most bytes a signature's manifest may have (safehub's are under 1 KiB)."""
MAX_CANDIDATES = 32
"""The most referrers looked at for one snapshot (each costs a request or two)."""
_NOTES = {"dev.sigstore.bundle.content": "dsse-envelope",
          "dev.sigstore.bundle.predicateType": "https://safehub.dev/oci/snapshot/v1"}


def fallback_tag(digest: str) -> str:
    """The tag a registry without the referrers API keeps a snapshot's referrers under."""
    return digest.replace(":", "-", 1)


def build_referrer(bundle: bytes, subject: Descriptor) -> bytes:
    """The referrer manifest carrying ``bundle`` for the snapshot ``subject``."""
    return canonical({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": SIGNATURE_TYPE,
        "config": Descriptor(EMPTY_TYPE, sha256(EMPTY), len(EMPTY)).document(),
        "layers": [Descriptor(SIGNATURE_TYPE, sha256(bundle), len(bundle)).document()],
        "subject": Descriptor(MANIFEST_TYPE, subject.digest, subject.size).document(),
        "annotations": _NOTES})


def _bad(where: str, digest: str, why: str) -> IntegrityError:
    return IntegrityError(f"the referrer {digest} in {where} is not a snapshot signature: {why}",
                          fix=fixes.say("the registry lists something else as a signature of the "
                          "snapshot; it is skipped (sign again with `safehub prefetch --oci "
                                        "REGISTRY/REPOSITORY --sign-key KEY SPEC`)"))


def parse_referrer(data: bytes, digest: str, subject: str, where: str) -> Descriptor:
    """Check ``data`` is the referrer ``digest`` names, that it signs ``subject``, and has
    a signature's shape; return its bundle's descriptor."""
    if sha256(data) != digest:
        raise IntegrityError(f"{where} answered the referrer {digest} with other bytes",
                             fix=fixes.say("the registry is broken or hostile; the candidate is "
                                           "skipped"))
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _bad(where, digest, f"not JSON ({type(e).__name__})") from e
    if type(doc) is not dict or doc.get("mediaType") != MANIFEST_TYPE or \
            doc.get("schemaVersion") != 2:
        raise _bad(where, digest, "not an OCI image manifest")
    named = doc.get("subject")
    named = named.get("digest") if type(named) is dict else None
    if named != subject:
        raise IntegrityError(
            f"the referrer {digest} in {where} signs {str(named)[:80]!r}, not the snapshot "
            f"{subject}", fix=fixes.say("a signature of another manifest is listed as this "
            "snapshot's; it counts for nothing (the registry or a copy mixed them up)"))
    if doc.get("artifactType") != SIGNATURE_TYPE:
        raise _bad(where, digest, f"artifactType {str(doc.get('artifactType'))[:80]!r}")
    layers = doc.get("layers")
    if type(layers) is not list or len(layers) != 1 or type(layers[0]) is not dict:
        raise _bad(where, digest, "it must have exactly one layer, the bundle")
    layer = layers[0]
    media, blob, size = layer.get("mediaType"), layer.get("digest"), layer.get("size")
    if media != SIGNATURE_TYPE or type(blob) is not str or not DIGEST.fullmatch(blob) or \
            type(size) is not int or not 0 < size <= MAX_BUNDLE:
        raise _bad(where, digest, f"its layer is not a Sigstore bundle of at most "
                   f"{MAX_BUNDLE:,} bytes")
    return Descriptor(SIGNATURE_TYPE, blob, size)


def candidates(data: bytes, where: str) -> list[str]:
    """The manifest digests an index (the referrers API's answer or the fallback tag) lists
    as signatures; descriptors of other artifact types are not candidates."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise IntegrityError(f"{where} answered a referrers list that is not JSON",
                             fix=fixes.say("the registry is broken; signatures "
                                           "cannot be found")) from e
    listed = doc.get("manifests") if type(doc) is dict else None
    if type(listed) is not list:
        raise IntegrityError(f"{where} answered a referrers list without manifests",
                             fix=fixes.say("the registry is broken; signatures cannot be found"))
    found: list[str] = []
    for d in listed:
        if type(d) is not dict or d.get("mediaType") != MANIFEST_TYPE:
            continue
        if d.get("artifactType", SIGNATURE_TYPE) != SIGNATURE_TYPE:
            continue
        digest = d.get("digest")
        if type(digest) is str and DIGEST.fullmatch(digest) and digest not in found:
            found.append(digest)
    return found[:MAX_CANDIDATES]


def with_referrer(index: bytes | None, referrer: bytes) -> bytes:
    """The fallback tag's index with ``referrer`` added (what was there kept, by digest)."""
    entries: list[dict[str, Any]] = []
    if index is not None:
        try:
            doc = json.loads(index)
            listed = doc.get("manifests") if type(doc) is dict else None
            entries = [d for d in listed if type(d) is dict] if type(listed) is list else []
        except (ValueError, RecursionError):
            entries = []  # an unreadable index is replaced: the candidates are re-checked
    digest = sha256(referrer)
    entries = [d for d in entries if d.get("digest") != digest]
    entries.append({"mediaType": MANIFEST_TYPE, "digest": digest, "size": len(referrer),
                    "artifactType": SIGNATURE_TYPE})
    entries.sort(key=lambda d: str(d.get("digest")))
    return canonical({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": entries})
