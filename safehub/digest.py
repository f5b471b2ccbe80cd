"""Git object ids and safehub's canonical content digest.

Two hashes describe a tree of files:

* the **git tree id**, computed exactly as git does (``blob <size>\\0<data>`` ids, tree
  objects sorted by git's rules); it ties the files to the commit GitHub names;
* the **content digest** ``sha256:<hex>``, safehub's own canonical digest (defined in
  docs/digest.md): the SHA-256 of the text ``safehub-digest-v1\\n`` followed by one line
  ``<mode> <sha256 of content> <path>\\n`` per file, sorted by the path's UTF-8 bytes.
  Modes are git's (``100644``, ``100755``, ``120000`` for symlinks, whose content is the
  link target). It does not depend on git, so lockfiles and signatures can use it for any
  directory.

>>> f = FileEntry.from_bytes("hubconf.py", "100644", b"def m(): return 1\\n")
>>> f.blob
'fed69259aca468e3c8f36ed43d754d90656a7498'
>>> content_digest([f])[:15]
'sha256:d7e3150b'
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator

from safehub._internal.frozen import Frozen

__all__ = [
    "DIGEST_HEADER",
    "EMPTY_TREE",
    "MODE_EXEC",
    "MODE_FILE",
    "MODE_GITLINK",
    "MODE_LINK",
    "FileEntry",
    "blob_id",
    "content_digest",
    "git_tree_id",
    "is_digest",
    "parents",
    "tree_id",
]

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def is_digest(value: object) -> bool:
    """True for a content digest as safehub writes it (``sha256:<64 hex>``)."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


MODE_FILE = "100644"
MODE_EXEC = "100755"
MODE_LINK = "120000"
MODE_GITLINK = "160000"
_MODE_TREE = b"40000"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
DIGEST_HEADER = b"safehub-digest-v1\n"


def parents(path: str) -> Iterator[str]:
    """The folders above a relative POSIX path, innermost first.

    >>> list(parents("a/b/c.py"))
    ['a/b', 'a']
    """
    parent = path.rpartition("/")[0]
    while parent:
        yield parent
        parent = parent.rpartition("/")[0]


def blob_id(data: bytes) -> str:
    """The git object id of a blob with this content."""
    h = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
    h.update(data)
    return h.hexdigest()


class FileEntry(Frozen):
    """One file of a tree: relative POSIX path, git mode, size and both hashes."""

    path: str
    mode: str
    size: int
    sha256: str
    blob: str

    @classmethod
    def from_bytes(cls, path: str, mode: str, data: bytes) -> FileEntry:
        return cls(path, mode, len(data), hashlib.sha256(data).hexdigest(), blob_id(data))


def content_digest(files: Iterable[FileEntry]) -> str:
    """safehub's canonical digest of a set of files (see the module docstring)."""
    h = hashlib.sha256(DIGEST_HEADER)
    for f in sorted(files, key=lambda f: f.path.encode()):
        h.update(f"{f.mode} {f.sha256} {f.path}\n".encode())
    return "sha256:" + h.hexdigest()


def git_tree_id(files: Iterable[FileEntry]) -> str:
    """The git tree id of the root of ``files`` (directories are implied by paths).

    Empty directories cannot be expressed (git has none), so a tree with them, such as
    the placeholder ``git archive`` writes for a submodule, never matches.
    """
    return tree_id((f.path, f.mode, f.blob) for f in files)


def tree_id(entries: Iterable[tuple[str, str, str]], folders: Iterable[str] = ()) -> str:
    """The git tree id of a tree given as ``(path, mode, sha)`` entries (blobs, links,
    gitlinks ``160000``), plus ``folders`` that exist even if empty (their entries are
    the empty tree ``4b825dc...``). Folders above entries are implied.

    >>> tree_id([], ["empty"]) == tree_id([("empty", "40000", EMPTY_TREE)])
    True
    """
    # dir path -> {name: (mode, 20-byte id)}; subtrees are filled in deepest first.
    dirs: dict[str, dict[str, tuple[bytes, bytes]]] = {"": {}}

    def add_folder(path: str) -> None:
        while path and path not in dirs:
            dirs[path] = {}
            path = path.rpartition("/")[0]

    for path, mode, sha in entries:
        if mode in (_MODE_TREE.decode(), "040000"):
            add_folder(path)
            continue
        parent, _, name = path.rpartition("/")
        add_folder(parent)
        dirs[parent][name] = (mode.encode(), bytes.fromhex(sha))
    for folder in folders:
        add_folder(folder)
    for d in sorted(dirs, key=lambda p: p.count("/") if p else -1, reverse=True):
        if not d:
            continue
        parent, _, name = d.rpartition("/")
        dirs[parent][name] = (_MODE_TREE, bytes.fromhex(_tree_object_id(dirs[d])))
    return _tree_object_id(dirs[""])


def _tree_object_id(entries: dict[str, tuple[bytes, bytes]]) -> str:
    # git sorts tree entries by name, comparing a subtree's name as if it ended in '/'.
    def sort_key(name: str) -> bytes:
        mode, _ = entries[name]
        return name.encode() + (b"/" if mode == _MODE_TREE else b"")

    body = b"".join(
        entries[name][0] + b" " + name.encode() + b"\0" + entries[name][1]
        for name in sorted(entries, key=sort_key)
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body, usedforsecurity=False).hexdigest()
