"""Who published this code: signing and verifying hub repos (OpenSSF Model Signing).

* :mod:`~safehub.verify.signatures.signers` -- whose signature counts (the policy's signer types);
* :mod:`~safehub.verify.signatures.policies` -- composable checks on a signing certificate;
* :mod:`~safehub.verify.signatures.verify` -- verifying envelopes and trees (:class:`Verifier`);
* :mod:`~safehub.verify.signatures.manifest` -- what the signed statement lists, hashing a tree;
* :mod:`~safehub.verify.signatures.locate` -- finding the signature (tree, release, URL, disk);
* :mod:`~safehub.verify.signatures.check` -- the load's signature step, verdicts cached per user;
* :mod:`~safehub.verify.signatures.sign` -- signing a folder with an EC key.

sigstore and model-signing are imported only when a signature is verified or made.
"""

from __future__ import annotations

from safehub.verify.signatures.manifest import Signed
from safehub.verify.signatures.sign import sign_directory
from safehub.verify.signatures.signers import (
    DEFAULT_SIGNATURE,
    KeySigner,
    Signer,
    SignerSet,
    fingerprint,
)
from safehub.verify.signatures.verify import TreeSignature, Verifier

__all__ = [
    "DEFAULT_SIGNATURE",
    "KeySigner",
    "Signed",
    "Signer",
    "SignerSet",
    "TreeSignature",
    "Verifier",
    "fingerprint",
    "sign_directory",
]
