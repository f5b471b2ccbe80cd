"""The files' bytes, inflated, checked and hashed in one pass, on a helper thread.

:func:`decoded` yields, in the order asked for, each file's data in pieces; the last
piece of a file carries its :class:`~safehub.digest.FileEntry` (size, SHA-256, git blob
id). For a large archive the work runs on two helper threads, each taking every other
file (zlib and hashlib let go of the GIL), while the caller writes, with bounded queues
between them; any error reaches the caller, and closing the iterator stops the helpers.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple

from safehub.digest import MODE_EXEC, MODE_FILE, FileEntry
from safehub.verify.archive._plan import Item
from safehub.verify.archive._zipfile import chunks, corrupt, read_entry

__all__ = ["Piece", "decoded"]

_WHOLE = 1 << 20  # files up to this size come in one piece
_BATCH = 1 << 20  # pieces handed over together, up to this many bytes
_THREAD = 8 << 20  # below this much data, no helper thread
_WORKERS = 2


class Piece(NamedTuple):
    """Some bytes of ``item``; ``entry`` is set on its last piece."""

    item: Item
    data: bytes
    entry: FileEntry | None


def _mode(item: Item) -> str:
    return MODE_EXEC if item.kind == "exec" else MODE_FILE


def _pieces(f: BinaryIO, items: Sequence[Item]) -> Iterator[Piece]:
    for item in items:
        if item.entry.size <= _WHOLE:
            data = read_entry(f, item.entry)
            blob = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
            blob.update(data)
            yield Piece(item, data, FileEntry(item.path, _mode(item), len(data),
                                              hashlib.sha256(data).hexdigest(),
                                              blob.hexdigest()))
            continue
        sha256 = hashlib.sha256()
        blob = hashlib.sha1(b"blob %d\0" % item.entry.size, usedforsecurity=False)
        for chunk in chunks(f, item.entry):
            sha256.update(chunk)
            blob.update(chunk)
            yield Piece(item, chunk, None)
        yield Piece(item, b"", FileEntry(item.path, _mode(item), item.entry.size,
                                         sha256.hexdigest(), blob.hexdigest()))


class _Helper:
    """Runs :func:`_pieces` on a thread, handing batches over through a bounded queue."""

    def __init__(self, f: BinaryIO, zip_path: Path, items: Sequence[Item]) -> None:
        self._identity = _identity(f)
        self._queue: queue.Queue[list[Piece] | BaseException | None] = queue.Queue(8)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(zip_path, items),
                                        name="safehub-extract", daemon=True)
        self._thread.start()

    def _put(self, item: list[Piece] | BaseException | None) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, zip_path: Path, items: Sequence[Item]) -> None:
        try:
            with open(zip_path, "rb", buffering=0) as f:
                if _identity(f) != self._identity:
                    raise corrupt("the archive was replaced while it was read")
                batch: list[Piece] = []
                size = 0
                for piece in _pieces(f, items):
                    batch.append(piece)
                    size += len(piece.data) + 256
                    if size >= _BATCH:
                        if not self._put(batch):
                            return
                        batch, size = [], 0
                self._put(batch)
                self._put(None)
        except BaseException as e:  # handed to the caller, raised there
            self._put(e)

    def __iter__(self) -> Iterator[Piece]:
        while True:
            got = self._queue.get()
            if got is None:
                return
            if isinstance(got, BaseException):
                raise got
            yield from got

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _identity(f: BinaryIO) -> tuple[int, int, int, int]:
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def decoded(f: BinaryIO, zip_path: Path, items: Sequence[Item],
            ) -> Generator[Piece, None, None]:
    """The pieces of ``items`` (files), in order; see the module docstring."""
    workers = min(_WORKERS, os.cpu_count() or 1)
    if sum(i.entry.size for i in items) < _THREAD:
        yield from _pieces(f, items)
        return
    # Each helper takes every n-th file; the pieces are put back in order here.
    helpers = [_Helper(f, zip_path, items[k::workers]) for k in range(workers)]
    streams = [iter(h) for h in helpers]
    try:
        for k in range(len(items)):
            for piece in streams[k % workers]:
                yield piece
                if piece.entry is not None:
                    break
    finally:
        for helper in helpers:
            helper.close()
