"""The process-wide part of the runtime guard: one audit hook, per-thread guard stacks.

Installed once per process, on the first guard's activation (audit hooks cannot be
removed). While no thread has a guard and no tree is watched, the hook is two tests per
event; an ``open`` of a file outside every watched tree adds a prefix test.

Each thread has a stack of entries: the guards pushed by ``RuntimeGuard.active()``, and
the :data:`OWN_WORK` marker pushed by :class:`own_work` around safehub's own work during
a load (a nested load's checks, a weights download, the audit line). The innermost guard
decides and every guard on the stack records. Under the marker, an action on the
innermost guard's list of what safehub's work may touch (its hosts; its cache, data and
log folders but never consent records; never a process) is neither recorded nor refused;
anything else is decided as if there were no marker.

Two things raise no audit event on Python 3.10 and 3.11, so safehub wraps a function for
each, once: thread starts (a thread started while its starter has a stack runs with a copy
of it), and ``_posixsubprocess.fork_exec``, which ``multiprocessing`` calls directly (the
wrapper raises ``safehub.fork_exec``). They hold honest code. Code that wants to start an
unwatched thread or process can (docs/runtime.md); ``safehub run --confine`` holds that.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from safehub._internal import fixes
from safehub.errors import RuntimeGuardError
from safehub.run.runtime._events import EVENTS, Action, writes
from safehub.store.cache import warm

__all__ = ["OWN_WORK", "Guarded", "install", "own_work", "pop", "push", "watch"]


class Guarded(Protocol):
    """What the hook needs from a guard."""

    def decide(self, action: Action) -> RuntimeGuardError | None: ...

    def record(self, action: Action, refusal: RuntimeGuardError | None) -> None: ...

    def own_allows(self, action: Action) -> bool: ...

    def internal_error(self, event: str, error: Exception) -> RuntimeGuardError: ...


class _OwnWork:
    def __repr__(self) -> str:
        return "OWN_WORK"


OWN_WORK = _OwnWork()
Entry = Guarded | _OwnWork


class _State(threading.local):
    stack: tuple[Entry, ...] = ()
    busy: bool = False  # the guard is deciding: its own lookups and opens are not events
    own: int = 0  # inside own_work(): safehub may read tree files (to verify them again)


_STATE = _State()
_LOCK = threading.RLock()
_live = 0  # threads whose stack is not empty; the hook's whole idle cost is testing this
_threads: set[int] = set()
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        if _warm.prefixes:
            name = args[0]
            if name.__class__ is str:
                if "/." in name or name[:1] != "/":
                    _tree_read_slow(name, args)  # relative, "tree/../x" or "a/../tree/x"
                elif name.startswith(_warm.prefixes):
                    _tree_read(name, args)
            elif name.__class__ is not int:
                _tree_read_slow(name, args)  # bytes, a path object
    elif event == "os.chdir":
        warm.changed_dir()
    elif event == "os.mkdir" and _warm.prefixes:
        warm.refuse_bytecode_folder(args)
    if _live and event in EVENTS:
        _dispatch(event, args)


_warm = warm.STATE  # the watched trees' prefixes (``_warm.prefixes``): one home, read here


def watch(prefixes: tuple[str, ...], verified_ns: int, repo: str,
          ident: tuple[int, int] | None = None) -> None:
    """Check reads of the tree under ``prefixes`` from now on (:func:`warm.watch`)."""
    warm.watch(prefixes, verified_ns, repo, ident)


def _tree_read_slow(name: object, args: tuple[Any, ...]) -> None:
    try:
        path = warm.tree_path(name)
    except (OSError, ValueError, TypeError):  # a deleted working directory, an odd name
        return
    if path is not None:
        _tree_read(path, args)


def _tree_read(path: str, args: tuple[Any, ...]) -> None:
    """A file of a watched tree is opened (the check on open, store/cache/warm.py):
    during a guarded load, or after it by the tree's own code (a lazy import in
    ``model.forward``); the caller's own reads after the load, and safehub's own work,
    are not the repo's."""
    state = _STATE
    if state.own or state.busy or writes(args[1], args[2]):  # writes: the guard's business
        return
    if not state.stack and not _from_a_tree():
        return
    warm.refuse_bytecode(path)
    refusal = warm.check_opened(path)
    if refusal is not None:
        _record_all(state.stack, Action("read", "open", path), refusal)
        raise refusal


def _from_a_tree() -> bool:
    """Some frame on this thread's stack runs code of a watched tree."""
    frame: Any = sys._getframe(3)
    while frame is not None:
        if frame.f_code.co_filename.startswith(_warm.prefixes):
            return True
        frame = frame.f_back
    return False


def _guards(stack: tuple[Entry, ...]) -> list[Guarded]:
    return [e for e in stack if e is not OWN_WORK]  # type: ignore[misc]


def _record_all(stack: tuple[Entry, ...], action: Action,
                refusal: RuntimeGuardError | None) -> None:
    for guard in _guards(stack):
        guard.record(action, refusal)


def _dispatch(event: str, args: tuple[Any, ...]) -> None:
    state = _STATE
    stack = state.stack
    if not stack or state.busy:
        return
    guards = _guards(stack)
    if not guards:
        return
    top, own = guards[-1], stack[-1] is OWN_WORK
    state.busy = True
    try:
        for action in EVENTS[event](args):
            if own and top.own_allows(action):
                continue
            refusal = top.decide(action)
            for guard in guards:
                guard.record(action, refusal)
            if refusal is not None:
                raise refusal
    except RuntimeGuardError:
        raise
    except Exception as e:  # fail closed: a guard that cannot decide refuses
        error = top.internal_error(event, e)
        _record_all(stack, Action("guard", event, event), error)
        raise error from None
    finally:
        state.busy = False


def _set_stack(stack: tuple[Entry, ...]) -> None:
    global _live
    state = _STATE
    was = bool(state.stack)
    state.stack = stack
    if was != bool(stack):
        with _LOCK:
            if stack:
                _threads.add(threading.get_ident())
            else:
                _threads.discard(threading.get_ident())
            _live = len(_threads)


def push(entry: Entry) -> None:
    """Make ``entry`` the innermost entry of this thread's stack."""
    _set_stack((*_STATE.stack, entry))


def pop(entry: Entry) -> None:
    """Remove ``entry`` (and anything pushed after it and left behind) from this thread."""
    stack = _STATE.stack
    if entry in stack:
        index = len(stack) - 1 - stack[::-1].index(entry)
        _set_stack(stack[:index])


class own_work:  # used as a function: ``with own_work():``
    """safehub's own work, inside a guarded load or not: under a guard, what the guard's
    own-work list allows is neither recorded nor refused (see the module docstring); and
    the files of a verified tree may be read (to verify them again).

    >>> with own_work():
    ...     pass
    """

    __slots__ = ("_pushed",)

    def __enter__(self) -> None:
        state = _STATE
        state.own += 1
        self._pushed = bool(state.stack)
        if self._pushed:
            push(OWN_WORK)

    def __exit__(self, *exc: object) -> None:
        if self._pushed:
            pop(OWN_WORK)
        _STATE.own -= 1


class _Carried:
    """A thread's function, run with the stack its starter had."""

    def __init__(self, function: Callable[..., Any], stack: tuple[Entry, ...],
                 own: int) -> None:
        self.function, self.stack, self.own = function, stack, own

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _set_stack(self.stack)
        _STATE.own = self.own
        try:
            return self.function(*args, **kwargs)
        finally:
            _set_stack(())
            _STATE.own = 0


def _carrying(start: Callable[..., Any]) -> Callable[..., Any]:
    def start_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        state = _STATE
        if state.stack or state.own:
            function = _Carried(function, state.stack, state.own)
        return start(function, *args, **kwargs)

    return start_thread


def _announcing(fork_exec: Callable[..., Any]) -> Callable[..., Any]:
    def announce_fork_exec(*args: Any, **kwargs: Any) -> Any:
        if _live and len(args) > 5:
            sys.audit("safehub.fork_exec", args[1], args[0], args[5], args[4])
        return fork_exec(*args, **kwargs)

    return announce_fork_exec


def _wrap(module: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]
          ) -> None:
    current = getattr(module, name, None)
    if current is not None:
        setattr(module, name, make(current))


def _after_fork_in_child() -> None:
    global _live
    _threads.clear()
    if _STATE.stack:
        _threads.add(threading.get_ident())
    _live = len(_threads)


class _Probe:
    """Pushed for one event to prove the hook runs (an earlier hook may refuse new hooks)."""

    seen = False

    def decide(self, action: Action) -> RuntimeGuardError | None:
        self.seen = True
        return None

    def record(self, action: Action, refusal: RuntimeGuardError | None) -> None:
        return None

    def own_allows(self, action: Action) -> bool:
        return False

    def internal_error(self, event: str, error: Exception) -> RuntimeGuardError:
        return RuntimeGuardError(f"the runtime guard failed its self-test: {error!r}")


def install() -> None:
    """Add the audit hook and the thread and ``fork_exec`` wrappers, once per process.

    Raises :class:`RuntimeGuardError` if another audit hook refused ours (fail closed).
    """
    global _installed
    with _LOCK:
        if _installed:
            return
        sys.addaudithook(_hook)
        probe = _Probe()
        push(probe)
        try:
            sys.audit("safehub.run.runtime.probe")
        finally:
            pop(probe)
        if not probe.seen:
            raise RuntimeGuardError(
                "the runtime guard could not add its audit hook: another audit hook "
                "refused it", fix=fixes.say('set runtime = "off" in [safehub], or remove the hook'))
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
        import _thread

        for name in ("_start_new_thread", "_start_joinable_thread"):  # 3.13: joinable
            _wrap(threading, name, _carrying)
        _wrap(_thread, "start_new_thread", _carrying)
        try:
            import _posixsubprocess
        except ImportError:  # not POSIX
            pass
        else:
            _wrap(_posixsubprocess, "fork_exec", _announcing)
        _installed = True
