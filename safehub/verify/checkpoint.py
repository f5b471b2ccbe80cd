"""What a checkpoint file is, from its bytes: safetensors (its header checked against the
file) or a pickle (torch's zip format, its legacy format, or any other bytes).

A safetensors file is an 8-byte little-endian header length ``N``, ``N`` bytes of a JSON
object (one entry per tensor: ``dtype``, ``shape``, ``data_offsets`` into the data section
that follows; an optional ``__metadata__`` of strings), then the data section. Before a
file is called safetensors, its header must tell the truth about the file: the header lies
inside the file, parses as JSON (no duplicate keys, no NaN), and the tensors' byte spans
cover the data section exactly, in order, without gaps or overlaps, each as long as its
dtype and shape say. safehub reads only the header (it does not need the ``safetensors``
package).

>>> import io, json, struct
>>> header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
>>> data = struct.pack("<Q", len(header)) + header + bytes(8)
>>> read_kind(io.BytesIO(data), len(data))
'safetensors'
>>> read_kind(io.BytesIO(b"PK\\x03\\x04" + bytes(20)), 24)
'pickle'
"""

from __future__ import annotations

import json
import math
import struct
from typing import IO, Any

__all__ = ["PICKLE", "SAFETENSORS", "CheckpointError", "file_kind", "read_kind"]

SAFETENSORS = "safetensors"
PICKLE = "pickle"
MAX_HEADER = 100_000_000
"""The largest header read (the ``safetensors`` package's own bound)."""

#: Bits per element of each dtype the safetensors format names.
_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
         "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
         "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


class CheckpointError(ValueError):
    """A file that claims to be safetensors (by its name, or by first bytes that are a
    header length fitting in the file, then ``{``) whose header does not describe it
    truthfully; the message says what is wrong."""


def file_kind(path: str, *, named: bool = False) -> str:
    """:data:`SAFETENSORS` or :data:`PICKLE` for the file at ``path``; ``named``: its name
    says safetensors, so anything else is a :class:`CheckpointError`."""
    with open(path, "rb") as f:
        import os

        return read_kind(f, os.fstat(f.fileno()).st_size, named=named)


def read_kind(f: IO[bytes], size: int, *, named: bool = False) -> str:
    """As :func:`file_kind`, for an open file of ``size`` bytes (read from its start)."""
    head = f.read(9)
    pickled = head[:4] == b"PK\x03\x04" or head[:1] == b"\x80"
    if not named and not _says_safetensors(head, size):
        return PICKLE
    try:
        _check(f, head, size)
    except CheckpointError:
        if pickled and not named:  # a pickle whose ninth byte happens to be '{'
            return PICKLE
        raise
    return SAFETENSORS


def _says_safetensors(head: bytes, size: int) -> bool:
    """The first bytes claim safetensors: a header length that fits in the file (and in
    :data:`MAX_HEADER`), then ``{``. Text or JSON never does (its first eight bytes read as
    a length beyond any file), nor do random bytes but for one file in 2**36 or more."""
    if len(head) < 9 or head[8:9] != b"{":
        return False
    length: int = struct.unpack("<Q", head[:8])[0]
    return _fits(length, size)


def _fits(length: int, size: int) -> bool:
    """A header of ``length`` bytes can be read (:data:`MAX_HEADER`) and lies inside a file
    of ``size`` bytes after its 8-byte length."""
    return length <= MAX_HEADER and 8 + length <= size


def _check(f: IO[bytes], head: bytes, size: int) -> None:
    if len(head) < 9:
        raise CheckpointError(f"it is {size} bytes long, too short for a safetensors header")
    (length,) = struct.unpack("<Q", head[:8])
    if not _fits(length, size):
        raise CheckpointError(f"its header says it is {length:,} bytes long, but the file "
                              f"has {size - 8:,} bytes after the length"
                              if length <= MAX_HEADER else
                              f"its header says it is {length:,} bytes long (the most "
                              f"read is {MAX_HEADER:,})")
    raw = head[8:] + f.read(length - 1)
    if len(raw) != length:
        raise CheckpointError("the file ended inside its header")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique,
                            parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"its header is not a JSON object ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError("its header is not a JSON object")
    _spans(header, size - 8 - length)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise CheckpointError(f"its header names {key!r} twice")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise CheckpointError(f"its header holds {name}, which JSON does not allow")


def _spans(header: dict[str, Any], data: int) -> None:
    """Each tensor's byte span is as long as its dtype and shape say, and together they
    cover the ``data`` bytes after the header exactly, in order."""
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
            isinstance(v, str) for v in metadata.values()):
        raise CheckpointError("its __metadata__ is not a table of strings")
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if not (isinstance(entry, dict) and set(entry) == {"dtype", "shape", "data_offsets"}):
            raise CheckpointError(f"tensor {name!r} is not described by exactly dtype, shape "
                                  "and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in _BITS:
            raise CheckpointError(f"tensor {name!r} has dtype {dtype!r}, which safetensors "
                                  "does not define")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise CheckpointError(f"tensor {name!r} has a shape that is not a list of "
                                  "non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise CheckpointError(f"tensor {name!r} has data_offsets that are not [begin, end] "
                                  "with 0 <= begin <= end")
        bits = math.prod(shape) * _BITS[dtype]
        if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
            raise CheckpointError(f"tensor {name!r} is {dtype} of shape {shape}, "
                                  f"{bits / 8:,g} bytes, but its data_offsets span "
                                  f"{offsets[1] - offsets[0]:,} bytes")
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise CheckpointError(f"tensor {name!r} starts at byte {begin:,} of the data, "
                                  f"where {end:,} was expected (a gap or an overlap)")
        end = stop
    if end != data:
        raise CheckpointError(f"its tensors span {end:,} bytes, but the data section after "
                              f"the header has {data:,}")
