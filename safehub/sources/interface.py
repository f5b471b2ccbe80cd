"""The source protocol: where a repo's refs, commits, trees and archives come from.

One method per need of the pipeline (resolving a ref, proving a commit is the repo's own,
the ``.gitattributes`` fallback, fetching the archive). Everything a source answers is
checked by the pipeline as untrusted input: a source decides nothing. Implementations:
:class:`safehub.sources.github.GitHub` (GitHub's REST API and archive URLs, or a mirror
that speaks them); the tests' in-memory source (tests/support/memory.py).

A method raises :class:`~safehub.errors.NotFoundError` for a repo, commit or ref that does
not exist, :class:`~safehub.errors.FetchError` when the source cannot answer, and
returns None only where its docstring says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, BinaryIO, Protocol

from safehub._internal.frozen import Frozen

if TYPE_CHECKING:  # types only: a warm load imports neither the transport nor the attributes
    from safehub.sources.transport import Progress
    from safehub.spec import RepoSpec
    from safehub.verify.gitattributes.subst import CommitFacts

__all__ = ["RefTarget", "Source"]


class RefTarget(Frozen):
    """What a ref names: the commit (tags peeled), and the ref in full as the source
    spells it (``refs/tags/v1.0``)."""

    ref: str
    commit: str


class Source(Protocol):
    """What the pipeline asks of a place code comes from."""

    def repo_info(self, spec: RepoSpec) -> tuple[str, str]:
        """(default branch, ``owner/name`` as the source spells it)."""

    def ref(self, spec: RepoSpec, kind: str, name: str) -> RefTarget | None:
        """The commit the branch (``kind="heads"``) or tag (``"tags"``) named exactly
        ``name`` points at; None if there is none."""

    def expand(self, spec: RepoSpec, prefix: str) -> str | None:
        """The full sha of the repo's commit starting with ``prefix``; None if none."""

    def commit_tree(self, spec: RepoSpec, sha: str) -> str:
        """The tree id of commit ``sha``."""

    def commit(self, spec: RepoSpec, sha: str) -> CommitFacts:
        """Commit ``sha``'s tree, parents, people and message (``export-subst`` bounds)."""

    def contains(self, spec: RepoSpec, ref: str, sha: str) -> str | None:
        """The tree of commit ``sha`` if it is ``ref`` (``heads/main``, ``tags/v1``) or one
        of its ancestors; None if it is not in that ref's history (NotFoundError if the
        ref or the commit does not exist)."""

    def refs(self, spec: RepoSpec, kind: str) -> Iterator[tuple[str, str]]:
        """(name, tip commit) of the repo's ``branches`` or ``tags``, boundedly many."""

    def tree_listing(self, spec: RepoSpec, tree: str) -> list[Mapping[str, object]]:
        """The recursive listing of ``tree``: items with ``path``, ``mode``, ``type`` and
        ``sha``, as git's tree objects hold them."""

    def top_level_file(self, spec: RepoSpec, tree: str, name: str) -> bytes | None:
        """A file at the root of ``tree`` (checked against its blob id); None if absent."""

    def blob(self, spec: RepoSpec, sha: str) -> bytes:
        """A blob's bytes, checked against its id."""

    def download_archive(self, repo: str, commit: str, out: BinaryIO, *, max_bytes: int,
                         progress: Progress | None = None) -> None:
        """Write the archive (a ``git archive`` zip) of ``commit`` to ``out``, at most
        ``max_bytes``; ``repo`` is ``owner/name`` as :meth:`repo_info` spells it."""

    def signature_at(self, url: str) -> bytes | None:
        """A signature bundle the policy names by URL (a release asset, ``signature_url``),
        checked by the signature step as untrusted bytes; None if there is none. A source
        of snapshots answers only with what came with the snapshot."""

    def snapshot_signer(self, manifest: str) -> str:
        """Who signed the snapshot with manifest digest ``manifest`` (what ``[oci]``
        required, for the audit line); ``""`` for a source of no snapshots."""
