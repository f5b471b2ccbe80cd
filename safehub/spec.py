"""Parsing and validating ``owner/name[:ref]`` before any I/O.

GitHub's own rules decide what is valid: owners are 1-39 ASCII letters, digits or
hyphens (not at either end); repo names are 1-100 ASCII letters, digits, ``.``, ``-``
or ``_`` (not ``.`` or ``..``); refs follow ``git check-ref-format``. Anything else,
including look-alike Unicode letters, is refused here, so it never reaches a policy
glob, a cache path or a URL.

>>> spec = RepoSpec.parse("PyTorch/Vision:v0.10.0")
>>> spec.key, spec.ref
('pytorch/vision', 'v0.10.0')
>>> RepoSpec.parse("pytorch/vision").ref is None
True
"""

from __future__ import annotations

import re

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import SpecError

__all__ = ["FULL_REF", "FULL_SHA", "RepoSpec", "is_full_sha", "looks_like_sha", "plain_text",
           "ref_forms"]

_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
FULL_SHA = re.compile(r"[0-9a-f]{40}")
# The full name of the branch or tag a ref resolved to, as GitHub reported it and as the
# lockfile and the cache record keep it (``resolved_ref``): the one grammar both read. Wider
# than what a spec may ask for (a default branch may have a name no spec could write), never
# a control character or a space, never outside refs/heads/ and refs/tags/.
FULL_REF = re.compile(r"refs/(heads|tags)/[^\x00-\x20\x7f]{1,250}")
_SHORT_SHA = re.compile(r"[0-9a-fA-F]{4,40}")
# Characters git refuses in ref names (git check-ref-format), plus ':' which separates the
# ref in a spec, and '\\' which some filesystems treat as a separator.
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_MAX_REF = 255
_FOREIGN_NAMESPACES = frozenset({"pull", "remotes", "notes", "changes", "merge-requests"})

_SPEC_FIX = fixes.say("write the repo as 'owner/name' or 'owner/name:ref', e.g. "
                      "'pytorch/vision:v0.10.0'")


def ref_forms(ref: str | None, full_ref: str, *, resolved: bool = False
              ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names a ref is matched by: (for deny rules, for allow rules).

    ``full_ref``: the branch or tag it resolved to, where known. Before resolution a short
    name's kind is unknown: deny patterns written for a kind wait for it, allow patterns
    admit it until then. Resolved but of unknown kind (a lockfile or cache record written
    before safehub kept the full name): a deny matches either kind.

    >>> ref_forms("dev", "refs/heads/dev")[0]
    ('refs/heads/dev', 'heads/dev', 'dev')
    >>> ref_forms("dev", "")
    (('dev',), ('dev', 'refs/heads/dev', 'heads/dev', 'refs/tags/dev', 'tags/dev'))
    """
    if ref is None:
        return (), ()
    for kind in ("heads", "tags"):  # asked with its kind: as good as resolved
        for prefix in (f"refs/{kind}/", f"{kind}/"):
            if not full_ref and ref.startswith(prefix):
                full_ref = f"refs/{kind}/{ref[len(prefix):]}"
    if full_ref:
        kind, bare = full_ref.split("/", 2)[1:]
        known = (full_ref, f"{kind}/{bare}", bare)
        return known, known
    if looks_like_sha(ref):
        return (ref,), (ref,)
    either = (ref, *(f"{p}{k}/{ref}" for k in ("heads", "tags") for p in ("refs/", "")))
    return (either if resolved else (ref,)), either


def plain_text(value: object, what: str) -> str:
    """``value``, a str, as a plain str (the caller's argument, checked once where it
    enters: a subclass's overridden methods never run later).

    >>> plain_text(type("S", (str,), {"lower": lambda s: "x"})("A"), "name").lower()
    'a'
    """
    if not isinstance(value, str):
        raise SpecError(f"{what} must be a string, not {type(value).__name__}",
                        fix=fixes.say(f"pass {what} as a str"))
    return str.__getitem__(value, slice(None))


def is_full_sha(ref: object) -> bool:
    """True if ``ref`` is a full 40-hex commit id (lower case)."""
    return isinstance(ref, str) and FULL_SHA.fullmatch(ref) is not None


def looks_like_sha(ref: str) -> bool:
    """True if ``ref`` is read as a commit id (4 to 40 hex digits, as git abbreviates),
    never as a branch or tag name.

    >>> looks_like_sha("deadbeef"), looks_like_sha("v1.0"), looks_like_sha("abc")
    (True, False, False)
    """
    return _SHORT_SHA.fullmatch(ref) is not None


def _check_ref(ref: str, spec: str) -> None:
    def bad(why: str) -> SpecError:
        return SpecError(
            f"invalid ref {ref!r} in {spec!r}: {why}",
            fix=fixes.say("use a branch name, a tag name or a commit sha (4 to 40 hex digits)"),
        )

    if not ref:
        raise bad("it is empty")
    if len(ref) > _MAX_REF:
        raise bad(f"longer than {_MAX_REF} characters")
    if not ref.isascii():
        raise bad("only ASCII characters are allowed")
    if _REF_FORBIDDEN.search(ref):
        raise bad("it contains a space, a control character or one of ~ ^ : ? * [ \\")
    if ".." in ref or "@{" in ref or ref == "@" or "//" in ref:
        raise bad("git does not allow '..', '@{', '//' or a lone '@' in ref names")
    if ref.startswith(("/", "-")) or ref.endswith(("/", ".", ".lock")):
        raise bad("a ref cannot start with '/' or '-', or end with '/', '.' or '.lock'")
    if any(part.startswith(".") for part in ref.split("/")):
        raise bad("a ref component cannot start with '.'")
    if ref.startswith("refs/") and not ref.startswith(("refs/heads/", "refs/tags/")):
        # refs/pull/N/head points at commits of forks; refs/remotes and others are not
        # the repo's own branches or tags.
        raise bad("only refs/heads/... and refs/tags/... are accepted among full ref names")
    if ref.split("/", 1)[0].lower() in _FOREIGN_NAMESPACES and "/" in ref:
        # GitHub expands short names as git does: 'pull/1/head' is refs/pull/1/head, a
        # commit of whoever opened the pull request.
        raise bad("pull/, remotes/, notes/ and similar names are not the repo's own "
                  "branches or tags (write refs/heads/... for a branch really named so)")
    if ref.lower() == "head":
        raise bad("HEAD is not a ref safehub resolves; leave the ref out for the default branch")


_URL = (r"(?:https?://|git@|ssh://git@)?(?:www\.)?github\.com[:/]+"
        r"([^/\s:]+)/([^/\s:#?]+?)(?:\.git)?/?(?:/(?:tree|commit|releases/tag)/"
        r"([^\s#?]+?))?/?(?:[#?].*)?")
"""A GitHub URL, compiled where a spec names ``github.com`` (it must, to match)."""


def _from_url(text: str) -> str | None:
    """The spec a GitHub URL means (``https://github.com/o/n/tree/v1`` -> ``o/n:v1``).

    >>> _from_url("https://github.com/pytorch/vision.git"), _from_url("pytorch/vision")
    ('pytorch/vision', None)
    """
    m = re.fullmatch(_URL, text.strip()) if "github.com" in text else None
    if m is None:
        return None
    owner, name, ref = m.groups()
    return f"{owner}/{name}" + (f":{ref}" if ref else "")


class RepoSpec(Frozen):
    """A validated GitHub repo reference.

    ``owner`` and ``name`` keep the case the user typed (GitHub answers in either case);
    :attr:`key` is the case-folded ``owner/name`` used for policy, cache and consent.
    """

    owner: str
    name: str
    ref: str | None = None

    @classmethod
    def parse(cls, text: str) -> RepoSpec:
        """Parse ``owner/name[:ref]``; raise :class:`SpecError` for anything else."""
        if not isinstance(text, str):
            raise SpecError(f"repo must be a string, not {type(text).__name__}", fix=_SPEC_FIX)
        if (meant := _from_url(text)) is not None:
            raise SpecError(f"invalid repo spec {text!r}: a URL, not owner/name[:ref]",
                            fix=fixes.say(f"write it as {meant!r} (owner/name[:ref])"))
        if text.startswith(("./", "../", "/", "~")) or text in (".", ".."):
            raise SpecError(f"invalid repo spec {text!r}: a folder path, not owner/name[:ref]",
                            fix=fixes.noted(fixes.call("source", "'local'", "load"),
                                            "to load a folder on this machine (your own code, "
                                            "as torch.hub does): "))
        repo, sep, ref = text.partition(":")
        parts = repo.split("/")
        if len(parts) != 2:
            raise SpecError(
                f"invalid repo spec {text!r}: expected exactly one '/'", fix=_SPEC_FIX
            )
        owner, name = parts
        if not _OWNER.fullmatch(owner):
            raise SpecError(
                f"invalid owner {owner!r} in {text!r}: GitHub owners are 1-39 ASCII letters, "
                "digits or hyphens, not starting or ending with a hyphen", fix=_SPEC_FIX,
            )
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise SpecError(
                f"invalid repo name {name!r} in {text!r}: GitHub repo names are 1-100 ASCII "
                "letters, digits, '.', '-' or '_'", fix=_SPEC_FIX,
            )
        if name.endswith(".git"):
            raise SpecError(
                f"invalid repo name {name!r} in {text!r}: drop the '.git' suffix", fix=_SPEC_FIX
            )
        if sep:
            _check_ref(ref, text)
            return cls(owner, name, ref)
        return cls(owner, name, None)

    @property
    def key(self) -> str:
        """Case-folded ``owner/name`` (GitHub names compare case-insensitively)."""
        return f"{self.owner}/{self.name}".lower()

    @property
    def repo(self) -> str:
        """``owner/name`` as the user typed it."""
        return f"{self.owner}/{self.name}"

    def __str__(self) -> str:
        return self.repo if self.ref is None else f"{self.repo}:{self.ref}"
