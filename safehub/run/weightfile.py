"""A weights file as the guard handles it: its stat identity (what no write leaves as it
was), hashed whole, deleted when refused (a download is hashed as it is written:
:mod:`safehub._internal.hashing`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

__all__ = ["delete", "named_safetensors", "same_file", "sha256_of", "stat_key"]


def stat_key(st: os.stat_result) -> list[int]:
    """A file's stat identity: size, mtime, ctime and inode."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(1 << 20)
        view = memoryview(buffer)
        while n := f.readinto(buffer):
            h.update(view[:n])
    return h.hexdigest()


def same_file(seen: dict[str, Any] | None, path: Path) -> bool:
    """Whether ``path`` is the file recorded in ``seen``, unchanged since (its stat
    identity: size, mtime, ctime and inode, which no write leaves as they were)."""
    if not seen or seen.get("file") != str(path):
        return False
    try:
        return seen.get("stat") == stat_key(path.stat())
    except OSError:
        return False


def named_safetensors(url: str, path: Path) -> bool:
    return path.name.endswith(".safetensors") or urlparse(url).path.endswith(".safetensors")


def delete(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
