"""The README's first command runs the shipped example end to end, offline."""

from __future__ import annotations

import pytest

from safehub._cli import main


def test_demo_runs_and_every_attack_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("refused, as it should be") == 4
    assert "0 requests" in out and "every check behaved as expected" in out
