"""Which ``.gitattributes`` rules can explain how ``git archive`` output differs from a tree.

Used only by the per-file fallback (:func:`safehub.archive.check_tree`), when the git tree
id of an archive does not match its commit. A difference is accepted only if an attribute
that *applies to that path* explains it, and where the change can be undone, undoing it
must give back the committed blob exactly:

* ``text`` / ``eol`` / ``crlf`` (line endings): CRLF turned back into LF must give the blob;
* ``ident``: ``$Id: <sha> $`` turned back into ``$Id$`` must give the blob;
* ``filter=lfs``: the blob is an LFS pointer; the file's SHA-256 and size must be the
  pointer's;
* ``export-subst``: cannot be undone; the file is accepted as *unverified* and listed;
* ``export-ignore``: explains a file (or folder) missing from the archive.

Anything else, including an attribute that does not apply to the path, or a word in a
comment, explains nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from safehub._internal.globs import Glob
from safehub.digest import blob_id, parents

__all__ = ["Attributes", "Rule", "parse"]

_IDENT = re.compile(rb"\$Id: [0-9a-f]{40} \$")
_LFS = re.compile(rb"version https://git-lfs\S*\noid sha256:([0-9a-f]{64})\nsize (\d+)\n")
_MACROS = {"binary": {"diff": False, "merge": False, "text": False}}


@dataclass(frozen=True)
class Rule:
    """One line of a ``.gitattributes`` file, in the folder ``base`` (``""`` = root)."""

    base: str
    pattern: str
    attrs: Mapping[str, bool | str]

    def matches(self, path: str) -> bool:
        rel = path if not self.base else path.removeprefix(self.base + "/")
        if self.base and rel == path:
            return False  # outside this file's folder
        pattern = self.pattern.strip("/")
        if "/" not in self.pattern.rstrip("/"):  # no slash: the name, at any depth
            return Glob(pattern).match(rel.rpartition("/")[2])
        return Glob(pattern).match(rel)


def parse(path: str, text: str) -> list[Rule]:
    """The rules of the ``.gitattributes`` file at ``path`` (relative to the tree)."""
    base = path.rpartition("/")[0]
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "[attr]", '"')):
            continue  # comments, macro definitions, quoted patterns (not understood: ignored)
        pattern, *tokens = line.split()
        attrs: dict[str, bool | str] = {}
        for token in tokens:
            if token in _MACROS:
                attrs.update(_MACROS[token])
            elif token.startswith(("-", "!")):
                attrs[token[1:]] = False
            elif "=" in token:
                name, _, value = token.partition("=")
                attrs[name] = value
            else:
                attrs[token] = True
        rules.append(Rule(base, pattern, attrs))
    return rules


class Attributes:
    """The attributes of a commit, from its verified ``.gitattributes`` files."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        # Deeper files win over shallower ones, later lines over earlier ones (as in git).
        self.rules = sorted(rules, key=lambda r: r.base.count("/") + bool(r.base))

    def of(self, path: str) -> dict[str, bool | str]:
        attrs: dict[str, bool | str] = {}
        for rule in self.rules:
            if rule.matches(path):
                attrs.update(rule.attrs)
        return attrs

    def ignored(self, path: str) -> bool:
        """True if ``export-ignore`` applies to the path or a folder above it."""
        return any(self.of(p).get("export-ignore") is True for p in (path, *parents(path)))

    def explain(self, path: str, data: bytes, blob: str,
                fetch_blob: Callable[[str], bytes] | None) -> str | None:
        """How the archive's ``data`` relates to the committed ``blob``: ``"verified"``
        (undone exactly), ``"unverified"`` (export-subst), or None (not explained).

        ``fetch_blob`` returns a blob's committed bytes (checked against its id); it is
        needed only for LFS pointers.
        """
        attrs = self.of(path)
        text = attrs.get("text", attrs.get("crlf"))
        if (text not in (None, False) or attrs.get("eol") in ("crlf", "lf")) and blob_id(
                data.replace(b"\r\n", b"\n")) == blob:
            return "verified"
        if attrs.get("ident") is True and blob_id(_IDENT.sub(b"$Id$", data)) == blob:
            return "verified"
        if attrs.get("filter") == "lfs" and fetch_blob is not None and _lfs_matches(
                fetch_blob(blob), data):
            return "verified"
        if attrs.get("export-subst") is True:
            return "unverified"
        return None


def _lfs_matches(pointer: bytes, data: bytes) -> bool:
    """True if ``pointer`` is a Git LFS pointer for exactly ``data``."""
    m = _LFS.match(pointer)
    if m is None:
        return False
    return int(m.group(2)) == len(data) and hashlib.sha256(data).hexdigest() == m.group(
        1).decode()
