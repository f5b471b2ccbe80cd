"""Who published this code: signing and verifying hub repos (OpenSSF Model Signing).

* :mod:`~safehub.signatures.signers` -- whose signature counts (the policy's signer types);
* :mod:`~safehub.signatures.policies` -- composable checks on a signing certificate;
* :mod:`~safehub.signatures.verify` -- verifying envelopes and trees (:class:`Verifier`);
* :mod:`~safehub.signatures.manifest` -- what the signed statement lists, hashing a tree;
* :mod:`~safehub.signatures.locate` -- finding the signature (tree, release, URL, disk);
* :mod:`~safehub.signatures.check` -- the load's signature step, verdicts cached per user;
* :mod:`~safehub.signatures.sign` -- signing a folder with an EC key.

sigstore and model-signing are imported only when a signature is verified or made.
"""

from __future__ import annotations

from safehub.signatures.manifest import Signed
from safehub.signatures.sign import sign_directory
from safehub.signatures.signers import DEFAULT_SIGNATURE, KeySigner, Signer, SignerSet, fingerprint
from safehub.signatures.verify import TreeSignature, Verifier

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
