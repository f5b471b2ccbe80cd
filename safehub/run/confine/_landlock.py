"""A small binding to the kernel's Landlock (three system calls and ``prctl``), by ctypes.

Why not a library: the Python bindings on PyPI were checked (README, "Dependencies"):
``landlock`` is an alpha with no network rules; ``landlockpy`` (0.2) and ``py-landlock``
(0.1) are months old, from single authors, and drop rights the kernel lacks by default
("best effort"), where safehub must refuse instead. The kernel interface is three calls
with fixed numbers on every architecture, and the structures below.

Rights (``include/uapi/linux/landlock.h``): file-system rights from ABI 1, ``REFER``
from 2, ``TRUNCATE`` from 3, TCP ``bind``/``connect`` from 4, ``IOCTL_DEV`` from 5, scopes
(abstract Unix sockets, signals) from 6.

>>> abi() >= 0
True
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["ABI_NEEDED", "FS", "NET", "SCOPE", "LandlockError", "abi", "create", "enforce",
           "open_path", "restrict"]

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38
_OPENAT2, _AT_FDCWD = 437, -100  # openat2(2): the same number on every architecture
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS = 0x02, 0x04


class FS:
    """File-system access rights."""

    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13      # ABI 2
    TRUNCATE = 1 << 14   # ABI 3
    FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # what a rule on a file may hold


class NET:
    BIND_TCP = 1 << 0
    CONNECT_TCP = 1 << 1


class SCOPE:
    ABSTRACT_UNIX_SOCKET = 1 << 0
    SIGNAL = 1 << 1


#: The ABI each right needs.
ABI_NEEDED = {"refer": 2, "truncate": 3, "tcp": 4, "scope": 6}


class LandlockError(OSError):
    """A Landlock call failed (``errno`` says why)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc: ctypes.CDLL | None = None


def _syscall(*args: object) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
    result = int(_libc.syscall(*args))
    if result < 0:
        number = ctypes.get_errno()
        raise LandlockError(number, os.strerror(number))
    return result


def open_path(path: str) -> int:
    """``path`` opened as a location (``O_PATH``, close-on-exec) without following a
    symbolic link at any component (``openat2`` with ``RESOLVE_NO_SYMLINKS``): what a rule
    is built from is the folder the path names now, never where a link points. A link
    anywhere on the way is ``OSError(ELOOP)``.

    >>> import os; os.close(open_path("/")) is None
    True
    """
    if not os.path.isabs(path):
        raise OSError(errno.EINVAL, f"not an absolute path: {path!r}")
    how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0,
                   _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    try:
        return _syscall(_OPENAT2, _AT_FDCWD, os.fsencode(path), ctypes.byref(how),
                        ctypes.c_size_t(ctypes.sizeof(how)))
    except LandlockError as e:
        if e.errno != errno.ENOSYS:
            raise OSError(e.errno, e.strerror, path) from None
    # Before Linux 5.6 (no openat2; such kernels have no Landlock ABI 4 either): one
    # component at a time, none of them followed.
    fd = os.open("/", os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
    try:
        for part in [p for p in path.split("/") if p]:
            if part == "..":
                raise OSError(errno.EINVAL, "'..' in a granted path", path)
            nxt = os.open(part, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(errno.ELOOP, "a symbolic link on the way", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def abi() -> int:
    """The Landlock ABI the running kernel offers; 0 without Landlock (not Linux, not built
    in, or turned off at boot)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except LandlockError as e:
        if e.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
            return 0
        raise


def create(*, handled_fs: int, paths: Iterable[tuple[str, int]], handled_net: int = 0,
           ports: Iterable[int] = (), scoped: int = 0) -> int:
    """A ruleset (its descriptor, close-on-exec) with the rules: ``paths`` are (path,
    rights) pairs, each allowing its rights beneath the path; ``ports`` may be connected
    to. Anything of ``handled_fs`` / ``handled_net`` not allowed is refused once the
    ruleset is entered (:func:`enforce`); ``scoped`` confines abstract Unix sockets and
    signals to the domain. Raises :class:`LandlockError` (a path that cannot be opened:
    ``OSError``)."""
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = 8 if not (handled_net or scoped) else 16 if not scoped else 24
    ruleset = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                       ctypes.c_uint32(0))
    try:
        os.set_inheritable(ruleset, False)
        for path, rights in paths:
            fd = open_path(path)
            try:
                rule = _PathBeneath(rights, fd)
                _syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule),
                         ctypes.c_uint32(0))
            finally:
                os.close(fd)
        for port in ports:
            net = _NetPort(NET.CONNECT_TCP, port)
            _syscall(_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(net), ctypes.c_uint32(0))
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def enforce(ruleset: int) -> None:
    """Restrict the calling thread, and every process it starts from now on, to the
    ruleset; for good. Sets ``no_new_privs`` first (required without ``CAP_SYS_ADMIN``,
    and what a setuid program would otherwise escape by). Safe between ``fork`` and
    ``exec``: two system calls through a libc handle opened by :func:`create`."""
    assert _libc is not None
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise LandlockError(number, os.strerror(number))
    _syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0))


def restrict(**rules: Any) -> None:
    """:func:`create` and :func:`enforce` in this thread (the arguments of :func:`create`)."""
    ruleset = create(**rules)
    try:
        enforce(ruleset)
    finally:
        os.close(ruleset)
