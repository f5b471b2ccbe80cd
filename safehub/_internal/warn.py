"""Warnings that point at the caller's line, not at safehub's own."""

from __future__ import annotations

import os
import sys
import warnings

from safehub._internal.text import printable

__all__ = ["printable", "warn"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outside(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not (path == _PACKAGE or path.startswith(_PACKAGE + os.sep))


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` with the stack level of the first frame outside safehub, the
    message made printable (its lines kept: :func:`~safehub._internal.text.printable`).

    So a warning from ``safehub.load`` (or ``torch.hub.load`` routed through safehub)
    names the user's line, whichever internal path raised it.
    """
    level = 2
    frame = sys._getframe(1)
    while frame is not None and not _outside(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(printable(message, lines=True), category, stacklevel=level)
