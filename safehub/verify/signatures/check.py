"""Step 7 of a load: the signature the policy asks for, with verdicts cached per user.

A verdict is cached for (commit, content digest, fingerprint of the signer policy): a warm
signed load does not verify again, and a changed policy or key verifies again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, replace
from safehub._internal.warn import warn
from safehub.errors import SignatureError
from safehub.verify.signatures.signers import DEFAULT_SIGNATURE, SignerSet, fingerprint

if TYPE_CHECKING:  # the verifier is imported where a verdict is not recorded yet
    from safehub.store.records import SignatureRecords
    from safehub.verify.signatures.locate import Found
    from safehub.verify.signatures.verify import TreeSignature

if TYPE_CHECKING:
    from safehub.policy.decision import Decision

__all__ = ["SignatureCheck", "SignatureStatus", "verify_complete"]


class SignatureStatus(Frozen):
    """What the signature step found, as data: its ``kind``, a line for the prompt and the
    audit, and the signer.

    ``kind`` is ``OK`` (verified), ``UNSIGNED`` (none, and ``if-present`` allows that),
    ``MISSING`` (none, and one is required), ``INVALID`` (one that does not verify),
    ``NOT_ASKED`` (no policy asks) or ``NOT_CHECKED`` (no tree at hand: a dry run).
    """

    status: str
    signer: str = ""
    failed: str = ""
    """In ``mode = "warn"``, why the signature failed (the load goes on with consent)."""
    kind: str = "OK"
    error: SignatureError | None = None
    """The refusal, where the step was asked to return it instead of raising it."""

    @classmethod
    def not_asked(cls) -> SignatureStatus:
        return cls("not checked (no policy asks for one)", kind="NOT_ASKED")

    @classmethod
    def not_checked(cls, wanted: str) -> SignatureStatus:
        return cls(f"not checked (signature = {wanted!r}: the tree is not cached)",
                   kind="NOT_CHECKED")

    def weighed(self, decision: Decision) -> Decision:
        """``decision`` once this step has spoken: in ``mode = "warn"`` a failed signature
        is a violation like any other (the load asks consent); else it is unchanged. The
        one place a load and ``safehub check`` change the decision after admission."""
        if not self.failed:
            return decision
        return replace(decision, verdict="prompt",
                                   violations=(*decision.violations, self.failed))


def verify_complete(what: str, tree: Path, found: Found,
                    sets: Sequence[SignerSet]) -> TreeSignature:
    """Verify ``found`` over ``tree``; every file must be covered (a load refuses others)."""
    from safehub.verify.signatures.verify import Verifier  # only where a verdict is new

    result = Verifier(sets).verify_tree(tree, found.data, signature_in_tree=found.in_tree)
    if result.uncovered:
        raise SignatureError(
            f"the signature over {what} is valid ({result.signer}) but does not cover "
            f"{len(result.uncovered)} file(s): {', '.join(result.uncovered[:5])}",
            fix=fixes.say("every file that could be imported must be signed; files the "
                          "signer declared ignored count as unsigned. Ask the publisher to "
                          "sign them"))
    return result


class SignatureCheck:
    """Find and verify a repo's signature for the policy's signer sets."""

    def __init__(self, records: SignatureRecords, *, web_url: str,
                 fetch: Callable[[str], bytes | None]) -> None:
        self.records = records
        self.web_url = web_url
        self.fetch = fetch

    def find(self, tree: Path, sets: Sequence[SignerSet],
             values: Mapping[str, str]) -> Found | None:
        from safehub.verify.signatures.locate import find_signature

        return find_signature(tree, sets, values, web_url=self.web_url, fetch=self.fetch)

    def check(self, *, repo: str, commit: str, digest: str, tree: Path, signature: str,
              sets: Sequence[SignerSet], values: Mapping[str, str],
              warn_only: bool = False, refuse: bool = True) -> SignatureStatus:
        """Verify per the policy's ``signature`` (``none``, ``if-present``, ``required``).

        Raises :class:`SignatureError`; with ``warn_only`` (``mode = "warn"``) a failure is
        returned in ``failed`` instead; without ``refuse`` (a dry run), in ``error``.
        """
        if signature == "none":
            return SignatureStatus.not_asked()
        try:
            found = self._check(repo, commit, digest, tree, signature, sets, values)
        except SignatureError as invalid:
            found = SignatureStatus("INVALID", kind="INVALID", error=invalid)
        refusal = found.error
        if refusal is None:
            return found
        if warn_only:
            warn(f"signature check failed (mode = 'warn', loading anyway): {refusal.message}")
            return SignatureStatus(f"INVALID ({refusal.message})", failed=refusal.message,
                                   kind=found.kind)
        if refuse:
            raise refusal
        return found

    def _check(self, repo: str, commit: str, digest: str, tree: Path, signature: str,
               sets: Sequence[SignerSet], values: Mapping[str, str]) -> SignatureStatus:
        policy = fingerprint(sets)
        known = self.records.find(commit, digest, policy)
        if known is not None:
            return SignatureStatus(f"verified ({known})", known)
        found = self.find(tree, sets, values)
        if found is None:
            if signature == "required":
                where = next((s.location for s in sets if s.location), DEFAULT_SIGNATURE)
                return SignatureStatus("MISSING", kind="MISSING", error=SignatureError(
                    f"{repo} at {commit} has no signature ({where}), and the policy requires "
                    f"one ({sets[0].source})",
                    fix=fixes.either(fixes.say("ask the publisher to sign releases "
                                               "(`safehub docs signing`)"),
                                     fixes.say("load a signed commit")),
                ))
            return SignatureStatus("unsigned (the policy allows that: signature = "
                                   "'if-present')", kind="UNSIGNED")
        result = verify_complete(repo, tree, found, sets)
        self.records.record(commit, digest, policy, result.signer)
        return SignatureStatus(f"verified ({result.signer})", result.signer)
