"""The fleet signature: a Sigstore bundle over one OCI snapshot's manifest digest.

``safehub prefetch --oci ... --sign-key KEY`` (or ``--sign-keyless``) signs an in-toto
statement whose one subject is the snapshot's manifest digest and whose predicate is the
snapshot's config (repo, commit, tree, content digest), as a DSSE envelope in a Sigstore
bundle: a key bundle (``verificationMaterial.publicKey``) or a keyless one (a Fulcio
certificate and a Rekor entry). A node whose policy has an ``[oci]`` table with
``signature = "required"`` accepts a snapshot only with such a bundle that verifies
against every ``[oci]`` signer set and names exactly that digest and that lock entry.

>>> doc = json.loads(statement("sha256:" + "a" * 64, {"repo": "acme/tiny"}))
>>> doc["subject"][0]["digest"], doc["predicateType"]
({'sha256': 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}, \
'https://safehub.dev/oci/snapshot/v1')
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub.errors import SignatureError
from safehub.verify.signatures.dsse import ecdsa_hash, pae
from safehub.verify.signatures.manifest import IN_TOTO_PAYLOAD, fail
from safehub.verify.signatures.signers import SignerSet

__all__ = ["PREDICATE_TYPE", "Check", "checkers", "sign_keyless", "sign_with_key", "statement",
           "verify"]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://safehub.dev/oci/snapshot/v1"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def statement(manifest: str, predicate: Mapping[str, Any]) -> bytes:
    """The canonical statement for the snapshot ``manifest`` (``sha256:<hex>``)."""
    doc = {"_type": STATEMENT_TYPE, "predicateType": PREDICATE_TYPE,
           "predicate": dict(predicate),
           "subject": [{"name": str(predicate.get("repo", "snapshot")),
                        "digest": {"sha256": manifest.removeprefix("sha256:")}}]}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def sign_with_key(private_key: Path, payload: bytes, *, password: str | None = None) -> bytes:
    """A key bundle (DSSE, ECDSA) over ``payload``, in the shape the verifier reads."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        data = private_key.read_bytes()
    except OSError as e:
        raise SignatureError(f"cannot read the signing key {private_key} ({e.strerror})",
                             fix=fixes.say("give a PEM EC private key file with --sign-key")) from e
    try:
        key = serialization.load_pem_private_key(
            data, password.encode() if password is not None else None)
    except (ValueError, TypeError) as e:
        raise SignatureError(f"{private_key} is not a readable PEM private key ({e})",
                             fix=fixes.run("openssl ecparam -name prime256v1 -genkey -noout "
                                           "-out key.pem", "to make one")) from e
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SignatureError(f"{private_key} is not an EC private key ({type(key).__name__})",
                             fix=fixes.run("openssl ecparam -name prime256v1 -genkey -noout "
                                           "-out key.pem", "to make one"))
    algorithm = ecdsa_hash(key)
    if algorithm is None:
        raise SignatureError(f"{private_key}: unsupported curve {key.curve.name}",
                             fix=fixes.say("use P-256, P-384 or P-521"))
    import hashlib

    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    sig = key.sign(pae(IN_TOTO_PAYLOAD, payload), ec.ECDSA(algorithm))
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": hashlib.sha256(public).hexdigest()}},
        "dsseEnvelope": {"payload": base64.b64encode(payload).decode(),
                         "payloadType": IN_TOTO_PAYLOAD,
                         "signatures": [{"sig": base64.b64encode(sig).decode()}]}}
    return json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()


def sign_keyless(payload: bytes, *, offline: bool) -> bytes:
    """A keyless bundle over ``payload``: a Fulcio certificate for the ambient OIDC identity
    (a CI job's, or ``SIGSTORE_IDENTITY_TOKEN``) and a Rekor entry, on public Sigstore."""
    fix = fixes.say("sign with a key instead (`--sign-key KEY`), or run where an OIDC identity "
                    "is available to Sigstore (a CI job with `id-token: write`, or "
                    "SIGSTORE_IDENTITY_TOKEN) and Sigstore is reachable")
    if offline:
        raise SignatureError("keyless signing needs Sigstore's servers, and offline mode "
                             "forbids the network", fix=fix)
    import os

    from sigstore import dsse
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential
    from sigstore.sign import SigningContext

    try:
        raw = os.environ.get("SIGSTORE_IDENTITY_TOKEN") or detect_credential()
    except IdentityError as e:
        raise SignatureError(f"no OIDC identity for keyless signing ({e})", fix=fix) from e
    if not raw:
        raise SignatureError("no OIDC identity for keyless signing: no SIGSTORE_IDENTITY_TOKEN and "
                             "no ambient CI credential", fix=fix)
    try:
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        with context.signer(IdentityToken(raw)) as signer:
            return signer.sign_dsse(dsse.Statement(payload)).to_json().encode()
    except (SigstoreError, IdentityError, OSError, ValueError) as e:
        raise SignatureError(f"keyless signing failed: {e}", fix=fix) from e


def verify(sets: Sequence[SignerSet], bundle: bytes, manifest: str,
           predicate: Mapping[str, Any]) -> str:
    """Check ``bundle`` is accepted by every signer set and signs exactly the statement of
    ``manifest`` for ``predicate``; return who signed it."""
    from safehub.verify.signatures.verify import Verifier

    signed = Verifier(sets).verify_dsse(bundle)
    if signed.payload_type != IN_TOTO_PAYLOAD:
        raise fail(f"the snapshot signature carries {signed.payload_type[:80]!r}, not an "
                   "in-toto statement")
    try:
        doc = json.loads(signed.payload)
    except (ValueError, RecursionError) as e:
        raise fail(f"the snapshot signature's statement is not JSON ({e})") from e
    if type(doc) is not dict or doc.get("_type") != STATEMENT_TYPE or \
            doc.get("predicateType") != PREDICATE_TYPE:
        said = str(doc.get("predicateType") if type(doc) is dict else "")[:80]
        raise fail(f"the signed statement is not a safehub snapshot's (predicateType {said!r})")
    subjects = doc.get("subject")
    named = [s.get("digest", {}).get("sha256") if type(s) is dict and
             type(s.get("digest")) is dict else None
             for s in (subjects if type(subjects) is list else [])]
    if named != [manifest.removeprefix("sha256:")]:
        said = ", ".join(f"sha256:{str(n)[:64]}" for n in named[:3]) or "no digest"
        raise fail(f"the signature is for {said}, not the snapshot {manifest}")
    if doc.get("predicate") != dict(predicate):
        raise fail(f"the signature over {manifest} names another snapshot than the lockfile "
                   "entry (its repo, commit, tree or content digest differ)")
    return signed.signer


Check = Callable[[bytes, str, Mapping[str, Any]], str]
"""(bundle, manifest digest, predicate) -> who signed it, or a SignatureError."""


def checkers(sets: Sequence[SignerSet]) -> list[tuple[str, Check]]:
    """One :func:`verify` per signer set, with the set's rule and file: each must accept
    one of the snapshot's signatures (several referrers may carry several signers)."""
    def bound(one: SignerSet) -> Check:
        return lambda bundle, manifest, predicate: verify((one,), bundle, manifest, predicate)

    return [(s.source, bound(s)) for s in sets]
