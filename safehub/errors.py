"""The errors safehub raises.

Every error derives from :class:`SafehubError` and carries two parts: what failed (the
message) and how to fix it (:attr:`SafehubError.fix`, as data: see
:mod:`safehub._internal.fixes`; :attr:`SafehubError.hint` is its text). ``str(err)`` shows
both as a terminal may show them (Python's traceback printer writes it there): text from
outside in them (a rule's reason, a path, a server's words) made printable, one line a
field; ``message``, ``fix`` and ``hint`` stay exact, for a program to read.

Families, one per kind of failure a caller may want to handle apart:

* :class:`SpecError` -- a malformed ``owner/name[:ref]`` (also a ``ValueError``, as in torch).
* :class:`PolicyError` -- a policy file is unreadable or invalid (fail closed).
* :class:`PolicyDenied` -- a policy rule refuses the repo, ref or entrypoint.
* :class:`UntrustedRepoError` -- nobody agreed to run this content.
* :class:`PinError` -- the lockfile or a pin disagrees (moved tag, fork commit, renamed repo:
  :class:`RepoMovedError`).
* :class:`IntegrityError` -- downloaded or cached content failed verification.
* :class:`SignatureError` -- a required signature is missing or invalid.
* :class:`FetchError` -- the network could not deliver (distinct from "delivered but wrong"):
  :class:`NotFoundError`, :class:`RateLimitError`, :class:`OfflineError`,
  :class:`UnreachableError`.
* :class:`CacheError` -- the cache directory cannot be used.
* :class:`HubconfError` -- the repo has no ``hubconf.py`` (:class:`NoHubconfError`, also a
  ``FileNotFoundError`` as in torch) or not the entrypoint asked for.
* :class:`RuntimeGuardError` -- while hubconf code ran, the runtime guard refused an action.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fixes module is imported when an error is made (import safehub stays cheap)
    from safehub._internal.fixes import Fix

__all__ = [
    "CacheError",
    "ConfineError",
    "FetchError",
    "HubconfError",
    "IntegrityError",
    "NoHubconfError",
    "NotFoundError",
    "OfflineError",
    "PinError",
    "PolicyDenied",
    "PolicyError",
    "RateLimitError",
    "RepoMovedError",
    "RuntimeGuardError",
    "SafehubError",
    "SignatureError",
    "SpecError",
    "TamperedError",
    "UnreachableError",
    "UntrustedRepoError",
]


class SafehubError(Exception):
    """Base class of every error safehub raises on purpose.

    >>> from safehub._internal import fixes
    >>> err = SafehubError("the thing failed", fix=fixes.say("do the other thing"))
    >>> print(err)
    the thing failed
      fix: do the other thing
    >>> err.hint
    'do the other thing'
    >>> print(SafehubError("denied: \\x1b]0;title\\x07", fix=fixes.say("ask\\n  fix: sh")))
    denied: \\x1b]0;title\\x07
      fix: ask\\n  fix: sh

    ``fix``: the fix as data (:mod:`safehub._internal.fixes`); :attr:`hint` is its text.
    """

    def __init__(self, message: str, *, fix: Fix | None = None,
                 details: Sequence[str] = ()) -> None:
        self.details = tuple(details)
        """Lines under the message (the faults of an invalid file), each one line."""
        self.summary = message
        """The message without its details."""
        self.message = message + "".join(f"\n    {d}" for d in self.details)
        """What failed, exactly as written (the summary, then each detail on its line)."""
        super().__init__(self.message)
        self.fix: Fix | None = fix
        """How to fix it, as data (:mod:`safehub._internal.fixes`)."""
        self.surface = "api"
        """Where the fix is shown (``api``, or ``torchhub`` when code called torch.hub's
        routed function): which words :attr:`hint` and ``str(err)`` use."""

    @property
    def hint(self) -> str | None:
        """How to fix it, as text: :attr:`fix` rendered for :attr:`surface`."""
        from safehub._internal.fixes import render

        return render(self.fix, self.surface) if self.fix is not None else None

    def __str__(self) -> str:
        """The message and the fix as a terminal shows them: what came from outside (a
        rule's reason, a path, a server's words) made printable, on the lines it was
        written for (:func:`safehub._internal.text.error`). :attr:`message`, :attr:`fix`
        and :attr:`hint` stay exact."""
        from safehub._internal.text import error

        return error(self.summary, self.fix, self.details, surface=self.surface)


class SpecError(SafehubError, ValueError):
    """A repo spec, ref or source that safehub refuses before any I/O."""


class PolicyError(SafehubError):
    """A policy file could not be read or is invalid; nothing loads until it is fixed."""

    faults: tuple[str, ...] = ()
    """Each fault of an invalid file (``key: what is wrong``), when it could be read."""


class PolicyDenied(SafehubError):
    """A policy rule refuses this load."""

    reasons: tuple[str, ...] = ()
    """Each reason the policy gave (the rule and file of each)."""


class UntrustedRepoError(SafehubError):
    """The content is not trusted and nobody agreed to run it."""

    declined: bool = False
    """True if someone was asked at the prompt and said no."""


class PinError(SafehubError):
    """A pin or provenance rule failed: moved tag, fork commit, renamed repo, bad lockfile."""

    missing_lockfile: bool = False
    """True if the lockfile named by the environment or the policy does not exist."""


class RepoMovedError(PinError):
    """GitHub answers for another owner/name: the repo was renamed or transferred."""

    def __init__(self, message: str, *, old: str, new: str, fix: Fix | None = None) -> None:
        super().__init__(message, fix=fix)
        self.old = old
        self.new = new


class IntegrityError(SafehubError):
    """Content was delivered (or cached) but is not what it claims to be."""


class SignatureError(SafehubError):
    """A signature the policy asks for is missing or does not verify."""


class FetchError(SafehubError):
    """The network could not deliver what was asked (nothing was verified or run)."""


class NotFoundError(FetchError):
    """The server answered 404: no such repo, ref or file (or it is private)."""


class RateLimitError(FetchError):
    """The GitHub API refused the request because the rate limit is spent."""


class OfflineError(FetchError):
    """Offline mode is on and what is needed is not in the cache."""


class UnreachableError(FetchError):
    """The network is unreachable: a name does not resolve or a connection is refused.

    Not retried: it fails at once, with the fixes that work without a network.
    """


class CacheError(SafehubError):
    """The cache directory cannot be created, written or locked."""


class HubconfError(SafehubError, RuntimeError):
    """The repo has no ``hubconf.py``, or no callable entrypoint of that name."""


class NoHubconfError(HubconfError, FileNotFoundError):
    """The repo has no ``hubconf.py`` at its root at that commit (a ``FileNotFoundError``
    too, as torch.hub raises for it)."""


class RuntimeGuardError(SafehubError):
    """While a repo's hubconf code ran, the runtime guard refused an action.

    Raised where the action happens (the ``connect``, ``open``, ``Popen``... call fails with
    it), and again when the load ends if the repo's code caught it. ``action`` is one of
    ``network``, ``process``, ``write``, ``library``, ``module``, ``pickle`` or ``guard``;
    ``target`` is what was refused (host, program, path, library, module name, the global a
    pickle names); ``key`` is the policy key that decided (``network``, ``subprocess``,
    ``writes``, ``weights_format`` or ``runtime``).

    >>> err = RuntimeGuardError("org/repo tried to start curl", action="process",
    ...                         target="curl", repo="org/repo", key="subprocess")
    >>> (err.action, err.key, isinstance(err, SafehubError))
    ('process', 'subprocess', True)
    """

    def __init__(self, message: str, *, fix: Fix | None = None, action: str = "guard",
                 target: str = "", repo: str = "", key: str = "runtime") -> None:
        super().__init__(message, fix=fix)
        self.action = action
        self.target = target
        self.repo = repo
        self.key = key


class ConfineError(SafehubError):
    """``safehub run --confine`` (or a policy's ``confine = true``) cannot hold the command
    to its ruleset: the kernel has no Landlock, or not the ABI a rule needs, or refused the
    ruleset. Nothing was started: never silently unconfined.

    >>> isinstance(ConfineError("no Landlock"), SafehubError)
    True
    """


class TamperedError(RuntimeGuardError, IntegrityError):
    """A file of a cached tree changed after safehub verified it, found as the repo's code
    opened it (an :class:`IntegrityError` raised by the runtime guard)."""
