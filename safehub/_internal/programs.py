"""Programs as a process start names them, and as policy entries name them.

:func:`find_program` finds a program as ``exec`` would (a name on ``PATH``, or a path);
:func:`shell_program` tells the program a shell command runs when it is one simple
command; :func:`check_entry` is the one rule for an entry of the policy's ``subprocess``
and ``[confine] exec`` keys (a program name or an absolute path).

>>> shell_program("pip install --no-cache 'ultralytics>=8'")
'pip'
>>> shell_program("git log | head") is None, shell_program("A=1 git log") is None
(True, True)
>>> check_entry("git"), check_entry("/usr/bin/git")
('git', '/usr/bin/git')
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

__all__ = ["check_entry", "command_line", "find_program", "shell_program"]

_SHELL_SPECIAL = frozenset(";&|<>()$`\\\n\r*?[]{}~!#")
_MAX_TEXT = 240
_NAME = re.compile(r"[A-Za-z0-9._+-]+")


def check_entry(entry: str) -> str:
    """``entry`` if it is a program name (letters, digits, ``. _ + -``) or an absolute
    path; else ``ValueError``."""
    if not (_NAME.fullmatch(entry) or (os.path.isabs(entry) and "\0" not in entry)):
        raise ValueError(f"{entry!r} is not a program name (letters, digits, . _ + -) or an "
                         "absolute path")
    return entry


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return os.fsdecode(value)
    if isinstance(value, os.PathLike):
        return _text(os.fspath(value))
    return str(value)


def _env_path(env: Any) -> str:
    """The ``PATH`` a child started with ``env`` searches."""
    if env is None or env is os.environ:
        return os.environ.get("PATH", os.defpath)
    if isinstance(env, dict):
        value = env.get("PATH", env.get(b"PATH"))
        return _text(value) if value is not None else os.defpath
    for item in env if isinstance(env, (list, tuple)) else ():  # fork_exec: [b"K=V", ...]
        key, _, value = _text(item).partition("=")
        if key == "PATH":
            return value
    return os.defpath


def find_program(program: str, env: object = None, cwd: object = None) -> tuple[str, str]:
    """(``program`` as exec would find it, its real path or "" if not found)."""
    if os.sep in program:
        found = os.path.abspath(os.path.join(_text(cwd) if cwd is not None else os.getcwd(),
                                             program))
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
    """The program a shell command runs, if it is one simple command; else None."""
    if _special(command):
        return None
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or "=" in words[0]:
        return None
    return words[0]


def command_line(words: list[str]) -> str:
    """``words`` as one line, quoted, cut at 240 characters."""
    import shlex

    line = " ".join(shlex.quote(w) for w in words)
    return line if len(line) <= _MAX_TEXT else line[:_MAX_TEXT - 3] + "..."


