"""The kernel's inotify and the filesystem type of a path, through ctypes (Linux only).

Only what :mod:`safehub.store.cache.quiet` needs: an instance that never blocks, watches
on folders, the events read back, and ``statfs``'s ``f_type``. Every call returns None or
raises ``OSError`` where the kernel says no, and the caller falls back to its scan.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Iterator

__all__ = ["CHANGES", "IGNORED", "OVERFLOW", "add_watch", "events", "fs_type", "init"]

# What changes a folder's entries or its own stat data (inotify(7)); the kernel adds
# IN_IGNORED, IN_Q_OVERFLOW and IN_UNMOUNT by itself.
_IN_ATTRIB, _IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE = 0x4, 0x40, 0x80, 0x100
_IN_DELETE, _IN_DELETE_SELF, _IN_MOVE_SELF = 0x200, 0x400, 0x800
_IN_ONLYDIR, _IN_DONT_FOLLOW = 0x01000000, 0x02000000
CHANGES = (_IN_ATTRIB | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
           | _IN_DELETE_SELF | _IN_MOVE_SELF)
IGNORED, OVERFLOW = 0x8000, 0x4000
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.inotify_init1.restype = ctypes.c_int
            libc.inotify_add_watch.restype = ctypes.c_int
            libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
            libc.statfs.restype = ctypes.c_int
            libc.statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)
        except (OSError, AttributeError):
            return None
        _libc = libc
    return _libc


def _failed() -> OSError:
    number = ctypes.get_errno()
    return OSError(number, os.strerror(number))


def init() -> int | None:
    """A new inotify instance (non-blocking, closed on exec), or None where there is none."""
    libc = _lib()
    if libc is None:
        return None
    fd = int(libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
    if fd < 0:
        raise _failed()
    return fd


def add_watch(fd: int, path: str) -> int:
    """Watch the folder ``path`` (not a link to one) for :data:`CHANGES`; its descriptor."""
    libc = _lib()
    assert libc is not None
    wd = int(libc.inotify_add_watch(fd, os.fsencode(path),
                                    CHANGES | _IN_ONLYDIR | _IN_DONT_FOLLOW))
    if wd < 0:
        raise _failed()
    return wd


def events(fd: int) -> Iterator[tuple[int, int]]:
    """The events waiting on ``fd`` as ``(wd, mask)``, without blocking."""
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size + length
            yield wd, mask


def fs_type(path: str) -> int | None:
    """``statfs(2)``'s ``f_type`` of the filesystem holding ``path`` (its first field on
    every Linux ABI), or None."""
    libc = _lib()
    if libc is None:
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return int(ctypes.c_long.from_buffer(buf).value) & 0xFFFFFFFF
