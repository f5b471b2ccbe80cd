"""What a model-signing signature says about a tree, and what the tree holds.

A model-signing bundle carries an in-toto statement whose predicate lists every file's
digest (the manifest). :func:`statement` reads it from a verified envelope,
:func:`manifest` checks its internal consistency, :func:`hash_tree` hashes a tree the way
the signer did, and :func:`compare` says which files are unsigned, missing or different.
Coverage is strict: every file except the signature itself and git metadata (``.git/``,
``.gitattributes``, ``.github/``, ``.gitignore``, which model-signing never hashes and
Python cannot import) must be in the manifest; a file the signer declared ignored counts
as unsigned.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub._internal.fsutil import within_any
from safehub.errors import SignatureError

__all__ = ["GIT_METADATA", "Signed", "all_files", "compare", "hash_tree", "manifest",
           "statement"]

IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
_STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")
_PREDICATE = "https://model_signing/signature/v1.0"
_PREDICATE_COMPAT = "https://model_signing/Digests/v0.1"
GIT_METADATA = (".git", ".gitattributes", ".github", ".gitignore")


def fail(what: str, fix: fixes.Fix | None = None) -> SignatureError:
    """A :class:`SignatureError` with ``fix``, else the usual one."""
    return SignatureError(what, fix=fix or fixes.say(
        "do not load it: the content or its signature is not what the policy requires "
        "(check the signers and keys in the policy, and the publisher's signing workflow)"))


class Signed(Frozen):
    """A verified envelope: what it carries and who signed it."""

    payload_type: str
    payload: bytes
    signer: str


def statement(signed: Signed) -> dict[str, Any]:
    """The in-toto statement inside a verified envelope."""
    if signed.payload_type != IN_TOTO_PAYLOAD:
        raise fail(f"the signed payload is {signed.payload_type!r}, not an in-toto statement")
    try:
        parsed = json.loads(signed.payload)
    except (ValueError, RecursionError) as e:
        raise fail(f"the signed payload is not JSON ({e})") from e
    if not isinstance(parsed, dict) or parsed.get("_type") not in _STATEMENT_TYPES:
        raise fail("the signed payload is not an in-toto statement")
    return parsed


def compare(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """What differs between the signed manifest and the tree's hashes."""
    problems = [f"{name} is not signed" for name in sorted(set(actual) - set(expected))]
    problems += [f"{name} is signed but missing" for name in sorted(set(expected) - set(actual))]
    problems += [f"{name} differs from the signed digest"
                 for name in sorted(set(actual) & set(expected)) if actual[name] != expected[name]]
    return problems


def payload_json(bundle: dict[str, Any]) -> dict[str, Any]:
    try:
        payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    except (KeyError, TypeError, ValueError) as e:
        raise fail(f"the bundle's DSSE payload is malformed ({e})") from e
    if not isinstance(payload, dict):
        raise fail("the bundle's DSSE payload is not a statement")
    return payload


def hashing_config(hashing: Any, statement: dict[str, Any], ignore: list[Path]) -> Any:
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
    config.set_allow_symlinks(bool(serialization.get("allow_symlinks", False)))
    return config


def manifest(signed: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """(resource name -> "algorithm:hex", serialization) from a model-signing statement.

    The statement was signed, but its shape is still checked: a malformed one is a
    :class:`SignatureError`, never a bare exception.
    """
    try:
        return _manifest(signed)
    except SignatureError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise fail(f"the model-signing statement is malformed ({type(e).__name__}: {e})") from e


def _manifest(signed: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    kind = signed.get("predicateType")
    if kind == _PREDICATE_COMPAT:
        compat = {str(s["name"]): "sha256:" + str(s["digest"]["sha256"])
                  for s in signed.get("subject", [])}
        return compat, {"method": "files", "hash_type": "sha256", "allow_symlinks": False}
    if kind != _PREDICATE:
        raise fail(f"the statement is not a model-signing signature (predicateType {kind!r})")
    predicate = signed["predicate"]
    serialization = dict(predicate["serialization"])
    resources = list(predicate["resources"])
    subjects = signed["subject"]
    if len(subjects) != 1:
        raise fail("the model-signing statement must have exactly one subject")
    root = subjects[0]["digest"]["sha256"]
    h = hashlib.sha256()
    items: dict[str, str] = {}
    for r in sorted(resources, key=lambda r: str(r["name"])):
        h.update(bytes.fromhex(r["digest"]))
        name = str(r["name"])
        if name in items:
            raise fail(f"the signed manifest lists {name!r} twice")
        items[name] = f"{r['algorithm']}:{r['digest']}"
    if h.hexdigest() != root:
        raise fail("the signed manifest is inconsistent: its resources do not hash to its "
                   "subject digest")
    return items, serialization


def hash_tree(tree: Path, serialization: dict[str, Any],
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
    return _hash_model_signing(tree, serialization, ignore)


def _sha256_files(tree: Path, ignore: Iterable[str]) -> dict[str, str] | None:
    """model-signing's ``files``/SHA-256 manifest of ``tree``; None if it has symlinks."""
    from pathlib import PurePosixPath

    prefixes = {str(PurePosixPath(p)) for p in (*ignore, *GIT_METADATA)
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
            if within_any(rel, prefixes):
                continue
            h = hashlib.sha256()
            with open(os.path.join(dirpath, name), "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            out[rel] = "sha256:" + h.hexdigest()
    return out


def _hash_model_signing(tree: Path, serialization: dict[str, Any],
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
            raise fail(f"unknown model-signing serialization method {method!r}")
        config.set_ignored_paths(paths=ignore_paths, ignore_git_paths=True)
        config.set_allow_symlinks(symlinks)  # hash() applies this one, not the serializer's
        manifest = config.hash(tree)
    except SignatureError:
        raise
    except (ValueError, OSError) as e:
        raise fail(f"cannot hash the files as the signer did: {e}") from e
    return {d.identifier: f"{d.digest.algorithm}:{d.digest.digest_hex}"
            for d in manifest.resource_descriptors()}


def all_files(tree: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        out += [prefix + n for n in filenames]
        out += [prefix + n for n in dirnames if os.path.islink(os.path.join(dirpath, n))]
    return out


