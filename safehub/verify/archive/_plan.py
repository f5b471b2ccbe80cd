"""Every entry's name, type and size checked before anything is written."""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from collections.abc import Mapping
from typing import TYPE_CHECKING, BinaryIO

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import IntegrityError
from safehub.verify.archive._zipfile import ZipEntry, copy_entry

if TYPE_CHECKING:  # only its fields are read: no import of the settings layer
    from safehub.limits import Limits

__all__ = ["Item", "Plan", "fail", "fold_path", "plan", "resolve_link"]

_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
_UNIX = 3
_UTF8_NAME = 0x0800
_DOS_DIRECTORY = 0x10
_MAX_LINK_HOPS = 64
_MAX_LINK = 4096
_NAME_MAX = 255
_PATH_MAX = 4095


def fail(name: str, why: str) -> IntegrityError:
    """The error for one refused entry."""
    return IntegrityError(
        f"refused archive entry {name!r}: {why}",
        fix=fixes.say("the archive is not a plain `git archive` of the commit; do not load it "
                      "(if it came from a mirror, the mirror is serving altered content)"),
    )


class Item(Frozen):
    """An entry with its path relative to the top folder and its kind."""

    entry: ZipEntry
    path: str
    kind: str  # "file", "exec", "link" or "dir"


class Plan(Frozen):
    """What :func:`plan` accepted: the entries below the top folder, and link targets."""

    items: tuple[Item, ...]
    links: Mapping[str, str]


def fold_path(path: str) -> str:
    """A path as a case- and normalisation-insensitive filesystem (macOS, Windows) sees it."""
    return unicodedata.normalize("NFC", path).casefold()


class _Loop:
    """A path that needs more links than any OS follows (it answers ELOOP): it reaches
    nothing."""


LOOP = _Loop()


def walk_link(path: str, links: Mapping[str, str], *, fold: bool = False) -> str | _Loop | None:
    """Like :func:`resolve_link`, but tells a loop (:data:`LOOP`) from leaving the tree."""
    pending = path.split("/")
    done: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return None
            done.pop()
            continue
        candidate = "/".join([*done, part])
        target = links.get(fold_path(candidate) if fold else candidate)
        if target is None:
            done.append(part)
            continue
        if target.startswith("/"):
            return None
        hops += 1
        if hops > _MAX_LINK_HOPS:
            return LOOP  # no OS follows more links (Linux 40, macOS 32, Windows 63)
        pending = target.split("/") + pending
    return "/".join(done)


def resolve_link(path: str, links: Mapping[str, str], *, fold: bool = False) -> str | None:
    """Where ``path`` leads inside the tree, following ``links`` as the OS would.

    ``links`` maps link paths to their targets (with ``fold``, keyed by :func:`fold_path`,
    as a case-insensitive filesystem would look them up). Returns the resolved relative
    path (``""`` is the root), or ``None`` if the path leaves the tree, is absolute, or
    loops.

    >>> resolve_link("a/up", {"a/up": "..", "x": "a/up/.."})
    ''
    >>> resolve_link("x", {"a/up": "..", "x": "a/up/.."}) is None
    True
    """
    found = walk_link(path, links, fold=fold)
    return found if isinstance(found, str) else None


def _name(e: ZipEntry) -> str:
    try:
        return e.name.decode("utf-8")
    except UnicodeDecodeError:
        flagged = "flagged as UTF-8 but is not" if e.flags & _UTF8_NAME else "not UTF-8"
        raise fail(e.name.decode("utf-8", "replace"),
                   f"the name is {flagged} (git archive names every file in UTF-8)") from None


def _kind(e: ZipEntry, name: str) -> str:
    is_dir_name = name.endswith("/")
    mode = e.external >> 16 if e.system == _UNIX else 0
    if mode == 0:
        if e.external & _DOS_DIRECTORY and not is_dir_name:
            raise fail(name, "the directory flag and the name disagree")
        kind = "dir" if is_dir_name else "file"
    else:
        fmt = stat.S_IFMT(mode)
        if fmt == 0:  # permission bits alone (Python's zipfile writes 0o600): by the name
            fmt = stat.S_IFDIR if is_dir_name else stat.S_IFREG
        if fmt == stat.S_IFDIR:
            kind = "dir"
        elif fmt == stat.S_IFLNK:
            kind = "link"
        elif fmt == stat.S_IFREG:
            kind = "exec" if mode & 0o111 else "file"
        else:
            raise fail(name, f"special file (mode {oct(mode)}); only files, directories and "
                       "symlinks may appear in a repo")
        if (kind == "dir") != is_dir_name:
            raise fail(name, "the directory flag and the name disagree")
    if kind == "dir" and e.size:
        raise fail(name, "a directory entry with content")
    if kind == "link" and e.size > _MAX_LINK:
        raise fail(name, f"symlink target longer than {_MAX_LINK} bytes")
    return kind


def _relative(name: str, prefix: str, room: int) -> str:
    if not name.startswith(prefix):
        raise fail(name, f"outside the archive's top folder {prefix!r}")
    rel = name[len(prefix):]
    rel = rel[:-1] if rel.endswith("/") else rel
    if rel == "":
        return rel
    if _BAD_CHARS.search(rel):
        raise fail(name, "control character or backslash in the name")
    for part in rel.split("/"):
        if part in ("", ".", ".."):
            raise fail(name, "empty, '.' or '..' path component")
        if part.lower() == ".git":
            raise fail(name, "'.git' path component (git never archives one)")
        if len(part) > _NAME_MAX // 4 and len(part.encode()) > _NAME_MAX:
            raise fail(name, f"a name longer than {_NAME_MAX} bytes, which no filesystem "
                       "can hold")
    if len(rel) > room // 4 and len(rel.encode()) > room:
        raise fail(name, f"a path longer than the {room} bytes left below the staging folder")
    return rel


def _top(entries: list[ZipEntry]) -> str:
    first = _name(entries[0])
    top = first.split("/", 1)[0]
    if not top or "/" not in first or _BAD_CHARS.search(top) or top in (".", ".."):
        raise fail(first, "the archive has no proper top folder")
    return top + "/"


def _check_parents(items: list[Item]) -> None:
    """No entry below a file or a symlink, matched as a case-insensitive FS would."""
    folded = [fold_path(i.path) for i in items]
    leaves = {key for key, i in zip(folded, items, strict=True) if i.kind != "dir"}
    for key, i in zip(folded, items, strict=True):
        # Folding keeps '/' and works part by part, so a folded path's prefixes are the
        # folded paths of its folders.
        parts = key.split("/")
        for n in range(1, len(parts)):
            if "/".join(parts[:n]) in leaves:
                parent = "/".join(i.path.split("/")[:n])
                raise fail(i.path, f"its parent {parent!r} is not a directory")


def _links(f: BinaryIO, items: list[Item]) -> dict[str, str]:
    links: dict[str, str] = {}
    for i in items:
        if i.kind != "link":
            continue
        chunks: list[bytes] = []
        copy_entry(f, i.entry, chunks.append)
        try:
            target = b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError:
            raise fail(i.path, "symlink target is not UTF-8") from None
        if target.startswith("/") or _BAD_CHARS.search(target) or not target:
            raise fail(i.path, f"absolute or malformed symlink target {target!r}")
        links[i.path] = target
    # Resolve every link both as a case-sensitive and as a case-insensitive filesystem
    # would (on macOS 'X -> D/up/..' can reach a link named 'd/up').
    folded = {fold_path(p): t for p, t in links.items()}
    for path, target in links.items():
        base = path.rpartition("/")[0]
        start = f"{base}/{target}" if base else target
        # A link that loops (the OS answers ELOOP) reaches nothing, harmlessly.
        if walk_link(start, links) is None or walk_link(start, folded, fold=True) is None:
            raise fail(path, f"symlink to {target!r} leads outside the tree")
    return links


def plan(f: BinaryIO, entries: list[ZipEntry], limits: Limits, dest: str) -> Plan:
    """Validate every entry's name, type and size; read and check the symlinks."""
    if not entries:
        raise IntegrityError("the archive is empty",
                             fix=fixes.say("check that the commit has files"))
    declared = sum(e.size for e in entries)
    if declared > limits.max_tree_bytes:
        raise IntegrityError(
            f"the archive unpacks to {declared:,} bytes, more than the limit of "
            f"{limits.max_tree_bytes:,}",
            fix=fixes.say("if the repo really is that large, raise SAFEHUB_MAX_TREE_BYTES"),
        )
    prefix = _top(entries)
    room = _PATH_MAX - len(os.fsencode(dest)) - 1
    items: list[Item] = []
    seen: dict[str, str] = {}  # folded path -> path as written
    for e in entries:
        name = _name(e)
        rel = _relative(name, prefix, room)
        kind = _kind(e, name)
        if rel == "":
            if kind != "dir":
                raise fail(name, "the top folder is not a directory")
            continue
        key = fold_path(rel)
        if key in seen:
            same = "twice" if seen[key] == rel else f"and as {seen[key]!r} (same up to case)"
            raise fail(name, f"the path appears {same}")
        seen[key] = rel
        items.append(Item(e, rel, kind))
    _check_parents(items)
    return Plan(tuple(items), _links(f, items))
