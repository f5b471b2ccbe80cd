"""A one-line download progress bar on stderr, shown only when stderr is a terminal: the
bytes so far of the total (when the server says it), the share done, and the rate.

>>> bar = _Bar("Downloading x", clock=iter([0.0, 2.0, 4.0]).__next__)
>>> bar.line(3 * 1048576, 6 * 1048576, 2.0)
'Downloading x: [##########..........] 3.0 MiB of 6.0 MiB 50% 1.5 MiB/s'
>>> bar.line(512, None, 0.5)
'Downloading x: 512 B 1.0 KiB/s'
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from safehub._internal.text import printable

__all__ = ["size", "terminal_progress"]

_WIDTH = 20  # the bar's cells


def size(n: float) -> str:
    """``n`` bytes in the largest unit that keeps it at least 1 (B, KiB, MiB, GiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns


class _Bar:
    def __init__(self, label: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self._clock = label, clock
        self._start = clock()
        self._last = float("-inf")

    def line(self, done: int, total: int | None, elapsed: float) -> str:
        """The bar's text after ``done`` bytes of ``total`` in ``elapsed`` seconds."""
        rate = f"{size(done / elapsed)}/s" if elapsed > 0 else ""
        if total:
            filled = _WIDTH * min(done, total) // total
            bar = "[" + "#" * filled + "." * (_WIDTH - filled) + "]"
            shown = f"{bar} {size(done)} of {size(total)} {100 * min(done, total) // total}%"
        else:
            shown = size(done)
        return f"{self.label}: {shown} {rate}".rstrip()

    def __call__(self, done: int, total: int | None) -> None:
        now = self._clock()
        finished = total is not None and done >= total
        if now - self._last < 0.1 and not finished:
            return
        self._last = now
        sys.stderr.write("\r" + self.line(done, total, now - self._start)
                         + ("\n" if finished else ""))
        sys.stderr.flush()


def terminal_progress(label: str) -> _Bar | None:
    """A progress callback ``(done, total)`` for a download, or None off a terminal
    (``label``, a URL or a repo's name, made printable)."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return _Bar(printable(f"Downloading {label}")) if tty else None
