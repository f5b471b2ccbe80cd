"""Audit events, read into :class:`Action` values the guard decides on.

Every reader takes the event's argument tuple and returns the actions it stands for
(usually one, none for events that change nothing, two for a rename). Paths come out
absolute and with symlinks resolved, as the operation will see them. Arguments are read
with :mod:`safehub.runtime._read`: an argument that could run the repo's code is not read,
and the action is *opaque*.
"""

from __future__ import annotations

import _socket
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from safehub.runtime._read import (
    Opaque,
    command_line,
    find_program,
    integer,
    items,
    path,
    shell_program,
    text,
)

__all__ = ["EVENTS", "PROCESS_EVENTS", "Action"]

PROCESS_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "os.startfile", "safehub.fork_exec"})
"""Process starts: never safehub's own work, paused or not (safehub starts none)."""


@dataclass(frozen=True)
class Action:
    """One thing the code tried to do.

    ``kind`` is ``lookup``, ``connect``, ``process``, ``write``, ``environ`` (a variable
    set or unset), ``library`` (a ``ctypes`` load), ``extension`` (a compiled module
    imported), ``symbol`` (a ``ctypes`` function looked up), ``module``, ``guard`` or
    ``probe``. ``op`` is the audit event. ``opaque``: an argument could not be read safely.
    """

    kind: str
    op: str
    target: str
    host: str = ""
    port: int | None = None
    paths: tuple[str, ...] = ()
    program: str = ""
    real: str = ""
    shell: str = ""
    opaque: bool = False


Reader = Callable[[tuple[Any, ...]], tuple[Action, ...]]
_NONE: tuple[Action, ...] = ()
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})
_FAMILY = _socket.socket.__dict__["family"]  # the C field, not a property a subclass made


def _arg(args: tuple[Any, ...], index: int | None) -> Any:
    return args[index] if index is not None and len(args) > index else None


# -- writes ------------------------------------------------------------------------------

def _writes(op: str, *specs: tuple[int, int | None, bool]) -> Reader:
    """A reader for an event whose argument ``index`` is a path written (``dir_fd``: the
    argument holding its folder's descriptor; ``follow``: a final symlink is followed)."""

    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        found = [path(_arg(args, index), _arg(args, dir_fd), follow)
                 for index, dir_fd, follow in specs]
        paths = tuple(p for p in found if p is not None)
        if not paths:
            return _NONE
        return (Action("write", op, " -> ".join(paths), paths=paths),)

    return read


def _open(args: tuple[Any, ...]) -> tuple[Action, ...]:
    name, mode, flags = _arg(args, 0), _arg(args, 1), integer(_arg(args, 2))
    writing = bool(flags is not None and flags & _WRITE_FLAGS)
    if not writing and type(mode) is str:
        writing = any(c in mode for c in "wax+")
    if not writing:
        return _NONE
    resolved = path(name)
    if resolved is None:  # an fd opened earlier
        return _NONE
    return (Action("write", "open", resolved, paths=(resolved,)),)


def _mkdir(args: tuple[Any, ...]) -> tuple[Action, ...]:
    resolved = path(_arg(args, 0), _arg(args, 2), follow=False)
    if resolved is None or os.path.isdir(resolved):  # makedirs(exist_ok=True): no change
        return _NONE
    return (Action("write", "os.mkdir", resolved, paths=(resolved,)),)


def _sqlite(args: tuple[Any, ...]) -> tuple[Action, ...]:
    database = _arg(args, 0)
    if database is None:
        return _NONE
    name = text(database)
    if name.startswith("file:"):
        name, _, query = name[5:].partition("?")
        if "mode=ro" in query or "mode=memory" in query:
            return _NONE
    if name in ("", ":memory:"):
        return _NONE
    resolved = str(path(name))
    return (Action("write", "sqlite3.connect", resolved, paths=(resolved,)),)


# -- processes ---------------------------------------------------------------------------

def _process(op: str, program: Any, argv: Any, env: Any = None, cwd: Any = None,
             command: Any = None) -> tuple[Action, ...]:
    """A program start; ``command`` is set for a shell command (``os.system``)."""
    if argv is None:
        words: list[str] = []
    elif isinstance(argv, (str, bytes)):
        words = [text(argv)]
    else:
        words = [text(w) for w in items(argv)]
    exe = text(program) if program is not None else (words[0] if words else "")
    if command is None and len(words) >= 3 and words[1] == "-c" \
            and os.path.basename(exe or words[0]) in _SHELLS:
        command = words[2]
    if command is not None:
        command = text(command)
    shown = command if command is not None else command_line(words or [exe])
    found, real = find_program(exe, env, cwd)
    if command is not None:
        simple = shell_program(command)
        if simple is not None:
            inner, inner_real = find_program(simple, env, cwd)
            return (Action("process", op, shown, program=inner, real=inner_real, shell=found),)
    return (Action("process", op, shown, program=found, real=real),)


def _popen(args: tuple[Any, ...]) -> tuple[Action, ...]:
    executable, argv, cwd, env = (_arg(args, i) for i in range(4))
    return _process("subprocess.Popen", executable, argv, env, cwd)


def _system(args: tuple[Any, ...]) -> tuple[Action, ...]:
    return _process("os.system", "/bin/sh", None, command=_arg(args, 0))


def _exec(args: tuple[Any, ...]) -> tuple[Action, ...]:
    return _process("os.exec", _arg(args, 0), _arg(args, 1), _arg(args, 2))


def _posix_spawn(args: tuple[Any, ...]) -> tuple[Action, ...]:
    return _process("os.posix_spawn", _arg(args, 0), _arg(args, 1), _arg(args, 2))


def _spawn(args: tuple[Any, ...]) -> tuple[Action, ...]:
    return _process("os.spawn", _arg(args, 1), _arg(args, 2), _arg(args, 3))


def _fork(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        exe = sys.executable or "python"
        return (Action("process", op, f"{op}() (a copy of {os.path.basename(exe)})",
                       program=exe, real=os.path.realpath(exe)),)

    return read


def _fork_exec(args: tuple[Any, ...]) -> tuple[Action, ...]:
    """``_posixsubprocess.fork_exec``: the child tries each candidate path in turn."""
    executables, argv, env, cwd = (_arg(args, i) for i in range(4))
    candidates = [text(e) for e in items(executables)] if executables is not None else []
    program = next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)),
                   candidates[0] if candidates else None)
    return _process("fork_exec", program, argv, env, cwd)


def _startfile(args: tuple[Any, ...]) -> tuple[Action, ...]:
    return _process("os.startfile", _arg(args, 0), None)


# -- network -----------------------------------------------------------------------------

def _lookup(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        host = _arg(args, 0)
        if host is None:
            return _NONE
        name = text(host)
        return (Action("lookup", op, name, host=name, port=integer(_arg(args, 1))),)

    return read


def _connect(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        sock, address = _arg(args, 0), _arg(args, 1)
        if address is None:
            return _NONE
        family = _FAMILY.__get__(sock, type(sock))
        if family == getattr(socket, "AF_UNIX", None) or isinstance(address, (str, bytes)):
            where = "unix:" + text(address).replace("\0", "@")
            return (Action("connect", op, where, host=where),)
        if family in (socket.AF_INET, socket.AF_INET6):
            parts = items(address)
            host = text(parts[0])
            port = integer(parts[1]) if len(parts) > 1 else None
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            return (Action("connect", op, shown, host=host, port=port),)
        where = f"family {family}"  # netlink, packet...: needs an entry nobody can write
        return (Action("connect", op, where, host=where),)

    return read


# -- environment and native code ---------------------------------------------------------

def _environ(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        key = _arg(args, 0)
        return _NONE if key is None else (Action("environ", op, text(key)),)

    return read


def _dlopen(args: tuple[Any, ...]) -> tuple[Action, ...]:
    name = _arg(args, 0)
    if name is None:  # the process itself (ctypes.pythonapi, CDLL(None))
        return _NONE
    shown = text(name)
    where = os.path.realpath(shown) if os.sep in shown else ""
    return (Action("library", "ctypes.dlopen", shown, paths=(where,) if where else ()),)


def _dlsym(args: tuple[Any, ...]) -> tuple[Action, ...]:
    symbol = _arg(args, 1)
    if integer(symbol) is not None:  # an ordinal (Windows)
        return _NONE
    name = text(symbol)
    return (Action("symbol", "ctypes.dlsym", name, program=name),)


def _import(args: tuple[Any, ...]) -> tuple[Action, ...]:
    filename = _arg(args, 1)
    if filename is None:  # not a compiled module
        return _NONE
    where = os.path.realpath(text(filename))
    return (Action("extension", "import", f"{text(_arg(args, 0))} ({where})",
                   paths=(where,)),)


def _readable(kind: str, op: str, reader: Reader) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        try:
            return reader(args)
        except Opaque as e:
            return (Action(kind, op, e.shown, opaque=True),)

    return read


_WRITES = {
    "os.rename": ((0, 2, False), (1, 3, False)),
    "os.remove": ((0, 1, False),),
    "os.rmdir": ((0, 1, False),),
    "os.symlink": ((1, 2, False),),
    # a hard link makes its source writable under the new name: both must be writable
    "os.link": ((0, 2, True), (1, 3, False)),
    "os.truncate": ((0, None, True),),
    "os.chmod": ((0, 2, True),),
    "os.chown": ((0, 3, True),),
    "os.utime": ((0, 3, True),),
    "os.chflags": ((0, None, True),),
    "os.lchflags": ((0, None, False),),
    "os.setxattr": ((0, None, True),),
    "os.removexattr": ((0, None, True),),
    "shutil.copyfile": ((1, None, True),),
    "shutil.copymode": ((1, None, True),),
    "shutil.copystat": ((1, None, True),),
    "shutil.copytree": ((1, None, True),),
    "shutil.move": ((0, None, False), (1, None, True)),
    "shutil.rmtree": ((0, 1, False),),
    "shutil.chown": ((0, None, True),),
    "shutil.unpack_archive": ((1, None, True),),
    "shutil.make_archive": ((0, None, False),),
}

_READERS: dict[str, tuple[str, Reader]] = {
    "open": ("write", _open),
    "os.mkdir": ("write", _mkdir),
    "sqlite3.connect": ("write", _sqlite),
    **{op: ("write", _writes(op, *specs)) for op, specs in _WRITES.items()},
    "subprocess.Popen": ("process", _popen),
    "os.system": ("process", _system),
    "os.exec": ("process", _exec),
    "os.posix_spawn": ("process", _posix_spawn),
    "os.spawn": ("process", _spawn),
    "os.fork": ("process", _fork("os.fork")),
    "os.forkpty": ("process", _fork("os.forkpty")),
    "os.startfile": ("process", _startfile),
    "safehub.fork_exec": ("process", _fork_exec),
    "socket.getaddrinfo": ("lookup", _lookup("socket.getaddrinfo")),
    "socket.gethostbyname": ("lookup", _lookup("socket.gethostbyname")),
    "socket.gethostbyname_ex": ("lookup", _lookup("socket.gethostbyname_ex")),
    "socket.connect": ("connect", _connect("socket.connect")),
    "socket.sendto": ("connect", _connect("socket.sendto")),
    "socket.sendmsg": ("connect", _connect("socket.sendmsg")),
    "os.putenv": ("environ", _environ("os.putenv")),
    "os.unsetenv": ("environ", _environ("os.unsetenv")),
    "ctypes.dlopen": ("library", _dlopen),
    "ctypes.dlsym": ("symbol", _dlsym),
    "ctypes.dlsym/handle": ("symbol", _dlsym),
    "import": ("extension", _import),
    "safehub.runtime.probe": ("probe", lambda args: (Action("probe", "probe", ""),)),
}

EVENTS: dict[str, Reader] = {op: _readable(kind, op, reader)
                             for op, (kind, reader) in _READERS.items()}
