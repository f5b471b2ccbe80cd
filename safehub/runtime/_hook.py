"""The process-wide part of the runtime guard: one audit hook, per-thread guard stacks.

Installed once per process, on the first guard's activation (audit hooks cannot be
removed). While no thread has a guard, the hook is one global test per audit event.

Each thread has a stack of guard entries: a guard pushed by ``RuntimeGuard.active()``, or
:data:`SUSPENDED` pushed by :func:`suspended` for safehub's own work. The innermost entry
decides; every guard on the stack records. A thread started while its starter had a stack
runs with a copy of that stack for its whole life (Python 3.10 and 3.11 raise no audit event
for a thread start, so the start functions of ``threading`` and ``_thread`` are wrapped).
Processes started through ``_posixsubprocess.fork_exec``, which raises no audit event
(``multiprocessing``'s spawn and forkserver; ``subprocess`` itself), are announced with the
event ``safehub.fork_exec``, whose arguments are the exact bytes the child will run.
"""

from __future__ import annotations

import errno
import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from safehub.errors import RuntimeGuardError
from safehub.runtime import sealed
from safehub.runtime._events import EVENTS, PROCESS_EVENTS, Action
from safehub.runtime.frames import foreign_between, safehubs
from safehub.runtime.integrity import replaced as _replaced

__all__ = ["SUSPENDED", "Entry", "Guarded", "heal", "install", "pop", "push",
           "routed", "snapshot", "suspended", "tampered"]


class Guarded(Protocol):
    """What the hook needs from a guard."""

    def decide(self, action: Action) -> RuntimeGuardError | None: ...

    def record(self, action: Action, refusal: RuntimeGuardError | None) -> None: ...

    def internal_error(self, event: str, error: Exception) -> RuntimeGuardError: ...

    def own_event(self, event: str, args: tuple[Any, ...]) -> bool: ...


class _Suspended:
    def __repr__(self) -> str:
        return "SUSPENDED"


SUSPENDED = _Suspended()
Entry = Guarded | _Suspended


class _State(threading.local):
    stack: tuple[Entry, ...] = ()
    busy: bool = False
    own: int = 0  # inside suspended(): safehub's own work, which may read tree files
    marks: tuple[int, ...] = ()  # guard depths at which a routed call began (see routed)
    pause_at: tuple[Any, ...] = ()  # frames that entered a pause under a guard (suspended)


_STATE = _State()
_LOCK = threading.RLock()
_live = 0  # threads whose stack is not empty; the hook's whole idle cost is testing this
_threads: set[int] = set()
_installed = False
_wrapped: dict[tuple[object, str], Callable[..., Any]] = {}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and sealed.PREFIXES:
        _check_tree_read(args)
    elif event == "os.mkdir" and sealed.PREFIXES:
        sealed.refuse_bytecode_folder(args)
    if _live and event in EVENTS:
        _dispatch(event, args)


def _record_all(stack: tuple[Entry, ...], action: Action,
                refusal: RuntimeGuardError | None) -> None:
    """Every guard of ``stack`` records ``action`` (and its refusal)."""
    for entry in stack:
        if entry is not SUSPENDED:
            entry.record(action, refusal)  # type: ignore[union-attr]


def _tamper(stack: tuple[Entry, ...], target: str, what: str) -> NoReturn:
    """Refuse (and have every guard record) an edit of the guard's machinery."""
    error = RuntimeGuardError(f"runtime guard: {what}",
                              hint="find what changed it (the repo's code, a test tool)")
    _record_all(stack, Action("guard", "tamper", target), error)
    raise error


def _check_tree_read(args: tuple[Any, ...]) -> None:
    """A file of a verified tree, opened for reading, guarded or not (sealed.py)."""
    state = _STATE
    if state.busy or state.own:
        return
    try:
        path = sealed.opened(args)
        if path is None or (not state.stack and not _from_a_tree()):
            return  # after a load, only the repo's own code is held to its tree
        refusal = sealed.check_read(path)
    except Exception:  # a path the check cannot read is the guard's business, not this one
        return
    if path.endswith(".pyc"):  # committed or planted: importlib then compiles the source
        raise PermissionError(errno.EACCES, "safehub: bytecode in a verified tree never "
                              "runs (the source it shows reviewers may differ)", path)
    if refusal is None:
        return
    _record_all(state.stack, Action("read", "open", path or ""), refusal)
    raise refusal


def _from_a_tree() -> bool:
    """Some frame on this thread's stack runs code of a watched tree (the repo's code,
    after its load returned: a lazy import in ``model.forward``)."""
    frame = sys._getframe(3)
    for _ in range(256):
        if frame is None:
            return False
        if frame.f_code.co_filename.startswith(sealed.PREFIXES):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _dispatch(event: str, args: tuple[Any, ...]) -> None:
    state = _STATE
    stack = state.stack
    if not stack:
        return
    if stack[-1] is SUSPENDED:  # safehub's own work: unless something else is doing this
        depth = _guard_depth(stack)
        if not depth or not state.pause_at or (
                event not in PROCESS_EVENTS
                and not foreign_between(sys._getframe(2), state.pause_at[-1], sealed.PREFIXES)
                and stack[depth - 1].own_event(event, args)):  # type: ignore[union-attr]
            return
        stack = stack[:depth]  # decided as if there were no pause
    top: Guarded = stack[-1]  # type: ignore[assignment]
    if state.busy:
        dispatching = _inside_dispatch()
        if dispatching is not None and not foreign_between(sys._getframe(2), dispatching,
                                                           sealed.PREFIXES):
            return  # the guard's own opens, lookups and imports
        state.busy = False  # set from outside, or code of another's ran while it decided
        _tamper(stack, event, f"code that is not the guard's ran while the guard was busy "
                f"({event}): its busy flag was set from outside, or a hook ran meanwhile")
    state.busy = True  # the guard's own opens, lookups and imports are not audited by it
    collecting = gc.isenabled()
    if collecting:
        gc.disable()  # no gc callback or finalizer of the repo's runs while busy
    try:
        actions = EVENTS[event](args)
        changed = _replaced() if actions else None
        if changed is not None:  # the guard's own tools were swapped: it cannot decide
            _tamper(stack, changed, f"{changed} was replaced while guarded code ran, so the "
                    f"guard cannot decide {event}; refused")
        for action in actions:
            refusal = top.decide(action)
            _record_all(stack, action, refusal)
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
        if collecting:
            gc.enable()


_DISPATCH = _dispatch
_DISPATCH_CODE = _dispatch.__code__
_EVENTS = EVENTS
_EVENTS_FROZEN = tuple(EVENTS.items())



def _inside_dispatch() -> Any:
    """The frame of :func:`_dispatch` on this thread's stack, if any (the busy flag is
    legitimately set only while the guard decides an event)."""
    frame = sys._getframe(2)
    for _ in range(128):
        if frame is None:
            return None
        if frame.f_code is _DISPATCH_CODE:
            return frame
        frame = frame.f_back  # type: ignore[assignment]
    return None


def heal() -> None:
    """Undo cheap edits an earlier load left behind (its guard refused them when it ended),
    so that the next guard holds again: the event table's contents, this thread's flag."""
    if tuple(EVENTS.items()) != _EVENTS_FROZEN:
        EVENTS.clear()
        EVENTS.update(_EVENTS_FROZEN)
    if not _STATE.stack:
        _STATE.busy = False


def _guard_depth(stack: tuple[Entry, ...]) -> int:
    """How many entries up to and including the innermost guard (0: no guard)."""
    for index in range(len(stack) - 1, -1, -1):
        if stack[index] is not SUSPENDED:
            return index + 1
    return 0


def _set_stack(stack: tuple[Entry, ...]) -> None:
    global _live
    state = _STATE
    was = bool(state.stack)
    state.stack = stack
    if was != bool(stack):
        with _LOCK:  # a set of threads, not a bare count: an edited count heals on the next
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


_safehubs = safehubs


def routed(handler: Callable[..., Any],
           plain: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]] | None = None
           ) -> Callable[..., Any]:
    """``handler`` (a torch.hub function's stand-in that a load installs) marked as the
    way a guarded repo's calls reach safehub: while it runs, safehub's own work may
    suspend the guard that was innermost when it was called (see :class:`suspended`).
    ``plain`` turns the caller's arguments into plain values first, outside that window:
    whatever code of the caller's that runs (``__fspath__``, ``__bool__``, a ``partial``
    of safehub's own functions) runs with no right to pause anything."""
    caller = sys._getframe(1)
    if not _safehubs(caller):
        _refuse_suspend(f"{caller.f_code.co_filename}:{caller.f_lineno}")

    def call_routed(*args: Any, **kwargs: Any) -> Any:
        state = _STATE
        if plain is not None:
            args, kwargs = plain(*args, **kwargs)
        state.marks = (*state.marks, _guard_depth(state.stack))
        try:
            return handler(*args, **kwargs)
        finally:
            state.marks = state.marks[:-1]

    global _CALL_ROUTED
    _CALL_ROUTED = call_routed.__code__
    return call_routed


_CALL_ROUTED: Any = None


def _routed_directly(caller: Any) -> bool:
    """Between ``caller`` and the routed call it serves, only safehub's own frames and
    libraries' (such as ``contextlib``): no code of the repo's (an object of its passed as
    an argument, a folder it loads locally) asked safehub for this pause."""
    frame = caller
    for _ in range(512):
        if frame is None:
            return False
        if frame.f_code is _CALL_ROUTED:
            return True
        if foreign_between(frame, frame.f_back, sealed.PREFIXES):
            return False
        frame = frame.f_back
    return False


class suspended:  # used as a function: ``with suspended():``
    """safehub's own work (inside a guarded load or not): neither recorded nor refused, and
    it may read a cached tree's files (to verify them again).

    Only safehub's own code may suspend the guard; under a guard, only for a call the load
    routed to safehub (:func:`routed`), never for the repo's code calling safehub's
    functions directly. Otherwise it refuses (recorded by every guard of the thread: the
    load fails even if the caller swallows it). A pause covers only safehub's own work
    (see :func:`_dispatch`). A thread-local counter when no guard is active.

    >>> try:
    ...     with suspended():
    ...         pass
    ... except RuntimeGuardError as refused:
    ...     print(refused.args[0].split(": ")[1])
    only safehub's own code may pause the runtime guard, and nothing was paused
    """

    __slots__ = ("_pushed", "_world")

    def __init__(self) -> None:
        self._pushed = False
        self._world: Any = None

    def __enter__(self) -> None:
        caller = sys._getframe(1)
        if not _safehubs(caller):
            _refuse_suspend(f"{caller.f_code.co_filename}:{caller.f_lineno}")
        state = _STATE
        if state.stack:
            depth = _guard_depth(state.stack)
            if depth and not (state.marks and state.marks[-1] >= depth
                              and _routed_directly(caller)):
                _refuse_suspend(f"{caller.f_code.co_filename}:{caller.f_lineno}",
                                direct=True)
        world = next((getattr(e, "world", None) for e in state.stack if e is not SUSPENDED),
                     None) if not state.own else None  # the outermost guard's (world.py)
        state.own += 1
        if state.stack:
            push(SUSPENDED)
            self._pushed = True
            state.pause_at = (*state.pause_at, caller)
        self._world = world
        if world is not None:
            world.enter()

    def __exit__(self, *exc: object) -> None:
        if self._world is not None:
            self._world.leave()
            self._world = None
        if self._pushed:
            pop(SUSPENDED)
            self._pushed = False
            _STATE.pause_at = _STATE.pause_at[:-1]
        _STATE.own -= 1


def _refuse_suspend(where: str, *, direct: bool = False) -> None:
    refusal = RuntimeGuardError(
        f"{where} called safehub.runtime.suspended(): only safehub's own code may pause "
        "the runtime guard, and nothing was paused" if not direct else
        f"a guarded repo's code called safehub directly (reaching {where}), which would "
        "fetch, write or load outside the guard; nothing was done",
        hint="remove the call; what a repo's code does is always held to the policy" if not
        direct else "call torch.hub.load/list/help or torch.hub.download_url_to_file: "
        "safehub routes those, under the same policy")
    _record_all(_STATE.stack, Action("guard", "suspend", where), refusal)
    raise refusal


class _Carried:
    """A thread's function, run with the stack its starter had."""

    def __init__(self, function: Callable[..., Any], stack: tuple[Entry, ...]) -> None:
        self.function = function
        self.stack = stack

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _set_stack(self.stack)
        if self.stack and self.stack[-1] is SUSPENDED:  # started by safehub's paused work:
            _STATE.pause_at = (None,)  # only its own and libraries' frames, to the bottom
        try:
            return self.function(*args, **kwargs)
        finally:
            _set_stack(())
            _STATE.pause_at = ()


def _carrying(start: Callable[..., Any]) -> Callable[..., Any]:
    def start_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        stack = _STATE.stack
        if stack:
            function = _Carried(function, stack)
        return start(function, *args, **kwargs)

    return start_thread


def _announcing(fork_exec: Callable[..., Any]) -> Callable[..., Any]:
    def announce_fork_exec(*args: Any, **kwargs: Any) -> Any:
        if _live and len(args) > 5:
            sys.audit("safehub.fork_exec", args[1], args[0], args[5], args[4])
        return fork_exec(*args, **kwargs)

    return announce_fork_exec


def _wrap(module: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    current = getattr(module, name, None)
    if current is None or _wrapped.get((module, name)) is current:
        return
    wrapper = make(current)
    setattr(module, name, wrapper)
    _wrapped[(module, name)] = wrapper


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

    def internal_error(self, event: str, error: Exception) -> RuntimeGuardError:
        return RuntimeGuardError(f"the runtime guard failed its self-test: {error!r}")

    def own_event(self, event: str, args: tuple[Any, ...]) -> bool:
        return True


def install() -> None:
    """Add the audit hook and the thread and ``fork_exec`` wrappers, once per process.

    Raises :class:`RuntimeGuardError` if another audit hook refused ours (fail closed).
    """
    global _installed
    with _LOCK:
        if not _installed:
            sys.addaudithook(_hook)
            probe = _Probe()
            push(probe)
            try:
                sys.audit("safehub.runtime.probe")
            finally:
                pop(probe)
            if not probe.seen:
                raise RuntimeGuardError(
                    "the runtime guard could not add its audit hook: another audit hook "
                    "refused it", hint='set runtime = "off" in [safehub], or remove the hook')
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)
            _installed = True
        import _thread

        for name in ("_start_new_thread", "_start_joinable_thread"):
            _wrap(threading, name, _carrying)
        for name in ("start_new_thread", "start_joinable_thread"):
            _wrap(_thread, name, _carrying)
        import subprocess

        _wrap(subprocess, "_fork_exec", _announcing)  # 3.11+: subprocess's own binding
        try:
            import _posixsubprocess
        except ImportError:  # not POSIX
            return
        _wrap(_posixsubprocess, "fork_exec", _announcing)


def snapshot() -> tuple[tuple[int, ...], int]:
    """This thread's routed-call marks and suspension count (a guard compares them when
    it ends: see :func:`tampered`)."""
    return _STATE.marks, _STATE.own


def tampered(entry: Entry, before: tuple[tuple[int, ...], int] = ((), 0)) -> list[str]:
    """What has been changed in the guard's machinery while ``entry`` was active in this
    thread: wrapped functions replaced, the hook's state or this thread's stack edited
    (``before``: the :func:`snapshot` taken when ``entry`` was pushed)."""
    found = [f"{getattr(module, '__name__', module)}.{name} was replaced"
             for (module, name), wrapper in _wrapped.items()
             if getattr(module, name, None) is not wrapper]
    if entry not in _STATE.stack:
        found.append("the guard was removed from its thread's stack")
    elif _STATE.stack[-1] is not entry:
        found.append("entries were left on the guard's stack")
    state = _STATE
    if (_live < 1 or _dispatch is not _DISPATCH or EVENTS is not _EVENTS
            or tuple(EVENTS.items()) != _EVENTS_FROZEN or state.busy
            or (state.marks, state.own) != before):
        found.append("the audit hook's state was edited")
    return found
