"""Compiled modules of verified trees, kept in the user's data dir: never in the cache.

safehub reads no bytecode from a verified tree and writes none into it: a ``.pyc`` there
would run on the next import in place of the source, unchecked (docs/threat-model.md).
Without a store of its own, every fresh process would compile every module of a repo
again (a real repo such as pytorch-image-models: 284 files, about 0.8 s of CPU).

So the code object compiled from a module's source is kept here, in
``<data_dir>/bytecode/<key>``, under a key that is a hash of everything the compiler was
given (:func:`key`): the bytecode's magic number, the path compiled (what the code object
carries as ``co_filename``), the optimisation level and the exact source bytes read. An
entry is a pure function of what was read: a changed file has a new key, and what runs
for a file is what its bytes compile to. The source is still read on every import (and
checked as it is opened, as any file of a verified tree), only its compilation is saved.

The folder is the user's own, as the records beside it (:mod:`safehub.store.records`):
whoever can write it can write the user's consent records too (docs/threat-model.md).
An entry that cannot be read back as a code object (cut short by a crash, or not one) is
ignored and written again. Writes are best effort: a read-only data dir (a job under
``safehub run --confine``, for which the data dir is read-only) only means no store.

Size: one entry per version of each module loaded; the store is emptied by every
``safehub cache clear``, and by a process that finds it holding more than
:data:`MAX_ENTRIES` entries when it first writes one.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import marshal
import os
import sys
import types
from pathlib import Path

__all__ = ["MAX_ENTRIES", "BytecodeStore", "key"]

MAX_ENTRIES = 20_000
"""More entries than this, and the next process that compiles a module starts the store
afresh (a few hundred MB of code objects at most)."""


def key(path: str, source: bytes, optimize: int | None = None) -> str:
    """The store key of ``source`` (the exact bytes read) compiled as ``path`` at
    ``optimize`` (the interpreter's ``-O`` level when None), for this Python's bytecode.

    >>> key("/t/a.py", b"x = 1\\n") == key("/t/a.py", b"x = 1\\n") != key("/t/b.py", b"x = 1\\n")
    True
    """
    level = sys.flags.optimize if optimize is None else optimize
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    digest.update(b"\0%d\0%s\0" % (level, os.fsencode(path)))
    digest.update(source)
    return digest.hexdigest()


class BytecodeStore:
    """Compiled modules under ``<data_dir>/bytecode``, one file a key."""

    FOLDER = "bytecode"
    KEEPS = "compiled modules of verified trees"

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / self.FOLDER
        self._checked_size = False

    def read(self, name: str) -> types.CodeType | None:
        """The code object stored under ``name``; None if there is none, or if what is
        there is not one (cut short, or other data): then it is compiled and written
        again."""
        try:
            fd = os.open(os.path.join(self.root, name), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                code = marshal.loads(f.read())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def write(self, name: str, code: types.CodeType) -> bool:
        """Store ``code`` under ``name`` (a temp file made with ``O_EXCL``, read-only, then
        renamed into place). False, and nothing left behind, where it cannot be written."""
        try:
            self._make_room()
            data = marshal.dumps(code)
            tmp = os.path.join(self.root, f".{name}.{os.getpid()}.{os.urandom(4).hex()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o400)
        except (OSError, ValueError):
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(self.root, name))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False
        return True

    def _make_room(self) -> None:
        """Make the folder (the user's only); on the first write of this process, empty it
        if it holds more than :data:`MAX_ENTRIES` entries."""
        if self._checked_size:
            return
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        with os.scandir(self.root) as entries:
            count = sum(1 for _ in entries)
        if count > MAX_ENTRIES:
            self.clear()
        self._checked_size = True

    def clear(self) -> None:
        """Remove every entry (``safehub cache clear``); a missing store, or one this
        process cannot change, is left as it is (it is only a cache of compile work)."""
        with contextlib.suppress(OSError), os.scandir(self.root) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
