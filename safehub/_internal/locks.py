"""Cross-process locks on files (:func:`exclusive`).

Where the platform and the filesystem have ``flock``, the kernel's lock on an open file:
other processes and other threads of this one wait for it, and it goes with its holder (a
killed process leaves no stale lock). Elsewhere (Windows, a filesystem that refuses
``flock``) the filelock package, imported only then: importing it costs a cold load more
than everything else its locks do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator

__all__ = ["LockTimeout", "exclusive"]

_POLL = 0.05
"""Seconds between two tries while another holds the lock."""
_BUSY = frozenset({errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK})
"""What ``flock`` answers when another holds the lock (some filesystems say EACCES)."""


class LockTimeout(Exception):
    """Another held the lock for the whole timeout."""


@contextlib.contextmanager
def exclusive(path: str, timeout: float) -> Iterator[None]:
    """Hold the lock file ``path`` (created if missing, never removed) while the block runs,
    against every other holder, in this process or another; wait at most ``timeout``
    seconds for it (0: one try; negative: for ever), else raise :class:`LockTimeout`.

    >>> import tempfile
    >>> lock = os.path.join(tempfile.mkdtemp(), "x.lock")
    >>> with exclusive(lock, 1):  # doctest: +ELLIPSIS
    ...     with exclusive(lock, 0):
    ...         pass
    Traceback (most recent call last):
    ...
    safehub._internal.locks.LockTimeout: .../x.lock
    """
    fd = _flock(path, timeout)
    if fd is None:
        with _filelock(path, timeout):
            yield
        return
    try:
        yield
    finally:
        os.close(fd)  # the lock goes with the file's last descriptor


def _flock(path: str, timeout: float) -> int | None:
    """The lock file's descriptor, holding its ``flock``; None where there is no flock."""
    try:
        import fcntl
    except ImportError:  # Windows
        return None
    # 0o666 less the umask, as filelock makes it: a cache a team shares (umask 002) stays so.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    deadline = None if timeout < 0 else time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError as e:
                if e.errno not in _BUSY:
                    break  # this filesystem has no flock (ENOLCK, ENOSYS, EOPNOTSUPP)
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout(path)
            time.sleep(_POLL)
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


@contextlib.contextmanager
def _filelock(path: str, timeout: float) -> Iterator[None]:
    import filelock

    lock = filelock.FileLock(path, timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise LockTimeout(path) from None
    try:
        yield
    finally:
        lock.release()
