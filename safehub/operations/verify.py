"""``safehub verify``: the signature of a folder or of a spec's verified tree."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
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
    try:
        result = verify_complete(target, tree_path, found, sets)
    except SignatureError as e:
        if commit is None and found.in_tree and _edited_after_signing(folder, found.in_tree):
            e.fix = fixes.either(
                fixes.run(f"safehub sign {shlex.quote(target)} --key KEY",
                          "to sign it again, if you changed it yourself after signing it"),
                e.fix)
        raise
    return VerifyReport(target, result.signer, len(result.files), list(result.uncovered),
                        commit, digest)


def _edited_after_signing(folder: Path, signature: str) -> bool:
    """A file of ``folder`` changed (or added) after its signature file was written: the
    publisher's own folder, edited since they signed it."""
    try:
        signed_at = (folder / signature).stat().st_mtime_ns
    except OSError:
        return False
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(root, name)
            try:
                if path != folder / signature and path.lstat().st_mtime_ns > signed_at:
                    return True
            except OSError:
                continue
    return False
