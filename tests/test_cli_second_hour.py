"""The second hour of a new user (issue 33): what the tools next door taught them works here,
and no message says more than safehub knows."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import safehub
from safehub.cli import main


def test_hub_names_cache_dir_and_offline(isolated: Path, tmp_path: Path) -> None:
    params = inspect.signature(safehub.Hub.__init__).parameters
    assert {"cache_dir", "offline", "overrides"} <= set(params)
    assert "cache_dir" in (safehub.Hub.__init__.__doc__ or "")
    hub = safehub.Hub(cache_dir=tmp_path / "c", offline=True)
    assert hub.settings.cache_dir == tmp_path / "c" and hub.settings.offline is True
    assert safehub.Hub().settings.offline is False


def test_unreachable_api_names_a_ref_not_a_tag(isolated: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # isolated points the API at a closed loopback port: the lookup never gets an answer
    code = main(["check", "acme/models:main"])
    out = capsys.readouterr()
    err = out.out + out.err
    assert code != 0 and "cannot connect" in err, err
    assert "ref 'main'" in err and "tag 'main'" not in err, err
