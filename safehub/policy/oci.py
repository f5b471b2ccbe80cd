"""The ``[oci]`` table: whose signature a snapshot from a registry must carry.

Each file whose ``[oci]`` table says ``signature = "required"`` adds one signer set (its
``signers``, ``keys`` and ``trust_config``, paths relative to that file); a snapshot's
fleet signature must be accepted by every set, so a later file can add a requirement
and never remove one.

>>> fleet_signers(Policy())
()
"""

from __future__ import annotations

from pathlib import Path

from safehub.policy.model import Policy
from safehub.verify.signatures.signers import KeySigner, Signer, SignerSet

__all__ = ["fleet_signers"]


def fleet_signers(policy: Policy) -> tuple[SignerSet, ...]:
    """The signer sets of every ``[oci]`` table that requires a fleet signature, in order."""
    sets = []
    for f in policy.layers:
        t = f.oci
        if t is None or t.signature != "required":
            continue
        sets.append(SignerSet(
            "[oci]", tuple(Signer(**s.set_values()) for s in t.signers),
            tuple(KeySigner(Path(k)) for k in t.keys),
            Path(t.trust_config) if t.trust_config else None, policy_file=f.source))
    return tuple(sets)
