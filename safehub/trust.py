"""Step 8 of a load: who agreed to run this content, and the prompt that asks.

torch.hub remembers that a user trusted a *name*; safehub remembers that they trusted
*this content*: a consent record is the triple (repo, commit, content digest), kept in
the user's data dir (:class:`~safehub.store.records.ConsentStore`), with the weights
pinned for the repo when it was given (the lockfile entry's and the user's own pins). New
content asks again, and so does a pinned weights file whose pin changed (the prompt names
the file, the old and the new sha256); a file pinned since is added to the record.

The prompt appears only on a terminal. With ``CI=true``, ``SAFEHUB_NONINTERACTIVE=1`` or
a stdin that is not a TTY, safehub never calls ``input()``: it refuses at once and says
how to consent.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, field
from safehub._internal.text import printable
from safehub._internal.warn import warn
from safehub.errors import SpecError, UntrustedRepoError
from safehub.policy import Decision
from safehub.store.records import ConsentStore, WeightPins

if TYPE_CHECKING:
    from safehub.store.lockfile import LockEntry

__all__ = ["TRUST_VALUES", "Subject", "Trust", "Verdict", "ask", "check_trust_repo",
           "pinned_weights"]

TRUST_VALUES = ("check", True, False, None)


_ALWAYS_ASK = "trust_repo=False asks every time"


def check_trust_repo(value: Any) -> None:
    """Refuse a ``trust_repo`` that torch.hub would not take, before any I/O."""
    if not any(value is v or (isinstance(v, str) and value == v) for v in TRUST_VALUES):
        raise SpecError(f"trust_repo={value!r} is not one of 'check', True, False, None",
                        fix=fixes.say("use trust_repo='check' (the default) or True"))


def ask(lines: list[str], question: str) -> bool:
    """Show ``lines`` and ``question [y/N]`` on stderr; read one answer from stdin.

    Each line, and the question, is made printable as one line (its repo, ref, reason or
    path cannot start a line, move the cursor or colour a verdict): only the line breaks
    written here reach the terminal.

    Only ``y`` or ``yes`` (any case) agree; anything else, including end of input, refuses.
    """
    shown = [printable(line) for line in (*lines, question)]
    sys.stderr.write("\n".join(shown) + " [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):  # end of input (Ctrl-D): what follows starts a line
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


class Subject(Frozen):
    """What consent is asked for."""

    repo: str  # owner/name as asked
    key: str  # case-folded owner/name
    ref: str
    commit: str
    digest: str
    signature: str
    weights: Mapping[str, str] = field(default_factory=dict)
    """The weights pinned for the repo now (URL -> sha256): :func:`pinned_weights`."""


def pinned_weights(lock: LockEntry | None, pins: WeightPins, key: str) -> dict[str, str]:
    """The weights pinned for repo ``key``: the user's own pins, and over them the lockfile
    entry's (which a load checks first)."""
    found = pins.for_repo(key)
    found.update({w.url: w.sha256 for w in (lock.weights if lock is not None else ())})
    return found


class Verdict(Frozen):
    """Who agrees to run a content, or what it takes: ``allow`` (the policy), ``consent``
    (recorded before), ``trust_repo`` (the caller said so), ``ask`` (a user at a terminal
    would be asked: ``why``), or ``refuse`` (nobody can be asked: ``error``)."""

    kind: str
    why: str = ""
    error: UntrustedRepoError | None = None
    consent_at: str = ""
    changed: tuple[tuple[str, str, str], ...] = ()
    """Pinned weights that changed since consent: (URL, old sha256, new sha256)."""
    bound: Mapping[str, str] = field(default_factory=dict)
    """The weights the recorded consent binds (``consent``)."""


class Trust:
    """Decides who agreed to run a content; asks on a terminal; refuses otherwise.

    :meth:`verdict` is the decision alone (``safehub check`` asks it too, so the dry run
    cannot drift from the load); :meth:`decide` acts on it: records, prompts, raises.
    """

    def __init__(self, consents: ConsentStore, *, noninteractive: bool) -> None:
        self.consents = consents
        self.noninteractive = noninteractive

    def verdict(self, subject: Subject, decision: Decision, trust_repo: Any, *,
                nested: bool = False) -> Verdict:
        """The answer for ``subject`` (its ``digest`` empty: any content of the commit, as
        a dry run that has not fetched the tree knows it).

        ``nested``: a load the repo's code asked for. It is never prompted for: the code
        runs in this process and could answer for the user (``sys.stdin``), so only the
        policy or an earlier consent can let it run."""
        if trust_repo is False:
            return self._asking(subject, _ALWAYS_ASK, nested)
        if decision.verdict == "allow":
            return Verdict("allow", "the policy allows it")
        if decision.violations:
            why = "the policy was violated (mode = 'warn'): " + "; ".join(decision.violations)
        else:
            why = "; ".join(decision.reasons)
        # From here on the policy lets the user decide.
        if trust_repo is True or trust_repo is None:
            return Verdict("trust_repo", f"trust_repo={trust_repo}")
        consents = self.consents.list(subject.key)
        same = [c for c in consents if c.commit == subject.commit
                and (not subject.digest or c.digest == subject.digest)]
        if same:
            bound = same[-1].weights
            changed = tuple((url, bound[url], sha) for url, sha in sorted(subject.weights.items())
                            if url in bound and bound[url] != sha)
            if not changed:
                return Verdict("consent", f"you trusted this content {same[-1].at}",
                               consent_at=same[-1].at, bound=bound)
            why = "; ".join(f"the pinned weights {url} changed since you trusted this content "
                            f"{same[-1].at} (sha256 {old} before, {new} now)"
                            for url, old, new in changed)
            asked = self._asking(subject, why, nested, as_asked=True)
            return Verdict(asked.kind, asked.why, asked.error, changed=changed)
        earlier = [c for c in consents if c.commit != subject.commit]
        if earlier:
            why = (f"you trusted {subject.repo} at {earlier[-1].commit[:12]} before, but this "
                   "is different content")
        return self._asking(subject, why, nested)

    def _asking(self, subject: Subject, why: str, nested: bool,
                as_asked: bool = False) -> Verdict:
        """Ask (a terminal), or the refusal; ``as_asked``: the fix names the spec as it was
        asked for (its lockfile entry's weights pins are the ones to bind), not the commit."""
        if nested:
            return Verdict("refuse", why, UntrustedRepoError(
                f"refused to run hubconf.py of {subject.repo} at commit {subject.commit}, "
                f"which a repo's code asked to load: it is not trusted ({why}), and a load "
                "the repo's code asks for is never prompted for (that code could answer)",
                fix=self._fix(subject, nested=True, as_asked=as_asked)))
        if self.noninteractive and why == _ALWAYS_ASK:
            return Verdict("refuse", why, UntrustedRepoError(
                f"refused to run hubconf.py of {subject.repo} at commit {subject.commit}: "
                "trust_repo=False means \"always ask\" (as in torch.hub: even trusted or "
                "allowed content is asked for every time), and nobody can be asked here "
                "(non-interactive: CI=true, SAFEHUB_NONINTERACTIVE=1, noninteractive = "
                "true, or no terminal), so no trust or policy rule can let it load",
                fix=fixes.either(
                    fixes.noted(fixes.call("trust_repo", "True", "load"),
                                after=" (run it without asking)"),
                    fixes.both(fixes.say("pass trust_repo='check' (the default: ask only "
                                         "for content not trusted yet)"),
                               fixes.noted(self._fix(subject, nested=True),
                                           "if it is not trusted yet, ")))))
        if self.noninteractive:
            return Verdict("refuse", why, UntrustedRepoError(
                f"refused to run hubconf.py of {subject.repo} at commit {subject.commit}: it "
                f"is not trusted ({why}), and nobody can be asked (non-interactive: CI=true, "
                "SAFEHUB_NONINTERACTIVE=1, noninteractive = true, or no terminal)",
                fix=self._fix(subject, as_asked=as_asked)))
        return Verdict("ask", why)

    def decide(self, subject: Subject, decision: Decision, trust_repo: Any, *,
               nested: bool = False) -> str:
        """Who agreed (``allow``, ``consent``, ``trust_repo``, ``prompt-yes``); raise if
        nobody (see :meth:`verdict`)."""
        found = self.verdict(subject, decision, trust_repo, nested=nested)
        if found.error is not None:
            raise found.error
        if found.kind == "trust_repo":
            if trust_repo is None:
                warn("trust_repo=None loads without asking (torch's legacy meaning); pass "
                     "trust_repo=True to say so explicitly, or 'check' to be asked")
            else:
                self.consents.record(subject.key, subject.commit, subject.digest,
                                     "trust_repo=True", subject.weights)
        if found.kind == "consent" and set(subject.weights) - set(found.bound):
            # weights pinned since consent join what it binds (a change is asked about)
            self.consents.record(subject.key, subject.commit, subject.digest, "prompt",
                                 {**subject.weights, **found.bound})
        if found.kind != "ask":
            return found.kind
        return self._ask(subject, found.why, found.changed)

    def _ask(self, subject: Subject, why: str,
             changed: tuple[tuple[str, str, str], ...] = ()) -> str:
        lines = [
            f"safehub: {subject.repo} wants to run code on this machine.",
            f"  repo       {subject.repo}",
            f"  ref        {subject.ref}",
            f"  commit     {subject.commit}",
            f"  digest     {subject.digest}",
            f"  signature  {subject.signature or 'not checked (no policy asks for one)'}",
        ]
        for url, old, new in changed:
            lines += [f"  weights    {url} changed",
                      f"    before   sha256 {old}", f"    now      sha256 {new}"]
        lines.append(f"  why        {why if not changed else 'pinned weights changed'}")
        if not ask(lines, f"Run hubconf.py of {subject.repo} at {subject.commit[:12]}?"):
            declined = UntrustedRepoError(
                f"you declined to run {subject.repo} at {subject.commit}",
                fix=fixes.say("nothing ran; answer y to trust this exact content"))
            declined.declined = True
            raise declined
        self.consents.record(subject.key, subject.commit, subject.digest, "prompt",
                             subject.weights)
        return "prompt-yes"

    def _fix(self, subject: Subject, *, nested: bool = False,
             as_asked: bool = False) -> fixes.Fix:
        """How to consent: ``safehub trust`` (which binds the weights pinned now too),
        ``trust_repo=True``, or a policy rule."""
        from safehub.policy import user_file

        user_policy = user_file()
        return fixes.either(
            fixes.run("safehub trust " + fixes.quote(
                f"{subject.repo}:{subject.ref if as_asked and subject.ref else subject.commit}"),
                      "once, to trust this exact content (runs nothing)"),
            *(() if nested else (fixes.call("trust_repo", "True", "load"),)),
            fixes.add(user_policy, ["[[allow]]", f'repo = "{subject.key}"']))

