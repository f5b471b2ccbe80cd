"""Checking and extracting a GitHub zipball without trusting it.

A zipball is untrusted input until it has passed every check here. :func:`extract`
refuses, before writing anything:

* an archive whose zip comment does not name the expected commit (``git archive`` writes
  the commit id there);
* entries outside one top folder, absolute paths, ``..``, ``.git``, backslashes, control
  characters, empty path components;
* special files (devices, FIFOs, sockets), and directory flags that contradict the mode;
* duplicate names, including names equal up to case or Unicode normalisation (they collide
  on macOS and Windows) and a file that is also used as a directory;
* symlinks that are absolute or resolve outside the tree (resolved the way the OS would,
  through other links in the archive, on case-sensitive and case-insensitive filesystems
  alike), and entries reached through a symlink (matched without regard to case);
* more files or more bytes than the limits allow (declared sizes are capped first; zipfile
  then never yields more than the declared size and checks each CRC).

It then writes the files read-only into a fresh directory and returns their hashes, the
git tree id and the content digest (:mod:`safehub.digest`), which the caller compares
with the commit's tree (:func:`check_tree`).
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from safehub.digest import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    FileEntry,
    content_digest,
    git_tree_id,
    parents,
)
from safehub.errors import IntegrityError
from safehub.limits import Limits

__all__ = ["Extracted", "TreeCheck", "check_tree", "extract", "resolve_link"]

# What zipfile raises for corrupt or exotic archives (bad CRC, encryption, unknown
# compression, truncated streams).
_ZIP_ERRORS = (zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError, zlib.error)
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
_UNIX = 3
_MAX_LINK_HOPS = 40
_READ = 1024 * 1024


@dataclass(frozen=True)
class Extracted:
    """What :func:`extract` wrote: the files (sorted by path) and their hashes."""

    root: Path
    files: tuple[FileEntry, ...]
    empty_dirs: tuple[str, ...]
    tree_id: str
    digest: str


@dataclass(frozen=True)
class _Entry:
    info: zipfile.ZipInfo
    path: str
    kind: str  # "file", "exec", "link" or "dir"


def _fail(name: str, why: str) -> IntegrityError:
    return IntegrityError(
        f"refused archive entry {name!r}: {why}",
        hint="the archive is not a plain `git archive` of the commit; do not load it "
        "(if it came from a mirror, the mirror is serving altered content)",
    )


def _kind(info: zipfile.ZipInfo) -> str:
    is_dir_name = info.filename.endswith("/")
    mode = info.external_attr >> 16 if info.create_system == _UNIX else 0
    if mode == 0:
        return "dir" if is_dir_name else "file"
    fmt = stat.S_IFMT(mode)
    if fmt == stat.S_IFDIR:
        kind = "dir"
    elif fmt == stat.S_IFLNK:
        kind = "link"
    elif fmt == stat.S_IFREG:
        kind = "exec" if mode & 0o111 else "file"
    else:
        raise _fail(info.filename, f"special file (mode {oct(mode)}); only files, "
                    "directories and symlinks may appear in a repo")
    if (kind == "dir") != is_dir_name:
        raise _fail(info.filename, "the directory flag and the name disagree")
    return kind


def _relative(info: zipfile.ZipInfo, prefix: str) -> str:
    name = info.filename
    if not name.startswith(prefix):
        raise _fail(name, f"outside the archive's top folder {prefix!r}")
    rel = name[len(prefix):].rstrip("/") if name.endswith("/") else name[len(prefix):]
    if rel == "":
        return rel
    if _BAD_CHARS.search(rel):
        raise _fail(name, "control character or backslash in the name")
    for part in rel.split("/"):
        if part in ("", ".", ".."):
            raise _fail(name, "empty, '.' or '..' path component")
        if part.lower() == ".git":
            raise _fail(name, "'.git' path component (git never archives one)")
    return rel


def _fold(path: str) -> str:
    """A path as a case- and normalisation-insensitive filesystem (macOS, Windows) sees it."""
    return unicodedata.normalize("NFC", path).casefold()


def resolve_link(path: str, links: Mapping[str, str], *, fold: bool = False) -> str | None:
    """Where ``path`` leads inside the tree, following ``links`` as the OS would.

    ``links`` maps link paths to their targets (with ``fold``, keyed by :func:`_fold`, as a
    case-insensitive filesystem would look them up). Returns the resolved relative path
    (``""`` is the root), or ``None`` if the path leaves the tree, is absolute, or loops.

    >>> resolve_link("a/up", {"a/up": "..", "x": "a/up/.."})
    ''
    >>> resolve_link("x", {"a/up": "..", "x": "a/up/.."}) is None
    True
    """
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
        target = links.get(_fold(candidate) if fold else candidate)
        if target is None:
            done.append(part)
            continue
        hops += 1
        if hops > _MAX_LINK_HOPS or target.startswith("/"):
            return None
        pending = target.split("/") + pending
    return "/".join(done)


def _plan(zf: zipfile.ZipFile, limits: Limits) -> tuple[list[_Entry], dict[str, str]]:
    """Validate every entry's name and type, and the sizes, before writing anything."""
    infos = zf.infolist()
    if not infos:
        raise IntegrityError("the archive is empty", hint="check that the commit has files")
    if len(infos) > limits.max_files:
        raise IntegrityError(
            f"the archive has {len(infos):,} entries, more than the limit of {limits.max_files:,}",
            hint="if the repo really is that large, raise SAFEHUB_MAX_FILES",
        )
    top = infos[0].filename.split("/", 1)[0]
    prefix = top + "/"
    if not top or _BAD_CHARS.search(top) or top in (".", ".."):
        raise _fail(infos[0].filename, "the archive has no proper top folder")
    declared = sum(i.file_size for i in infos)
    if declared > limits.max_tree_bytes:
        raise IntegrityError(
            f"the archive unpacks to {declared:,} bytes, more than the limit of "
            f"{limits.max_tree_bytes:,}",
            hint="if the repo really is that large, raise SAFEHUB_MAX_TREE_BYTES",
        )
    entries: list[_Entry] = []
    seen: dict[str, str] = {}  # folded path -> path as written
    kinds: dict[str, str] = {}  # folded path -> kind: lookups as a case-insensitive FS does
    for info in infos:
        rel = _relative(info, prefix)
        kind = _kind(info)
        if rel == "":
            if kind != "dir":
                raise _fail(info.filename, "the top folder is not a directory")
            continue
        folded = _fold(rel)
        if folded in seen:
            same = "twice" if seen[folded] == rel else f"and as {seen[folded]!r} (same up to case)"
            raise _fail(info.filename, f"the path appears {same}")
        seen[folded] = rel
        kinds[folded] = kind
        entries.append(_Entry(info, rel, kind))
    links: dict[str, str] = {}
    for e in entries:
        parent = e.path.rpartition("/")[0]
        while parent:
            if kinds.get(_fold(parent), "dir") != "dir":
                raise _fail(e.info.filename, f"its parent {parent!r} is not a directory")
            parent = parent.rpartition("/")[0]
        if e.kind == "link":
            if e.info.file_size > 4096:
                raise _fail(e.info.filename, "symlink target longer than 4096 bytes")
            try:
                target = zf.read(e.info).decode("utf-8")
            except UnicodeDecodeError:
                raise _fail(e.info.filename, "symlink target is not UTF-8") from None
            if target.startswith("/") or _BAD_CHARS.search(target) or not target:
                raise _fail(e.info.filename, f"absolute or malformed symlink target {target!r}")
            links[e.path] = target
    # Resolve every link both as a case-sensitive and as a case-insensitive filesystem
    # would (on macOS 'X -> D/up/..' can reach a link named 'd/up').
    folded_links = {_fold(p): t for p, t in links.items()}
    for path, target in links.items():
        base = path.rpartition("/")[0]
        start = f"{base}/{target}" if base else target
        if (resolve_link(start, links) is None
                or resolve_link(start, folded_links, fold=True) is None):
            raise _fail(path, f"symlink to {target!r} leads outside the tree")
    return entries, links


def extract(zip_path: Path, dest: Path, *, commit: str, limits: Limits) -> Extracted:
    """Check ``zip_path`` fully, then write its files read-only under ``dest`` (created).

    ``commit`` is the 40-hex commit the archive must name in its zip comment.
    """
    try:
        zf = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as e:
        raise IntegrityError(
            f"the download is not a valid zip archive ({e})",
            hint="retry with force_reload=True; if it persists the server is broken",
        ) from e
    with zf:
        comment = zf.comment.decode("ascii", "replace").strip()
        if comment != commit:
            raise IntegrityError(
                f"the archive says it is commit {comment or '(nothing)'!r}, but {commit} "
                "was asked for",
                hint="the server (or a mirror) answered with another commit's archive; "
                "do not load it",
            )
        try:
            entries, links = _plan(zf, limits)
        except _ZIP_ERRORS as err:
            raise IntegrityError(
                f"the archive is corrupt or uses an unsupported zip feature ({err})",
                hint="retry with force_reload=True; if it persists the server is broken",
            ) from err
        dest.mkdir(parents=True)
        files: list[FileEntry] = []
        dirs: set[str] = set()
        written = 0
        try:
            for item in entries:
                target = dest / item.path
                if item.kind == "dir":
                    target.mkdir(parents=True, exist_ok=True)
                    dirs.add(item.path)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if item.kind == "link":
                    os.symlink(links[item.path], target)
                    files.append(
                        FileEntry.from_bytes(item.path, MODE_LINK, links[item.path].encode())
                    )
                    continue
                entry = _write_file(zf, item, target)
                written += entry.size
                if written > limits.max_tree_bytes:
                    raise IntegrityError(
                        f"the archive unpacks to more than {limits.max_tree_bytes:,} bytes",
                        hint="if the repo really is that large, raise SAFEHUB_MAX_TREE_BYTES",
                    )
                files.append(entry)
        except _ZIP_ERRORS as err:
            raise IntegrityError(
                f"the archive is corrupt or uses an unsupported zip feature ({err})",
                hint="retry with force_reload=True; if it persists the server is broken",
            ) from err
    files.sort(key=lambda f: f.path.encode())
    above = {p for f in files for p in parents(f.path)}
    empty = tuple(sorted(d for d in dirs if d not in above))
    make_read_only(dest)
    return Extracted(dest, tuple(files), empty, git_tree_id(files), content_digest(files))



def _write_file(zf: zipfile.ZipFile, e: _Entry, target: Path) -> FileEntry:
    import hashlib

    sha256 = hashlib.sha256()
    blob = hashlib.sha1(b"blob %d\0" % e.info.file_size, usedforsecurity=False)
    size = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o555 if e.kind == "exec" else 0o444)
    with zf.open(e.info) as src, os.fdopen(fd, "wb") as out:
        while chunk := src.read(_READ):
            size += len(chunk)
            sha256.update(chunk)
            blob.update(chunk)
            out.write(chunk)
    if size != e.info.file_size:
        raise _fail(e.info.filename, f"declares {e.info.file_size} bytes but holds {size}")
    mode = MODE_EXEC if e.kind == "exec" else MODE_FILE
    return FileEntry(e.path, mode, size, sha256.hexdigest(), blob.hexdigest())


def make_read_only(root: Path) -> None:
    """Drop write permission on every file and directory under ``root`` (links untouched)."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o222:
                os.chmod(p, st.st_mode & 0o555)
        for name in dirnames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o555)
    os.chmod(root, 0o555)


@dataclass(frozen=True)
class TreeCheck:
    """How the extracted files were tied to the commit's tree.

    ``level`` is ``"tree"`` when the git tree id matched exactly, ``"per-file"`` when the
    fallback matched each file against the API's listing of the tree (see
    :func:`check_tree`). ``unverified`` lists files whose bytes differ from the commit's
    blobs (explained by ``.gitattributes``), ``omitted`` files the archive left out.
    """

    level: str
    unverified: tuple[str, ...] = ()
    omitted: tuple[str, ...] = ()


def check_tree(
    ext: Extracted,
    tree_id: str,
    listing: Iterable[Mapping[str, object]] | None,
    *,
    allow_fallback: bool,
    fetch_blob: Callable[[str], bytes] | None = None,
) -> TreeCheck:
    """Tie the extracted files to the commit's tree, or raise :class:`IntegrityError`.

    The exact check compares git tree ids. When they differ, ``listing`` (the API's
    recursive listing of the commit's tree, fetched by the caller only in that case)
    permits the per-file fallback (:mod:`safehub.gitattributes`): every extracted file must
    exist in the tree with the same mode, and its bytes must equal the blob's unless an
    attribute of the commit that applies to that very path explains the difference (undone
    exactly where possible; ``export-subst`` files are listed as unverified); a tree file
    may be missing only where ``export-ignore`` applies; submodules appear as empty
    folders. Extra files are never accepted. ``fetch_blob`` returns a blob's committed
    bytes, checked against its id (for ``.gitattributes`` files the archive left out, and
    LFS pointers).
    """
    from safehub.gitattributes import Attributes, parse

    if ext.tree_id == tree_id:
        return TreeCheck("tree")
    altered = "the archive was altered in transit or by a mirror; do not load it"
    mismatch = IntegrityError(
        f"the archive's files do not match the commit's tree (git tree {ext.tree_id}, "
        f"expected {tree_id})", hint=altered)
    if listing is None:
        raise mismatch
    if not allow_fallback:
        raise IntegrityError(
            f"{mismatch.message}; the per-file fallback for repos whose .gitattributes "
            "rewrites exports is forbidden by policy",
            hint="ask the publisher to drop export-ignore/export-subst rules, or allow the "
            "fallback (tree_fallback = true)",
        )
    blobs: dict[str, tuple[str, str]] = {}
    gitlinks: set[str] = set()
    for item in listing:
        path, mode, sha, kind = (str(item.get(k, "")) for k in ("path", "mode", "sha", "type"))
        if kind == "blob":
            blobs[path] = (mode, sha)
        elif kind == "commit":
            gitlinks.add(path)
    ours = {f.path: f for f in ext.files}
    for path, f in ours.items():
        if path not in blobs:
            raise IntegrityError(f"the archive has {path!r}, which is not in the commit's tree",
                                 hint=altered)
        if blobs[path][0] != f.mode:
            raise IntegrityError(f"{path!r} has mode {f.mode} in the archive but "
                                 f"{blobs[path][0]} in the commit", hint=altered)
    rules = []
    for path, (_, sha) in blobs.items():
        if path.rpartition("/")[2] != ".gitattributes":
            continue
        if path in ours and ours[path].blob == sha:
            content = (ext.root / path).read_bytes()
        elif fetch_blob is not None:
            content = fetch_blob(sha)
        else:
            continue  # unknown rules explain nothing
        rules += parse(path, content.decode("utf-8", "replace"))
    attributes = Attributes(rules)
    unverified: list[str] = []
    for path, f in ours.items():
        sha = blobs[path][1]
        if sha == f.blob:
            continue
        data = (ext.root / path).read_bytes() if f.mode != MODE_LINK else b""
        how = attributes.explain(path, data, sha, fetch_blob) if data else None
        if how is None:
            raise IntegrityError(
                f"{path!r} differs from the commit's blob {sha} and no .gitattributes rule "
                "of the commit explains it", hint=altered)
        if how == "unverified":
            unverified.append(path)
    omitted = sorted(p for p in blobs if p not in ours)
    for path in omitted:
        if not attributes.ignored(path):
            raise IntegrityError(
                f"the archive lacks {path!r}, and no export-ignore rule of the commit covers it",
                hint=altered)
    stray = [d for d in ext.empty_dirs if d not in gitlinks]
    if stray:
        raise IntegrityError(
            f"the archive has an empty folder {stray[0]!r} that is not a submodule of the commit",
            hint=altered,
        )
    return TreeCheck("per-file", tuple(sorted(unverified)), tuple(omitted))
