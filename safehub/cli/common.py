"""What every verb of the ``safehub`` command shares: exit codes, usage errors, the Hub
its options make, and printing a result as text or as one JSON object."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from safehub.cli import text

__all__ = ["DATA", "EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "Parser", "Usage", "emit", "hub"]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
DATA = Path(__file__).parents[1] / "_data"


class Usage(Exception):
    """A usage error (argparse's, or the command's own)."""

    def __init__(self, message: str, command: str = "") -> None:
        super().__init__(message)
        self.command = command


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Usage(message, self.prog)


def hub(args: argparse.Namespace) -> Any:
    """The Hub for a command: its ``--cache-dir`` and ``--lockfile`` over the settings."""
    from safehub.hub import Hub

    overrides: dict[str, Any] = {}
    if getattr(args, "cache_dir", None):
        overrides.update(cache_dir=args.cache_dir, cache_source="--cache-dir")
    if getattr(args, "lockfile", None):
        overrides["lockfile"] = args.lockfile
    if getattr(args, "locked", False):
        from safehub.config import Origin

        overrides.update(locked=True, locked_source=Origin("hub", "--locked", "--locked"))
    return Hub(**overrides)


def emit(args: argparse.Namespace, data: dict[str, Any], shown: str) -> None:
    """Print ``data`` as one JSON object with ``--json`` (exact), else ``shown`` (made
    printable: its fields one by one where it was laid out, :func:`text.lines`)."""
    if getattr(args, "json", False):
        text.out_json(data)
    elif shown:
        text.out(shown)
