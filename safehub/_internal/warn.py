"""Warnings that point at the caller's line, not at safehub's own."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["printable", "warn"]

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, *range(0x80, 0xa0))
            if chr(c) not in "\n\t"}


def printable(text: str) -> str:
    """``text`` with control characters shown escaped (``\\x1b``), newlines and tabs kept:
    a repo's names, rules and messages reach a terminal, where an escape sequence could
    erase lines, fake a verdict or write the clipboard.

    >>> print(printable("tag\x1b[2Kok"))
    tag\\x1b[2Kok
    """
    return text.translate(_CONTROL)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outside(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not (path == _PACKAGE or path.startswith(_PACKAGE + os.sep))


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` with the stack level of the first frame outside safehub.

    So a warning from ``safehub.load`` (or ``torch.hub.load`` routed through safehub)
    names the user's line, whichever internal path raised it.
    """
    level = 2
    frame = sys._getframe(1)
    while frame is not None and not _outside(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(printable(message), category, stacklevel=level)
