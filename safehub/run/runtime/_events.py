"""Audit events, read into :class:`Action` values the guard decides on.

Every reader takes the event's argument tuple and returns the actions it stands for
(usually one, none for events that change nothing, two for a rename). Paths come out
absolute and with symlinks resolved, as the operation will see them.

Arguments are read as honest code passes them (``str``, ``bytes``, path objects, lists):
the guard is a record and a seatbelt for code that is not hiding (docs/runtime.md).

>>> [a.target for a in EVENTS["socket.gethostbyaddr"](("10.1.2.3",))]
['10.1.2.3']
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from safehub._internal.frozen import Frozen
from safehub._internal.programs import command_line, find_program, shell_program

__all__ = ["EVENTS", "Action", "writes"]


class Action(Frozen):
    """One thing the code tried to do.

    ``kind`` is ``lookup`` (a name resolved, or an address looked up in reverse),
    ``connect``, ``process``, ``write``, ``environ`` (a variable set or unset),
    ``library`` (a ``ctypes`` load), ``extension`` (a compiled module imported),
    ``unpickle`` (a pickle names a global: what ``weights_format`` decides),
    ``symbol`` (a ``ctypes`` function looked up), ``module``, ``guard`` or ``probe``.
    ``op`` is the audit event.
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
    relative: bool = False
    """An ``open`` by a relative name: relative to the working directory, or to a folder
    descriptor the event does not carry (``os.open(name, dir_fd=fd)``)."""


Reader = Callable[[tuple[Any, ...]], tuple[Action, ...]]
_NONE: tuple[Action, ...] = ()
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})


def writes(mode: object, flags: object) -> bool:
    """An ``open`` event's mode or flags open the file for writing.

    >>> writes("rb", None), writes("a", None), writes(None, os.O_RDONLY), writes(None, os.O_CREAT)
    (False, True, False, True)
    """
    if isinstance(flags, int) and flags & WRITE_FLAGS:
        return True
    return isinstance(mode, str) and any(c in mode for c in "wax+")


def _arg(args: tuple[Any, ...], index: int | None) -> Any:
    return args[index] if index is not None and len(args) > index else None


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return os.fsdecode(value)
    if isinstance(value, os.PathLike):
        return _text(os.fspath(value))
    return str(value)


def _items(value: object) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [] if value is None else [value]


def _dir_of_fd(fd: object) -> str:
    if not isinstance(fd, int) or fd < 0:
        return os.getcwd()
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"/<unknown directory of fd {fd}>"  # outside every allowed folder


def path(value: object, dir_fd: object = None, follow: bool = True) -> str | None:
    """``value`` as the absolute, resolved path an operation acts on (None: an fd).

    ``follow``: the operation follows a final symlink (``open``, ``chmod``...), so the
    link's target is what changes; else only the folders on the way are resolved.
    """
    if value is None or isinstance(value, int):
        return None
    name = _text(value)
    if not os.path.isabs(name):
        name = os.path.join(_dir_of_fd(dir_fd), name)
    if follow:
        return os.path.realpath(name)
    head, tail = os.path.split(name.rstrip(os.sep) or os.sep)
    if tail in ("", ".", ".."):
        return os.path.realpath(name)
    return os.path.join(os.path.realpath(head), tail)


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
    if not writes(_arg(args, 1), _arg(args, 2)):
        return _NONE
    name = _arg(args, 0)
    resolved = path(name)
    if resolved is None:  # an fd opened earlier
        return _NONE
    relative = isinstance(name, (str, bytes)) and not os.path.isabs(name)
    return (Action("write", "open", resolved, paths=(resolved,), relative=relative),)


def _mkdir(args: tuple[Any, ...]) -> tuple[Action, ...]:
    resolved = path(_arg(args, 0), _arg(args, 2), follow=False)
    if resolved is None or os.path.isdir(resolved):  # makedirs(exist_ok=True): no change
        return _NONE
    return (Action("write", "os.mkdir", resolved, paths=(resolved,)),)


def _sqlite(args: tuple[Any, ...]) -> tuple[Action, ...]:
    database = _arg(args, 0)
    if database is None:
        return _NONE
    name = _text(database)
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
    words = [_text(w) for w in _items(argv)]
    exe = _text(program) if program is not None else (words[0] if words else "")
    if command is None and len(words) >= 3 and words[1] == "-c" \
            and os.path.basename(exe or words[0]) in _SHELLS:
        command = words[2]
    if command is not None:
        command = _text(command)
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


def _fork(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        exe = sys.executable or "python"
        return (Action("process", op, f"{op}() (a copy of {os.path.basename(exe)})",
                       program=exe, real=os.path.realpath(exe)),)

    return read


def _fork_exec(args: tuple[Any, ...]) -> tuple[Action, ...]:
    """``_posixsubprocess.fork_exec``: the child tries each candidate path in turn."""
    executables, argv, env, cwd = (_arg(args, i) for i in range(4))
    candidates = [_text(e) for e in _items(executables)]
    program = next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)),
                   candidates[0] if candidates else None)
    return _process("fork_exec", program, argv, env, cwd)


# -- network -----------------------------------------------------------------------------

def _lookup(op: str) -> Reader:
    """A name resolved (``getaddrinfo``...), or an address looked up in reverse
    (``gethostbyaddr``, ``getnameinfo``, whose first argument is a socket address)."""

    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        host, port = _arg(args, 0), _arg(args, 1)
        if isinstance(host, tuple):  # getnameinfo((host, port, ...))
            host, port = _arg(host, 0), _arg(host, 1)
        if host is None:
            return _NONE
        name = _text(host)
        return (Action("lookup", op, name, host=name,
                       port=port if isinstance(port, int) else None),)

    return read


def _connect(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        sock, address = _arg(args, 0), _arg(args, 1)
        if address is None:
            return _NONE
        family = getattr(sock, "family", None)
        if family == getattr(socket, "AF_UNIX", None) or isinstance(address, (str, bytes)):
            where = "unix:" + _text(address).replace("\0", "@")
            return (Action("connect", op, where, host=where),)
        if family in (socket.AF_INET, socket.AF_INET6):
            parts = _items(address)
            host = _text(parts[0])
            port = parts[1] if len(parts) > 1 and isinstance(parts[1], int) else None
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            return (Action("connect", op, shown, host=host, port=port),)
        where = f"family {family}"  # netlink, packet...: needs an entry nobody can write
        return (Action("connect", op, where, host=where),)

    return read


# -- environment and native code ---------------------------------------------------------

def _environ(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        key = _arg(args, 0)
        return _NONE if key is None else (Action("environ", op, _text(key)),)

    return read


def _dlopen(args: tuple[Any, ...]) -> tuple[Action, ...]:
    name = _arg(args, 0)
    if name is None:  # the process itself (ctypes.pythonapi, CDLL(None))
        return _NONE
    shown = _text(name)
    where = os.path.realpath(shown) if os.sep in shown else ""
    return (Action("library", "ctypes.dlopen", shown, paths=(where,) if where else ()),)


def _dlsym(args: tuple[Any, ...]) -> tuple[Action, ...]:
    symbol = _arg(args, 1)
    if isinstance(symbol, int):  # an ordinal (Windows)
        return _NONE
    name = _text(symbol)
    return (Action("symbol", "ctypes.dlsym", name, program=name),)


def _import(args: tuple[Any, ...]) -> tuple[Action, ...]:
    filename = _arg(args, 1)
    if filename is None:  # not a compiled module
        return _NONE
    where = os.path.realpath(_text(filename))
    return (Action("extension", "import", f"{_text(_arg(args, 0))} ({where})",
                   paths=(where,)),)


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

#: Every audit event a process starts with (os.exec covers all exec*, os.posix_spawn also
#: posix_spawnp); ``safehub.fork_exec`` is raised by safehub's wrapper (see _hook.py).
_PROCESSES: dict[str, Reader] = {
    "subprocess.Popen": _popen,
    "os.system": lambda args: _process("os.system", "/bin/sh", None,
                                       command=_arg(args, 0)),
    "os.exec": lambda args: _process("os.exec", _arg(args, 0), _arg(args, 1), _arg(args, 2)),
    "os.posix_spawn": lambda args: _process("os.posix_spawn", _arg(args, 0), _arg(args, 1),
                                            _arg(args, 2)),
    "os.spawn": lambda args: _process("os.spawn", _arg(args, 1), _arg(args, 2),
                                      _arg(args, 3)),
    "os.fork": _fork("os.fork"),
    "os.forkpty": _fork("os.forkpty"),
    "os.startfile": lambda args: _process("os.startfile", _arg(args, 0), None),
    "safehub.fork_exec": _fork_exec,
}

#: Every name-resolution entry point of ``socket`` (and ``_socket``, which raises the same
#: events): each is a lookup the ``network`` key decides.
_LOOKUPS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
            "socket.gethostbyaddr", "socket.getnameinfo")

EVENTS: dict[str, Reader] = {
    "open": _open,
    "os.mkdir": _mkdir,
    "sqlite3.connect": _sqlite,
    **{op: _writes(op, *specs) for op, specs in _WRITES.items()},
    **_PROCESSES,
    **{op: _lookup(op) for op in _LOOKUPS},
    **{op: _connect(op) for op in ("socket.connect", "socket.sendto", "socket.sendmsg")},
    "os.putenv": _environ("os.putenv"),
    "os.unsetenv": _environ("os.unsetenv"),
    "ctypes.dlopen": _dlopen,
    "ctypes.dlsym": _dlsym,
    "ctypes.dlsym/handle": _dlsym,
    "import": _import,
    "safehub.run.runtime.probe": lambda args: (Action("probe", "probe", ""),),
    # a pickle names a global to call: torch.load(weights_only=False), pickle.load (torch's
    # weights_only unpickler names none)
    "pickle.find_class": lambda args: (Action(
        "unpickle", "pickle.find_class", f"{_text(_arg(args, 0))}.{_text(_arg(args, 1))}"),),
}
