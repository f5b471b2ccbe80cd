"""What ``git archive`` writes for a committed file, given the file's attributes.

For a regular file (never a symlink or a submodule), git archive converts the blob as a
checkout would (convert.c), then expands ``export-subst`` placeholders (archive.c):

1. ``ident``: every ``$Id$`` (or ``$Id: ...$`` without a space inside) becomes
   ``$Id: <blob id> $``;
2. line endings: each LF not already after a CR becomes CRLF when the attributes ask for
   CRLF output. The servers that make archives have ``core.autocrlf`` and ``core.eol``
   unset, so only ``eol=crlf`` asks for it (``text`` alone means LF: nothing to do); with
   ``text=auto`` (or ``crlf=auto``) only a file that has no CR yet and is not binary by
   git's count is converted; ``-text``/``binary`` turn it off;
3. ``working-tree-encoding``: the UTF-8 blob is re-encoded (``UTF-16`` gets a BOM; a
   blob that does not convert is left as it is);
4. filters: no filter driver is configured there, so ``filter=lfs`` leaves the LFS
   pointer, unless the repo asks GitHub to put the LFS object in its archives;
5. ``export-subst``: each ``$Format:<fmt>$`` becomes ``git log --format=<fmt>`` of the commit.

Steps 1-3 are reproduced exactly here (:meth:`Export.apply`, with Python's codecs); step 4
is checked against the pointer's SHA-256 and size; in step 5 the text outside the
placeholders must be equal, and each expansion is bounded by what git could have written
for that commit (:mod:`safehub.verify.gitattributes.subst`).

>>> e = Export.of({})
>>> e.changes_content
False
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator, Mapping

from safehub._internal.frozen import Frozen
from safehub.digest import blob_id
from safehub.verify.gitattributes import Assignment

__all__ = ["Export", "LfsPointer", "crlf_to_worktree", "ident_to_worktree", "lfs_pointer"]

_CONTROL_PRINTABLE = frozenset(b"\b\t\x1b\x0c")
_NONPRINTABLE = bytes(c for c in [*range(32), 127] if c not in _CONTROL_PRINTABLE
                      and c not in (10, 13))
_ALL_BUT_NONPRINTABLE = bytes(c for c in range(256) if c not in _NONPRINTABLE)
_LONE_LF = re.compile(rb"(?<!\r)\n")


def _is_binary_text(data: bytes) -> bool:
    """git's ``convert_is_binary`` over ``gather_stats``: a lone CR, a NUL, or too many
    non-printable bytes (a final ^Z does not count)."""
    crlf = data.count(b"\r\n")
    if data.count(b"\r") > crlf or b"\0" in data:
        return True
    nonprintable = len(data.translate(None, _ALL_BUT_NONPRINTABLE))
    printable = len(data) - nonprintable - data.count(b"\r") - data.count(b"\n")
    if data.endswith(b"\x1a"):
        nonprintable -= 1
    return (printable >> 7) < nonprintable


def crlf_to_worktree(data: bytes, *, auto: bool) -> bytes:
    """LF to CRLF as a checkout with CRLF output does (``auto``: ``text=auto`` rules)."""
    lone_lf = data.count(b"\n") - data.count(b"\r\n")
    if not lone_lf:
        return data
    if auto and (b"\r" in data or _is_binary_text(data)):
        return data
    return _LONE_LF.sub(b"\r\n", data)


def _count_ident(data: bytes) -> int:
    count, i, n = 0, 0, len(data)
    while (d := data.find(b"$", i)) >= 0:
        i = d + 1
        if n - i < 3:
            break
        if data[i:i + 2] != b"Id":
            continue
        ch = data[i + 2]
        i += 3
        if ch == ord("$"):
            count += 1
        elif ch == ord(":"):
            end, newline = data.find(b"$", i), data.find(b"\n", i)
            if end >= 0 and (newline < 0 or end < newline):
                count += 1
                i = end + 1
            else:
                i = newline + 1 if newline >= 0 else n
    return count


def ident_to_worktree(data: bytes, blob: str) -> bytes:
    """``$Id$`` expanded with the blob id, exactly as git's ``ident_to_worktree``."""
    if not _count_ident(data):
        return data
    out: list[bytes] = []
    i, n = 0, len(data)
    while (d := data.find(b"$", i)) >= 0:
        out.append(data[i:d + 1])
        i = d + 1
        if n - i < 3 or data[i:i + 2] != b"Id":
            continue
        if data[i + 2] == ord("$"):
            i += 3
        elif data[i + 2] == ord(":"):
            end = data.find(b"$", i + 3)
            if end < 0:
                break
            if b"\n" in data[i + 3:end]:
                continue
            space = data.find(b" ", i + 4, end)
            if 0 <= space < end - 1:
                continue  # an id of another version control system: left alone
            i = end + 1
        else:
            continue
        out.append(b"Id: " + blob.encode() + b" $")
    out.append(data[i:])
    return b"".join(out)


def _same_utf(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    if a.startswith("utf") and b.startswith("utf"):
        return a[3:].removeprefix("-") == b[3:].removeprefix("-")
    return False


def _codec(encoding: str) -> tuple[str, bytes]:
    """The Python codec and BOM for an iconv encoding name as git writes it.

    ``UTF-16``/``UTF-32`` are written with a little-endian BOM, as glibc's iconv does on
    the x86 servers that make archives.
    """
    for name, codec, bom in (("UTF-16LE-BOM", "utf-16-le", codecs.BOM_UTF16_LE),
                             ("UTF-16BE-BOM", "utf-16-be", codecs.BOM_UTF16_BE),
                             ("UTF-16", "utf-16-le", codecs.BOM_UTF16_LE),
                             ("UTF-32", "utf-32-le", codecs.BOM_UTF32_LE)):
        if _same_utf(encoding, name):
            return codec, bom
    return codecs.lookup(encoding).name, b""


class LfsPointer(Frozen):
    """A Git LFS pointer: the object's SHA-256 and size."""

    oid: str
    size: int


_LFS_LINE = re.compile(r"([a-z0-9.-]+) ([^\n]*)")


def lfs_pointer(blob: bytes) -> LfsPointer | None:
    """The pointer in ``blob`` (git-lfs spec v1), or None if it is not one.

    >>> lfs_pointer(b"version https://git-lfs.github.com/spec/v1\\noid sha256:" + b"a" * 64
    ...             + b"\\nsize 3\\n").size
    3
    """
    if len(blob) > 1024 or not blob.endswith(b"\n"):
        return None
    try:
        lines = blob.decode("ascii").split("\n")[:-1]
    except UnicodeDecodeError:
        return None
    fields = {}
    for line in lines:
        m = _LFS_LINE.fullmatch(line)
        if m is None or m.group(1) in fields:
            return None
        fields[m.group(1)] = m.group(2)
    if (not lines or not lines[0].startswith("version ")
            or not fields["version"].startswith("https://git-lfs.github.com/spec/")):
        return None
    oid, size = fields.get("oid", ""), fields.get("size", "")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", oid) or not re.fullmatch(r"[0-9]{1,15}", size):
        return None
    return LfsPointer(oid.removeprefix("sha256:"), int(size))


class Export(Frozen):
    """The attributes of one file that make ``git archive`` change its bytes."""

    ident: Assignment | None = None
    eol: Assignment | None = None
    eol_auto: Assignment | None = None
    encoding: Assignment | None = None
    lfs: Assignment | None = None
    subst: Assignment | None = None

    @classmethod
    def of(cls, found: Mapping[str, Assignment]) -> Export:
        """From a file's attributes (:meth:`safehub.verify.gitattributes.Attributes.lookup`)."""
        def value(name: str) -> object:
            return found[name].value if name in found else None

        def action(name: str) -> str | None:
            v = value(name)
            return {True: "text", False: "binary", "input": "text", "auto": "auto"}.get(
                v if isinstance(v, (bool, str)) else "")

        text = action("text")
        rule = found.get("text")
        if text is None:
            text, rule = action("crlf"), found.get("crlf")
        eol = None
        if text != "binary" and value("eol") == "crlf":
            eol = found["eol"]
        encoding = found.get("working-tree-encoding")
        enc = value("working-tree-encoding")
        if enc in (None, False, "") or (isinstance(enc, str) and _same_utf(enc, "UTF-8")):
            encoding = None
        return cls(
            ident=found["ident"] if value("ident") is True else None,
            eol=eol,
            eol_auto=rule if eol is not None and text == "auto" else None,
            encoding=encoding,
            lfs=found["filter"] if value("filter") == "lfs" else None,
            subst=found["export-subst"] if value("export-subst") is True else None,
        )

    @property
    def changes_content(self) -> bool:
        """True if any attribute here can make the archive's bytes differ from the blob."""
        return any((self.ident, self.eol, self.encoding, self.lfs, self.subst))

    def _codec(self) -> tuple[str, bytes] | None:
        """The codec of the working-tree-encoding; None if git or Python cannot use it."""
        name = self.encoding.value if self.encoding is not None else None
        if not isinstance(name, str):
            return None  # git refuses to archive with working-tree-encoding set to true
        try:
            return _codec(name)
        except LookupError:
            return None

    def apply(self, blob: bytes, sha: str, *, encode: bool = True,
              ) -> tuple[bytes, list[tuple[str, Assignment]]] | None:
        """The bytes ``git archive`` writes for ``blob`` before ``export-subst`` and LFS,
        and the steps that changed them (``"ident"``, ``"eol"``,
        ``"working-tree-encoding"``, each with the attribute that asked for it);
        ``encode=False`` stops before the re-encoding.

        None if safehub cannot reproduce them (an encoding Python does not know).
        """
        changes: list[tuple[str, Assignment]] = []
        data = blob
        for name, rule, step in (
                ("ident", self.ident, lambda d: ident_to_worktree(d, sha)),
                ("eol", self.eol, lambda d: crlf_to_worktree(d, auto=self.eol_auto is not None)),
                ("working-tree-encoding", self.encoding if encode else None, self._encode)):
            if rule is None:
                continue
            done = step(data)
            if done is None:
                return None
            if done != data:
                changes.append((name, rule))
            data = done
        return data, changes

    def _encode(self, data: bytes) -> bytes | None:
        if not data:
            return data
        codec = self._codec()
        if codec is None:
            return None
        try:
            return codec[1] + data.decode("utf-8").encode(codec[0])
        except UnicodeError:
            return data  # git leaves what does not convert as it is

    def decodes_to(self, data: bytes, text: bytes) -> bool:
        """True if ``data`` decodes, in the working-tree-encoding, to the UTF-8 ``text``
        (another encoder than git's iconv may choose other bytes for the same text)."""
        codec = self._codec()
        if codec is None:
            return False
        try:
            return data.removeprefix(codec[1]).decode(codec[0]) == text.decode("utf-8")
        except UnicodeError:
            return False

    def blob_candidates(self, data: bytes, sha: str) -> Iterator[bytes]:
        """Guesses at the blob behind ``data``, undoing each step (checked by blob id)."""
        stages = [data]
        if self.encoding is not None:
            codec = self._codec()
            try:
                if codec is not None:
                    stages.append(data.removeprefix(codec[1]).decode(codec[0]).encode("utf-8"))
            except UnicodeError:
                pass
        if self.eol is not None:
            stages += [s.replace(b"\r\n", b"\n") for s in stages]
        if self.ident:
            expanded = b"$Id: " + sha.encode() + b" $"
            stages += [s.replace(expanded, b"$Id$") for s in stages]
        for candidate in stages:
            if blob_id(candidate) == sha:
                yield candidate
