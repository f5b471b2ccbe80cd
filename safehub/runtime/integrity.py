"""The functions the runtime guard computes with, as they were before any repo code ran.

The guard decides a write by making its path absolute and resolving links, a process by
finding its program, a connection by parsing its address: with ``os.path.realpath``,
``os.lstat``, ``shutil.which``, ``ipaddress``... looked up when it decides. Code that
replaces one of them (``os.path.realpath = tempfile.gettempdir().__add__``: one line, no
frame of its own) would make a write outside look like one inside. So the originals are
kept here when safehub's runtime package is imported, before any guarded code runs, and
every action the guard is about to decide is first checked against them: a replaced one
is tampering, refused.
"""

from __future__ import annotations

import builtins
import ipaddress
import os
import posixpath
import shlex
import shutil
import socket
import stat
from typing import Any

__all__ = ["replaced"]

_WATCHED: dict[Any, tuple[str, ...]] = {
    os: ("lstat", "stat", "readlink", "getcwd", "fspath", "fsdecode", "fsencode", "access",
         "getenv", "path", "sep"),
    posixpath: ("realpath", "abspath", "join", "split", "isabs", "isdir", "isfile",
                "basename", "dirname", "expanduser", "normpath", "exists", "lexists",
                "islink", "splitext"),
    shutil: ("which",),
    shlex: ("split", "quote"),
    socket: ("getaddrinfo", "inet_pton", "inet_aton", "AF_INET", "AF_INET6", "AF_UNIX"),
    ipaddress: ("ip_address", "ip_network"),
    stat: ("S_ISLNK", "S_ISDIR", "S_ISREG"),
    builtins: ("isinstance", "issubclass", "len", "str", "bytes", "int", "getattr",
               "hasattr", "type", "tuple", "list", "any", "all", "sorted", "next", "iter",
               "open", "min", "max", "repr", "hash", "id", "frozenset", "set", "dict"),
}
_ORIGINAL = tuple((module, name, getattr(module, name)) for module, names in _WATCHED.items()
                  for name in names if hasattr(module, name))


def replaced() -> str | None:
    """The first function the guard relies on that is no longer the original, if any."""
    for module, name, original in _ORIGINAL:
        if module.__dict__.get(name) is not original:
            return f"{module.__name__}.{name}"
    return None
