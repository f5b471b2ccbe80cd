"""A repo without hubconf.py, or without the entrypoint asked for: the error says which,
where torch.hub's own would (a ``FileNotFoundError`` for the first), and what to do about
it: the ref to check (listing entrypoints would fail the same), or the entrypoints the
repo does define, with the one meant when the name looks misspelt (difflib)."""

from __future__ import annotations

import json

import pytest

import safehub
from tests.conftest import HubRepo
from tests.helpers_load import cli

pytest.importorskip("torch")


@pytest.fixture
def no_hubconf(hub_repo: HubRepo) -> HubRepo:
    """acme/models with tag v2 on a commit that removed hubconf.py."""
    hub_repo.git("rm", "-q", "hubconf.py")
    hub_repo.git("commit", "-qm", "no hubconf")
    hub_repo.tag("v2")
    return hub_repo


def test_a_repo_without_hubconf_is_a_file_not_found_error_naming_the_ref(
        no_hubconf: HubRepo) -> None:
    with pytest.raises(FileNotFoundError) as err:  # as torch.hub raises it
        safehub.load("acme/models:v2", "tiny", trust_repo=True)
    assert isinstance(err.value, safehub.NoHubconfError)
    assert isinstance(err.value, safehub.HubconfError)
    assert "has no hubconf.py at its root" in err.value.message
    assert "tag v2 of acme/models" in (err.value.hint or "")
    assert "safehub list" not in (err.value.hint or "")  # it would fail the same


def test_the_honest_repo_loads_at_the_ref_that_has_hubconf(no_hubconf: HubRepo) -> None:
    assert safehub.load("acme/models:v1.0", "tiny", trust_repo=True) is not None


def test_check_says_the_ref_has_no_hubconf(no_hubconf: HubRepo,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "trust", "acme/models:v2")
    code, out, _ = cli(capsys, "check", "acme/models:v2", "--entrypoint", "tiny", "--json")
    report = json.loads(out)
    assert (code, report["outcome"]) == (1, "refuse")
    assert "no hubconf.py" in report["why"] and "check the ref" in report["fix"]


@pytest.mark.parametrize("verb", ["load", "help"])
def test_a_misspelt_entrypoint_is_named_with_the_one_meant(
        hub_repo: HubRepo, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    code, _, err = cli(capsys, verb, "acme/models:v1.0", "tiy", "--trust")
    assert code == 1
    assert "no callable entrypoint 'tiy' (did you mean 'tiny'?); it defines: echo, tiny" in err
    code, _, err = cli(capsys, verb, "acme/models:v1.0", "resnet50", "--trust")
    assert code == 1 and "did you mean" not in err and "it defines: echo, tiny" in err
    assert cli(capsys, verb, "acme/models:v1.0", "tiny", "--trust")[0] == 0


def test_check_suggests_the_entrypoint_meant(hub_repo: HubRepo,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", "acme/models:v1.0", "--entrypoint", "tiy", "--json")
    assert code == 1 and "(did you mean 'tiny'?)" in json.loads(out)["why"]
