"""safehub's signature layer on real Sigstore and OpenSSF Model Signing fixtures.

Fixtures (tests/fixtures, see NOTICE.md) are real bundles from public projects; keys for the
round trips are generated here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from safehub._internal import fixes
from safehub.errors import SignatureError
from safehub.verify.signatures import KeySigner, Signer, SignerSet, Verifier, sign_directory
from safehub.verify.signatures.manifest import statement

FIXTURES = Path(__file__).parent / "fixtures"
SIGSTORE = FIXTURES / "sigstore"
OMS = FIXTURES / "oms"
ROOT = SIGSTORE / "trusted_root/production.sigstore-python-4.5.1.trusted_root.json"
CASES = json.loads((SIGSTORE / "manifest.json").read_text())["cases"]
BEACON = ("https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
          ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main")
GHA = "https://token.actions.githubusercontent.com"
IBM = ("stefanb@us.ibm.com", "https://sigstore.verify.ibm.com/oauth2")


def keyless(identity: str, issuer: str, **claims: str) -> Verifier:
    return Verifier([SignerSet("test", (Signer(issuer, identity, **claims),), (), ROOT)])


def check_case(verifier: Verifier, case: dict[str, str]) -> str:
    bundle = (SIGSTORE / case["bundle"]).read_bytes()
    if case["kind"] == "dsse":  # an in-toto statement that must name the artifact
        sha = hashlib.sha256((SIGSTORE / case["artifact"]).read_bytes()).hexdigest()
        signed = verifier.verify_dsse(bundle)
        if not any(s.get("digest", {}).get("sha256") == sha
                   for s in statement(signed).get("subject") or []):
            raise SignatureError("the signed statement is about other artifacts",
                                 fix=fixes.say("not this artifact's attestation"))
        return signed.signer
    if case["artifact"]:
        return verifier.verify_artifact(bundle, (SIGSTORE / case["artifact"]).read_bytes())
    return verifier.verify_artifact(bundle, sha256=case["artifact_sha256"])


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_sigstore_fixture(case: dict[str, str]) -> None:
    verifier = keyless(case["identity"], case["issuer"])
    if case["expect"] == "valid":
        assert check_case(verifier, case).startswith(f"keyless: {case['identity']}")
    else:
        with pytest.raises(SignatureError) as err:
            check_case(verifier, case)
        assert err.value.hint


def test_identity_globs_and_github_claims() -> None:
    case = next(c for c in CASES if c["id"] == "conf-happy-path-v0.3")
    ok = keyless("https://github.com/sigstore-conformance/**", GHA,
                 repository="sigstore-conformance/*", ref="refs/heads/main",
                 workflow=".github/workflows/*.yml", trigger="workflow_dispatch")
    assert "repository=sigstore-conformance/*" in check_case(ok, case)
    for bad, why in [
        (keyless("https://github.com/sigstore-conformance/*", GHA), "does not match"),
        (keyless("https://github.com/**", GHA, repository="other/*"), "repository"),
        (keyless("https://github.com/**", GHA, ref="refs/tags/*"), "ref"),
        (keyless("https://github.com/**", GHA, workflow=".github/workflows/release.yml"),
         "workflow"),
        (keyless("https://github.com/**", GHA, trigger="push"), "trigger"),
        (keyless("https://github.com/**", "https://accounts.google.com"), "issuer"),
    ]:
        with pytest.raises(SignatureError, match=why):
            check_case(bad, case)


def test_every_signer_set_must_accept() -> None:
    case = next(c for c in CASES if c["id"] == "conf-happy-path-v0.3")
    admin = SignerSet("admin", (Signer(GHA, "https://github.com/sigstore-conformance/**"),),
                      (), ROOT)
    team = SignerSet("team", (Signer(GHA, BEACON, ref="refs/tags/*"),), (), ROOT)
    with pytest.raises(SignatureError, match="no signer of team"):
        check_case(Verifier([admin, team]), case)
    assert check_case(Verifier([admin]), case)


# -- OpenSSF Model Signing ---------------------------------------------------------------------

OMS_MANIFEST = json.loads((OMS / "manifest.json").read_text())
TRUST_CONFIG = OMS / OMS_MANIFEST["trust_config"]


def oms_verifier(model: dict[str, str], **override: str) -> Verifier:
    if model["method"] == "key":
        key = Path(override.get("key", OMS / model["public_key"]))
        return Verifier([SignerSet("test", (), (KeySigner(key),))])
    signer = Signer(override.get("issuer", model["issuer"]),
                    override.get("identity", model["identity"]))
    return Verifier([SignerSet("test", (signer,), (), TRUST_CONFIG)])


def oms_copy(model: dict[str, str], tmp_path: Path) -> Path:
    d = tmp_path / model["id"]
    shutil.copytree(OMS / model["model_dir"], d)
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return d


@pytest.mark.parametrize("model", OMS_MANIFEST["models"], ids=lambda m: m["id"])
def test_oms_directories_verify_but_ignored_files_count_as_unsigned(
    model: dict[str, str]
) -> None:
    d = OMS / model["model_dir"]
    result = oms_verifier(model).verify_tree(d, (d / "model.sig").read_bytes(),
                                             also_ignore=model.get("ignore_paths", []))
    assert result.files == ("signme-1", "signme-2")
    # 'ignore-me' is outside the signature: a hub load must refuse it (never ignored).
    assert result.uncovered == ("ignore-me",)


@pytest.mark.parametrize("model", OMS_MANIFEST["models"], ids=lambda m: m["id"])
def test_oms_negatives(model: dict[str, str], tmp_path: Path) -> None:
    ignore = model.get("ignore_paths", [])

    def verify(d: Path, **override: str) -> None:
        oms_verifier(model, **override).verify_tree(d, (d / "model.sig").read_bytes(),
                                                    also_ignore=ignore)

    tampered = oms_copy(model, tmp_path / "t")
    (tampered / "signme-1").write_bytes(b"tampered")
    with pytest.raises(SignatureError, match="signme-1 differs"):
        verify(tampered)
    extra = oms_copy(model, tmp_path / "e")
    (extra / "hubconf.py").write_text("import os\n")
    with pytest.raises(SignatureError, match="hubconf.py is not signed"):
        verify(extra)
    missing = oms_copy(model, tmp_path / "m")
    (missing / "signme-2").unlink()
    with pytest.raises(SignatureError, match="signme-2 is signed but missing"):
        verify(missing)
    if model["method"] == "key":
        other = tmp_path / "other.pub"
        other.write_bytes(new_key(tmp_path / "other.pem"))
        with pytest.raises(SignatureError, match="another key"):
            verify(OMS / model["model_dir"], key=str(other))
    else:
        with pytest.raises(SignatureError, match="identity"):
            verify(OMS / model["model_dir"], identity="someone@example.com")
        with pytest.raises(SignatureError, match="issuer"):
            verify(OMS / model["model_dir"], issuer="https://accounts.google.com")


def new_key(private: Path, curve: ec.EllipticCurve | None = None) -> bytes:
    """Write a fresh EC private key; return the public key PEM."""
    key = ec.generate_private_key(curve or ec.SECP256R1())
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.mark.parametrize("curve", [ec.SECP256R1(), ec.SECP384R1()], ids=["p256", "p384"])
def test_sign_and_verify_round_trip(tmp_path: Path, curve: ec.EllipticCurve) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "hubconf.py").write_text("def m():\n    return 1\n")
    (repo / "pkg/__init__.py").write_text("")
    (repo / ".github").mkdir()
    (repo / ".github/ci.yml").write_text("on: push\n")
    public = tmp_path / "key.pub"
    public.write_bytes(new_key(tmp_path / "key.pem", curve))
    sig = sign_directory(repo, tmp_path / "key.pem")
    assert sig == repo / "model.sig"
    verifier = Verifier([SignerSet("t", (), (KeySigner(public),))])
    result = verifier.verify_tree(repo, sig.read_bytes())
    assert result.files == ("hubconf.py", "pkg/__init__.py") and result.uncovered == ()
    assert result.signer == f"key {public}"
    (repo / "pkg/__init__.py").write_text("import os\n")
    with pytest.raises(SignatureError, match="pkg/__init__.py differs"):
        verifier.verify_tree(repo, sig.read_bytes())


def test_malformed_bundles(tmp_path: Path) -> None:
    v = keyless(BEACON, GHA)
    for data, why in [(b"not json", "not a JSON"), (b"{}", "not a Sigstore bundle"),
                      (b'{"verificationMaterial": {"publicKey": {}}}', "no DSSE envelope"),
                      (b'{"verificationMaterial": {"publicKey": {}}, "dsseEnvelope": {}}',
                       "accepts only keyless")]:
        with pytest.raises(SignatureError, match=why):
            v.verify_dsse(data)


@pytest.mark.parametrize("ignore", [[], ["ignore-me"], ["sub"], ["sub/inner.txt", "model.sig"]])
def test_fast_hashing_equals_model_signing(tmp_path: Path, ignore: list[str]) -> None:
    """safehub hashes the common case itself; it must be model-signing's manifest exactly."""
    from safehub.verify.signatures.manifest import _hash_model_signing as _hash_tree_model_signing
    from safehub.verify.signatures.manifest import _sha256_files

    tree = tmp_path / "t"
    for rel, data in {"a.py": b"x", "empty": b"", "sub/inner.txt": b"i" * 5000,
                      "sub/.gitignore": b"nested is signed", ".gitignore": b"root is not",
                      ".github/ci.yml": b"on: push", "ignore-me": b"", "model.sig": b"{}",
                      "deep/er/f.bin": bytes(range(256)) * 9000}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    serialization = {"method": "files", "hash_type": "sha256", "allow_symlinks": False}
    ours = _sha256_files(tree, ignore)
    assert ours == _hash_tree_model_signing(tree, serialization, ignore)
    assert ours is not None and ("sub/.gitignore" in ours or "sub" in ignore)
    (tree / "link").symlink_to("a.py")
    assert _sha256_files(tree, ignore) is None  # symlinks: model-signing decides


def make_pki(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """A private CA and a code-signing leaf: (ca.pem, leaf.pem, leaf-key.pem)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} root")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} release")]))
            .issuer_name(ca_name).public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=30))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                         False), critical=True)
            .sign(ca_key, hashes.SHA256()))
    paths = (tmp_path / f"{name}-ca.pem", tmp_path / f"{name}-leaf.pem",
             tmp_path / f"{name}-leaf-key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM,
                                                serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return paths


def test_private_pki_certificate_chain(tmp_path: Path) -> None:
    from model_signing import hashing, signing

    ca, leaf, leaf_key = make_pki(tmp_path, "acme")
    other_ca, _, _ = make_pki(tmp_path, "other")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "hubconf.py").write_text("def m():\n    return 1\n")
    config = signing.Config().use_certificate_signer(
        private_key=leaf_key, signing_certificate=leaf, certificate_chain=[ca])
    config.set_hashing_config(hashing.Config().set_ignored_paths(paths=["model.sig"]))
    config.sign(repo, repo / "model.sig")
    good = Verifier([SignerSet("acme rule", certificates=(ca,))])
    result = good.verify_tree(repo, (repo / "model.sig").read_bytes())
    assert result.files == ("hubconf.py",) and "CN=acme release" in result.signer
    with pytest.raises(SignatureError, match="does not verify against the certificates"):
        Verifier([SignerSet("other rule", certificates=(other_ca,))]).verify_tree(
            repo, (repo / "model.sig").read_bytes())
    with pytest.raises(SignatureError, match="names no `certificates`"):
        Verifier([SignerSet("keys only", keys=(KeySigner(ca),))]).verify_tree(
            repo, (repo / "model.sig").read_bytes())
    (repo / "evil.py").write_text("x = 1\n")
    with pytest.raises(SignatureError):
        good.verify_tree(repo, (repo / "model.sig").read_bytes())


def test_signing_refuses_a_key_inside_the_folder(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from safehub.errors import SignatureError
    from safehub.verify.signatures import sign_directory

    (tmp_path / "repo").mkdir()
    (tmp_path / "repo/hubconf.py").write_text("x = 1\n")
    key = tmp_path / "repo/signing.pem"
    key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    with pytest.raises(SignatureError, match="inside the folder being signed"):
        sign_directory(tmp_path / "repo", key)
    assert not (tmp_path / "repo/model.sig").exists()
