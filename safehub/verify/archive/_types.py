"""The verdict of :func:`~safehub.verify.archive.check_tree`: how files were tied to a commit."""

from __future__ import annotations

import enum

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import IntegrityError

__all__ = ["Difference", "Reason", "TreeCheck", "refuse"]

_ALTERED = fixes.noted(fixes.call("force_reload", "True"), "the archive was altered in transit or "
                       "by a mirror; nothing ran. Retry with ", "; if it persists, do not load it")


class Reason(str, enum.Enum):
    """Why a path of the archive differs from the commit's tree."""

    SUBMODULE = "submodule"
    """A gitlink: ``git archive`` writes an empty folder in its place."""
    EMPTY_TREE = "empty tree"
    """A folder with no file below it: ``git archive`` writes nothing for it."""
    EXPORT_IGNORE = "export-ignore"
    """Left out of the archive by an ``export-ignore`` attribute."""
    EOL = "eol"
    """LF written as CRLF (``eol=crlf``); undone exactly."""
    IDENT = "ident"
    """``$Id$`` expanded to the blob id; undone exactly."""
    ENCODING = "working-tree-encoding"
    """Re-encoded from UTF-8; undone exactly."""
    LFS = "lfs"
    """The Git LFS object in place of its pointer; checked against the pointer."""
    EXPORT_SUBST = "export-subst"
    """``$Format:...$`` placeholders expanded: each bounded by what git can write for the
    commit (:mod:`safehub.verify.gitattributes.subst`), not tied byte for byte."""

    def __str__(self) -> str:
        return self.value


class Difference(Frozen):
    """One path (a folder ends in ``/``) where the archive is not the tree, and why."""

    path: str
    reason: Reason
    rule: str = ""
    """The ``.gitattributes`` line that made it so: ``file:line: `text```."""
    detail: str = ""
    verified: bool = True
    """False where the archive's bytes could not be tied to the commit (export-subst)."""

    @property
    def from_attributes(self) -> bool:
        """True if a ``.gitattributes`` rule caused it (not a submodule or an empty tree)."""
        return self.reason not in (Reason.SUBMODULE, Reason.EMPTY_TREE)

    def __str__(self) -> str:
        text = f"{self.path}: {_PHRASES[self.reason]}"
        if self.detail:
            text += f" [{self.detail}]"
        if self.rule:
            text += f"; rule {self.rule}"
        return text


_PHRASES = {
    Reason.SUBMODULE: "a submodule, which `git archive` writes as an empty folder",
    Reason.EMPTY_TREE: "an empty folder of the commit, which `git archive` leaves out",
    Reason.EXPORT_IGNORE: "left out by export-ignore",
    Reason.EOL: "line endings written as CRLF (undone: exact)",
    Reason.IDENT: "$Id$ expanded (undone: exact)",
    Reason.ENCODING: "re-encoded from UTF-8 (undone: exact)",
    Reason.LFS: "the Git LFS object in place of its pointer (matches the pointer)",
    Reason.EXPORT_SUBST: "placeholders expanded by export-subst (NOT verifiable)",
}


class TreeCheck(Frozen):
    """How the extracted files were tied to the commit's tree.

    ``level`` is ``"tree"`` when the git tree id of the files matched exactly, ``"per-file"``
    when each file was matched against the API's listing of the tree (which must add up to
    the tree id) and every difference was explained. ``unverified`` lists files whose
    bytes could not all be tied to their blobs (``export-subst`` expansions), ``omitted``
    the files left out by ``export-ignore``, ``differences`` every path that differs and
    why (for the loader's warning: :meth:`describe`).
    """

    level: str
    unverified: tuple[str, ...] = ()
    omitted: tuple[str, ...] = ()
    differences: tuple[Difference, ...] = ()

    def describe(self, limit: int = 12) -> str:
        """The differences, one per line (at most ``limit``), for a warning or a log.

        >>> print(TreeCheck("per-file", differences=(Difference("ext/", Reason.SUBMODULE),)
        ...                 ).describe())
          ext/: a submodule, which `git archive` writes as an empty folder
        """
        return "\n".join(self.lines(limit))

    def lines(self, limit: int = 12) -> list[str]:
        """:meth:`describe`'s lines, one a difference (a path may hold a line break: a
        terminal shows each line made printable on its own)."""
        lines = [f"  {d}" for d in self.differences[:limit]]
        if len(self.differences) > limit:
            lines.append(f"  ... and {len(self.differences) - limit} more")
        return lines


def refuse(message: str) -> IntegrityError:
    """An archive that is not the commit's tree (exactly or as git archives it): refused,
    with the one fix."""
    return IntegrityError(message, fix=_ALTERED)
