"""Variables and ``Hub(...)`` arguments are later layers: where a policy file holds a
setting (``final = true``, or a stricter value it set), they have no effect, and safehub
says so: a warning on first use, ``safehub policy show`` (text and JSON), and no printed
fix tells the user to set what would be ignored. Where no file holds the setting, they
apply as always."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import safehub
from safehub._internal.fixes import AnyOf, Run
from safehub.cli import main
from safehub.config import Settings
from safehub.policy import held

SITE_FINAL = '[safehub]\nfinal = true\ncache_dir = "{cache}"\noffline = true\n' \
             'runtime = "enforce"\ntree_fallback = false\n'


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    held._SAID.clear()


def _site(isolated: Path, text: str) -> Path:
    path = isolated / "site/safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_variable_over_a_final_setting_is_ignored_and_said(
        isolated: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "site-cache"
    site = _site(isolated, SITE_FINAL.format(cache=cache))
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "mine"))
    with pytest.warns(UserWarning, match=r"SAFEHUB_CACHE_DIR=.*mine is ignored: .*"
                      + str(site) + ".*cache_dir.*final = true"):
        hub = safehub.Hub()
    assert hub.settings.cache_dir == cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        safehub.Hub()  # said once per process, not on every call
    assert main(["policy", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(i["given"], i["key"], i["by"]) for i in shown["ignored"]] == [
        (f"SAFEHUB_CACHE_DIR={tmp_path / 'mine'}", "cache_dir", str(site))]
    assert main(["policy", "show"]) == 0
    assert "IGNORED SAFEHUB_CACHE_DIR=" in capsys.readouterr().out


@pytest.mark.parametrize(("argument", "value", "kept"), [
    ("cache_dir", "/elsewhere", None),
    ("offline", False, True),
    ("runtime", "off", "enforce"),
    ("runtime", "observe", "enforce"),
    ("tree_fallback", True, False),
])
def test_a_hub_argument_cannot_loosen_what_a_file_holds(
        isolated: Path, tmp_path: Path, argument: str, value: object, kept: object) -> None:
    cache = tmp_path / "site-cache"
    _site(isolated, SITE_FINAL.format(cache=cache))
    with pytest.warns(UserWarning, match=rf"Hub\({argument}=.* is ignored"):
        hub = safehub.Hub(**{argument: value})
    assert getattr(hub.settings, argument) == (cache if kept is None else kept)
    assert [i.key for i in hub.settings.ignored] == [argument]


def test_a_hub_argument_that_tightens_applies(isolated: Path, tmp_path: Path) -> None:
    _site(isolated, '[safehub]\nruntime = "observe"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hub = safehub.Hub(runtime="enforce", offline=True, tree_fallback=False)
    assert (hub.settings.runtime, hub.settings.offline, hub.settings.tree_fallback) == (
        "enforce", True, False)


def test_where_no_file_holds_a_setting_variables_and_arguments_apply(
        isolated: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _site(isolated, '[safehub]\ncache_dir = "/site/cache"\n')  # not final
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "mine"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert safehub.Hub().settings.cache_dir == tmp_path / "mine"
        assert safehub.Hub(cache_dir=tmp_path / "arg").settings.cache_dir == tmp_path / "arg"
        assert safehub.Hub(runtime="off").settings.runtime == "off"  # no file sets it


def test_no_fix_says_to_set_a_variable_a_final_file_overrides(
        isolated: Path, tmp_path: Path) -> None:
    cache = tmp_path / "site-cache"
    site = _site(isolated, SITE_FINAL.format(cache=cache))
    settings = Settings.from_env(policy=safehub.Hub().policy)
    prefetch = _prefetch(settings)
    assert "SAFEHUB_CACHE_DIR" not in prefetch.where
    assert str(cache) in prefetch.where and str(site) in prefetch.where
    hint = settings.how_to_set("cache_dir", "point SAFEHUB_CACHE_DIR at a folder")
    assert "SAFEHUB_CACHE_DIR" not in hint and str(site) in hint
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    _site(isolated, SITE_FINAL.format(cache=blocker / "cache"))  # cannot be created
    with pytest.raises(safehub.CacheError, match="cannot create the cache folder") as refused:
        safehub.Hub().cache.staging("0" * 40)
    assert "SAFEHUB_CACHE_DIR" not in (refused.value.hint or "")
    assert str(site) in (refused.value.hint or "")


def test_without_a_final_file_the_fixes_name_the_variable(isolated: Path) -> None:
    settings = Settings.from_env(policy=safehub.Hub().policy)
    assert "SAFEHUB_CACHE_DIR" in _prefetch(settings).where


def _prefetch(settings: Settings) -> Run:
    """The offline fix's first alternative: prefetch on a machine with network."""
    fix = settings.offline_fix("acme/models:v1")
    assert isinstance(fix, AnyOf) and isinstance(fix.options[0], Run), fix
    assert fix.options[0].command == "safehub prefetch acme/models:v1"
    return fix.options[0]
