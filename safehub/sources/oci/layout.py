"""An OCI image layout folder: what carries snapshots across an air gap.

``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>``, as ``skopeo copy oci:DIR ...``
and oras read and write them. :class:`Layout` reads like a registry (the same caps, every
blob's sha256 checked: the folder is as untrusted as a registry) and writes atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import IO, Any

from safehub._internal import fixes
from safehub._internal.fsutil import atomic_write
from safehub.errors import CacheError, IntegrityError, NotFoundError
from safehub.sources.oci.artifact import (
    ARTIFACT_TYPE,
    DIGEST,
    MANIFEST_TYPE,
    MAX_MANIFEST,
    Descriptor,
    canonical,
    sha256,
)
from safehub.sources.oci.referrers import (
    EMPTY,
    INDEX_TYPE,
    candidates,
    fallback_tag,
    with_referrer,
)

__all__ = ["INDEX_TYPE", "Layout"]

REF_NAME = "org.opencontainers.image.ref.name"
_EXPORT_AGAIN = fixes.noted(
    fixes.run("safehub oci export --lockfile FILE DIR", "to export it again"),
    "the folder holds other bytes than the lockfile pins; nothing was installed; ")


def _holds(path: Path, digest: str) -> bool:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest() == digest


class Layout:
    """An OCI image layout at ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __str__(self) -> str:
        return f"oci:{self.root}"

    def _blob_path(self, digest: str) -> Path:
        if not DIGEST.fullmatch(digest):
            raise IntegrityError(f"{digest!r} is not a sha256 digest", fix=_EXPORT_AGAIN)
        return self.root / "blobs" / "sha256" / digest.removeprefix("sha256:")

    def _open(self, digest: str, cap: int, what: str) -> IO[bytes]:
        path = self._blob_path(digest)
        try:
            f = open(path, "rb")  # noqa: SIM115 - handed to the caller
        except FileNotFoundError:
            raise NotFoundError(f"{self} has no {what} {digest}",
                                fix=fixes.run("safehub oci export --lockfile FILE DIR",
                                              "to export the lockfile's snapshots into it")
                                ) from None
        except OSError as e:
            raise CacheError(f"cannot read {path} ({e.strerror or e})",
                             fix=fixes.say("fix the folder's permissions")) from e
        if os.fstat(f.fileno()).st_size > cap:
            f.close()
            raise IntegrityError(f"the {what} {digest} in {self} is larger than its "
                                 f"{cap:,}-byte cap; not read", fix=_EXPORT_AGAIN)
        return f

    def manifest(self, digest: str, *, max_bytes: int = MAX_MANIFEST) -> bytes:
        with self._open(digest, max_bytes, "manifest") as f:
            return f.read(max_bytes + 1)

    def blob(self, desc: Descriptor, out: IO[bytes]) -> None:
        h, size = hashlib.sha256(), 0
        with self._open(desc.digest, desc.size, "blob") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                size += len(chunk)
                if size > desc.size:
                    break
                h.update(chunk)
                out.write(chunk)
        if "sha256:" + h.hexdigest() != desc.digest or size != desc.size:
            raise IntegrityError(f"the blob {desc.digest} in {self} holds other bytes",
                                 fix=_EXPORT_AGAIN)
        out.flush()
        out.seek(0)

    def blob_bytes(self, desc: Descriptor) -> bytes:
        import io

        buf = io.BytesIO()
        self.blob(desc, buf)
        return buf.getvalue()

    # -- writing ----------------------------------------------------------------------

    def write_blob(self, data: bytes | Path, digest: str) -> None:
        path = self._blob_path(digest)
        if path.is_file() and _holds(path, digest):
            return  # a blob whose bytes are not its name's is written again
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, Path):
            tmp = path.with_name(f".{path.name}.partial")
            shutil.copyfile(data, tmp)
            os.replace(tmp, path)
        else:
            atomic_write(path, data)

    def write_manifest(self, data: bytes, tag: str | None = None, *,
                       media_type: str = MANIFEST_TYPE,
                       artifact_type: str | None = ARTIFACT_TYPE) -> str:
        """Add a manifest (and its index entry, named ``tag``, which then names only it);
        its digest."""
        digest = sha256(data)
        self.write_blob(data, digest)
        atomic_write(self.root / "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        entries = [m for m in self.index() if m.get("digest") != digest and not (
            tag and type(m.get("annotations")) is dict and m["annotations"].get(REF_NAME) == tag)]
        entry: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": len(data)}
        if artifact_type:
            entry["artifactType"] = artifact_type
        if tag:
            entry["annotations"] = {REF_NAME: tag}
        entries.append(entry)
        entries.sort(key=lambda m: str(m.get("digest")))
        atomic_write(self.root / "index.json", canonical(
            {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": entries}))
        return digest

    def write_referrer(self, referrer: bytes, bundle: bytes, subject: str) -> str:
        """Attach a signature manifest to ``subject`` under its fallback tag, as a registry
        without the referrers API keeps it (and as ``skopeo copy`` of that tag writes it)."""
        self.write_blob(EMPTY, sha256(EMPTY))
        self.write_blob(bundle, sha256(bundle))
        self.write_blob(referrer, sha256(referrer))
        tag = fallback_tag(subject)
        old = self._tagged(tag)
        self.write_manifest(with_referrer(old, referrer), tag, media_type=INDEX_TYPE,
                            artifact_type=None)
        return f"tag {tag}"

    def referrers(self, digest: str) -> list[str]:
        """The manifests the fallback tag of ``digest`` lists (candidates only)."""
        found = self._tagged(fallback_tag(digest))
        return [] if found is None else candidates(found, str(self))

    def _tagged(self, tag: str) -> bytes | None:
        for m in self.index():
            notes = m.get("annotations")
            if type(notes) is dict and notes.get(REF_NAME) == tag and \
                    m.get("mediaType") == INDEX_TYPE:
                return self.manifest(str(m.get("digest", "")))
        return None

    def index(self) -> list[dict[str, Any]]:
        """The index's manifest descriptors (candidates only: each is checked by digest)."""
        try:
            raw = (self.root / "index.json").read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise CacheError(f"cannot read {self.root / 'index.json'} ({e.strerror or e})",
                             fix=fixes.say("fix the folder's permissions")) from e
        try:
            doc = json.loads(raw[:MAX_MANIFEST + 1])
        except (ValueError, RecursionError) as e:
            raise IntegrityError(f"{self.root / 'index.json'} is not JSON",
                                 fix=_EXPORT_AGAIN) from e
        found = doc.get("manifests") if type(doc) is dict else None
        return [m for m in found if type(m) is dict] if type(found) is list else []
