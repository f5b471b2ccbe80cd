"""A one-line byte counter on stderr, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
import time

from safehub._internal.text import printable

__all__ = ["terminal_progress"]


class _Bar:
    def __init__(self, label: str) -> None:
        self.label = label
        self._last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        finished = total is not None and done >= total
        if now - self._last < 0.1 and not finished:
            return
        self._last = now
        mib = done / 1048576
        text = (f"{mib:.1f}/{total / 1048576:.1f} MiB ({100 * done // max(total, 1)}%)"
                if total else f"{mib:.1f} MiB")
        sys.stderr.write(f"\r{self.label}: {text}" + ("\n" if finished else ""))
        sys.stderr.flush()


def terminal_progress(label: str) -> _Bar | None:
    """A progress callback ``(done, total)`` for a download, or None off a terminal
    (``label``, a URL or a repo's name, made printable)."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return _Bar(printable(f"Downloading {label}")) if tty else None
