"""Shared parts of the tests that load through safehub end to end: a policy file written
into the isolated home (tests/conftest.py's ``isolated``), and the CLI run in process with
its output captured."""

from __future__ import annotations

from pathlib import Path

import pytest

from safehub.cli import main


def policy(isolated: Path, text: str, where: str = "config") -> Path:
    """Write ``text`` as the policy of the isolated home's ``where`` folder: ``config`` is
    the user's, ``site`` the site's (XDG_CONFIG_DIRS)."""
    path = isolated / where / "safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cli(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    """Run ``safehub WORDS...`` in process: its exit code, stdout and stderr."""
    code = main(list(words))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
