"""``safehub docs env`` and ``docs cli`` are made from safehub's declarations and parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from safehub.cli import main

ROOT = Path(__file__).parents[1]


def shown(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    assert main(list(words)) == 0
    return capsys.readouterr().out


def test_docs_env_names_every_variable_safehub_reads(capsys: pytest.CaptureFixture[str]) -> None:
    page = shown(capsys, "docs", "env")
    source = "".join(p.read_text() for p in (ROOT / "safehub").rglob("*.py"))
    read = set(re.findall(r"SAFEHUB_[A-Z][A-Z_]*[A-Z]", source)) - {"SAFEHUB_TEST_CANARY"}
    readme = (ROOT / "README.md").read_text().split("## Environment", 1)[1].split("##", 1)[0]
    in_readme = set(re.findall(r"^\| `([A-Z_]+)", readme, re.M))
    listed = set(re.findall(r"^\| `([A-Z_]+)`", page, re.M))
    assert read <= listed and in_readme <= listed, (read - listed, in_readme - listed)
    assert "| `SAFEHUB_CACHE_DIR` | `[safehub] cache_dir` |" in page


def test_docs_cli_names_every_command_and_option(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from safehub.cli import COMMANDS
    from safehub.cli.common import Parser
    from safehub.cli.parser import build
    from safehub.cli.reference import _verbs

    page = shown(capsys, "docs", "cli")
    for name, parser in _verbs(build(Parser, COMMANDS)):
        assert f"## safehub {name}\n" in page, name
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                assert f"`{', '.join(action.option_strings)}`" in page, (name, action)
    assert "--args" in page and "--serve" in page and "--yes" in page


def test_help_points_to_both(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(shown(capsys, "--help").split())
    assert "safehub docs env" in text and "safehub docs cli" in text
    assert "safehub demo --serve" in text
    assert "env" in shown(capsys, "docs") and "cli" in shown(capsys, "docs")
