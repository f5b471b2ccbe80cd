"""A file being downloaded into, hashed as it is written: the one hashing of a download
that is checked by its SHA-256 (a weights file, an OCI blob), so that nothing is read back."""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["Hashing"]


class Hashing:
    """A file being downloaded into, hashed as it is written (no second read).

    The transport hands over views of the buffers it reads into (a MiB each, reused: no
    copy is made here either), from a thread of its own while it reads the next piece
    (:func:`safehub.sources.connections.read_body`); SHA-256 lets go of the interpreter
    lock, so where a core is free the hashing costs no wall time (bench/bench_weights.py).
    The transport rewinds the file to its start on a retry, and the hash starts over; a
    resumed download seeks to the end of what was written (the hash so far holds) and goes
    on.
    """

    def __init__(self, out: Any) -> None:
        self._out = out
        self._hash = hashlib.sha256()
        self._size = 0

    def write(self, chunk: bytes | memoryview) -> int:
        self._hash.update(chunk)
        self._size += len(chunk)
        view, left = memoryview(chunk), len(chunk)
        while left:  # a raw file may take a part of a chunk
            n = self._out.write(view[-left:])
            left -= n
        return len(chunk)

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0 and offset == self._size:  # a resumed download goes on
            moved: int = self._out.seek(offset)
            return moved
        if (offset, whence) != (0, 0):
            import io

            raise io.UnsupportedOperation("a hashed download only starts over or goes on")
        self._hash, self._size = hashlib.sha256(), 0
        moved = self._out.seek(0)
        return moved

    def truncate(self, size: int | None = None) -> int:
        cut: int = self._out.truncate(size)
        return cut

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        """Nothing to end (kept for callers that close it when the download ends)."""

    @property
    def size(self) -> int:
        """The bytes written (and hashed)."""
        return self._size

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
