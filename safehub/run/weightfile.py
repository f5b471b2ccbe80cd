"""A weights file as the guard handles it: hashed as it is written (no second read), its
stat identity (what no write leaves as it was), hashed whole, deleted when refused."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

__all__ = ["Hashing", "delete", "named_safetensors", "same_file", "sha256_of", "stat_key"]


def stat_key(st: os.stat_result) -> list[int]:
    """A file's stat identity: size, mtime, ctime and inode."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class Hashing:
    """A file being downloaded into, hashed as it is written: by a thread of its own, so
    that SHA-256 (which releases the interpreter lock) runs beside the network's reads
    instead of after each (the chunks are immutable ``bytes``; at most ``_AHEAD`` wait).
    The transport rewinds the file to its start on a retry, and the hash starts over."""

    _AHEAD = 64

    def __init__(self, out: Any) -> None:
        self._out = out
        self._start()

    def _start(self) -> None:
        import queue
        import threading

        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(self._AHEAD)
        self._thread = threading.Thread(target=hash_chunks, args=(self._hash, self._queue),
                                        name="safehub-sha256", daemon=True)
        self._thread.start()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def write(self, chunk: bytes) -> int:
        self._queue.put(chunk if type(chunk) is bytes else bytes(chunk))
        written: int = self._out.write(chunk)
        return written

    def seek(self, offset: int, whence: int = 0) -> int:
        if (offset, whence) != (0, 0):
            import io

            raise io.UnsupportedOperation("a hashed download only starts over")
        self._stop()
        self._start()
        moved: int = self._out.seek(0)
        return moved

    def truncate(self, size: int | None = None) -> int:
        cut: int = self._out.truncate(size)
        return cut

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        """End the hashing thread (the download ended, or failed)."""
        self._stop()

    def hexdigest(self) -> str:
        self._stop()
        return self._hash.hexdigest()


def hash_chunks(h: Any, chunks: Any) -> None:
    while (chunk := chunks.get()) is not None:
        h.update(chunk)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(1 << 20)
        view = memoryview(buffer)
        while n := f.readinto(buffer):
            h.update(view[:n])
    return h.hexdigest()


def same_file(seen: dict[str, Any] | None, path: Path) -> bool:
    """Whether ``path`` is the file recorded in ``seen``, unchanged since (its stat
    identity: size, mtime, ctime and inode, which no write leaves as they were)."""
    if not seen or seen.get("file") != str(path):
        return False
    try:
        return seen.get("stat") == stat_key(path.stat())
    except OSError:
        return False


def named_safetensors(url: str, path: Path) -> bool:
    return path.name.endswith(".safetensors") or urlparse(url).path.endswith(".safetensors")


def delete(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
