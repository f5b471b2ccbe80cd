"""A notice that says something true the user cannot act on each time (a repo's module
shadowing its own installed distribution, as pytorch-image-models' ``timm`` does) is said
once per repo and module for each user, recorded in the user data dir; the runtime report
keeps it on every load, and a refusal is never silenced."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from safehub.errors import RuntimeGuardError
from tests.test_runtime_hygiene import installed  # noqa: F401 - the fixture

pytest.importorskip("torch")

HUBCONF = 'import timmish\ndependencies = []\n\ndef tiny():\n    """t"""\n    return 1\n'


def _loaded(spec: str) -> tuple[list[str], list[str]]:
    """Load ``spec``'s tiny: the warnings said, and the shadowing its report holds."""
    import safehub

    hub = safehub.Hub()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert hub.load(spec, "tiny", verbose=False) == 1
    assert hub.last_report is not None
    return ([str(w.message) for w in said if "shadows" in str(w.message)],
            [s.name for s in hub.last_report.shadowing])


@pytest.mark.usefixtures("installed", "clean_modules")
def test_the_own_distribution_notice_is_said_once_per_user(
        make_hub_repo, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    repo = make_hub_repo("huggingface", "pytorch-image-models",
                         {"hubconf.py": HUBCONF, "timmish/__init__.py": ""})
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text('[safehub]\nruntime = "enforce"\n'
                      '[[allow]]\nrepo = "huggingface/pytorch-image-models"\n')
    spec = f"{repo.spec}:v1.0"
    said, shadowing = _loaded(spec)
    assert len(said) == 1 and "said once for this repo and module" in said[0]
    assert shadowing == ["timmish"]
    assert _loaded(spec) == ([], ["timmish"])  # not said again; the report still has it
    repo.commit({"README.md": "v2\n"})
    repo.tag("v2")
    assert _loaded(f"{repo.spec}:v2") == ([], ["timmish"])  # another commit of the same repo
    other = isolated / "other-user-data"  # another user (their own data dir): said to them
    monkeypatch.setenv("XDG_DATA_HOME", str(other))
    said, _ = _loaded(spec)
    assert len(said) == 1 and (other / "safehub" / "notices.json").is_file()


@pytest.mark.usefixtures("installed", "clean_modules")
def test_a_refused_shadowing_is_refused_on_every_load(
        make_hub_repo, isolated: Path) -> None:  # type: ignore[no-untyped-def]
    import safehub

    repo = make_hub_repo("someone", "pytorch-image-models",
                         {"hubconf.py": HUBCONF, "timmish/__init__.py": ""})
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text('[safehub]\nruntime = "enforce"\n'
                      '[[allow]]\nrepo = "someone/pytorch-image-models"\n')
    for _ in range(2):
        with pytest.raises(RuntimeGuardError, match="would replace distribution timmish"):
            safehub.load(f"{repo.spec}:v1.0", "tiny", verbose=False)
