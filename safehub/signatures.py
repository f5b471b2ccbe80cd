"""Who published this code: Sigstore and OpenSSF Model Signing verification.

A hub repo is signed the way ``model_signing sign`` signs a model: a Sigstore bundle
(``model.sig``) whose DSSE envelope carries an in-toto statement listing every file's
digest. safehub verifies it in three steps, all before any ``hubconf.py`` runs:

1. **The envelope.** Keyless bundles (a Fulcio certificate) are verified with
   sigstore-python against the trusted root (offline: the root shipped inside sigstore,
   or a ``trust_config`` for a private Sigstore) and a policy built from the policy file's
   ``signers``: issuer exact, identity exact or glob, and GitHub Actions claims
   (``repository``, ``ref``, ``workflow``, ``trigger``) read from the certificate. Key
   bundles are verified against the policy's ``keys`` (ECDSA P-256/384/521, as
   model-signing writes them). Bundles signed with a private-PKI certificate (no
   transparency log) go through model-signing's certificate verifier, with the policy's
   ``certificates`` as trust anchors. model-signing's own Sigstore verifier accepts only
   one exact identity, so safehub verifies keyless bundles itself.
2. **The files.** The statement's manifest must equal the manifest model-signing's hashing
   computes for the verified tree (same files, same digests, nothing missing).
3. **Coverage.** Every file in the tree must be in the signed manifest, except the
   signature itself and git metadata (``.git/``, ``.gitattributes``, ``.github/``,
   ``.gitignore``, which model-signing never hashes and Python cannot import). A file the
   signer declared ignored, or any unsigned extra file, refuses the load (it is not
   removed: the tree stays exactly the verified commit).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from safehub._internal.globs import Glob
from safehub.errors import SignatureError

__all__ = [
    "DEFAULT_SIGNATURE",
    "KeySigner",
    "Signed",
    "Signer",
    "SignerSet",
    "TreeSignature",
    "Verifier",
    "fingerprint",
]

DEFAULT_SIGNATURE = "model.sig"
_IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
_STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")
_PREDICATE = "https://model_signing/signature/v1.0"
_PREDICATE_COMPAT = "https://model_signing/Digests/v0.1"
_GIT_METADATA = (".git", ".gitattributes", ".github", ".gitignore")

# Fulcio certificate extensions (https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md)
_OID = "1.3.6.1.4.1.57264.1."
_ISSUER_V1, _ISSUER_V2 = _OID + "1", _OID + "8"
_TRIGGER_V1, _REPO_V1, _REF_V1 = _OID + "2", _OID + "5", _OID + "6"
_REPO_URI_V2, _REF_V2, _CONFIG_URI_V2, _TRIGGER_V2 = (
    _OID + "12", _OID + "14", _OID + "18", _OID + "20")
_SAN_OTHERNAME = "1.3.6.1.4.1.57264.1.7"


@dataclass(frozen=True)
class Signer:
    """A keyless identity the policy accepts (every field given must match)."""

    issuer: str
    identity: str
    repository: str | None = None
    ref: str | None = None
    workflow: str | None = None
    trigger: str | None = None

    def describe(self) -> str:
        claims = [f"{k}={v}" for k in ("repository", "ref", "workflow", "trigger")
                  if (v := getattr(self, k))]
        return f"{self.identity} ({self.issuer})" + (f" [{', '.join(claims)}]" if claims else "")


@dataclass(frozen=True)
class KeySigner:
    """A public key the policy accepts."""

    path: Path

    def describe(self) -> str:
        return f"key {self.path}"


@dataclass(frozen=True)
class SignerSet:
    """The signers and keys one policy rule accepts; a signature must satisfy every set.

    ``certificates`` are the trust anchors of a private PKI: a bundle signed with a
    certificate (no transparency log) must chain to one of them.
    """

    source: str
    signers: tuple[Signer, ...] = ()
    keys: tuple[KeySigner, ...] = ()
    trust_config: Path | None = None
    location: str | None = None
    certificates: tuple[Path, ...] = ()


def _file_hash(path: Path) -> str:
    st = path.stat()
    return _file_hash_at(str(path), st.st_mtime_ns, st.st_size, st.st_ctime_ns)


@lru_cache(maxsize=64)
def _file_hash_at(path: str, _mtime: int, _size: int, _ctime: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def fingerprint(sets: Sequence[SignerSet]) -> str:
    """A hash of everything that decides a signature verdict (for caching verdicts)."""
    h = hashlib.sha256(b"safehub-signature-policy-v1\n")
    for s in sets:
        h.update(json.dumps([
            [vars(x) for x in s.signers],
            [_file_hash(k.path) for k in s.keys],
            _file_hash(s.trust_config) if s.trust_config else "",
            s.location or "",
            [_file_hash(c) for c in s.certificates],
        ], sort_keys=True, default=str).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Signed:
    """A verified envelope: what it carries and who signed it."""

    payload_type: str
    payload: bytes
    signer: str


@dataclass(frozen=True)
class TreeSignature:
    """A verified signature over a tree of files."""

    signer: str
    files: tuple[str, ...]
    uncovered: tuple[str, ...] = ()


def _fail(what: str, hint: str | None = None) -> SignatureError:
    return SignatureError(what, hint=hint or "do not load it: the content or its signature is "
                          "not what the policy requires (check the signers and keys in the "
                          "policy, and the publisher's signing workflow)")


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
            raise _fail(f"cannot read the Sigstore trust config {trust_config} ({e})",
                        hint="fix trust_config in the policy") from e
    import sigstore

    # The production trusted root that ships inside sigstore: no network, no TUF cache.
    shipped = (Path(sigstore.__file__).parent / "_store" /
               "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev" / "trusted_root.json")
    return TrustedRoot.from_file(str(shipped))


def _cert_ext(cert: Any, oid: str, der: bool) -> str | None:
    from cryptography import x509
    from cryptography.hazmat import asn1

    try:
        ext = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value
    except x509.ExtensionNotFound:
        return None
    raw = ext.value
    if der:
        return str(asn1.decode_der(str, raw))
    return bytes(raw).decode()


def _cert_claims(cert: Any) -> dict[str, str | None]:
    """Issuer, SAN identities and GitHub Actions claims of a Fulcio certificate."""
    from cryptography import x509

    sans: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans += san.get_values_for_type(x509.RFC822Name)
        sans += san.get_values_for_type(x509.UniformResourceIdentifier)
        sans += [o.value.decode("utf-8", "replace")
                 for o in san.get_values_for_type(x509.OtherName)
                 if o.type_id.dotted_string == _SAN_OTHERNAME]
    except x509.ExtensionNotFound:
        pass
    repo_uri = _cert_ext(cert, _REPO_URI_V2, True)
    config_uri = _cert_ext(cert, _CONFIG_URI_V2, True)
    repository = (repo_uri.removeprefix("https://github.com/") if repo_uri
                  else _cert_ext(cert, _REPO_V1, False))
    workflow = None
    if config_uri and repository and config_uri.startswith(f"https://github.com/{repository}/"):
        workflow = config_uri.removeprefix(f"https://github.com/{repository}/").split("@")[0]
    return {
        "issuer": _cert_ext(cert, _ISSUER_V2, True) or _cert_ext(cert, _ISSUER_V1, False),
        "identities": "\n".join(sans),
        "repository": repository,
        "ref": _cert_ext(cert, _REF_V2, True) or _cert_ext(cert, _REF_V1, False),
        "workflow": workflow,
        "trigger": _cert_ext(cert, _TRIGGER_V2, True) or _cert_ext(cert, _TRIGGER_V1, False),
    }


def _signer_matches(signer: Signer, claims: dict[str, str | None]) -> str | None:
    """None if ``signer`` accepts the certificate, else why not."""
    if claims["issuer"] != signer.issuer:
        return f"issuer {claims['issuer']!r} is not {signer.issuer!r}"
    identities = (claims["identities"] or "").split("\n")
    pattern = Glob(signer.identity)
    if not any(pattern.match(i) for i in identities if i):
        return f"identity {identities} does not match {signer.identity!r}"
    for claim in ("repository", "ref", "workflow", "trigger"):
        wanted = getattr(signer, claim)
        if wanted is None:
            continue
        got = claims[claim]
        if got is None or not Glob(wanted).match(got):
            return f"{claim} {got!r} does not match {wanted!r}"
    return None


class _Policy:
    """A sigstore VerificationPolicy: every signer set must accept the certificate."""

    def __init__(self, sets: Sequence[SignerSet]) -> None:
        self.sets = sets
        self.accepted: str = ""

    def verify(self, cert: Any) -> None:
        from sigstore.errors import VerificationError

        claims = _cert_claims(cert)
        described = []
        for s in self.sets:
            results = [(x, _signer_matches(x, claims)) for x in s.signers]
            accepted = [x for x, why in results if why is None]
            if not accepted:
                reasons = [why for _, why in results if why is not None]
                raise VerificationError(
                    f"the signing certificate matches no signer of {s.source}: "
                    + ("; ".join(reasons) or "the rule lists keys only, and this is a keyless "
                       "signature")
                )
            described.append(accepted[0].describe())
        self.accepted = described[0] if described else ""


def _pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _verify_with_key(envelope: dict[str, Any], key_path: Path) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_public_key(key_path.read_bytes())
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise _fail(f"{key_path} is not an elliptic-curve public key",
                    hint="model-signing keys are ECDSA P-256, P-384 or P-521")
    algorithm = {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}.get(
        key.curve.key_size)
    if algorithm is None:
        raise _fail(f"{key_path}: unsupported curve {key.curve.name}")
    payload = base64.b64decode(envelope["payload"], validate=True)
    pae = _pae(str(envelope["payloadType"]), payload)
    for sig in envelope.get("signatures", []):
        try:
            key.verify(base64.b64decode(sig["sig"], validate=True), pae, ec.ECDSA(algorithm))
            return
        except (InvalidSignature, ValueError, KeyError, TypeError):
            continue
    raise _fail(f"the signature was not made with the key {key_path}")


def _key_hint(path: Path) -> str:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(path.read_bytes())
    raw = key.public_bytes(serialization.Encoding.PEM,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(raw).hexdigest()


class Verifier:
    """Verifies Sigstore bundles against a policy's signer sets."""

    def __init__(self, sets: Sequence[SignerSet]) -> None:
        if not sets:
            raise ValueError("a Verifier needs at least one signer set")
        self.sets = tuple(sets)
        configs = {str(s.trust_config) if s.trust_config else None for s in self.sets}
        if len(configs) > 1:
            raise _fail("the rules that apply name different Sigstore trust configs",
                        hint="use one trust_config for a repo")
        self.trust_config = configs.pop()

    # -- envelopes ----------------------------------------------------------------------

    def _bundle_json(self, data: bytes) -> dict[str, Any]:
        try:
            bundle = json.loads(data)
        except ValueError as e:
            raise _fail(f"the signature is not a JSON Sigstore bundle ({e})") from e
        if not isinstance(bundle, dict) or "verificationMaterial" not in bundle:
            raise _fail("the signature is not a Sigstore bundle (no verificationMaterial)")
        return bundle

    def verify_dsse(self, data: bytes) -> Signed:
        """Verify a DSSE bundle (keyless or key); return its payload and signer."""
        bundle = self._bundle_json(data)
        material = bundle["verificationMaterial"]
        if "publicKey" in material:
            return self._verify_key_dsse(bundle)
        from sigstore.errors import Error as SigstoreError
        from sigstore.models import Bundle
        from sigstore.verify import Verifier as SigstoreVerifier

        policy = _Policy(self.sets)
        try:
            parsed = Bundle.from_json(data)
            verifier = SigstoreVerifier(trusted_root=_trusted_root(self.trust_config))
            payload_type, payload = verifier.verify_dsse(parsed, policy)
        except SigstoreError as e:
            raise _fail(f"the Sigstore signature does not verify: {e}") from e
        except ValueError as e:
            raise _fail(f"the Sigstore bundle is malformed: {e}") from e
        return Signed(payload_type, payload, f"keyless: {policy.accepted}")

    def _verify_key_dsse(self, bundle: dict[str, Any]) -> Signed:
        envelope = bundle.get("dsseEnvelope")
        if not isinstance(envelope, dict):
            raise _fail("the key-signed bundle has no DSSE envelope")
        hint = bundle["verificationMaterial"]["publicKey"].get("hint", "")
        accepted = []
        for s in self.sets:
            if not s.keys:
                raise _fail(f"the signature was made with a key, but {s.source} accepts only "
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
                raise _fail("the signature matches no key of " + s.source + ": "
                            + "; ".join(errors))
        payload = base64.b64decode(envelope["payload"])
        return Signed(str(envelope.get("payloadType", "")), payload, accepted[0])

    def verify_artifact(self, data: bytes, artifact: bytes | None = None, *,
                        sha256: str | None = None) -> str:
        """Verify a message-signature bundle over an artifact (or its SHA-256); the signer."""
        from sigstore.errors import Error as SigstoreError
        from sigstore.hashes import Hashed
        from sigstore.models import Bundle
        from sigstore.verify import Verifier as SigstoreVerifier
        from sigstore_models.common.v1 import HashAlgorithm

        policy = _Policy(self.sets)
        value: bytes | Any = artifact if artifact is not None else Hashed(
            algorithm=HashAlgorithm.SHA2_256, digest=bytes.fromhex(sha256 or ""))
        try:
            verifier = SigstoreVerifier(trusted_root=_trusted_root(self.trust_config))
            verifier.verify_artifact(value, Bundle.from_json(data), policy)
        except SigstoreError as e:
            raise _fail(f"the Sigstore signature does not verify: {e}") from e
        except ValueError as e:
            raise _fail(f"the Sigstore bundle is malformed: {e}") from e
        return f"keyless: {policy.accepted}"

    def _verify_pki(self, tree: Path, bundle: bytes, signature_in_tree: str | None,
                    also_ignore: Sequence[str]) -> Signed:
        """A bundle signed with a private-PKI certificate: model-signing's verifier checks the
        chain against each rule's ``certificates`` (and the files, checked again after)."""
        import tempfile

        from model_signing import hashing, verifying

        data = self._bundle_json(bundle)
        accepted = []
        with tempfile.TemporaryDirectory(prefix="safehub-sig-") as tmp:
            sig_path = Path(tmp) / "model.sig"
            sig_path.write_bytes(bundle)
            ignore = [Path(p) for p in (*also_ignore, signature_in_tree or "") if p]
            for s in self.sets:
                if not s.certificates:
                    raise _fail(f"the signature was made with a certificate, but {s.source} "
                                "names no `certificates` (trust anchors) to check it against")
                config = verifying.Config().use_certificate_verifier(  # type: ignore[no-untyped-call]
                    certificate_chain=list(s.certificates))
                statement = _payload_json(data)
                hashing_config = _hashing_config(hashing, statement, ignore)
                if hashing_config is not None:
                    config.set_hashing_config(hashing_config)
                try:
                    config.verify(tree, sig_path)
                except Exception as e:  # model-signing raises ValueError and OpenSSL errors
                    raise _fail(f"the certificate signature does not verify against the "
                                f"certificates of {s.source}: {e}") from e
                accepted.append(f"certificate {_leaf_name(data)} (chain to {s.source})")
        envelope = data["dsseEnvelope"]
        return Signed(str(envelope.get("payloadType", "")),
                      base64.b64decode(envelope["payload"]), accepted[0])

    @staticmethod
    def statement(signed: Signed) -> dict[str, Any]:
        """The in-toto statement inside a verified envelope."""
        if signed.payload_type != _IN_TOTO_PAYLOAD:
            raise _fail(f"the signed payload is {signed.payload_type!r}, not an in-toto "
                        "statement")
        try:
            statement = json.loads(signed.payload)
        except ValueError as e:
            raise _fail(f"the signed payload is not JSON ({e})") from e
        if not isinstance(statement, dict) or statement.get("_type") not in _STATEMENT_TYPES:
            raise _fail("the signed payload is not an in-toto statement")
        return statement

    # -- trees ----------------------------------------------------------------------------

    def verify_attestation(self, data: bytes, sha256: str) -> str:
        """Verify a DSSE bundle whose in-toto statement names an artifact by its SHA-256."""
        signed = self.verify_dsse(data)
        subjects = self.statement(signed).get("subject") or []
        if not any(isinstance(s, dict) and s.get("digest", {}).get("sha256") == sha256
                   for s in subjects):
            raise _fail(f"the signed statement is about other artifacts, not sha256:{sha256}")
        return signed.signer

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
        expected, serialization = _manifest(self.statement(signed))
        ignored = (*(str(p) for p in serialization.get("ignore_paths", ())), *also_ignore)
        extra_ignores = [signature_in_tree] if signature_in_tree else []
        actual = _hash_tree(tree, serialization, [*ignored, *extra_ignores])
        problems = []
        for name in sorted(set(actual) - set(expected)):
            problems.append(f"{name} is not signed")
        for name in sorted(set(expected) - set(actual)):
            problems.append(f"{name} is signed but missing")
        for name in sorted(set(actual) & set(expected)):
            if actual[name] != expected[name]:
                problems.append(f"{name} differs from the signed digest")
        if problems:
            raise _fail("the files do not match the signature: " + "; ".join(problems[:10])
                        + (f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""))
        uncovered = tuple(
            p for p in _all_files(tree)
            if p not in expected and p != signature_in_tree
            and p.split("/")[0] not in _GIT_METADATA
        )
        return TreeSignature(signed.signer, tuple(sorted(expected)), uncovered)


def _is_pki_bundle(bundle: dict[str, Any]) -> bool:
    """Signed with a certificate of a private PKI: a chain, and no transparency log."""
    material = bundle.get("verificationMaterial") or {}
    return ("x509CertificateChain" in material or "certificate" in material) and not material.get(
        "tlogEntries")


def _payload_json(bundle: dict[str, Any]) -> dict[str, Any]:
    try:
        payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    except (KeyError, TypeError, ValueError) as e:
        raise _fail(f"the bundle's DSSE payload is malformed ({e})") from e
    if not isinstance(payload, dict):
        raise _fail("the bundle's DSSE payload is not a statement")
    return payload


def _hashing_config(hashing: Any, statement: dict[str, Any], ignore: list[Path]) -> Any:
    """model-signing's hashing config for the statement, plus safehub's extra ignores."""
    serialization = (statement.get("predicate") or {}).get("serialization") or {}
    if not ignore or serialization.get("method") != "files":
        return None
    config = hashing.Config()
    config.use_file_serialization(
        hashing_algorithm=serialization.get("hash_type", "sha256"),
        allow_symlinks=bool(serialization.get("allow_symlinks", False)),
        ignore_paths=[Path(p) for p in serialization.get("ignore_paths", ())])
    config.set_ignored_paths(
        paths=[*(Path(p) for p in serialization.get("ignore_paths", ())), *ignore])
    return config


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


def _manifest(statement: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """(resource name -> "algorithm:hex", serialization) from a model-signing statement."""
    kind = statement.get("predicateType")
    if kind == _PREDICATE_COMPAT:
        compat = {s["name"]: "sha256:" + s["digest"]["sha256"]
                  for s in statement.get("subject", [])}
        return compat, {"method": "files", "hash_type": "sha256", "allow_symlinks": False}
    if kind != _PREDICATE:
        raise _fail(f"the statement is not a model-signing signature (predicateType {kind!r})")
    try:
        predicate = statement["predicate"]
        serialization = dict(predicate["serialization"])
        resources = predicate["resources"]
        subjects = statement["subject"]
        root = subjects[0]["digest"]["sha256"]
    except (KeyError, IndexError, TypeError) as e:
        raise _fail(f"the model-signing statement is malformed ({e})") from e
    if len(subjects) != 1:
        raise _fail("the model-signing statement must have exactly one subject")
    h = hashlib.sha256()
    items: dict[str, str] = {}
    for r in sorted(resources, key=lambda r: str(r["name"])):
        h.update(bytes.fromhex(r["digest"]))
        if r["name"] in items:
            raise _fail(f"the signed manifest lists {r['name']!r} twice")
        items[str(r["name"])] = f"{r['algorithm']}:{r['digest']}"
    if h.hexdigest() != root:
        raise _fail("the signed manifest is inconsistent: its resources do not hash to its "
                    "subject digest")
    return items, serialization


def _hash_tree(tree: Path, serialization: dict[str, Any],
               ignore: Iterable[str]) -> dict[str, str]:
    """Hash the tree the way the signer did.

    The common case (``files`` with SHA-256, no symlinks) is computed here, without
    importing model-signing (whose package import pulls in all of sigstore, about a
    second); tests check it gives exactly model-signing's manifest. Everything else
    (shards, BLAKE2/3, symlinks) uses model-signing's hashing.
    """
    ignore = list(ignore)
    if (serialization.get("method") == "files"
            and serialization.get("hash_type", "sha256") == "sha256"):
        fast = _sha256_files(tree, ignore)
        if fast is not None:
            return fast
    return _hash_tree_model_signing(tree, serialization, ignore)


def _sha256_files(tree: Path, ignore: Iterable[str]) -> dict[str, str] | None:
    """model-signing's ``files``/SHA-256 manifest of ``tree``; None if it has symlinks."""
    from pathlib import PurePosixPath

    prefixes = {str(PurePosixPath(p)) for p in (*ignore, *_GIT_METADATA)
                if not str(PurePosixPath(p)).startswith("..")}
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        rel_dir = os.path.relpath(dirpath, tree)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        for name in (*dirnames, *filenames):
            if os.path.islink(os.path.join(dirpath, name)):
                return None
        for name in filenames:
            rel = prefix + name
            if any(rel == p or rel.startswith(p + "/") for p in prefixes):
                continue
            h = hashlib.sha256()
            with open(os.path.join(dirpath, name), "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            out[rel] = "sha256:" + h.hexdigest()
    return out


def _hash_tree_model_signing(tree: Path, serialization: dict[str, Any],
                             ignore: Iterable[str]) -> dict[str, str]:
    """Hash the tree with model-signing's own hashing configuration."""
    from model_signing import hashing

    method = serialization.get("method")
    algorithm = serialization.get("hash_type", "sha256")
    symlinks = bool(serialization.get("allow_symlinks", False))
    ignore_paths = [Path(p) for p in ignore]
    config = hashing.Config()  # type: ignore[no-untyped-call]
    try:
        if method == "files":
            config.use_file_serialization(hashing_algorithm=algorithm, allow_symlinks=symlinks,
                                          ignore_paths=ignore_paths)
        elif method == "shards":
            config.use_shard_serialization(hashing_algorithm=algorithm,
                                           shard_size=int(serialization["shard_size"]),
                                           allow_symlinks=symlinks, ignore_paths=ignore_paths)
        else:
            raise _fail(f"unknown model-signing serialization method {method!r}")
        config.set_ignored_paths(paths=ignore_paths, ignore_git_paths=True)
        manifest = config.hash(tree)
    except SignatureError:
        raise
    except (ValueError, OSError) as e:
        raise _fail(f"cannot hash the files as the signer did: {e}") from e
    return {d.identifier: f"{d.digest.algorithm}:{d.digest.digest_hex}"
            for d in manifest.resource_descriptors()}


def _all_files(tree: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        out += [prefix + n for n in filenames]
        out += [prefix + n for n in dirnames if os.path.islink(os.path.join(dirpath, n))]
    return out


def sign_directory(directory: Path, private_key: Path, *, out: Path | None = None,
                   password: str | None = None) -> Path:
    """Sign every file under ``directory`` with an EC private key (OpenSSF Model Signing).

    Writes ``model.sig`` at the root (or ``out``); the signature file itself and git
    metadata are not signed. Verify with the matching public key in a policy's ``keys``.
    """
    from model_signing import hashing, signing

    target = out or directory / DEFAULT_SIGNATURE
    ignored: list[Path] = []
    if target.resolve().is_relative_to(directory.resolve()):
        ignored.append(target.resolve().relative_to(directory.resolve()))
    hashing_config = hashing.Config().set_ignored_paths(  # type: ignore[no-untyped-call]
        paths=ignored, ignore_git_paths=True)
    config = signing.Config()  # type: ignore[no-untyped-call]
    try:
        config.use_elliptic_key_signer(private_key=private_key, password=password)
        config.set_hashing_config(hashing_config)
        config.sign(directory, target)
    except (ValueError, TypeError, OSError) as e:
        raise SignatureError(f"cannot sign {directory} with {private_key}: {e}",
                             hint="use a PEM EC private key (P-256, P-384 or P-521)") from e
    return target
