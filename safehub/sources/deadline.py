"""The total deadline of one request, kept without a thread per request.

A server can drip bytes (of its headers or its body) below any per-read timeout, so a
per-read timeout does not bound a request. A :class:`Deadline` does: the request runs in
the caller's thread, and its connections hand each socket they use to the deadline of
their thread (:func:`watch`). One watchdog thread per process sleeps until the earliest
deadline still running; when one passes, it shuts the deadline's sockets down
(``shutdown``, which wakes a read or a write blocked on them at once, with an end of file
or an error), and the request's caller, told by :meth:`Deadline.end` that the deadline
passed, refuses whatever the attempt made of it (a body cut short by the shutdown reads as
a whole one where no length is said).

The watchdog keeps its own descriptor of each socket (``dup``), closed when the attempt
ends: it never shuts down a descriptor number that the request closed and the system gave
to another file. It sleeps while nothing runs, is woken only when a deadline earlier than
all the others starts (requests started one after another never wake it), and ends once
no deadline is left (started again by the next request). Before a socket exists (a name
looked up, a connection made) the connection's own timeout, at most the time left, holds.
"""

from __future__ import annotations

import heapq
import os
import socket
import threading
import time

__all__ = ["Deadline", "current", "watch"]


class Deadline:
    """One attempt's deadline, ``seconds`` from now; this thread's until :meth:`end`."""

    __slots__ = ("_descriptors", "_ended", "_outer", "at", "passed")

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.passed = False
        """The watchdog shut this deadline's sockets down (set before it does)."""
        self._descriptors: list[int] = []
        self._ended = False
        self._outer: Deadline | None = getattr(_LOCAL, "deadline", None)
        _WATCHDOG.start(self)
        _LOCAL.deadline = self

    def ok(self) -> bool:
        """Whether the deadline has not passed (a body's piece may still be handed on)."""
        return not self.passed and time.monotonic() < self.at

    def left(self) -> float:
        """Seconds left (0 once passed)."""
        return max(self.at - time.monotonic(), 0.0)

    def end(self) -> bool:
        """Stop watching (the attempt is over); whether the deadline passed meanwhile."""
        _LOCAL.deadline = self._outer
        with _WATCHDOG.lock:
            self._ended = True
            descriptors, self._descriptors = self._descriptors, []
        for fd in descriptors:
            os.close(fd)
        return self.passed or time.monotonic() >= self.at

    def _watch(self, sock: socket.socket) -> None:
        try:
            fd = os.dup(sock.fileno())
        except OSError:
            return  # closed already: nothing to wake
        with _WATCHDOG.lock:
            if not self._ended:
                self._descriptors.append(fd)
                if self.passed:
                    _shut(fd)
                return
        os.close(fd)

    def _fire(self) -> None:
        """Called by the watchdog, under its lock, once the deadline is reached."""
        if not self._ended:
            self.passed = True
            for fd in self._descriptors:
                _shut(fd)

    def __lt__(self, other: Deadline) -> bool:
        return self.at < other.at


def current() -> Deadline | None:
    """The deadline of the request this thread is making, if any."""
    found: Deadline | None = getattr(_LOCAL, "deadline", None)
    return found


def watch(sock: socket.socket) -> socket.socket:
    """Put ``sock`` under this thread's deadline (if a request is running); ``sock``."""
    deadline: Deadline | None = getattr(_LOCAL, "deadline", None)
    if deadline is not None:
        deadline._watch(sock)
    return sock


def _shut(fd: int) -> None:
    """Shut the socket of ``fd`` down (the descriptor stays open: :meth:`Deadline.end`
    closes it)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more: nothing is blocked on it
    finally:
        sock.detach()


class _Watchdog:
    """The one thread that ends requests at their deadline (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._heap: list[Deadline] = []
        self._running = False

    def start(self, deadline: Deadline) -> None:
        with self.lock:
            heapq.heappush(self._heap, deadline)
            if not self._running:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name="safehub-deadline")
                thread.start()  # (raises, running nothing, if no thread can start)
                self._running = True
            elif self._heap[0] is deadline:  # earlier than the one it sleeps until
                self._wake.notify()

    def _run(self) -> None:
        with self.lock:
            while True:
                now = time.monotonic()
                heap = self._heap
                while heap and (heap[0]._ended or heap[0].at <= now):
                    heapq.heappop(heap)._fire()
                if not heap:
                    self._running = False
                    return
                self._wake.wait(heap[0].at - now)

    def forked(self) -> None:
        """In a child process: no watchdog runs there (the next request starts one), and
        the parent's deadlines are not the child's: their copies of the parent's sockets
        are closed, never shut down (a shutdown acts on the socket the parent still uses,
        a connection kept in its pool)."""
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._running = False
        for deadline in self._heap:
            deadline._ended = True
            descriptors, deadline._descriptors = deadline._descriptors, []
            for fd in descriptors:
                os.close(fd)
        self._heap = []


_LOCAL = threading.local()
_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHDOG.forked)
