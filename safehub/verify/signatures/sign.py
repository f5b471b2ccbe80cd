"""Signing a folder the way ``model_signing sign`` does (an EC key; OpenSSF Model Signing)."""

from __future__ import annotations

from pathlib import Path

from safehub._internal import fixes
from safehub._internal.fsutil import within
from safehub.errors import SignatureError
from safehub.verify.signatures.signers import DEFAULT_SIGNATURE

__all__ = ["sign_directory"]


def sign_directory(directory: Path, private_key: Path, *, out: Path | None = None,
                   password: str | None = None, allow_symlinks: bool = False) -> Path:
    """Sign every file under ``directory`` with an EC private key (OpenSSF Model Signing).

    Writes ``model.sig`` at the root (or ``out``); the signature file itself and git
    metadata are not signed. Verify with the matching public key in a policy's ``keys``.
    ``allow_symlinks``: a link inside the folder is signed as the file it names (as
    ``model_signing sign --allow_symlinks``); without it a link is refused.
    """
    if not directory.is_dir():
        raise SignatureError(f"cannot sign {directory}: it is not a folder",
                             fix=fixes.say("name the folder of the repo to sign"))
    _check_links(directory, allow_symlinks)
    if within(str(private_key.resolve()), str(directory.resolve())):
        raise SignatureError(
            f"the private key {private_key} is inside the folder being signed: it would be "
            "signed and published with the code",
            fix=fixes.say("keep signing keys outside the repo (for example in ~/), and sign again"))
    try:
        key_bytes = private_key.read_bytes()
    except OSError as e:
        raise SignatureError(f"cannot read the private key {private_key} ({e.strerror})",
                             fix=fixes.say("give a PEM EC private key file with --key")) from e
    if b"PRIVATE KEY" not in key_bytes:
        raise SignatureError(f"{private_key} is not a PEM private key",
                             fix=fixes.run("openssl ecparam -name prime256v1 -genkey -noout "
                                           "-out key.pem", "to make one"))
    _require_ec(private_key, key_bytes, password)
    from model_signing import hashing, signing

    target = out or directory / DEFAULT_SIGNATURE
    ignored: list[Path] = []
    if within(str(target.resolve()), str(directory.resolve())):
        ignored.append(target.resolve().relative_to(directory.resolve()))
    hashing_config = hashing.Config().set_ignored_paths(  # type: ignore[no-untyped-call]
        paths=ignored, ignore_git_paths=True)
    config = signing.Config()  # type: ignore[no-untyped-call]
    try:
        config.use_elliptic_key_signer(private_key=private_key, password=password)
        config.set_hashing_config(hashing_config.set_allow_symlinks(allow_symlinks))
        config.sign(directory, target)
    except (ValueError, TypeError, OSError) as e:
        raise SignatureError(f"cannot sign {directory} with {private_key}: {e}",
                             fix=fixes.say("use a PEM EC private key (P-256, "
                                           "P-384 or P-521)")) from e
    return target


def _check_links(directory: Path, allowed: bool) -> None:
    """A symbolic link is signed only when asked for, and only one to a file inside the
    folder (a load refuses an archive with a link out of its tree)."""
    import os

    root = directory.resolve()
    for folder, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not (Path(folder) == directory and d == ".git")]
        for name in sorted([*dirs, *files]):
            path = Path(folder) / name
            if not path.is_symlink():
                continue
            target = path.resolve()
            if not within(str(target), str(root)) or not target.is_file():
                raise SignatureError(
                    f"cannot sign {directory}: {path} is a symbolic link to {target}, which "
                    "is not a file inside the folder (a load refuses links out of the "
                    "repo's tree; the key is not the problem)",
                    fix=fixes.say(f"replace {path} with the file itself (or remove it), then sign "
                                  "again"))
            if not allowed:
                raise SignatureError(
                    f"cannot sign {directory}: {path} is a symbolic link (to {target}), and "
                    "links are signed only when asked for (the key is not the problem)",
                    fix=fixes.say("sign it as the file it names: add --allow-symlinks to `safehub "
                    "sign` (model_signing sign: --allow_symlinks); or replace the link with "
                                  "the file"))


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
                             fix=fixes.run("openssl ecparam -name prime256v1 -genkey -noout "
                                           "-out key.pem", "to make one"))
