"""Who published this code: signing and verifying hub repos (OpenSSF Model Signing).

* :mod:`~safehub.verify.signatures.signers` -- whose signature counts (the policy's signer types);
* :mod:`~safehub.verify.signatures.policies` -- composable checks on a signing certificate;
* :mod:`~safehub.verify.signatures.verify` -- verifying envelopes and trees (:class:`Verifier`);
* :mod:`~safehub.verify.signatures.manifest` -- what the signed statement lists, hashing a tree;
* :mod:`~safehub.verify.signatures.locate` -- finding the signature (tree, release, URL, disk);
* :mod:`~safehub.verify.signatures.check` -- the load's signature step, verdicts cached per user;
* :mod:`~safehub.verify.signatures.sign` -- signing a folder with an EC key.

sigstore and model-signing are imported only when a signature is verified or made; the
names below are imported from their modules on first use, so a load that asks for no
signature (or finds its verdict recorded) imports neither the verifier nor the signer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Where each name of the surface lives (imported on first use, PEP 562).
_HOMES = {"Signed": "manifest", "sign_directory": "sign", "DEFAULT_SIGNATURE": "signers",
          "KeySigner": "signers", "Signer": "signers", "SignerSet": "signers",
          "fingerprint": "signers", "TreeSignature": "verify", "Verifier": "verify"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
