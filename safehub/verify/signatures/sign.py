"""Signing a folder the way ``model_signing sign`` does (an EC key; OpenSSF Model Signing)."""

from __future__ import annotations

from pathlib import Path

from safehub.errors import SignatureError
from safehub.verify.signatures.signers import DEFAULT_SIGNATURE

__all__ = ["sign_directory"]


def sign_directory(directory: Path, private_key: Path, *, out: Path | None = None,
                   password: str | None = None) -> Path:
    """Sign every file under ``directory`` with an EC private key (OpenSSF Model Signing).

    Writes ``model.sig`` at the root (or ``out``); the signature file itself and git
    metadata are not signed. Verify with the matching public key in a policy's ``keys``.
    """
    if not directory.is_dir():
        raise SignatureError(f"cannot sign {directory}: it is not a folder",
                             hint="name the folder of the repo to sign")
    if private_key.resolve().is_relative_to(directory.resolve()):
        raise SignatureError(
            f"the private key {private_key} is inside the folder being signed: it would be "
            "signed and published with the code",
            hint="keep signing keys outside the repo (for example in ~/), and sign again")
    try:
        key_bytes = private_key.read_bytes()
    except OSError as e:
        raise SignatureError(f"cannot read the private key {private_key} ({e.strerror})",
                             hint="give a PEM EC private key file with --key") from e
    if b"PRIVATE KEY" not in key_bytes:
        raise SignatureError(f"{private_key} is not a PEM private key",
                             hint="make one with `openssl ecparam -name prime256v1 -genkey "
                             "-noout -out key.pem`")
    _require_ec(private_key, key_bytes, password)
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


def _require_ec(path: Path, key_bytes: bytes, password: str | None) -> None:
    """Model signing takes EC keys only: another kind of key is named (not a bare error)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_private_key(
            key_bytes, password.encode() if password is not None else None)
    except (ValueError, TypeError):
        return  # unreadable or encrypted: model_signing's own error says which
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SignatureError(f"{path} is not an EC private key ({type(key).__name__})",
                             hint="make one with `openssl ecparam -name prime256v1 -genkey "
                             "-noout -out key.pem`")
