"""Warnings that point at the caller's line, not at safehub's own."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence

from safehub._internal.fsutil import within
from safehub._internal.text import printable

__all__ = ["printable", "warn"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outside(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not within(path, _PACKAGE)


def warn(message: str, category: type[Warning] = UserWarning, *,
         details: Sequence[str] = ()) -> None:
    """``warnings.warn`` with the stack level of the first frame outside safehub; the
    message, and each line of ``details`` under it, made printable as one line
    (:func:`~safehub._internal.text.printable`: a rule's reason or a path in it cannot
    start a line of its own).

    So a warning from ``safehub.load`` (or ``torch.hub.load`` routed through safehub)
    names the user's line, whichever internal path raised it.
    """
    level = 2
    frame = sys._getframe(1)
    while frame is not None and not _outside(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    shown = "\n".join(printable(line) for line in (message, *details))
    warnings.warn(shown, category, stacklevel=level)
