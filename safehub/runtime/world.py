"""What safehub's own work reads from the process, held as it was before the repo's code ran.

While safehub works for a guarded load (a nested load's checks, a weights download) it
pauses the guard for that work, and the guard holds only what safehub's own code does
(frames.py, ``OwnWork``): a hook of the repo's written in Python (a replaced stream, a
warnings hook, an import finder, a monkeypatched library) acts under the guard. What
library code reads without calling the repo's code is put back instead: the environment's
variables (proxies and CA bundles, which the repo may have edited in place), and gc,
profiling and tracing stop. The outermost guard takes a :class:`World` before any of the
repo's code runs; pauses put it in place, process-wide and counted (another thread's
change to the environment during a pause is lost: documented).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["World", "no_bytecode"]

_BYTECODE_LOCK = threading.Lock()

_HELD: tuple[tuple[Any, str], ...] = ((os, "environ"),)


class World:
    """The process state a pause puts back (see the module docstring).

    Process-wide and counted: the first pause (of any thread) puts it in place, the last
    puts back what was there, unless some thread assigned another value meanwhile;
    profiling and tracing (per thread) stop in the pausing thread."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        from safehub.runtime.frames import remember_modules

        remember_modules()  # the modules there before the repo's code: libraries
        self._values = {key: _copy(getattr(*key)) for key in _HELD}
        # The variables too, not only the mapping: proxies and CA bundles come from them,
        # and the repo's code may have edited them in place (os.environ._data included).
        self._values[(os, "environ")] = dict(os.environ)

    def enter(self) -> None:
        """Put this world in place; gc, profiling and tracing stop meanwhile."""
        global _ACTIVE, _RESTORE
        _THREAD.saved = (*getattr(_THREAD, "saved", ()), (sys.getprofile(), sys.gettrace()))
        sys.setprofile(None)
        sys.settrace(None)
        with _LOCK:
            if _ACTIVE == 0:
                current = {key: getattr(*key) for key in _HELD}
                placed = {key: _copy(value) for key, value in self._values.items()}
                _RESTORE = (current, placed, gc.isenabled())
                gc.disable()
                for (owner, name), value in placed.items():
                    setattr(owner, name, value)
            _ACTIVE += 1

    def leave(self) -> None:
        global _ACTIVE, _RESTORE
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0 and _RESTORE is not None:
                current, placed, enabled = _RESTORE
                _RESTORE = None
                for (owner, name), value in current.items():
                    if getattr(owner, name) is placed[(owner, name)]:  # else: assigned since
                        setattr(owner, name, value)
                if enabled:
                    gc.enable()
        profile, trace = _THREAD.saved[-1]
        _THREAD.saved = _THREAD.saved[:-1]
        sys.settrace(trace)
        sys.setprofile(profile)


_LOCK = threading.Lock()
_ACTIVE = 0
_RESTORE: tuple[dict[tuple[Any, str], Any], dict[tuple[Any, str], Any], bool] | None = None
_THREAD = threading.local()


def _copy(value: Any) -> Any:
    """Lists and dicts (finders, hooks, filters, the importer cache, the environment's
    variables) as copies: the repo's code may change the originals in place."""
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
