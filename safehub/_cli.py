"""``safehub._cli.main``, where the command line lived before it got a folder: see
:mod:`safehub.cli`."""

from safehub.cli import main

__all__ = ["main"]
