"""A cached tree: its ``entry.json`` and its verdict, read back and checked.

Whether the tree may be served is :mod:`safehub.store.cache.integrity`'s to say (the scan,
the re-hash, the check of each file as it is opened).
"""

from __future__ import annotations

from pathlib import Path

from safehub._internal.frozen import Frozen
from safehub._internal.fsutil import read_json, write_json
from safehub.digest import content_digest
from safehub.store.cache.integrity import tamper
from safehub.store.cache.records import FORMAT, Verdict

__all__ = ["CachedTree", "write_entry"]


class CachedTree(Frozen):
    """A verified tree in the cache, as its small ``entry.json`` describes it.

    Whether a hit may be served without re-hashing is decided by the caller, against a
    record *it* trusts (see :meth:`safehub.hub.Hub` and docs/digest.md): anything stored in
    the cache folder can be rewritten by whoever can write the cache.
    """

    path: Path
    commit: str
    digest: str
    tree: str
    level: str
    verified_ns: int | None = None
    """The latest ctime of any entry right after this user verified it (set by the fetcher)."""
    ident: tuple[int, int] | None = None
    """The tree folder's ``(st_dev, st_ino)`` as the fetcher checked it (set with
    ``verified_ns``)."""

    @property
    def entry_dir(self) -> Path:
        return self.path.parent

    def verdict(self) -> Verdict:
        """The full verdict; it must add up to the digest this entry is known by."""
        vfile = self.entry_dir / "verdict.json"
        try:
            verdict = Verdict.from_json(read_json(vfile))
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise tamper(vfile, f"cannot be read ({e})") from e
        if (verdict.commit, verdict.digest, verdict.tree) != (
                self.commit, self.digest, self.tree) or content_digest(
            verdict.files
        ) != verdict.digest:
            raise tamper(vfile, "does not add up to the digest it was installed with")
        return verdict


def write_entry(entry: CachedTree) -> None:
    write_json(entry.entry_dir / "entry.json", {
        "format": FORMAT, "commit": entry.commit, "digest": entry.digest,
        "tree": entry.tree, "level": entry.level,
    }, mode=0o444)

