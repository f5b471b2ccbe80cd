"""``safehub run --confine``: what Landlock cannot hold, the seccomp filter does. On real
parts: the machine's kernel, real sockets and listeners, a real pty, real memfds, and the
exported BPF program itself, run by a small interpreter against a model of how the
kernel reads each argument.

Each attack is shown refused inside a confined job (``EPERM``, nothing sent, written or
queued) and, where the machine lets it, succeeding without the filter; the honest job
works unchanged; the job runs in its own session and still gets the signals
``safehub run`` gets.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import pty
import select
import signal
import socket
import struct
import subprocess
import sys
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safehub.cli import main
from safehub.run.confine import _landlock, _seccomp
from tests.conftest import needs_torch


def _seccomp_missing() -> str:
    try:
        _seccomp.available()
    except OSError as e:
        return f"no seccomp filter here: {e}"
    return ""


needs_confine = pytest.mark.skipif(
    _landlock.abi() < 4 or bool(_seccomp_missing()),
    reason=_seccomp_missing() or f"the kernel offers Landlock ABI {_landlock.abi()}; "
    "confinement needs 4 (Linux 6.7)")

ALLOW, EPERM, KILL = 0x7FFF0000, 0x00050001, 0x80000000
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def number(name: str) -> int:
    found = _seccomp._number(_seccomp._lib(), name)
    assert found is not None, name
    return found


# -- the exported program, run by an interpreter ----------------------------------------------

def run_bpf(code: bytes, nr: int, args: tuple[int, ...] = (), arch: int | None = None) -> int:
    """What the filter answers for a call (the seccomp_data the kernel fills in): the
    subset of classic BPF that libseccomp writes; an unknown instruction is an error."""
    if arch is None:
        arch = AUDIT_ARCH[platform.machine()]
    full = [a % 2**64 for a in (*args, 0, 0, 0, 0, 0, 0)[:6]]
    data = struct.pack("<iIQ6Q", nr, arch, 0, *full)
    program = [struct.unpack_from("<HBBI", code, i) for i in range(0, len(code), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = program[pc]
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x54:  # and #k
            acc &= k
        elif op == 0x06:  # ret #k
            return k
        elif op == 0x05:  # ja
            pc += k
        elif op in (0x15, 0x25, 0x35, 0x45):  # jeq, jgt, jge, jset
            hit = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: acc & k != 0}[op]
            pc += jt if hit else jf
        else:
            raise AssertionError(f"instruction {op:#x} at {pc}")
        pc += 1


@pytest.fixture(scope="module")
def program() -> bytes:
    if _seccomp_missing():
        pytest.skip(_seccomp_missing())
    if platform.machine() not in AUDIT_ARCH:
        pytest.skip(f"no interpreter test for {platform.machine()}")
    return _seccomp.build(_seccomp.rules())


def kernel_allows_socket(domain: int, kind: int, protocol: int) -> bool:
    """The rule, on what the kernel reads: ``int`` arguments (the low 32 bits), the type's
    low 4 bits (above them: SOCK_CLOEXEC, SOCK_NONBLOCK)."""
    d, t, p = domain & 0xFFFFFFFF, kind & 0xF, protocol & 0xFFFFFFFF
    if d == socket.AF_UNIX:
        return True
    if d in (socket.AF_INET, socket.AF_INET6):
        return (t, p) in ((1, 0), (1, 6), (2, 0), (2, 17))
    return d == socket.AF_NETLINK and p == 0


def _int_argument(small: int) -> st.SearchStrategy[int]:
    """Small values, and the same with high bits set (the kernel reads only the low half)."""
    low = st.integers(0, small)
    return st.one_of(low, st.integers(0, 2**64 - 1),
                     st.builds(lambda lo, hi: lo | hi << 32, low, st.integers(1, 2**32 - 1)))


@pytest.mark.slow
@given(domain=_int_argument(48), kind=st.builds(lambda t, f: t | f, _int_argument(16),
                                                st.sampled_from([0, 0x800, 0x80000, 0x80800])),
       protocol=_int_argument(300))
def test_a_socket_the_kernel_reads_as_another_kind_is_refused(
        program: bytes, domain: int, kind: int, protocol: int) -> None:
    for call in ("socket", "socketpair"):
        verdict = run_bpf(program, number(call), (domain, kind, protocol))
        if not kernel_allows_socket(domain, kind, protocol):
            assert verdict == EPERM, (call, hex(domain), hex(kind), hex(protocol))
        elif domain < 2**32 and protocol < 2**32:  # what a C caller passes
            assert verdict == ALLOW, (call, hex(domain), hex(kind), hex(protocol))


@pytest.mark.parametrize(("domain", "kind", "protocol", "verdict"), [
    (socket.AF_INET, socket.SOCK_STREAM, 0, ALLOW),
    (socket.AF_INET6, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK, 6, ALLOW),
    (socket.AF_INET, socket.SOCK_DGRAM, 17, ALLOW),
    (socket.AF_UNIX, socket.SOCK_SEQPACKET, 0, ALLOW),
    (socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0, ALLOW),  # getaddrinfo
    (socket.AF_INET, socket.SOCK_STREAM, 262, EPERM),  # IPPROTO_MPTCP
    (socket.AF_INET6, socket.SOCK_STREAM, 262, EPERM),
    (socket.AF_INET, socket.SOCK_STREAM, 132, EPERM),  # SCTP
    (socket.AF_INET, socket.SOCK_SEQPACKET, 132, EPERM),
    (socket.AF_INET, socket.SOCK_RAW, 1, EPERM),
    (socket.AF_INET, socket.SOCK_DGRAM, 1, EPERM),  # ICMP ping sockets
    (socket.AF_INET, socket.SOCK_DGRAM, 136, EPERM),  # UDP-Lite
    (17, socket.SOCK_RAW, 0x300, EPERM),  # AF_PACKET
    (40, socket.SOCK_STREAM, 0, EPERM),  # AF_VSOCK
    (31, socket.SOCK_STREAM, 3, EPERM),  # AF_BLUETOOTH
    (socket.AF_NETLINK, socket.SOCK_RAW, 15, EPERM),  # NETLINK_KOBJECT_UEVENT
    (socket.AF_INET | 1 << 32, socket.SOCK_STREAM, 262, EPERM),
    (socket.AF_INET, socket.SOCK_STREAM, 262 | 1 << 32, EPERM),
    (socket.AF_INET, socket.SOCK_STREAM, 6 | 1 << 40, EPERM),  # over-refused: not from C
])
def test_socket_kinds(program: bytes, domain: int, kind: int, protocol: int, verdict: int
                      ) -> None:
    assert run_bpf(program, number("socket"), (domain, kind, protocol)) == verdict


def test_terminal_ioctls_memfds_and_metadata_calls(program: bytes) -> None:
    ioctl, memfd = number("ioctl"), number("memfd_create")
    for request in (0x5412, 0x541C, 0x1_0000_5412, 0xFFFF_FFFF_0000_541C, 0x40086602):
        assert run_bpf(program, ioctl, (0, request)) == EPERM, hex(request)
    for request in (0x5401, 0x5413, 0x5412 | 1 << 16, 0x541B):  # TCGETS, TIOCGWINSZ, FIONREAD
        assert run_bpf(program, ioctl, (0, request)) == ALLOW, hex(request)
    assert run_bpf(program, memfd, (0, 0x1)) == EPERM  # MFD_CLOEXEC alone
    assert run_bpf(program, memfd, (0, 0x10)) == EPERM  # MFD_EXEC
    assert run_bpf(program, memfd, (0, 0x18)) == EPERM
    assert run_bpf(program, memfd, (0, 0x9)) == ALLOW  # MFD_NOEXEC_SEAL | MFD_CLOEXEC
    for name in ("chmod", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat", "utimensat",
                 "fsetxattr", "setxattrat", "removexattrat", "io_uring_setup", "keyctl",
                 "add_key", "userfaultfd"):
        assert run_bpf(program, number(name), (3, 0o644)) == EPERM, name
    for name in ("openat", "read", "write", "connect", "clone", "execve", "mmap"):
        assert run_bpf(program, number(name), (3, 0o644)) == ALLOW, name


def test_calls_through_another_abi_kill_the_process(program: bytes) -> None:
    """Only the native ABI is in the filter: i386 calls (``int 0x80``) and x32 numbers
    take the bad-architecture branch, set to kill the process."""
    assert run_bpf(program, 20, (), arch=0x40000003) == KILL  # AUDIT_ARCH_I386, getpid
    assert run_bpf(program, 41, (2, 1, 262), arch=0x40000003) == KILL
    if platform.machine() == "x86_64":
        assert run_bpf(program, 41 | 0x40000000, (2, 1, 262)) == KILL  # x32 socket
        assert run_bpf(program, 0x40000000 + 512) == KILL
    assert run_bpf(program, number("getpid")) == ALLOW


# -- confined jobs on the real kernel ---------------------------------------------------------

PRELUDE = '''
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
results = {}

def outcome(action):
    """'done: ...', or the errno's name."""
    try:
        return "done: " + str(action())
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def raw(*args):
    """A system call with each argument passed in a full register, as given."""
    result = libc.syscall(*[a if isinstance(a, (bytes, ctypes.c_void_p)) else
                            ctypes.c_ulong(a % 2**64) for a in args])
    return "done" if result >= 0 else errno.errorcode[ctypes.get_errno()]

def report():
    print("RESULTS " + json.dumps(results), flush=True)
'''


def python_job(code: str, *, confine: bool = True, stdin: Any = subprocess.DEVNULL,
               env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """Run ``code`` (after :data:`PRELUDE`; it calls ``report()``) as a job of ``safehub
    run --confine``, or as a plain Python process; what it reported, and stderr."""
    program = PRELUDE + code
    command = ([sys.executable, "-m", "safehub", "run", "--confine", "--"] if confine else [])
    done = subprocess.run([*command, sys.executable, "-c", program], capture_output=True,
                          text=True, stdin=stdin, timeout=600, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, (done.returncode, done.stdout, done.stderr)
    return json.loads(line[len("RESULTS "):]), done.stderr


@pytest.fixture
def confine_table(isolated: Path) -> Iterator[Any]:
    """Write the user policy's [confine] table."""
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)

    def write(text: str) -> None:
        policy.write_text("[confine]\n" + text)

    yield write


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        s.setblocking(False)
        yield s


def nothing_queued(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return True
    return False


def mptcp_enabled() -> bool:
    try:
        return Path("/proc/sys/net/mptcp/enabled").read_text().strip() == "1"
    except OSError:
        return False


MPTCP_CONNECT = '''
def mptcp():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262) as s:
        s.connect(("127.0.0.1", PORT))
        return "connected"
def tcp():
    with socket.socket() as s:
        s.connect(("127.0.0.1", PORT))
        return "connected"
results["mptcp"], results["tcp"] = outcome(mptcp), outcome(tcp)
'''


@needs_confine
@pytest.mark.skipif(not mptcp_enabled(), reason="MPTCP is off (sysctl net.mptcp.enabled)")
def test_an_mptcp_socket_gets_past_landlock_and_not_the_filter(
        listener: socket.socket, confine_table: Any) -> None:
    port = listener.getsockname()[1]
    code = MPTCP_CONNECT.replace("PORT", str(port))
    confine_table("connect_ports = [443]\n")
    landlock_only = ("from safehub.run.confine import _landlock\n_landlock.restrict("
                     "handled_fs=0, paths=[], handled_net=_landlock.NET.CONNECT_TCP, "
                     "ports=[443])\n")
    results, _ = python_job(landlock_only + code + "report()", confine=False)
    assert results == {"mptcp": "done: connected", "tcp": "EACCES"}  # the hole
    assert not nothing_queued(listener)
    results, _ = python_job(code + "report()")
    assert results == {"mptcp": "EPERM", "tcp": "EACCES"}  # seccomp, then Landlock
    assert nothing_queued(listener)


SOCKETS = {"mptcp": (2, 1, 262), "mptcp6": (10, 1, 262), "sctp": (2, 1, 132),
           "sctp_seqpacket": (2, 5, 132), "raw": (2, 3, 1), "raw6": (10, 3, 58),
           "packet": (17, 3, 0x300), "ping": (2, 2, 1), "vsock": (40, 1, 0),
           "bluetooth": (31, 1, 3), "netlink_uevent": (16, 3, 15),
           "mptcp_high_bits": (2 | 1 << 32, 1, 262 | 1 << 32)}


@needs_confine
def test_sockets_of_other_kinds_are_refused(confine_table: Any) -> None:
    confine_table("")
    code = (f"for name, args in {SOCKETS!r}.items():\n"
            f"    results[name] = raw({number('socket')}, *args)\n"
            f"    results[name + '_pair'] = raw({number('socketpair')}, *args, "
            "ctypes.c_void_p(ctypes.addressof((ctypes.c_int * 2)())))\n"
            "report()")
    results, _ = python_job(code)
    assert results == {name: "EPERM" for name in results} and len(results) == 2 * len(SOCKETS)
    if os.geteuid() == 0:  # root may make raw and packet sockets: the filter is what holds
        plain, _ = python_job(code, confine=False)
        assert plain["raw"] == plain["packet"] == "done"


def tiny_program() -> bytes:
    """A static ELF program that exits with 42 (no loader, no library)."""
    machine = platform.machine()
    if machine == "x86_64":
        e_machine, code = 0x3E, bytes.fromhex("bf2a000000b83c0000000f05")
    elif machine == "aarch64":
        e_machine, code = 0xB7, bytes.fromhex("400580d2a80b80d2010000d4")
    else:
        pytest.skip(f"no tiny program for {machine}")
    base, entry = 0x400000, 64 + 56
    size = entry + len(code)
    header = b"\x7fELF\x02\x01\x01\x00" + bytes(8) + struct.pack(
        "<HHIQQQIHHHHHH", 2, e_machine, 1, base + entry, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    return header + struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000) + code


EXEC_FROM_MEMORY = '''
import mmap
ELF = bytes.fromhex(HEX)
def run(path=None, fd=-1):
    """Exec a program in a child: its exit code (42: it ran), or 100 + the errno."""
    pid = os.fork()
    if pid == 0:
        if path is None:  # execveat(fd, "", argv, envp, AT_EMPTY_PATH)
            argv, envp = (ctypes.c_char_p * 2)(b"x", None), (ctypes.c_char_p * 1)(None)
            libc.syscall(ctypes.c_long(EXECVEAT), ctypes.c_long(fd), b"", argv, envp,
                         ctypes.c_long(0x1000))
            os._exit(100 + ctypes.get_errno())
        try:
            os.execv(path, [path])
        except OSError as e:
            os._exit(100 + e.errno)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

def memfd(flags):
    fd = os.memfd_create("job", flags)
    os.write(fd, ELF)
    return fd

def plain():
    fd = memfd(0)
    return run(f"/proc/self/fd/{fd}"), run(fd=fd)
results["plain"] = outcome(plain)
results["exec_flag"] = outcome(lambda: memfd(0x10))
def sealed():
    fd = memfd(0x8)  # MFD_NOEXEC_SEAL
    return run(f"/proc/self/fd/{fd}"), run(fd=fd), outcome(lambda: os.fchmod(fd, 0o755))
results["sealed"] = outcome(sealed)
def shared_mapping():
    area = mmap.mmap(-1, 4096, mmap.MAP_SHARED)
    area.write(ELF)
    start = ctypes.addressof(ctypes.c_char.from_buffer(area))
    name = next(n for n in os.listdir("/proc/self/map_files") if n.startswith(f"{start:x}-"))
    return run(f"/proc/self/map_files/{name}")
results["map_files"] = outcome(shared_mapping)
report()
'''


@needs_confine
def test_a_program_in_memory_does_not_run(confine_table: Any) -> None:
    """memfds live on the kernel's internal mount, where Landlock checks no path."""
    confine_table("")
    code = EXEC_FROM_MEMORY.replace("HEX", repr(tiny_program().hex())).replace(
        "EXECVEAT", str(number("execveat")))
    plain, _ = python_job(code, confine=False)
    assert plain["plain"] == "done: (42, 42)"  # the same memfd runs without the filter
    assert plain["sealed"] == "done: (113, 113, 'EPERM')"  # the seal holds by itself
    if os.geteuid() == 0:
        assert plain["map_files"] == "done: 42"  # CAP_CHECKPOINT_RESTORE opens map_files
    results, _ = python_job(code)
    assert results["plain"] == results["exec_flag"] == "EPERM"
    assert results["sealed"] == "done: (113, 113, 'EPERM')"  # EACCES to run, EPERM to chmod
    assert results["map_files"] == "done: 101"  # EPERM: no capability opens it


TERMINAL = '''
import fcntl, termios
char = ctypes.create_string_buffer(b"id\\n")
results["tiocsti"] = outcome(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"i"))
results["tiocsti_high_bits"] = raw(IOCTL, 0, 0x1_0000_5412, ctypes.c_void_p(ctypes.addressof(char)))
results["tioclinux"] = raw(IOCTL, 0, 0x541C, ctypes.c_void_p(ctypes.addressof(char)))
results["own_session"] = os.getsid(0) == os.getpid() and os.getsid(0) != PARENT_SESSION
results["dev_tty"] = outcome(lambda: open("/dev/tty", "rb"))
report()
'''


def queued(fd: int) -> bytes:
    """What a terminal has in its input queue (it is in raw mode: no line to wait for)."""
    found = b""
    while select.select([fd], [], [], 0)[0]:
        found += os.read(fd, 1024)
    return found


@needs_confine
def test_nothing_is_queued_on_the_terminal(confine_table: Any) -> None:
    confine_table("")
    master, slave = pty.openpty()
    try:
        tty.setraw(slave)
        code = TERMINAL.replace("IOCTL", str(number("ioctl"))).replace(
            "PARENT_SESSION", str(os.getsid(0)))
        results, _ = python_job(code, stdin=slave)
        assert results == {"tiocsti": "EPERM", "tiocsti_high_bits": "EPERM",
                           "tioclinux": "EPERM", "own_session": True, "dev_tty": "ENXIO"}
        assert queued(slave) == b""
    finally:
        os.close(master)
        os.close(slave)


CONTROLLING = '''
import fcntl, termios
os.setsid()
fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # the pty is this process's controlling terminal
if FILTER:
    from safehub.run.confine import _seccomp
    _seccomp.Program(_seccomp.build(_seccomp.rules())).load()
results["tiocsti"] = outcome(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"i"))
report()
'''


@pytest.mark.skipif(Path("/proc/sys/dev/tty/legacy_tiocsti").exists() and Path(
    "/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "0",
    reason="TIOCSTI is off on this kernel (dev.tty.legacy_tiocsti = 0)")
def test_the_filter_holds_tiocsti_on_the_controlling_terminal_too() -> None:
    """Without the new session: the filter alone refuses what the kernel would do."""
    if _seccomp_missing():
        pytest.skip(_seccomp_missing())
    master, slave = pty.openpty()
    try:
        tty.setraw(slave)
        plain, _ = python_job(CONTROLLING.replace("FILTER", "False"), confine=False,
                              stdin=slave)
        assert plain == {"tiocsti": "done: b'i'"} and queued(slave) == b"i"
        results, _ = python_job(CONTROLLING.replace("FILTER", "True"), confine=False,
                                stdin=slave)
        assert results == {"tiocsti": "EPERM"} and queued(slave) == b""
    finally:
        os.close(master)
        os.close(slave)


METADATA = '''
path = sys.argv[1] if len(sys.argv) > 1 else TARGET
fd = os.open(path, os.O_RDONLY)  # read-only: still enough for fchmod, as the owner
results["chmod"] = outcome(lambda: os.chmod(path, 0o644))
results["fchmod"] = outcome(lambda: os.fchmod(fd, 0o644))
results["fchmodat2"] = raw(FCHMODAT2, -100 % 2**64, path.encode(), 0o644, 0x100)
results["chown"] = outcome(lambda: os.chown(path, os.getuid(), os.getgid()))
results["fchown"] = outcome(lambda: os.fchown(fd, os.getuid(), os.getgid()))
results["utime"] = outcome(lambda: os.utime(path, (0, 0)))
results["futimens"] = outcome(lambda: os.utime(fd, (0, 0)))
results["setxattr"] = outcome(lambda: os.setxattr(path, "user.safehub", b"job"))
results["fsetxattr"] = outcome(lambda: os.setxattr(fd, "user.safehub", b"job"))
results["removexattr"] = outcome(lambda: os.removexattr(path, "user.before"))
flags = ctypes.c_int(0x40)  # FS_NODUMP_FL: chattr +d, no capability needed
results["chattr"] = raw(IOCTL, fd, 0x40086602, ctypes.c_void_p(ctypes.addressof(flags)))
report()
'''


def _metadata(path: Path) -> tuple[Any, ...]:
    st = path.stat()
    return (st.st_mode, st.st_uid, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns,
            sorted((n, os.getxattr(path, n)) for n in os.listxattr(path)))


@needs_confine
def test_metadata_outside_the_grants_stays_as_it_was(tmp_path: Path, confine_table: Any) -> None:
    secret = tmp_path / "outside" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_bytes(b"key")
    secret.chmod(0o600)
    os.utime(secret, ns=(10**18, 10**18))
    try:
        os.setxattr(secret, "user.before", b"1")
    except OSError as e:
        pytest.skip(f"no user extended attributes in {tmp_path} ({e.strerror})")
    confine_table("")
    code = METADATA.replace("TARGET", repr(str(secret))).replace(
        "FCHMODAT2", str(number("fchmodat2"))).replace("IOCTL", str(number("ioctl")))
    before = _metadata(secret)
    results, _ = python_job(code)
    assert results == {name: "EPERM" for name in results} and len(results) == 11
    assert _metadata(secret) == before  # not even the change time moved
    plain, _ = python_job(code, confine=False)  # the owner's calls, unfiltered, work
    failed = {name for name, seen in plain.items() if not seen.startswith("done")}
    assert failed <= {"chattr", "fchmodat2"}, plain  # a file system without such flags;
    assert _metadata(secret) != before  # a kernel before 6.6


KERNEL_FACILITIES = '''
params = ctypes.create_string_buffer(120)  # struct io_uring_params
results["io_uring_setup"] = raw(IO_URING_SETUP, 4, ctypes.c_void_p(ctypes.addressof(params)))
results["add_key"] = raw(ADD_KEY, b"user", b"safehub-test", b"x", 1, -2 % 2**64)
results["keyctl"] = raw(KEYCTL, 0, -2 % 2**64, 1)  # KEYCTL_GET_KEYRING_ID, process, create
results["userfaultfd"] = raw(USERFAULTFD, os.O_CLOEXEC | 1)  # UFFD_USER_MODE_ONLY
report()
'''


@needs_confine
def test_io_uring_keyrings_and_userfaultfd_are_refused(confine_table: Any) -> None:
    confine_table("")
    code = KERNEL_FACILITIES
    for name in ("io_uring_setup", "add_key", "keyctl", "userfaultfd"):
        code = code.replace(name.upper(), str(number(name)))
    results, _ = python_job(code)
    assert results == {"io_uring_setup": "EPERM", "add_key": "EPERM", "keyctl": "EPERM",
                       "userfaultfd": "EPERM"}
    if Path("/proc/keys").exists():
        plain, _ = python_job(code, confine=False)
        assert plain["keyctl"] == plain["add_key"] == "done"  # the process's keyring only


I386_GETPID = '''
import mmap, resource
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # killed: no core file
code = bytes.fromhex("b814000000cd80c3")  # mov eax, 20 (i386 getpid); int 0x80; ret
area = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
area.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(area)))
results["getpid"] = call() == os.getpid()
report()
'''


@needs_confine
@pytest.mark.skipif(platform.machine() != "x86_64", reason="i386 calls exist on x86_64 only")
def test_an_i386_system_call_kills_the_job(confine_table: Any) -> None:
    confine_table("")
    done = subprocess.run([sys.executable, "-c", PRELUDE + I386_GETPID], capture_output=True,
                          text=True, timeout=120)
    if "RESULTS " not in done.stdout:
        pytest.skip(f"this kernel runs no i386 calls ({done.returncode})")
    assert json.loads(done.stdout.split("RESULTS ")[1]) == {"getpid": True}
    job = subprocess.run([sys.executable, "-m", "safehub", "run", "--confine", "--",
                          sys.executable, "-c", PRELUDE + I386_GETPID],
                         capture_output=True, text=True, timeout=120)
    assert job.returncode == 128 + signal.SIGSYS and "RESULTS" not in job.stdout


HONEST = '''
import shutil, subprocess, tempfile, torch
from torch.utils.data import DataLoader, TensorDataset
folder, port, udp_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def tcp():
    with socket.create_connection(("127.0.0.1", port), timeout=30):
        return "connected"
def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return s.sendto(b"dns-ish", ("127.0.0.1", udp_port))
def loader():
    data = TensorDataset(torch.arange(64.0).reshape(32, 2))
    return sum(int(b[0].sum()) for b in DataLoader(data, batch_size=4, num_workers=2))
def save():
    torch.save(torch.nn.Linear(2, 2).state_dict(), os.path.join(folder, "epoch-1.pt"))
    return os.path.getsize(os.path.join(folder, "epoch-1.pt")) > 0
def copies():
    source = os.path.join(tempfile.mkdtemp(), "notes.txt")
    with open(source, "w") as f:
        f.write("notes")
    shutil.copyfile(source, os.path.join(folder, "copyfile.txt"))
    return outcome(lambda: shutil.copy2(source, os.path.join(folder, "copy2.txt")))
results["tcp"], results["udp"], results["pair"] = outcome(tcp), outcome(udp), outcome(
    lambda: len(socket.socketpair()))
results["addresses"] = outcome(lambda: len(socket.getaddrinfo(
    "localhost", port, proto=socket.IPPROTO_TCP, flags=socket.AI_ADDRCONFIG)) > 0)
results["sealed_memfd"] = outcome(lambda: os.memfd_create("buffer", 0x9) > 0)
results["loader"], results["save"] = outcome(loader), outcome(save)
results["program"] = outcome(lambda: subprocess.run(["git", "--version"], check=True,
                                                    capture_output=True).returncode)
results["copies"] = outcome(copies)
report()
'''


@pytest.mark.slow
@needs_confine
@needs_torch
def test_the_honest_job_works_under_the_filter(tmp_path: Path, confine_table: Any,
                                               listener: socket.socket) -> None:
    checkpoints = tmp_path / "checkpoints"
    port = listener.getsockname()[1]
    confine_table(f'writes = ["{checkpoints}"]\nexec = ["git"]\nconnect_ports = [{port}]\n')
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        done = subprocess.run(
            [sys.executable, "-m", "safehub", "run", "--confine", "--", sys.executable, "-c",
             PRELUDE + HONEST, str(checkpoints), str(port), str(udp.getsockname()[1])],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout.split("RESULTS ")[1])
        assert udp.recv(64) == b"dns-ish"  # UDP stays open (docs/confine.md)
    assert results == {"tcp": "done: connected", "udp": "done: 7", "pair": "done: 2",
                       "addresses": "done: True", "sealed_memfd": "done: True",
                       "loader": "done: 2016", "save": "done: True", "program": "done: 0",
                       "copies": "done: EPERM"}  # copy2's copystat: docs/confine.md
    assert (checkpoints / "copyfile.txt").read_text() == "notes"
    assert (checkpoints / "copy2.txt").read_text() == "notes"  # the data got there first
    assert not nothing_queued(listener)


# -- the job's own session, and the signals safehub run passes on ------------------------------

SIGNALLED = '''
import json, os, signal
received = []
def handler(number, frame):
    received.append(number)
    if number != signal.SIGINT or IGNORED is False:
        print("GOT " + json.dumps(received), flush=True)
        os._exit(10 + number)
initial = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(number, handler)
print("READY " + json.dumps([os.getsid(0) == os.getpid(), initial, os.getpid()]), flush=True)
while True:
    signal.pause()
'''


def _start(ignore_sigint: bool) -> subprocess.Popen[str]:
    """``safehub run --confine`` in a process group of its own (as a shell starts a job),
    with SIGINT as given: caught (foreground) or ignored (a background job)."""
    def dispositions() -> None:  # whatever the test run's own (nohup ignores SIGHUP)
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    code = SIGNALLED.replace("IGNORED", str(ignore_sigint))
    return subprocess.Popen([sys.executable, "-m", "safehub", "run", "--confine", "--",
                             sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=dispositions)


def _ready(outer: subprocess.Popen[str]) -> tuple[list[bool], int]:
    """Once the job has its handlers: whether it leads a session of its own, whether it
    started with SIGINT ignored; its process id."""
    assert outer.stdout is not None
    line = outer.stdout.readline()
    assert line.startswith("READY "), line
    *flags, pid = json.loads(line[len("READY "):])
    return flags, pid


@needs_confine
@pytest.mark.parametrize("name", ["SIGINT", pytest.param("SIGTERM", marks=pytest.mark.slow),
                                  pytest.param("SIGHUP", marks=pytest.mark.slow)])
def test_the_job_gets_the_signals_safehub_run_gets(confine_table: Any, name: str) -> None:
    confine_table("")
    number = getattr(signal, name)
    with _start(ignore_sigint=False) as outer:
        assert _ready(outer)[0] == [True, False]  # a session of its own
        os.killpg(outer.pid, number)  # as the terminal does: safehub run's process group
        assert outer.wait(timeout=120) == 10 + number  # the job's own exit code
        assert outer.stdout is not None
        assert json.loads(outer.stdout.read().split("GOT ")[1]) == [number]


@needs_confine
def test_a_sigint_ignored_by_safehub_run_stays_ignored(confine_table: Any) -> None:
    """A background job of a shell ignores SIGINT: so does safehub run, so does its job."""
    confine_table("")
    with _start(ignore_sigint=True) as outer:
        assert _ready(outer)[0] == [True, True]  # the job started with SIGINT ignored
        os.kill(outer.pid, signal.SIGINT)  # dropped: ignored signals are not queued
        os.kill(outer.pid, signal.SIGTERM)
        assert outer.wait(timeout=120) == 10 + signal.SIGTERM
        assert outer.stdout is not None
        assert json.loads(outer.stdout.read().split("GOT ")[1]) == [signal.SIGTERM]


@needs_confine
def test_a_job_ended_by_a_signal_is_128_plus_the_signal(confine_table: Any) -> None:
    confine_table("")
    done = subprocess.run([sys.executable, "-m", "safehub", "run", "--confine", "--",
                           sys.executable, "-c", "import os; os.kill(os.getpid(), 15)"],
                          stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 128 + signal.SIGTERM


# -- when the filter cannot be built ----------------------------------------------------------

def test_without_libseccomp_nothing_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    if _landlock.abi() < 4:
        pytest.skip("Landlock is refused first on this kernel")

    def missing() -> ctypes.CDLL:
        raise OSError(errno.ENOENT, "libseccomp.so.2: cannot open shared object file")

    monkeypatch.setattr(_seccomp, "_lib", missing)
    marker = tmp_path / "ran"
    assert main(["run", "--confine", "--", sys.executable, "-c",
                 f"open({str(marker)!r}, 'w')"]) == 1
    err = capsys.readouterr().err
    assert "ConfineError" in err and "libseccomp" in err
    assert "apt-get install libseccomp2" in err and not marker.exists()


def test_dry_run_names_what_the_filter_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--confine", "--dry-run", "--", sys.executable, "-c", "pass"]) == 0
    shown = capsys.readouterr().out
    assert "seccomp" in shown and "io_uring" in shown and "TIOCSTI" in shown


def test_the_rules_are_data(tmp_path: Path) -> None:
    """Every rule names a call and compares at most one value per argument (libseccomp's
    limit), and the library is not loaded by ``import safehub``."""
    for rule in _seccomp.rules():
        arguments = [c[0] for c in rule.compare]
        assert len(arguments) == len(set(arguments)), rule
    code = "import sys, safehub, safehub.run.confine; print('libseccomp' in open(" \
           "f'/proc/{__import__(\"os\").getpid()}/maps').read())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


