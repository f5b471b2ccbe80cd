"""What safehub's own work reads from the process, held as it was before the repo's code ran.

While safehub works for a guarded load (a nested load's checks, a weights download) the
guard is paused for that work. Anything of the repo's that the work would call back into
would then run unguarded: a replaced ``sys.stderr`` (progress lines), ``warnings``
hooks, import finders (safehub's lazy imports), ``os.environ`` (proxies), ``gc`` callbacks,
profile and trace functions. So the outermost guard takes a :class:`World` before any of
the repo's code runs, and each pause puts it back for its duration: the repo's objects
are not reached, and are restored afterwards. Process-wide: other threads see the saved
world during a pause, which only ever lasts as long as safehub's own step.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["World", "no_bytecode"]

_BYTECODE_LOCK = threading.Lock()

_HELD: tuple[tuple[Any, str], ...] = (
    (sys, "meta_path"), (sys, "path_hooks"), (sys, "path_importer_cache"), (sys, "stdout"),
    (sys, "stderr"), (warnings, "showwarning"), (warnings, "filters"), (os, "environ"),
)


class World:
    """The process state a pause puts back (see the module docstring)."""

    __slots__ = ("_saved", "_values")

    def __init__(self) -> None:
        self._values = {key: _copy(getattr(*key)) for key in _HELD}
        self._saved: list[tuple[dict[tuple[Any, str], Any], bool, Any, Any]] = []

    def enter(self) -> None:
        """Put this world in place (nestable); gc, profiling and tracing stop meanwhile."""
        current = {key: getattr(*key) for key in _HELD}
        self._saved.append((current, gc.isenabled(), sys.getprofile(), sys.gettrace()))
        gc.disable()
        sys.setprofile(None)
        sys.settrace(None)
        for (owner, name), value in self._values.items():
            setattr(owner, name, _copy(value))

    def leave(self) -> None:
        current, enabled, profile, trace = self._saved.pop()
        for (owner, name), value in current.items():
            setattr(owner, name, value)
        sys.settrace(trace)
        sys.setprofile(profile)
        if enabled:
            gc.enable()


def _copy(value: Any) -> Any:
    """Lists and dicts (finders, hooks, filters, the importer cache) as copies: the repo's
    code may change the originals in place."""
    if type(value) is list:
        return list(value)
    if type(value) is dict:
        return dict(value)
    return value


_bytecode_users = 0
_bytecode_saved = False


@contextlib.contextmanager
def no_bytecode() -> Iterator[None]:
    """``sys.dont_write_bytecode`` while any guard is active (a count: loads may overlap)."""
    global _bytecode_users, _bytecode_saved
    with _BYTECODE_LOCK:
        if _bytecode_users == 0:
            _bytecode_saved = sys.dont_write_bytecode
            sys.dont_write_bytecode = True
        _bytecode_users += 1
    try:
        yield
    finally:
        with _BYTECODE_LOCK:
            _bytecode_users -= 1
            if _bytecode_users == 0:
                sys.dont_write_bytecode = _bytecode_saved
