"""Verifying signatures: Sigstore keyless, keys and private-PKI certificates.

A hub repo is signed the way ``model_signing sign`` signs a model: a Sigstore bundle
(``model.sig``) whose DSSE envelope carries an in-toto statement listing every file's
digest. :meth:`Verifier.verify_tree` checks it in three steps, before any hubconf runs:

1. **The envelope.** Keyless bundles (a Fulcio certificate) are verified with
   sigstore-python against the trusted root (offline: the root shipped inside sigstore,
   or a ``trust_config`` for a private Sigstore) and the policy's signers, composed as in
   :mod:`safehub.verify.signatures.policies`. Key bundles are verified against the policy's
   ``keys`` (ECDSA P-256/384/521, as model-signing writes them). Bundles signed with a
   private-PKI certificate (no transparency log) go through model-signing's certificate
   verifier, with the policy's ``certificates`` as trust anchors.
2. **The files.** The statement's manifest must equal the tree's hashes
   (:mod:`safehub.verify.signatures.manifest`).
3. **Coverage.** Every file must be signed, except the signature and git metadata; the
   uncovered ones are returned, and a load refuses them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import SignatureError
from safehub.verify.signatures.dsse import ecdsa_hash, pae
from safehub.verify.signatures.manifest import (
    GIT_METADATA,
    Signed,
    all_files,
    compare,
    fail,
    hash_tree,
    hashing_config,
    manifest,
    payload_json,
    statement,
)
from safehub.verify.signatures.policies import SigstorePolicy, for_sets
from safehub.verify.signatures.signers import DEFAULT_SIGNATURE, SignerSet

__all__ = ["TreeSignature", "Verifier"]

_T = TypeVar("_T")


class TreeSignature(Frozen):
    """A verified signature over a tree of files."""

    signer: str
    files: tuple[str, ...]
    uncovered: tuple[str, ...] = ()


@lru_cache(maxsize=8)
def _trusted_root(trust_config: str | None) -> Any:
    from sigstore.models import ClientTrustConfig, TrustedRoot

    if trust_config:
        try:
            text = Path(trust_config).read_text()
            if "trustedroot" in str(json.loads(text).get("mediaType", "")).lower():
                return TrustedRoot.from_file(trust_config)  # a bare trusted root
            return ClientTrustConfig.from_json(text).trusted_root
        except Exception as e:
            raise fail(f"cannot read the Sigstore trust config {trust_config} ({e})",
                        fix=fixes.say("fix trust_config in the policy")) from e
    import sigstore

    # The production trusted root that ships inside sigstore: no network, no TUF cache.
    shipped = (Path(sigstore.__file__).parent / "_store" /
               "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev" / "trusted_root.json")
    return TrustedRoot.from_file(str(shipped))


def _public_key(key_path: Path) -> Any:
    """The public key in ``key_path``: a file that holds none is named, not the bundle."""
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_public_key(key_path.read_bytes())
    except (OSError, ValueError, TypeError) as e:
        raise fail(f"the key {key_path} is not a PEM public key ({type(e).__name__})",
                   fix=fixes.say("name the publisher's public key file (-----BEGIN PUBLIC "
                                 "KEY-----), not a private key or a certificate")) from e


def _verify_with_key(envelope: dict[str, Any], key_path: Path) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec

    key = _public_key(key_path)
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise fail(f"{key_path} is not an elliptic-curve public key",
                    fix=fixes.say("model-signing keys are ECDSA P-256, P-384 or P-521"))
    algorithm = ecdsa_hash(key)
    if algorithm is None:
        raise fail(f"{key_path}: unsupported curve {key.curve.name}")
    payload = base64.b64decode(envelope["payload"], validate=True)
    signed = pae(str(envelope["payloadType"]), payload)
    for sig in envelope.get("signatures", []):
        try:
            key.verify(base64.b64decode(sig["sig"], validate=True), signed, ec.ECDSA(algorithm))
            return
        except (InvalidSignature, ValueError, KeyError, TypeError):
            continue
    raise fail(f"the signature was not made with the key {key_path}")


def _key_hint(path: Path) -> str:
    from cryptography.hazmat.primitives import serialization

    key = _public_key(path)
    raw = key.public_bytes(serialization.Encoding.PEM,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(raw).hexdigest()


def _shape_checked(method: Callable[..., _T]) -> Callable[..., _T]:
    """A bundle of the wrong shape is a :class:`SignatureError`, never a bare exception."""
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> _T:
        try:
            return method(*args, **kwargs)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError,
                RecursionError) as e:
            if isinstance(e, SignatureError):
                raise
            raise fail(f"the signature bundle is malformed ({type(e).__name__}: {e})") from e
    return wrapper


class Verifier:
    """Verifies Sigstore bundles against a policy's signer sets."""

    def __init__(self, sets: Sequence[SignerSet]) -> None:
        if not sets:
            raise ValueError("a Verifier needs at least one signer set")
        self.sets = tuple(sets)
        configs = {str(s.trust_config) if s.trust_config else None for s in self.sets}
        if len(configs) > 1:
            raise fail("the rules that apply name different Sigstore trust configs",
                        fix=fixes.say("use one trust_config for a repo"))
        self.trust_config = configs.pop()

    # -- envelopes ----------------------------------------------------------------------

    def _bundle_json(self, data: bytes) -> dict[str, Any]:
        try:
            bundle = json.loads(data)
        except ValueError as e:
            raise fail(f"the signature is not a JSON Sigstore bundle ({e})") from e
        if not isinstance(bundle, dict) or "verificationMaterial" not in bundle:
            raise fail("the signature is not a Sigstore bundle (no verificationMaterial)")
        return bundle

    @_shape_checked
    def verify_dsse(self, data: bytes) -> Signed:
        """Verify a DSSE bundle (keyless or key); return its payload and signer."""
        bundle = self._bundle_json(data)
        material = bundle["verificationMaterial"]
        if "publicKey" in material:
            return self._verify_key_dsse(bundle)
        from sigstore.errors import Error as SigstoreError
        from sigstore.models import Bundle
        from sigstore.verify import Verifier as SigstoreVerifier

        policy = SigstorePolicy(for_sets(self.sets))
        try:
            parsed = Bundle.from_json(data)
            verifier = SigstoreVerifier(trusted_root=_trusted_root(self.trust_config))
            payload_type, payload = verifier.verify_dsse(parsed, policy)
        except SigstoreError as e:
            raise fail(f"the Sigstore signature does not verify: {e}") from e
        except ValueError as e:
            raise fail(f"the Sigstore bundle is malformed: {e}") from e
        return Signed(payload_type, payload, f"keyless: {policy.accepted}")

    def _verify_key_dsse(self, bundle: dict[str, Any]) -> Signed:
        envelope = bundle.get("dsseEnvelope")
        if not isinstance(envelope, dict):
            raise fail("the key-signed bundle has no DSSE envelope")
        hint = bundle["verificationMaterial"]["publicKey"].get("hint", "")
        accepted = []
        for s in self.sets:
            if not s.keys:
                raise fail(f"the signature was made with a key, but {s.source} accepts only "
                           "keyless signers")
            errors = []
            for key in s.keys:
                if hint and hint != _key_hint(key.path):
                    errors.append(f"{key.path}: the bundle names another key")
                    continue
                try:
                    _verify_with_key(envelope, key.path)
                    accepted.append(key.describe())
                    break
                except SignatureError as e:
                    errors.append(e.message)
            else:
                raise fail("the signature matches no key of " + s.source + ": "
                            + "; ".join(errors))
        payload = base64.b64decode(envelope["payload"])
        return Signed(str(envelope.get("payloadType", "")), payload, accepted[0])

    @_shape_checked
    def verify_artifact(self, data: bytes, artifact: bytes | None = None, *,
                        sha256: str | None = None) -> str:
        """Verify a message-signature bundle over an artifact (or its SHA-256); the signer."""
        from sigstore.errors import Error as SigstoreError
        from sigstore.hashes import Hashed
        from sigstore.models import Bundle
        from sigstore.verify import Verifier as SigstoreVerifier
        from sigstore_models.common.v1 import HashAlgorithm

        policy = SigstorePolicy(for_sets(self.sets))
        value: bytes | Any = artifact if artifact is not None else Hashed(
            algorithm=HashAlgorithm.SHA2_256, digest=bytes.fromhex(sha256 or ""))
        try:
            verifier = SigstoreVerifier(trusted_root=_trusted_root(self.trust_config))
            verifier.verify_artifact(value, Bundle.from_json(data), policy)
        except SigstoreError as e:
            raise fail(f"the Sigstore signature does not verify: {e}") from e
        except ValueError as e:
            raise fail(f"the Sigstore bundle is malformed: {e}") from e
        return f"keyless: {policy.accepted}"

    def _verify_pki(self, tree: Path, bundle: bytes, signature_in_tree: str | None,
                    also_ignore: Sequence[str]) -> Signed:
        """A bundle signed with a private-PKI certificate: model-signing's verifier checks the
        chain against each rule's ``certificates`` (and the files, checked again after)."""
        import tempfile

        from model_signing import hashing as hashing_module
        from model_signing import verifying

        data = self._bundle_json(bundle)
        accepted = []
        with tempfile.TemporaryDirectory(prefix="safehub-sig-") as tmp:
            sig_path = Path(tmp) / "model.sig"
            sig_path.write_bytes(bundle)
            ignore = [Path(p) for p in (*also_ignore, signature_in_tree or "") if p]
            for s in self.sets:
                if not s.certificates:
                    raise fail(f"the signature was made with a certificate, but {s.source} "
                               "names no `certificates` (trust anchors) to check it against")
                config = verifying.Config().use_certificate_verifier(  # type: ignore[no-untyped-call]
                    certificate_chain=list(s.certificates))
                hashing = hashing_config(hashing_module, payload_json(data), ignore)
                if hashing is not None:
                    config.set_hashing_config(hashing)
                try:
                    config.verify(tree, sig_path)
                except Exception as e:  # model-signing raises ValueError and OpenSSL errors
                    raise fail(f"the certificate signature does not verify against the "
                               f"certificates of {s.source}: {e}") from e
                accepted.append(f"certificate {_leaf_name(data)} (chain to {s.source})")
        envelope = data["dsseEnvelope"]
        return Signed(str(envelope.get("payloadType", "")),
                      base64.b64decode(envelope["payload"]), accepted[0])

    # -- trees ----------------------------------------------------------------------------

    @_shape_checked
    def verify_tree(self, tree: Path, bundle: bytes, *,
                    signature_in_tree: str | None = DEFAULT_SIGNATURE,
                    also_ignore: Sequence[str] = ()) -> TreeSignature:
        """Verify a model-signing bundle over the files under ``tree`` (see module doc).

        ``also_ignore`` plays the role of model-signing's verifier-side ignore list (for
        signatures made before manifests recorded ``ignore_paths``). Files it or the
        signer ignores are still reported in ``uncovered``: loading refuses them.
        """
        if _is_pki_bundle(self._bundle_json(bundle)):
            signed = self._verify_pki(tree, bundle, signature_in_tree, also_ignore)
        else:
            signed = self.verify_dsse(bundle)
        expected, serialization = manifest(statement(signed))
        ignored = (*(str(p) for p in serialization.get("ignore_paths", ())), *also_ignore)
        extra_ignores = [signature_in_tree] if signature_in_tree else []
        problems = compare(expected, hash_tree(tree, serialization, [*ignored, *extra_ignores]))
        if problems:
            raise fail("the files do not match the signature: " + "; ".join(problems[:10])
                       + (f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""))
        uncovered = tuple(
            p for p in all_files(tree)
            if p not in expected and p != signature_in_tree
            and p.split("/")[0] not in GIT_METADATA
        )
        return TreeSignature(signed.signer, tuple(sorted(expected)), uncovered)


def _is_pki_bundle(bundle: dict[str, Any]) -> bool:
    """Signed with a certificate of a private PKI: a chain, and no transparency log."""
    material = bundle.get("verificationMaterial") or {}
    return ("x509CertificateChain" in material or "certificate" in material) and not material.get(
        "tlogEntries")


def _leaf_name(bundle: dict[str, Any]) -> str:
    from cryptography import x509

    material = bundle["verificationMaterial"]
    raw = (material.get("x509CertificateChain", {}).get("certificates") or [{}])[0].get(
        "rawBytes") or material.get("certificate", {}).get("rawBytes", "")
    try:
        cert = x509.load_der_x509_certificate(base64.b64decode(raw))
    except ValueError:
        return "(unreadable)"
    return cert.subject.rfc4514_string()


