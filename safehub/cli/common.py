"""What every verb of the ``safehub`` command shares: exit codes, usage errors, the Hub
its options make, and printing a result as text or as one JSON object."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from safehub._internal import fixes
from safehub.cli import text
from safehub.errors import SpecError

__all__ = ["DATA", "EXIT_OK", "EXIT_REFUSED", "EXIT_UNDECIDED", "EXIT_USAGE", "Parser", "Usage",
           "emit", "hub", "specs_from"]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNDECIDED = 3
"""``safehub check`` could not decide: the network failed before the policy or the repo
answered (not a refusal; ask again)."""
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


def specs_from(args: argparse.Namespace) -> list[str]:
    """The specs a command was given: its arguments, then those of its ``--from`` file."""
    specs = list(args.specs)
    if getattr(args, "from_file", None):
        try:
            content = Path(args.from_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(f"cannot read --from {args.from_file} ({e})",
                            fix=fixes.say("give a UTF-8 text file: one owner/name:ref per line; "
                                          "# starts a comment")) from e
        listed = [line.split("#", 1)[0].strip() for line in content.splitlines()
                  if line.split("#", 1)[0].strip()]
        if not listed:
            raise SpecError(f"--from {args.from_file} lists no specs",
                            fix=fixes.say("write one owner/name:ref per line; # starts a comment"))
        specs += listed
    return specs
