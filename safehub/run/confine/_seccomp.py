"""The kernel's second engine for what Landlock cannot hold: a seccomp filter, built with
libseccomp (by ctypes) in the parent and loaded in the child between fork and exec.

Landlock holds paths, programs started by ``execve`` and TCP ports. It does not see the
kind of socket a job makes (an ``IPPROTO_MPTCP`` socket connects to any port), terminal
ioctls (``TIOCSTI`` queues input on the user's terminal), files on the kernel's internal
mounts (a ``memfd`` runs with ``execve("/proc/self/fd/N")``), ``io_uring`` (which does
system calls' work without the calls), or metadata changes (``chmod``, ``chown``,
``utime``, extended attributes, ``chattr``; Landlock ABI 7 holds none of them). The
filter below refuses those with ``EPERM`` and allows everything else: Landlock's refusals
are ``EACCES``, so the errno says which engine refused.

Why libseccomp and not BPF written by hand: libseccomp knows every architecture's
system call numbers and the checks a filter needs (the architecture of each call, the
x32 bit), and every Debian machine has it (``libseccomp2``). The Python binding it ships
(``python3-seccomp``) is not on PyPI, so safehub binds the C library's seven functions.

Allocation is not safe between fork and exec, so :func:`build` runs in the parent and
exports the filter as classic BPF (:class:`Program`); :meth:`Program.load` is three
calls (``prctl``, ``capset``, ``prctl``) on memory that is already there. It also drops
the capabilities that would reach past both engines (:data:`DROPPED_CAPABILITIES`).

>>> len(rules()) > 50 and all(r.syscall for r in rules())
True
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable, Sequence

from safehub._internal.frozen import Frozen

__all__ = ["DROPPED_CAPABILITIES", "REFUSED", "Program", "Rule", "SeccompError", "available",
           "build", "rules"]

REFUSED = ("sockets other than TCP and UDP over IPv4/IPv6, Unix and netlink-route "
           "sockets; io_uring; TIOCSTI/TIOCLINUX; memfds that could be executed; "
           "chmod, chown, utime, extended attributes and chattr on any file; the kernel "
           "keyrings; userfaultfd")
"""What the filter refuses, in one line (``--dry-run``)."""

# libseccomp's constants (seccomp.h of libseccomp 2.4 and later)
_ACT_ALLOW = 0x7FFF0000
_ACT_KILL_PROCESS = 0x80000000
_ACT_ERRNO = 0x00050000
_ATTR_ACT_BADARCH = 2
_NE, _GT, _MASKED_EQ = 1, 6, 7
_LOW32 = 0xFFFFFFFF  # the kernel reads an ``int`` argument from the register's low half

# the kernel's constants (the same on every architecture)
_PR_SET_NO_NEW_PRIVS, _PR_GET_SECCOMP, _PR_SET_SECCOMP = 38, 21, 22
_SECCOMP_MODE_FILTER = 2
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_SOCK_STREAM, _SOCK_DGRAM, _SOCK_TYPE_MASK = 1, 2, 0xF  # above the mask: CLOEXEC, NONBLOCK
_IPPROTO_TCP, _IPPROTO_UDP, _NETLINK_ROUTE = 6, 17, 0
_MFD_NOEXEC_SEAL, _MFD_EXEC = 0x8, 0x10

#: Calls libseccomp 2.5.4 may not know by name, with their numbers in the table that every
#: architecture shares from 424 on (alpha, ia64 and mips number them otherwise).
_UNIFIED = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469}
_OWN_NUMBERS = ("alpha", "ia64", "mips")

#: Changes of a file's metadata. seccomp cannot see paths, so these are refused on every
#: file, on paths and on descriptors alike (a file opened read-only can be ``fchmod``-ed).
#: Names an architecture lacks (``chmod`` on arm64, ``chown32`` on x86_64) are skipped.
_METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
             "fchownat", "chown32", "fchown32", "lchown32", "utime", "utimes", "futimesat",
             "utimensat", "utimensat_time64", "setxattr", "lsetxattr", "fsetxattr",
             "setxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
             "file_setattr")

#: Neither held by Landlock nor needed by an honest job: io_uring does the work of system
#: calls (making a socket, an ioctl on some files) without the calls the rules see; the kernel
#: keyrings are not namespaced and outlive the job (a key added to the user keyring is
#: there for the user's next login); userfaultfd is an exploit's way to stop the kernel in
#: the middle of a copy. ``socketcall`` (i386, s390x, ppc) hides a socket's arguments in
#: memory, where a filter cannot read them.
_OUTRIGHT = ("io_uring_setup", "io_uring_enter", "io_uring_register", "add_key",
             "request_key", "keyctl", "userfaultfd", "socketcall")


class SeccompError(OSError):
    """libseccomp or the kernel refused a step (``errno`` says why)."""


class Rule(Frozen):
    """Refuse ``syscall`` when every comparison holds: ``(argument, operator, datum_a,
    datum_b)`` in libseccomp's terms (``datum_a`` is the mask of ``MASKED_EQ``)."""

    syscall: str
    compare: tuple[tuple[int, int, int, int], ...] = ()


def _low32(arg: int, value: int) -> tuple[int, int, int, int]:
    return (arg, _MASKED_EQ, _LOW32, value)


def _not_in(arg: int, allowed: Iterable[int], width: int = 0
            ) -> list[tuple[int, int, int, int]]:
    """Comparisons (one rule each) that together match every value of argument ``arg``
    that the kernel reads as outside ``allowed``: its low ``width`` bits (a field), or,
    with ``width`` 0, the ``int`` in its low 32 bits.

    libseccomp takes one comparison per argument in a rule, so "not in a set" is written
    as aligned blocks of the values around the set (``MASKED_EQ``), plus, for an ``int``,
    one unsigned 64-bit ``GT`` above the set's largest value, which also matches every
    value with any of the high 32 bits set (the kernel would read only the low half).

    >>> [(hex(m), v) for _, op, m, v in _not_in(1, {1, 2}, width=4)]
    [('0xf', 0), ('0xf', 3), ('0xc', 4), ('0x8', 8)]
    >>> [op == _GT for _, op, _, _ in _not_in(2, {0, 6})]
    [True, False, False, False]
    """
    kept = set(allowed)
    top = max(kept)
    field = (1 << width) - 1 if width else _LOW32
    found: list[tuple[int, int, int, int]] = [] if width else [(arg, _GT, top, 0)]

    def cover(start: int, size: int) -> None:
        if not width and start > top:
            return  # the GT comparison holds these
        if not any(start <= v < start + size for v in kept):
            found.append((arg, _MASKED_EQ, field & ~(size - 1), start))
        elif size > 1:
            cover(start, size // 2)
            cover(start + size // 2, size // 2)

    cover(0, 1 << (width or top.bit_length()))
    return found


def _sockets(call: str) -> list[Rule]:
    """``socket``/``socketpair`` (domain, type, protocol): Unix sockets of any type; TCP
    (``SOCK_STREAM`` with protocol 0 or ``IPPROTO_TCP``, so not MPTCP or SCTP) and UDP
    (``SOCK_DGRAM`` with 0 or ``IPPROTO_UDP``, so not ICMP or UDP-Lite) over IPv4 and
    IPv6; netlink route sockets (glibc's ``getaddrinfo`` asks them for the addresses of
    the machine). Raw, packet, vsock, Bluetooth, RDS, ... sockets are refused."""
    found = [Rule(call, (c,)) for c in _not_in(0, {_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK})]
    for family in (_AF_INET, _AF_INET6):
        inet = _low32(0, family)
        found += [Rule(call, (inet, c)) for c in _not_in(1, {_SOCK_STREAM, _SOCK_DGRAM}, 4)]
        for kind, protocol in ((_SOCK_STREAM, _IPPROTO_TCP), (_SOCK_DGRAM, _IPPROTO_UDP)):
            typed = (1, _MASKED_EQ, _SOCK_TYPE_MASK, kind)
            found += [Rule(call, (inet, typed, c)) for c in _not_in(2, {0, protocol})]
    # a netlink protocol is an int: anything but exactly 0 in all 64 bits is refused
    found.append(Rule(call, (_low32(0, _AF_NETLINK), (2, _NE, _NETLINK_ROUTE, 0))))
    return found


def _ioctls() -> list[Rule]:
    """``ioctl`` requests that write to what Landlock does not hold, compared on the low
    32 bits (the kernel takes ``unsigned int cmd``: ``0x1_0000_5412`` is ``TIOCSTI``).
    ``TIOCSTI`` queues input on a terminal (typed into the user's shell after the job);
    ``TIOCLINUX`` pastes a virtual console's selection as input; ``FS_IOC_SETFLAGS`` and
    ``FS_IOC_FSSETXATTR`` are ``chattr``, a metadata change on a file opened read-only."""
    import termios

    requests = [termios.TIOCSTI, getattr(termios, "TIOCLINUX", 0x541C)]
    if not os.uname().machine.startswith(("alpha", "mips", "ppc", "powerpc", "sparc")):
        def write(kind: str, number: int, size: int) -> int:  # _IOW in asm-generic/ioctl.h
            return (1 << 30) | (size << 16) | (ord(kind) << 8) | number
        # FS_IOC_SETFLAGS is declared with a long, FS_IOC32_SETFLAGS with an int
        requests += [write("f", 2, ctypes.sizeof(ctypes.c_long)), write("f", 2, 4),
                     write("X", 32, 28)]  # FS_IOC_FSSETXATTR, struct fsxattr
    # else: these architectures encode ioctl numbers their own way; TIOCSTI and TIOCLINUX
    # come from Python's termios, chattr stays open there (docs/confine.md)
    return [Rule("ioctl", (_low32(1, r),)) for r in dict.fromkeys(requests)]


def rules() -> list[Rule]:
    """Every rule of the filter; a call that no rule matches is allowed."""
    found = _sockets("socket") + _sockets("socketpair") + _ioctls()
    # A memfd is a file on the kernel's internal tmpfs mount, where Landlock checks no
    # path: it could be filled with a program and run with execve("/proc/self/fd/N") or
    # execveat(fd, "", AT_EMPTY_PATH). Only memfds sealed against execution may be made
    # (MFD_NOEXEC_SEAL: mode without x bits, F_SEAL_EXEC; Linux 6.3), never MFD_EXEC.
    found += [Rule("memfd_create", ((1, _MASKED_EQ, _MFD_NOEXEC_SEAL, 0),)),
              Rule("memfd_create", ((1, _MASKED_EQ, _MFD_EXEC, _MFD_EXEC),))]
    found += [Rule(name) for name in (*_METADATA, *_OUTRIGHT)]
    return found


class _Compare(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


_library: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    """libseccomp, opened once (``OSError`` if it is not installed)."""
    global _library
    if _library is None:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
        lib.seccomp_version.restype = ctypes.POINTER(_Version)
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                               ctypes.c_uint, ctypes.POINTER(_Compare)]
        lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        _library = lib
    return _library


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.restype = libc.capget.restype = libc.capset.restype = ctypes.c_int
    return libc


def available() -> str:
    """libseccomp's version, once the library loads and the kernel filters system calls;
    :class:`SeccompError` (``OSError`` if the library is missing) otherwise."""
    version = _lib().seccomp_version().contents
    if (version.major, version.minor) < (2, 4):  # SCMP_ACT_KILL_PROCESS
        raise SeccompError(0, f"libseccomp {version.major}.{version.minor} is older than 2.4")
    if _libc().prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        number = ctypes.get_errno()
        raise SeccompError(number, f"the kernel does not filter system calls "
                                   f"({os.strerror(number)})")
    return f"{version.major}.{version.minor}.{version.micro}"


def _number(lib: ctypes.CDLL, name: str) -> int | None:
    """The native number of system call ``name``, or None where this architecture has no
    such call (libseccomp answers -1, or a negative pseudo number for a call that only
    other architectures have, such as ``socketcall`` on x86_64)."""
    number = int(lib.seccomp_syscall_resolve_name(name.encode()))
    if number >= 0:
        return number
    if name in _UNIFIED and not os.uname().machine.startswith(_OWN_NUMBERS):
        return _UNIFIED[name]  # newer than this libseccomp; the kernel may know it
    return None


def _check(result: int, step: str) -> None:
    if result < 0:
        raise SeccompError(-result, f"libseccomp: {step}: {os.strerror(-result)}")


def build(refused: Sequence[Rule], error: int = 1) -> bytes:
    """The filter as classic BPF for the native architecture: ``refused`` calls fail with
    ``error`` (``EPERM``), every other call is allowed.

    Only the native ABI is in the filter. A call made through another ABI the kernel
    offers, i386's ``int 0x80`` on x86_64 or a call number with x32's bit (0x40000000),
    takes libseccomp's bad-architecture branch, which is set to kill the process: the
    filter's first instructions compare the architecture, then, on x86_64, jump to that
    branch for any number at or above 0x40000000 (checked in tests/test_confine_seccomp.py
    on the exported program and, for ``int 0x80``, on the kernel)."""
    lib = _lib()
    context = lib.seccomp_init(_ACT_ALLOW)
    if not context:
        raise SeccompError(0, "libseccomp: seccomp_init failed")
    try:
        _check(lib.seccomp_attr_set(context, _ATTR_ACT_BADARCH, _ACT_KILL_PROCESS),
               "the bad-architecture action")
        for rule in refused:
            number = _number(lib, rule.syscall)
            if number is None:
                continue
            compare = (_Compare * len(rule.compare))(*(_Compare(*c) for c in rule.compare))
            _check(lib.seccomp_rule_add_array(context, _ACT_ERRNO | error, number,
                                              len(rule.compare), compare),
                   f"rule for {rule.syscall}")
        return _export(lib, context)
    finally:
        lib.seccomp_release(context)


def _export(lib: ctypes.CDLL, context: int) -> bytes:
    """libseccomp 2.5 exports only to a descriptor: a memfd sealed against execution (a
    plain one would be refused in a job that is itself confined), else a temporary file."""
    import tempfile

    try:
        fd = os.memfd_create("safehub-seccomp", os.MFD_CLOEXEC | _MFD_NOEXEC_SEAL)
    except OSError:  # before Linux 6.3
        with tempfile.TemporaryFile() as f:
            return _export_to(lib, context, f.fileno())
    try:
        return _export_to(lib, context, fd)
    finally:
        os.close(fd)


def _export_to(lib: ctypes.CDLL, context: int, fd: int) -> bytes:
    _check(lib.seccomp_export_bpf(context, fd), "export")
    size = os.lseek(fd, 0, os.SEEK_END)
    chunks, done = [], 0
    while done < size:
        chunk = os.pread(fd, size - done, done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    code = b"".join(chunks)
    if not code or len(code) % 8:
        raise SeccompError(0, f"libseccomp exported {len(code)} bytes, not a BPF program")
    return code


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_CAPABILITY_VERSION_3 = 0x20080522

#: Capabilities that reach past both engines, dropped from a job that has them (root
#: outside a container): CAP_SYS_ADMIN (21) and CAP_CHECKPOINT_RESTORE (40) open
#: ``/proc/*/map_files/``, where a shared memory mapping is a file on the kernel's internal
#: mount that ``execve`` runs and Landlock does not check; CAP_SYS_MODULE (16) loads kernel
#: code; CAP_SYS_RAWIO (17) does port I/O; CAP_BPF (39) and CAP_PERFMON (38) load BPF
#: programs that write other processes' memory; CAP_NET_ADMIN (12) changes routes and
#: firewalls through the netlink route socket the filter allows.
DROPPED_CAPABILITIES = (12, 16, 17, 21, 38, 39, 40)


class Program:
    """A filter exported by :func:`build`, held in memory with everything :meth:`load`
    needs, so that loading it allocates nothing; with it, the capabilities of
    :data:`DROPPED_CAPABILITIES` this process has (read now: the job is a fork of it)."""

    def __init__(self, code: bytes) -> None:
        self.code = code
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._fprog = _SockFprog(len(code) // 8, ctypes.addressof(self._buffer))
        self._libc = libc = _libc()
        self._no_new_privs = (ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1),
                              ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        self._set = (ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                     ctypes.c_void_p(ctypes.addressof(self._fprog)), ctypes.c_ulong(0),
                     ctypes.c_ulong(0))
        self._header = _CapHeader(_CAPABILITY_VERSION_3, 0)
        self._header_ref = ctypes.byref(self._header)
        self._caps = (_CapData * 2)()
        _done(libc.capget(self._header_ref, self._caps))
        self.drops = False
        for cap in DROPPED_CAPABILITIES:
            word, bit = self._caps[cap // 32], 1 << (cap % 32)
            self.drops |= bool(word.permitted & bit)
            word.effective &= ~bit
            word.permitted &= ~bit
            word.inheritable &= ~bit

    def load(self) -> None:
        """Filter every system call of the calling thread, and of every process it starts
        from now on, for good: ``no_new_privs`` first (as the kernel requires of a process
        without ``CAP_SYS_ADMIN``, and so that no ``execve`` gives back what is dropped;
        Landlock has set it already in a confined job), then the capabilities dropped,
        then the filter."""
        _done(self._libc.prctl(*self._no_new_privs))
        if self.drops:
            _done(self._libc.capset(self._header_ref, self._caps))
        _done(self._libc.prctl(*self._set))


def _done(result: int) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise SeccompError(number, os.strerror(number))
