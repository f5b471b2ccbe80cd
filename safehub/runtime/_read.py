"""Reading audit-event arguments without running the repo's code.

An event carries the objects the code passed: a ``str`` subclass, a path object, a tuple
subclass or a mapping may have methods of the repo's own. Calling them while the guard
decides would run the repo's code unwatched, and could answer differently from what the
operation used (CPython has already converted the argument once). So only exact built-in
types, the raw contents of their subclasses, and the standard library's own path classes
are read; anything else raises :class:`Opaque`, and the guard decides on "an object it
cannot read" (refused wherever a key restricts the action).

>>> text(b"/tmp/x"), integer(True), items(("a", "b"))
('/tmp/x', 1, ['a', 'b'])
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shlex
import shutil
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["Opaque", "command_line", "find_program", "integer", "items", "path", "shell_program",
           "text"]

_PATH_TYPES = frozenset({pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.PosixPath,
                         pathlib.WindowsPath})
_SHELL_SPECIAL = frozenset(";&|<>()$`\\\n\r*?[]{}~!#")
_MAX_TEXT = 240


class Opaque(Exception):
    """An argument the guard will not read (it could run the repo's code)."""

    def __init__(self, value: object) -> None:
        super().__init__(type(value).__name__)
        self.shown = f"<a {type(value).__name__} object>"


def text(value: object) -> str:
    """``value`` as text: exact ``str``/``bytes``, their subclasses' raw contents, or a
    ``pathlib`` path of the standard library's own classes."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)  # the characters themselves, no method of the subclass
    if isinstance(value, bytes):
        return os.fsdecode(bytes.__getitem__(value, slice(None)))
    if type(value) in _PATH_TYPES:
        return str(value)
    raise Opaque(value)


def integer(value: object) -> int | None:
    """``value`` as an ``int`` if it is one (subclasses by their value), else None."""
    return int.__int__(value) if isinstance(value, int) else None


def items(value: object) -> list[Any]:
    """The items of a list or tuple (subclasses: their stored items)."""
    if isinstance(value, list):
        return list.copy(value)
    if isinstance(value, tuple):
        return list(tuple.__getitem__(value, slice(None)))
    raise Opaque(value)


def _dir_of_fd(fd: object) -> str:
    number = integer(fd)
    if number is None or number < 0:
        return os.getcwd()
    try:
        return os.readlink(f"/proc/self/fd/{number}")
    except OSError:
        pass
    get_path = getattr(fcntl, "F_GETPATH", None) if fcntl is not None else None
    if get_path is not None:  # macOS
        with contextlib.suppress(OSError):
            return os.fsdecode(fcntl.fcntl(number, get_path, bytes(1024)).rstrip(b"\0"))
    return f"/<unknown directory of fd {number}>"  # outside every allowed folder


def path(value: object, dir_fd: object = None, follow: bool = True) -> str | None:
    """``value`` as the absolute, resolved path an operation acts on (None: an fd).

    ``follow``: the operation follows a final symlink (``open``, ``chmod``...), so the
    link's target is what changes; else only the folders on the way are resolved.
    """
    if value is None or integer(value) is not None:
        return None
    name = text(value)
    if not os.path.isabs(name):
        name = os.path.join(_dir_of_fd(dir_fd), name)
    if follow:
        return os.path.realpath(name)
    head, tail = os.path.split(name.rstrip(os.sep) or os.sep)
    if tail in ("", ".", ".."):
        return os.path.realpath(name)
    return os.path.join(os.path.realpath(head), tail)


def _env_path(env: object) -> str:
    """The ``PATH`` a child started with ``env`` searches."""
    if env is None or env is os.environ:
        return os.environ.get("PATH", os.defpath)
    if isinstance(env, dict):
        value = dict.get(env, "PATH", dict.get(env, b"PATH"))
        return text(value) if value is not None else os.defpath
    for item in items(env):  # fork_exec: [b"K=V", ...]
        key, _, value = text(item).partition("=")
        if key == "PATH":
            return value
    return os.defpath


def find_program(program: str, env: object, cwd: object) -> tuple[str, str]:
    """(``program`` as exec would find it, its real path or "" if not found)."""
    if os.sep in program or (os.altsep and os.altsep in program):
        base = text(cwd) if cwd is not None else os.getcwd()
        found = os.path.abspath(os.path.join(base, program))
        return found, os.path.realpath(found)
    on_path = shutil.which(program, path=_env_path(env))
    if on_path is None:
        return program, ""
    found = os.path.abspath(on_path)
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


def command_line(words: list[str]) -> str:
    """``words`` as one line, quoted, cut at 240 characters."""
    line = " ".join(shlex.quote(w) for w in words)
    return line if len(line) <= _MAX_TEXT else line[:_MAX_TEXT - 3] + "..."
