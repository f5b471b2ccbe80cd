"""Whose signature counts: the signer types a policy rule produces.

This is the only part of the signing package that :mod:`safehub.policy` imports: plain
frozen data, no cryptography.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from safehub._internal.frozen import Frozen

__all__ = ["DEFAULT_SIGNATURE", "KeySigner", "Signer", "SignerSet", "fingerprint"]

DEFAULT_SIGNATURE = "model.sig"
"""Where a signature sits in a repo unless the policy says otherwise (as model_signing)."""


class Signer(Frozen):
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


class KeySigner(Frozen):
    """A public key the policy accepts."""

    path: Path

    def describe(self) -> str:
        return f"key {self.path}"


class SignerSet(Frozen):
    """The signers one policy rule accepts; a signature must satisfy every set that applies.

    ``rule`` names the rule for messages (``[[allow]] #2 (org/*)``) and ``policy_file`` the
    file it came from (relative signature paths are relative to it). ``certificates`` are
    the trust anchors of a private PKI: a bundle signed with a certificate (no transparency
    log) must chain to one of them. ``location`` is the rule's ``signature_url``.
    """

    rule: str
    signers: tuple[Signer, ...] = ()
    keys: tuple[KeySigner, ...] = ()
    trust_config: Path | None = None
    location: str | None = None
    certificates: tuple[Path, ...] = ()
    policy_file: str = ""

    @property
    def source(self) -> str:
        """The rule and its file, for messages."""
        return f"{self.rule} in {self.policy_file}" if self.policy_file else self.rule


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
