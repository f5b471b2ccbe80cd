"""DSSE's signing input and the ECDSA hash each curve signs with (one home for both, as
model-signing's key bundles and safehub's fleet signatures use them).

>>> pae("t", b"ab")
b'DSSEv1 1 t 2 ab'
"""

from __future__ import annotations

from typing import Any

__all__ = ["ecdsa_hash", "pae"]


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what an envelope's signature signs."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def ecdsa_hash(key: Any) -> Any:
    """The hash an EC key of this curve signs with (P-256: SHA-256, P-384: SHA-384, P-521:
    SHA-512), or None for another curve."""
    from cryptography.hazmat.primitives import hashes

    return {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}.get(
        key.curve.key_size)
