"""Composable checks on a Sigstore signing certificate.

Each policy answers one question about a certificate's claims (:class:`Claims`):
:class:`Issuer` (exact), :class:`Identity` (exact or glob over the certificate's SANs),
:class:`Claim` (a GitHub Actions claim: repository, ref, workflow, trigger), and the
combinators :class:`AllOf` and :class:`AnyOf`. A policy file's signer sets become
``AllOf(AnyOf(signer...) per set)`` (:func:`for_sets`), handed to sigstore-python through
:class:`SigstorePolicy`, which implements its ``VerificationPolicy`` protocol.

>>> claims = Claims("https://issuer.example", ("ana@example.org",), None, None, None, None)
>>> for_signer(Signer("https://issuer.example", "*@example.org")).check(claims)
'*@example.org (https://issuer.example)'
>>> Issuer("https://other.example").check(claims)
Traceback (most recent call last):
...
safehub.verify.signatures.policies.Refused: issuer 'https://issuer.example' is not 'https://other.example'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from safehub._internal.frozen import Frozen
from safehub._internal.globs import Glob
from safehub.verify.signatures.signers import Signer, SignerSet

__all__ = ["AllOf", "AnyOf", "Claim", "Claims", "Identity", "Issuer", "Refused",
           "SigstorePolicy", "for_sets", "for_signer"]

# Fulcio certificate extensions (https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md)
_OID = "1.3.6.1.4.1.57264.1."
_ISSUER_V1, _ISSUER_V2 = _OID + "1", _OID + "8"
_TRIGGER_V1, _REPO_V1, _REF_V1 = _OID + "2", _OID + "5", _OID + "6"
_REPO_URI_V2, _REF_V2, _CONFIG_URI_V2, _TRIGGER_V2 = (
    _OID + "12", _OID + "14", _OID + "18", _OID + "20")
_SAN_OTHERNAME = "1.3.6.1.4.1.57264.1.7"
CLAIMS = ("repository", "ref", "workflow", "trigger")


class Refused(Exception):
    """A policy does not accept the certificate (the message says why)."""


class Claims(Frozen):
    """What a Fulcio certificate says about its signer."""

    issuer: str | None
    identities: tuple[str, ...]
    repository: str | None
    ref: str | None
    workflow: str | None
    trigger: str | None

    @classmethod
    def of(cls, cert: Any) -> Claims:
        from cryptography import x509

        sans: list[str] = []
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            sans += san.get_values_for_type(x509.RFC822Name)
            sans += san.get_values_for_type(x509.UniformResourceIdentifier)
            sans += [o.value.decode("utf-8", "replace")
                     for o in san.get_values_for_type(x509.OtherName)
                     if o.type_id.dotted_string == _SAN_OTHERNAME]
        except x509.ExtensionNotFound:
            pass
        repo_uri = _ext(cert, _REPO_URI_V2, der=True)
        config_uri = _ext(cert, _CONFIG_URI_V2, der=True)
        repository = (repo_uri.removeprefix("https://github.com/") if repo_uri
                      else _ext(cert, _REPO_V1, der=False))
        workflow = None
        prefix = f"https://github.com/{repository}/"
        if config_uri and repository and config_uri.startswith(prefix):
            workflow = config_uri.removeprefix(prefix).split("@")[0]
        return cls(
            _ext(cert, _ISSUER_V2, der=True) or _ext(cert, _ISSUER_V1, der=False),
            tuple(s for s in sans if s), repository,
            _ext(cert, _REF_V2, der=True) or _ext(cert, _REF_V1, der=False), workflow,
            _ext(cert, _TRIGGER_V2, der=True) or _ext(cert, _TRIGGER_V1, der=False))


def _ext(cert: Any, oid: str, *, der: bool) -> str | None:
    from cryptography import x509
    from cryptography.hazmat import asn1

    try:
        raw = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value.value
    except x509.ExtensionNotFound:
        return None
    return str(asn1.decode_der(str, raw)) if der else bytes(raw).decode()


class Policy(Protocol):
    def check(self, claims: Claims) -> str:
        """A description of what accepted the certificate; raise :class:`Refused` if not."""


class Issuer(Frozen):
    issuer: str

    def check(self, claims: Claims) -> str:
        if claims.issuer != self.issuer:
            raise Refused(f"issuer {claims.issuer!r} is not {self.issuer!r}")
        return self.issuer


class Identity(Frozen):
    pattern: str

    def check(self, claims: Claims) -> str:
        glob = Glob(self.pattern)
        if not any(glob.match(i) for i in claims.identities):
            raise Refused(f"identity {list(claims.identities)} does not match {self.pattern!r}")
        return self.pattern


class Claim(Frozen):
    name: str
    pattern: str

    def check(self, claims: Claims) -> str:
        got = getattr(claims, self.name)
        if got is None or not Glob(self.pattern).match(got):
            raise Refused(f"{self.name} {got!r} does not match {self.pattern!r}")
        return f"{self.name}={self.pattern}"


class AllOf(Frozen):
    policies: tuple[Policy, ...]
    label: str = ""

    def check(self, claims: Claims) -> str:
        accepted = [p.check(claims) for p in self.policies]
        return self.label or (accepted[0] if accepted else "")


class AnyOf(Frozen):
    policies: tuple[Policy, ...]
    label: str = ""

    def check(self, claims: Claims) -> str:
        reasons = []
        for p in self.policies:
            try:
                return p.check(claims)
            except Refused as e:
                reasons.append(str(e))
        why = "; ".join(reasons) or "the rule lists keys only, and this is a keyless signature"
        raise Refused(f"{self.label}: {why}" if self.label else why)


def for_signer(signer: Signer) -> AllOf:
    """Every field the signer gives must match."""
    parts: list[Policy] = [Issuer(signer.issuer), Identity(signer.identity)]
    parts += [Claim(name, value) for name in CLAIMS if (value := getattr(signer, name))]
    return AllOf(tuple(parts), label=signer.describe())


def for_sets(sets: Sequence[SignerSet]) -> AllOf:
    """Each rule's set must accept the certificate through one of its signers."""
    return AllOf(tuple(
        AnyOf(tuple(for_signer(s) for s in ss.signers),
              label=f"the signing certificate matches no signer of {ss.source}")
        for ss in sets))


class SigstorePolicy:
    """sigstore-python's ``VerificationPolicy`` over one of our policies; remembers who
    was accepted."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.accepted = ""

    def verify(self, cert: Any) -> None:
        from sigstore.errors import VerificationError

        try:
            self.accepted = self.policy.check(Claims.of(cert))
        except Refused as e:
            raise VerificationError(str(e)) from None
