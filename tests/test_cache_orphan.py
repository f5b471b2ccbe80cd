"""A cache root named by a setting that outlives a run (``SAFEHUB_CACHE_DIR``, a policy's
``cache_dir``) inside the folder of a ``safehub demo --serve`` that has stopped (its export
lines live on in the shell) is not made again: the command says so, with the fix. Any other
missing cache folder is made, with its folders (a deleted one too, quietly)."""

from __future__ import annotations

from pathlib import Path

import pytest

from safehub.store.cache.store import DEMO_PREFIX
from tests.conftest import HubRepo
from tests.helpers_load import cli


@pytest.mark.parametrize("by", ["variable", "policy"])
def test_a_stopped_demos_cache_is_refused_not_remade(
        hub_repo: HubRepo, tmp_path: Path, isolated: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, by: str) -> None:
    gone = tmp_path / f"{DEMO_PREFIX}x1y2"
    cache = gone / "cache"
    if by == "variable":
        monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(cache))
    else:
        policy = isolated / "config" / "safehub" / "policy.toml"
        policy.parent.mkdir(parents=True, exist_ok=True)
        policy.write_text(f"[safehub]\ncache_dir = '{cache}'\n")
    for words in (("check", "acme/models:v1.0"), ("prefetch", "acme/models:v1.0")):
        code, out, err = cli(capsys, *words)
        assert code == 1 and "demo --serve` that has stopped" in out + err
        assert not gone.exists()  # nothing made
    assert ("unset SAFEHUB_CACHE_DIR" in err) == (by == "variable")
    if by == "variable":
        monkeypatch.delenv("SAFEHUB_CACHE_DIR")  # the fix, as printed
        assert cli(capsys, "prefetch", "acme/models:v1.0")[0] == 0


def test_a_new_nested_cache_folder_is_made_with_its_folders(
        hub_repo: HubRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "runner-temp" / "safehub" / "cache"  # a CI job's fresh setting
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(cache))
    assert cli(capsys, "prefetch", "acme/models:v1.0")[0] == 0 and cache.is_dir()


def test_a_deleted_cache_folder_is_made_again_quietly(
        hub_repo: HubRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub._internal.fsutil import rmtree

    cache = tmp_path / "kept" / "cache"
    cache.parent.mkdir()
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(cache))
    assert cli(capsys, "prefetch", "acme/models:v1.0")[0] == 0
    rmtree(cache)
    code, _, err = cli(capsys, "prefetch", "acme/models:v1.0")
    assert (code, "CacheError" in err) == (0, False) and cache.is_dir()


def test_a_cache_dir_named_on_the_command_line_is_made_with_its_folders(
        hub_repo: HubRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "new" / "deep" / "cache"
    assert cli(capsys, "prefetch", "acme/models:v1.0", "--cache-dir", str(deep))[0] == 0
    assert deep.is_dir()
