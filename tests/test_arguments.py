"""Odd arguments and environment values end in a SafehubError, never a bare exception, and
before any of the repo's code runs: a model name that is no identifier, a ``set_dir`` or a
local load given no path, a flag variable set to no documented value, a ref that is no
branch, tag or sha (its hint states the sha rule as it is). Every documented flag value is
accepted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import safehub
from safehub.errors import SafehubError, SpecError
from tests.conftest import HubRepo, needs_torch, runs


@pytest.mark.parametrize("model", [None, 5, "", "a.b", "../x", b"echo"])
def test_a_model_name_that_is_no_identifier_is_a_spec_error(hub_repo: HubRepo, model: object,
                                                              canary: Path) -> None:
    with pytest.raises(SpecError):
        safehub.load("acme/models:v1.0", model, trust_repo=True, verbose=False)  # type: ignore[arg-type]
    assert runs(canary) == 0


@pytest.mark.parametrize("value", [123, None, b"/tmp/x"])
def test_set_dir_with_no_path_is_a_safehub_error(value: object) -> None:
    with pytest.raises(SafehubError):
        safehub.set_dir(value)  # type: ignore[arg-type]


@needs_torch
@pytest.mark.parametrize("target", [b"/tmp", None, 3])
def test_a_local_load_of_no_path_is_a_spec_error(target: object) -> None:
    with pytest.raises(safehub.SpecError):
        safehub.load(target, "echo", source="local")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["maybe", "2", "tru"])
def test_an_unknown_flag_value_is_a_spec_error_naming_it(
    hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SAFEHUB_OFFLINE", value)
    with pytest.raises(SpecError, match="SAFEHUB_OFFLINE"):
        safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False)


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "0", "false", "no", "off", ""])
def test_every_documented_flag_value_is_accepted(hub_repo: HubRepo,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  value: str) -> None:
    monkeypatch.setenv("SAFEHUB_NONINTERACTIVE", value)
    assert safehub.load("acme/models:v1.0", "echo", 3, trust_repo=True,
                        verbose=False) == ((3,), {})


@needs_torch
@pytest.mark.parametrize("ref", ["v1..0", "a b"])
def test_an_invalid_refs_hint_states_the_sha_rule(ref: str) -> None:
    from safehub.spec import RepoSpec, looks_like_sha

    with pytest.raises(SpecError) as err:
        RepoSpec.parse(f"acme/models:{ref}")
    assert "4 to 40 hex digits" in (err.value.hint or "")
    assert looks_like_sha("abcd") and not looks_like_sha("abc")  # the rule it states
