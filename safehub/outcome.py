"""What a load produced, and the one audit line built from it.

(The small records are named tuples: a load imports this module, and a frozen dataclass
costs several times as much to define.)

Each step of the pipeline (:func:`safehub.pipeline.steps`) notes a frozen
:class:`Outcome`: what was asked, then the admitted resolution, the verified tree, the
signature status, the decision and who trusted the content, the runtime guard's report.
:class:`Audited` keeps the last one (``outcome``) and, when the load ends, writes its line with
:func:`audit_line`, the one place that says what the line holds: a load that finished is
written with its decision; one that a :class:`~safehub.errors.SafehubError` stopped is
written as ``deny``, ``refused``, ``prompt-no`` or ``error`` with what it had produced by
then (the commit it resolved, the digest it verified...); one whose repo code raised
something else keeps its decision and names what was raised.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

from safehub._internal.frozen import Frozen
from safehub._internal.fsutil import within
from safehub.errors import PolicyDenied, SafehubError, UntrustedRepoError

if TYPE_CHECKING:
    from safehub.admission import Admission, Admitted
    from safehub.audit import AuditLog
    from safehub.policy import Decision
    from safehub.resolve import Resolved
    from safehub.run.runtime import RuntimeReport
    from safehub.spec import RepoSpec
    from safehub.store.cache import CachedTree
    from safehub.store.lockfile import Locked
    from safehub.verify.signatures.check import SignatureStatus

__all__ = [
    "AuditLine",
    "Audited",
    "LocalVerdict",
    "Outcome",
    "Prepared",
    "audit_line",
    "local_verdict",
]


class Prepared(Frozen):
    """A repo that passed every check: where its verified tree is and why it may run."""

    spec: RepoSpec
    resolved: Resolved
    tree: CachedTree
    decision: Decision
    trusted_by: str
    signature: str = ""
    lock: Locked | None = None
    """The spec's lockfile entry and its file, as admission found it (looked up once)."""

    @property
    def path(self) -> Path:
        return self.tree.path


class LocalVerdict(Frozen):
    """The verdict on a ``source="local"`` folder: ``allow`` (inside a verified tree whose
    code ran), ``local`` (the policy's ``local_dirs``) or ``warn``, and why."""

    verdict: str
    reasons: tuple[str, ...]


class Outcome(NamedTuple):
    """What one load has produced so far; each step adds its own product (``_replace``:
    a named tuple, as a load makes six of them)."""

    repo: str
    """The repo key asked for, or a local folder's real path."""
    ref: str | None
    """The ref as asked (the resolved one once ``admitted``)."""
    entrypoint: str | None
    admitted: Admitted | None = None
    tree: CachedTree | None = None
    signature: SignatureStatus | None = None
    decision: Decision | None = None
    """The decision that held after the signature step (set with ``trusted_by``)."""
    trusted_by: str = ""
    local: LocalVerdict | None = None
    folder: bool = False
    """A ``source="local"`` load."""
    runtime: RuntimeReport | None = None
    fleet: str = ""
    """Who signed the OCI snapshot the tree came from, where ``[oci]`` requires it."""

    @classmethod
    def asked(cls, spec: RepoSpec, entrypoint: str | None) -> Outcome:
        return cls(spec.key, spec.ref, entrypoint)

    @classmethod
    def local_folder(cls, real: str, entrypoint: str | None) -> Outcome:
        return cls(real, None, entrypoint, folder=True)


class AuditLine(Frozen):
    """One audit line: the decision, its reasons, and the other fields."""

    decision: str
    reasons: tuple[str, ...]
    fields: dict[str, Any]

    def write(self, log: AuditLog) -> None:
        log.write(self.decision, reasons=self.reasons, **self.fields)


def audit_line(outcome: Outcome, error: BaseException | None = None) -> AuditLine:
    """The audit line of a load that produced ``outcome`` and ended with ``error``."""
    o = outcome
    fields: dict[str, Any] = {"repo": o.repo, "ref": o.ref, "commit": None, "digest": None,
                              "entrypoint": o.entrypoint}
    if o.folder:
        fields["source"] = "local"
    if o.admitted is not None:
        fields["ref"], fields["commit"] = o.admitted.resolved.ref, o.admitted.commit
    if o.tree is not None:
        fields["digest"] = o.tree.digest
    if o.fleet:
        fields["fleet_signature"] = o.fleet
    if o.signature is not None:
        fields["signature"] = o.signature.status
    decision: str = "error"
    reasons: tuple[str, ...] = ()
    if o.local is not None:
        decision, reasons = o.local.verdict, o.local.reasons
    elif o.decision is not None:
        decision = "warn" if o.decision.violations else o.trusted_by
        reasons = o.decision.reasons
        if o.decision.violations:
            fields["trusted_by"] = o.trusted_by
    if o.runtime is not None:
        fields["runtime"] = o.runtime.to_json()
    if isinstance(error, SafehubError):
        if isinstance(error, PolicyDenied):
            decision = "deny"
        elif isinstance(error, UntrustedRepoError):
            decision = "prompt-no" if error.declined else "refused"
        else:
            decision = "error"
        reasons = (f"{type(error).__name__}: {error.message}",)
    elif error is not None:  # the repo's own code failed: its decision still stands
        fields["raised"] = type(error).__name__
    return AuditLine(decision, tuple(reasons), fields)


class Audited:
    """The audit line of one load, written once when the block ends, from the last
    outcome the load's steps noted (``outcome``)."""

    def __init__(self, log: AuditLog, first: Outcome) -> None:
        self.log = log
        self.outcome = first

    def __enter__(self) -> Audited:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        audit_line(self.outcome, error).write(self.log)


def local_verdict(admission: Admission, ran: dict[str, str], real: str) -> LocalVerdict:
    """The verdict on a local folder: inside a verified tree whose code ran (a repo
    loading its own folder), else the policy's ``local_dirs`` (a denial raises)."""
    verified = next((repo for tree, repo in ran.items() if within(real, tree)), None)
    if verified is not None:
        return LocalVerdict("allow", (f"in the verified tree of {verified}",))
    decision = admission.decide_local(real)
    return LocalVerdict("warn" if decision.violations else "local", decision.reasons)
