"""A zip reader that trusts nothing it reads (APPNOTE.TXT, as ``git archive`` writes zips).

It reads only what it has bounded first: the end record (and the zip64 one) gives the
number of entries, which is checked against the limit before a single entry of the
central directory is parsed; the directory is then parsed entry by entry, never past the
declared count or size, and must end exactly where the end records say. Every local
header must repeat its central entry; entries may not overlap. Only stored and deflated,
unencrypted entries are read; inflating stops at the declared size, and the CRC, the
compressed size and the size must all agree. Every failure is an
:class:`~safehub.errors.IntegrityError`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import IntegrityError

__all__ = ["End", "ZipEntry", "chunks", "copy_entry", "read_central", "read_end",
           "read_entry"]

_EOCD = struct.Struct("<4s4H2LH")
_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_LOCAL = struct.Struct("<4s5H3L2H")
_STORED, _DEFLATED = 0, 8
_ENCRYPTED = 0x0001 | 0x0040 | 0x2000  # encrypted, strong encryption, masked directory
_DESCRIPTOR = 0x0008
_CHUNK = 1 << 20
_MAX_NAME = 8192
_MAX_EXTRA = 4096
_MAX_RECORD = 46 + _MAX_NAME + _MAX_EXTRA + 0xFFFF  # the largest central entry accepted


def corrupt(why: str) -> IntegrityError:
    """The error for an archive that is not a well-formed zip of the kind git writes."""
    return IntegrityError(
        f"the archive is corrupt or uses a zip feature `git archive` never writes ({why})",
        fix=fixes.noted(fixes.call("force_reload", "True"), "retry with ",
                        "; if it persists, the server or mirror is sending something other "
                        "than a `git archive` of the commit: do not load it"),
    )


def not_a_zip(why: str) -> IntegrityError:
    """The error for a download that is no zip at all (an error page, a truncated file)."""
    return IntegrityError(f"the download is not a valid zip archive ({why})",
                          fix=fixes.noted(fixes.call("force_reload", "True"), "retry with ",
                                          "; if it persists the server is broken"))


class End(Frozen):
    """The end of central directory records: entry count, directory span, comment."""

    entries: int
    directory: int
    directory_end: int
    comment: bytes


class ZipEntry(NamedTuple):
    """One entry, as its central directory record (checked against its local header)."""

    name: bytes
    flags: int
    method: int
    crc: int
    compressed_size: int
    size: int
    header: int
    external: int
    system: int
    data: int = -1
    """Offset of the entry's data (known once its local header is read)."""


def _read_at(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise corrupt("it ends early")
    return data


def read_end(f: BinaryIO, size: int) -> End:
    """The end records of the zip in ``f`` (``size`` bytes), without reading any entry."""
    if size < _EOCD.size:
        raise not_a_zip("it is too short")
    tail_start = max(0, size - _EOCD.size - 0xFFFF)
    tail = _read_at(f, tail_start, size - tail_start)
    pos = tail.rfind(b"PK\x05\x06")
    while pos >= 0 and not (pos + _EOCD.size <= len(tail) and pos + _EOCD.size + int.from_bytes(
            tail[pos + 20:pos + 22], "little") == len(tail)):
        pos = tail.rfind(b"PK\x05\x06", 0, pos)
    if pos < 0:
        raise not_a_zip("it has no end of central directory record")
    _, disk, start_disk, on_disk, total, dir_size, dir_offset, _ = _EOCD.unpack_from(tail, pos)
    at = tail_start + pos
    comment = tail[pos + _EOCD.size:]
    if disk or start_disk or on_disk != total:
        raise corrupt("a multi-volume archive")
    end = at
    if at >= _LOCATOR.size and _read_at(f, at - _LOCATOR.size, 4) == b"PK\x06\x07":
        _, z_disk, z_offset, disks = _LOCATOR.unpack(_read_at(f, at - _LOCATOR.size,
                                                               _LOCATOR.size))
        end = at - _LOCATOR.size
        if z_disk or disks > 1 or z_offset + _EOCD64.size > end:
            raise corrupt("a bad zip64 end locator")
        (sig, record, _, _, disk64, start64, on_disk64, total64, size64,
         offset64) = _EOCD64.unpack(_read_at(f, z_offset, _EOCD64.size))
        if sig != b"PK\x06\x06" or z_offset + 12 + record != end or record < 44:
            raise corrupt("a bad zip64 end record")
        if disk64 or start64 or on_disk64 != total64:
            raise corrupt("a multi-volume archive")
        for short, long, clamp in ((total, total64, 0xFFFF), (dir_size, size64, 0xFFFFFFFF),
                                   (dir_offset, offset64, 0xFFFFFFFF)):
            if short not in (long, clamp):
                raise corrupt("the zip64 end record disagrees with the end record")
        total, dir_size, dir_offset, end = total64, size64, offset64, z_offset
    if dir_offset + dir_size != end:
        raise corrupt("the central directory is not where the end record says")
    return End(total, dir_offset, end, comment)


def _zip64_extra(extra: bytes, wanted: int) -> list[int]:
    """The ``wanted`` 8-byte values of the zip64 extra field (after checking that the
    extra data is well-formed: fields that fill it exactly)."""
    if not wanted and len(extra) == 9 and extra[:4] == b"UT\x05\x00":
        return []  # git's only extra field: the modification time
    values: list[int] = []
    i = 0
    while i < len(extra):
        if i + 4 > len(extra):
            raise corrupt("a truncated extra field")
        tag, length = struct.unpack_from("<2H", extra, i)
        body = extra[i + 4:i + 4 + length]
        if len(body) != length:
            raise corrupt("an extra field longer than its entry's extra data")
        if tag == 0x0001:
            if values:
                raise corrupt("two zip64 extra fields")
            if length < 8 * wanted:
                raise corrupt("a zip64 extra field without the sizes it must hold")
            values = [int.from_bytes(body[8 * k:8 * k + 8], "little") for k in range(wanted)]
        i += 4 + length
    if wanted and not values:
        raise corrupt("an entry whose sizes need a zip64 extra field that is missing")
    return values


def _central_entry(directory: bytes, at: int) -> tuple[ZipEntry, int]:
    """The entry whose record starts at ``at``, and where the next one starts."""
    if directory[at:at + 4] != b"PK\x01\x02" or at + _CENTRAL.size > len(directory):
        raise corrupt("a bad central directory entry")
    (_, made_by, _, flags, method, _, _, crc, csize, size, name_len, extra_len, comment_len,
     disk, _, external, offset) = _CENTRAL.unpack_from(directory, at)
    if name_len > _MAX_NAME or extra_len > _MAX_EXTRA:
        raise corrupt("an entry with an oversized name or extra field")
    start = at + _CENTRAL.size
    name = directory[start:start + name_len]
    extra = directory[start + name_len:start + name_len + extra_len]
    clamped = (size == 0xFFFFFFFF, csize == 0xFFFFFFFF, offset == 0xFFFFFFFF)
    values = iter(_zip64_extra(extra, sum(clamped)))
    size, csize, offset = (next(values) if c else v
                           for c, v in zip(clamped, (size, csize, offset), strict=True))
    if disk not in (0, 0xFFFF):
        raise corrupt("an entry on another volume")
    if flags & _ENCRYPTED:
        raise corrupt(f"encrypted entry {name!r}")
    if method not in (_STORED, _DEFLATED):
        raise corrupt(f"compression method {method} in {name!r}")
    if method == _STORED and csize != size:
        raise corrupt(f"stored entry {name!r} with two different sizes")
    entry = ZipEntry(name, flags, method, crc, csize, size, offset, external, made_by >> 8)
    return entry, start + name_len + extra_len + comment_len


def read_central(f: BinaryIO, end: End) -> list[ZipEntry]:
    """The central directory's entries (in its order), checked against their local headers.

    Never more entries than the end record declares (whose count the caller has bounded),
    and the directory must end exactly after them.
    """
    size = end.directory_end - end.directory
    if size < end.entries * _CENTRAL.size:
        raise corrupt(f"{end.entries:,} entries cannot fit in a {size:,}-byte central "
                      "directory")
    if size > end.entries * _MAX_RECORD:
        raise corrupt(f"the central directory holds more than the {end.entries:,} entries "
                      "its end record declares")
    directory = _read_at(f, end.directory, size)
    entries: list[ZipEntry] = []
    at = 0
    for _ in range(end.entries):
        entry, at = _central_entry(directory, at)
        entries.append(entry)
    if at != size:
        raise corrupt(f"the central directory holds more than the {end.entries:,} entries "
                      "its end record declares")
    return _locate(f, entries, end.directory)


def _locate(f: BinaryIO, entries: list[ZipEntry], directory: int) -> list[ZipEntry]:
    """Read each local header: it must repeat the central entry; data may not overlap."""
    located: list[ZipEntry | None] = [None] * len(entries)
    order = sorted(range(len(entries)), key=lambda k: entries[k].header)
    for rank, k in enumerate(order):
        e = entries[k]
        bound = entries[order[rank + 1]].header if rank + 1 < len(order) else directory
        if e.header + _LOCAL.size + len(e.name) > bound:
            raise corrupt(f"entry {e.name!r} overlaps another or the central directory")
        head = _read_at(f, e.header, _LOCAL.size + len(e.name))
        (sig, _, flags, method, _, _, crc, csize, size, name_len,
         extra_len) = _LOCAL.unpack_from(head)
        if sig != b"PK\x03\x04" or method != e.method or (flags ^ e.flags) & _ENCRYPTED:
            raise corrupt(f"the local header of {e.name!r} disagrees with its central entry")
        if name_len != len(e.name) or head[_LOCAL.size:] != e.name:
            raise corrupt(f"the local header of {e.name!r} names another file")
        if not flags & _DESCRIPTOR and (crc != e.crc or csize not in (e.compressed_size,
                                                                      0xFFFFFFFF)
                                        or size not in (e.size, 0xFFFFFFFF)):
            raise corrupt(f"the local header of {e.name!r} disagrees with its central entry")
        data = e.header + _LOCAL.size + name_len + extra_len
        if data + e.compressed_size > bound:
            raise corrupt(f"entry {e.name!r} overlaps another or the central directory")
        located[k] = e._replace(data=data)
    return [e for e in located if e is not None]


def read_entry(f: BinaryIO, e: ZipEntry) -> bytes:
    """A small entry's bytes, whole, with the checks of :func:`copy_entry`."""
    if e.method == _STORED or e.compressed_size > _CHUNK or e.size > _CHUNK:
        chunks: list[bytes] = []
        copy_entry(f, e, chunks.append)
        return b"".join(chunks)
    f.seek(e.data)
    raw = f.read(e.compressed_size)
    if len(raw) != e.compressed_size:
        raise corrupt(f"{e.name!r} ends early")
    inflate = zlib.decompressobj(-15)
    try:
        data = inflate.decompress(raw, e.size + 1)
    except zlib.error as err:
        raise corrupt(f"{e.name!r} does not inflate: {err}") from err
    if len(data) > e.size:
        raise corrupt(f"{e.name!r} holds more than the {e.size:,} bytes it declares")
    if not inflate.eof or inflate.unused_data or inflate.unconsumed_tail:
        raise corrupt(f"the compressed data of {e.name!r} does not end where declared")
    if len(data) != e.size:
        raise corrupt(f"{e.name!r} holds fewer than the {e.size:,} bytes it declares")
    if zlib.crc32(data) != e.crc:
        raise corrupt(f"{e.name!r} fails its CRC check")
    return data


def copy_entry(f: BinaryIO, e: ZipEntry, sink: Callable[[bytes], object]) -> None:
    """Feed the entry's bytes to ``sink`` (see :func:`chunks`)."""
    for chunk in chunks(f, e):
        sink(chunk)


def chunks(f: BinaryIO, e: ZipEntry) -> Iterator[bytes]:
    """The entry's bytes, a piece at a time; never more than its declared size. Once all
    are read, the CRC and the end of the compressed data are checked (an error then)."""
    offset = e.data
    left, budget, crc = e.compressed_size, e.size, 0
    inflate = zlib.decompressobj(-15) if e.method == _DEFLATED else None
    try:
        while left or (inflate is not None and inflate.unconsumed_tail):
            if inflate is not None and inflate.unconsumed_tail:
                chunk = inflate.unconsumed_tail
            else:
                f.seek(offset)
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    raise corrupt(f"{e.name!r} ends early")
                left -= len(chunk)
                offset += len(chunk)
            if inflate is not None:
                chunk = inflate.decompress(chunk, min(budget + 1, _CHUNK))
            if len(chunk) > budget:
                raise corrupt(f"{e.name!r} holds more than the {e.size:,} bytes it declares")
            budget -= len(chunk)
            crc = zlib.crc32(chunk, crc)
            yield chunk
            if inflate is not None and inflate.eof:
                break
    except zlib.error as err:
        raise corrupt(f"{e.name!r} does not inflate: {err}") from err
    if inflate is not None and (not inflate.eof or left or inflate.unused_data
                                or inflate.unconsumed_tail):
        raise corrupt(f"the compressed data of {e.name!r} does not end where declared")
    if budget:
        raise corrupt(f"{e.name!r} holds fewer than the {e.size:,} bytes it declares")
    if crc != e.crc:
        raise corrupt(f"{e.name!r} fails its CRC check")
