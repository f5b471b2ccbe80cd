"""Audit events, read into :class:`Action` values the guard decides on.

Every reader takes the event's argument tuple and returns the actions it stands for
(usually one, none for events that change nothing, two for a rename). Paths come out
absolute and with symlinks resolved, as the operation will see them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["EVENTS", "Action", "command_line", "shell_program"]


@dataclass(frozen=True)
class Action:
    """One thing the code tried to do.

    ``kind`` is ``lookup``, ``connect``, ``process``, ``write``, ``environ`` (a variable
    set or unset), ``library`` (a ``ctypes`` load), ``extension`` (a compiled module
    imported), ``symbol`` (a ``ctypes`` function looked up), ``guard`` or ``probe``. ``op``
    is the audit event.
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


Reader = Callable[[tuple[Any, ...]], tuple[Action, ...]]
_NONE: tuple[Action, ...] = ()
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})
_SHELL_SPECIAL = frozenset(";&|<>()$`\\\n\r*?[]{}~!#")
_MAX_TEXT = 240


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return os.fsdecode(value)
    return str(os.fspath(value)) if isinstance(value, (str, os.PathLike)) else str(value)


def _arg(args: tuple[Any, ...], index: int) -> Any:
    return args[index] if len(args) > index else None


# -- paths -------------------------------------------------------------------------------

def _dir_of_fd(fd: Any) -> str:
    if not isinstance(fd, int) or fd < 0:
        return os.getcwd()
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    get_path = getattr(fcntl, "F_GETPATH", None) if fcntl is not None else None
    if get_path is not None:  # macOS
        with contextlib.suppress(OSError):
            return os.fsdecode(fcntl.fcntl(fd, get_path, bytes(1024)).rstrip(b"\0"))
    return f"/<unknown directory of fd {fd}>"  # outside every allowed folder


def _path(value: Any, dir_fd: Any = None, follow: bool = True) -> str | None:
    """``value`` as the absolute, resolved path the operation acts on (None for an fd)."""
    if value is None or isinstance(value, int):
        return None
    path = _text(value)
    if not os.path.isabs(path):
        path = os.path.join(_dir_of_fd(dir_fd), path)
    if follow:
        return os.path.realpath(path)
    head, tail = os.path.split(path.rstrip(os.sep) or os.sep)
    if tail in ("", ".", ".."):
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(head), tail)


def _writes(op: str, *specs: tuple[int, int | None, bool]) -> Reader:
    """A reader for an event whose argument ``index`` is a path written (``dir_fd``: the
    argument holding its directory's descriptor; ``follow``: whether a final symlink is
    followed)."""

    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        paths = []
        for index, dir_fd, follow in specs:
            path = _path(_arg(args, index), _arg(args, dir_fd) if dir_fd is not None else None,
                         follow)
            if path is not None:
                paths.append(path)
        if not paths:
            return _NONE
        return (Action("write", op, " -> ".join(paths), paths=tuple(paths)),)

    return read


def _open(args: tuple[Any, ...]) -> tuple[Action, ...]:
    path, mode, flags = _arg(args, 0), _arg(args, 1), _arg(args, 2)
    writing = isinstance(flags, int) and flags & _WRITE_FLAGS
    if not writing and isinstance(mode, str):
        writing = any(c in mode for c in "wax+")
    if not writing or path is None or isinstance(path, int):
        return _NONE
    resolved = _path(path)
    return (Action("write", "open", str(resolved), paths=(str(resolved),)),)


def _mkdir(args: tuple[Any, ...]) -> tuple[Action, ...]:
    path = _path(_arg(args, 0), _arg(args, 2), follow=False)
    if path is None or os.path.isdir(path):  # makedirs(exist_ok=True) changes nothing
        return _NONE
    return (Action("write", "os.mkdir", path, paths=(path,)),)


def _sqlite(args: tuple[Any, ...]) -> tuple[Action, ...]:
    database = _arg(args, 0)
    if database is None or isinstance(database, int):
        return _NONE
    name = _text(database)
    if name.startswith("file:"):
        name, _, query = name[5:].partition("?")
        if "mode=ro" in query or "mode=memory" in query:
            return _NONE
    if name in ("", ":memory:"):
        return _NONE
    path = str(_path(name))
    return (Action("write", "sqlite3.connect", path, paths=(path,)),)


# -- processes ---------------------------------------------------------------------------

def _env_path(env: Any) -> str:
    if env is None:
        return os.environ.get("PATH", os.defpath)
    if isinstance(env, (list, tuple)):  # fork_exec: [b"K=V", ...]
        for item in env:
            key, _, value = _text(item).partition("=")
            if key == "PATH":
                return value
        return os.defpath
    try:
        value = env.get("PATH", env.get(b"PATH"))
    except (AttributeError, TypeError):
        return os.defpath
    return _text(value) if value is not None else os.defpath


def _find(program: str, env: Any, cwd: Any) -> tuple[str, str]:
    """(``program`` as found, its real path or "") the way exec would find it."""
    if os.sep in program or (os.altsep and os.altsep in program):
        base = _text(cwd) if cwd is not None else os.getcwd()
        found = os.path.abspath(os.path.join(base, program))
        return found, os.path.realpath(found)
    found_on_path = shutil.which(program, path=_env_path(env))
    if found_on_path is None:
        return program, ""
    found = os.path.abspath(found_on_path)
    return found, os.path.realpath(found)


def _special(command: str) -> bool:
    """``command`` has a character the shell treats specially (outside single quotes)."""
    quote = ""
    for c in command:
        if quote == "'":
            quote = "" if c == "'" else quote
        elif quote == '"':
            if c == '"':
                quote = ""
            elif c in "$`\\":
                return True
        elif c in "'\"":
            quote = c
        elif c in _SHELL_SPECIAL:
            return True
    return bool(quote)


def shell_program(command: str) -> str | None:
    """The program a shell command runs, if it is one simple command; else None.

    >>> shell_program("pip install --no-cache 'ultralytics>=8'")
    'pip'
    >>> shell_program("git log | head") is None, shell_program("A=1 git log") is None
    (True, True)
    """
    if _special(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or "=" in words[0]:
        return None
    return words[0]


def command_line(argv: Any) -> str:
    """``argv`` as one line, quoted, cut at 240 characters."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        text = _text(argv)
    else:
        try:
            text = " ".join(shlex.quote(_text(a)) for a in argv)
        except TypeError:
            text = repr(argv)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT - 3] + "..."


def _process(op: str, program: Any, argv: Any, env: Any = None, cwd: Any = None,
             command: Any = None) -> tuple[Action, ...]:
    """A program start; ``command`` is set for a shell command (``os.system``)."""
    exe = _text(program) if program is not None else ""
    words = [] if isinstance(argv, (str, bytes)) or argv is None else list(argv)
    if command is None and len(words) >= 3 and _text(words[1]) == "-c" \
            and os.path.basename(exe or _text(words[0])) in _SHELLS:
        command = words[2]
    shown = command_line(command if command is not None else (words or exe))
    if not exe and words:
        exe = _text(words[0])
    found, real = _find(exe, env, cwd)
    if command is not None:
        simple = shell_program(_text(command))
        if simple is not None:
            inner, inner_real = _find(simple, env, cwd)
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
    executables, argv, env, cwd = (_arg(args, i) for i in range(4))
    first = next(iter(executables), None) if executables else None
    return _process("fork_exec", first, argv, env, cwd)


def _startfile(args: tuple[Any, ...]) -> tuple[Action, ...]:
    return _process("os.startfile", _arg(args, 0), None)


# -- network -----------------------------------------------------------------------------

def _lookup(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        host = _arg(args, 0)
        if host is None:
            return _NONE
        name = _text(host)
        port = _arg(args, 1)
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
            path = _text(address).replace("\0", "@")
            return (Action("connect", op, f"unix:{path}", host=f"unix:{path}"),)
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
            host, port = _text(address[0]), address[1] if len(address) > 1 else None
            port = port if isinstance(port, int) else None
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            return (Action("connect", op, shown, host=host, port=port),)
        name = getattr(family, "name", str(family))
        return (Action("connect", op, f"{name}:{address!r}", host=f"{name}:{address!r}"),)

    return read


# -- environment -------------------------------------------------------------------------

def _environ(op: str) -> Reader:
    def read(args: tuple[Any, ...]) -> tuple[Action, ...]:
        key = _arg(args, 0)
        if key is None:
            return _NONE
        return (Action("environ", op, _text(key)),)

    return read


# -- native code -------------------------------------------------------------------------

def _dlopen(args: tuple[Any, ...]) -> tuple[Action, ...]:
    name = _arg(args, 0)
    if name is None:  # the process itself (ctypes.pythonapi, CDLL(None))
        return _NONE
    text = _text(name)
    path = os.path.realpath(text) if os.sep in text else ""
    return (Action("library", "ctypes.dlopen", text, paths=(path,) if path else ()),)


def _dlsym(args: tuple[Any, ...]) -> tuple[Action, ...]:
    library, symbol = _arg(args, 0), _arg(args, 1)
    if not isinstance(symbol, (str, bytes)):
        return _NONE
    where = getattr(library, "_name", None) if not isinstance(library, int) else None
    name = _text(symbol)
    shown = f"{name} from {_text(where)}" if where else name
    return (Action("symbol", "ctypes.dlsym", shown, program=name),)


def _import(args: tuple[Any, ...]) -> tuple[Action, ...]:
    filename = _arg(args, 1)
    if filename is None:
        return _NONE
    path = os.path.realpath(_text(filename))
    return (Action("extension", "import", f"{_text(_arg(args, 0))} ({path})", paths=(path,)),)


EVENTS: dict[str, Reader] = {
    "open": _open,
    "os.rename": _writes("os.rename", (0, 2, False), (1, 3, False)),
    "os.remove": _writes("os.remove", (0, 1, False)),
    "os.rmdir": _writes("os.rmdir", (0, 1, False)),
    "os.mkdir": _mkdir,
    "os.symlink": _writes("os.symlink", (1, 2, False)),
    # a hard link makes its source writable under the new name: both must be writable
    "os.link": _writes("os.link", (0, 2, True), (1, 3, False)),
    "os.truncate": _writes("os.truncate", (0, None, True)),
    "os.chmod": _writes("os.chmod", (0, 2, True)),
    "os.chown": _writes("os.chown", (0, 3, True)),
    "os.utime": _writes("os.utime", (0, 3, True)),
    "os.chflags": _writes("os.chflags", (0, None, True)),
    "os.lchflags": _writes("os.lchflags", (0, None, False)),
    "os.setxattr": _writes("os.setxattr", (0, None, True)),
    "os.removexattr": _writes("os.removexattr", (0, None, True)),
    "shutil.copyfile": _writes("shutil.copyfile", (1, None, True)),
    "shutil.copymode": _writes("shutil.copymode", (1, None, True)),
    "shutil.copystat": _writes("shutil.copystat", (1, None, True)),
    "shutil.copytree": _writes("shutil.copytree", (1, None, True)),
    "shutil.move": _writes("shutil.move", (0, None, False), (1, None, True)),
    "shutil.rmtree": _writes("shutil.rmtree", (0, 1, False)),
    "shutil.chown": _writes("shutil.chown", (0, None, True)),
    "shutil.unpack_archive": _writes("shutil.unpack_archive", (1, None, True)),
    "shutil.make_archive": _writes("shutil.make_archive", (0, None, False)),
    "sqlite3.connect": _sqlite,
    "subprocess.Popen": _popen,
    "os.system": _system,
    "os.exec": _exec,
    "os.posix_spawn": _posix_spawn,
    "os.spawn": _spawn,
    "os.fork": _fork("os.fork"),
    "os.forkpty": _fork("os.forkpty"),
    "os.startfile": _startfile,
    "safehub.fork_exec": _fork_exec,
    "socket.getaddrinfo": _lookup("socket.getaddrinfo"),
    "socket.gethostbyname": _lookup("socket.gethostbyname"),
    "socket.gethostbyname_ex": _lookup("socket.gethostbyname_ex"),
    "socket.connect": _connect("socket.connect"),
    "socket.sendto": _connect("socket.sendto"),
    "socket.sendmsg": _connect("socket.sendmsg"),
    "os.putenv": _environ("os.putenv"),
    "os.unsetenv": _environ("os.unsetenv"),
    "ctypes.dlopen": _dlopen,
    "ctypes.dlsym": _dlsym,
    "ctypes.dlsym/handle": _dlsym,
    "import": _import,
    "safehub.runtime.probe": lambda args: (Action("probe", "probe", ""),),
}
