"""``safehub verify``: the signature of a folder or of a spec's verified tree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub.errors import SignatureError, SpecError
from safehub.operations.common import Report, verified_tree
from safehub.spec import RepoSpec
from safehub.verify.signatures.check import verify_complete
from safehub.verify.signatures.signers import SignerSet

if TYPE_CHECKING:
    from safehub.hub import Hub

__all__ = ["VerifyReport", "verify"]


@dataclass(frozen=True)
class VerifyReport(Report):
    target: str
    signer: str
    files: int
    uncovered: list[str]
    commit: str | None = None
    digest: str | None = None
    valid: bool = True


def verify(hub: Hub, target: str, sets: Sequence[SignerSet] = ()) -> VerifyReport:
    """Verify the signature of a local folder or a spec (fetched and verified first).

    ``sets`` (signer sets) default to the policy's for a spec. Raises
    :class:`SignatureError` if the signature is missing, invalid, or leaves files
    uncovered; nothing is trusted or run.
    """
    folder = Path(target)
    commit = digest = None
    if folder.is_dir():
        tree_path = folder
        found = hub.signatures.find(folder, (), {})
    else:
        admitted, tree = verified_tree(hub, RepoSpec.parse(target))
        tree_path, commit, digest = tree.path, admitted.commit, tree.digest
        sets = sets or admitted.decision.requirements.signer_sets
        r = admitted.resolved
        owner, _, name = r.url_name.partition("/")
        found = hub.signatures.find(tree.path, sets, {
            "owner": owner, "name": name, "repo": r.url_name, "ref": r.ref,
            "commit": r.commit})
    if not sets:
        raise SpecError("no signers to verify against",
                        fix=fixes.say("give --key, or --identity and --issuer, or a policy "
                                      "rule with signers or keys for the repo"))
    if found is None:
        raise SignatureError(f"no signature found for {target}",
                             fix=fixes.either(
                                 fixes.run("safehub sign DIR --key KEY", "to sign it"),
                                 fixes.say("sign it with `model_signing sign`"),
                                 fixes.say("set signature_url in the policy")))
    result = verify_complete(target, tree_path, found, sets)
    return VerifyReport(target, result.signer, len(result.files), list(result.uncovered),
                        commit, digest)
