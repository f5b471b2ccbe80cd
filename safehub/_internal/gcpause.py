"""The cyclic garbage collector paused while safehub does its own work before a load.

safehub's checks allocate many short-lived objects (policy values, archive entries,
records) that reference counting frees; the collector's passes over them find nothing to
collect, and one of them can be the full pass over the whole heap (torch's: about 100 ms)
that the program's next allocations were due to pay anyway. torch.hub's own load leaves
that pass to the program; with the collector paused, so does safehub's.

- :func:`paused` disables the collector for the block if it was enabled, and enables it
  again when the last such block in the process ends (blocks nest, in any thread).
- :func:`running` lets it run again during a block that waits on the network (an
  archive's download can take minutes, and other threads keep allocating).
- The repo's own code never runs paused: the load ends the pause before it delegates.
- A program that turns the collector off itself while a load is paused finds it on again
  when the load's checks end (the collector cannot tell who turned it off).
- Where a pause leaves many objects behind (:data:`_MANY`: a first load imports most of
  safehub, whose modules, classes and functions live as long as the process), they move
  into the oldest generation unscanned when the collector runs again (``gc.freeze()``
  then ``gc.unfreeze()``, as CPython's docs advise before a fork): the two younger
  generations would each scan them once only to promote them (~5 ms of a fleet node's
  ~75). The price: a cycle of garbage young at that moment is found at the next full
  pass, not the next young one. A warm load leaves a few hundred: nothing is promoted.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["paused", "running"]

_LOCK = threading.Lock()
_depth = 0
_was_enabled = False
_MANY = 5000
"""A pause that leaves more tracked objects than this (imports, mostly) promotes them."""


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block (if it was on); see the module docstring."""
    global _depth, _was_enabled
    with _LOCK:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                _resume()


@contextlib.contextmanager
def running() -> Iterator[None]:
    """Inside :func:`paused`: the collector on again while the block waits."""
    with _LOCK:
        resume = _depth > 0 and _was_enabled and not gc.isenabled()
        if resume:
            _resume()
    try:
        yield
    finally:
        if resume:
            with _LOCK:
                if _depth > 0:
                    gc.disable()


def _resume() -> None:
    """The collector on again (``_LOCK`` held), after the promotion the module docstring
    describes where the pause left many objects."""
    if gc.get_count()[0] > _MANY:
        gc.freeze()
        gc.unfreeze()
    gc.enable()
