"""Every ``--json`` prints one JSON object, with the fields its ``--help`` names
(safehub.cli.parser.JSON_FIELDS); an error is one object too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safehub.cli import main
from safehub.cli.parser import JSON_FIELDS
from tests.conftest import HubRepo, needs_torch


def fields(key: str) -> list[tuple[set[str], set[str]]]:
    """(always, sometimes) for each form of the object (``|`` separates them)."""
    forms = []
    for form in JSON_FIELDS[key].split(" | "):
        names = form.split(": ", 1)[-1].split(", ")
        always = {n for n in names if not n.startswith("[")}
        sometimes = {n.split("] ", 1)[1] for n in names if n.startswith("[")}
        forms.append((always, sometimes))
    return forms


def emitted(capsys: pytest.CaptureFixture[str], key: str, *words: str, code: int = 0) -> dict:  # type: ignore[type-arg]
    at = words.index("--") if "--" in words else len(words)  # options before a command
    assert main([*words[:at], "--json", *words[at:]]) == code, capsys.readouterr()
    data = json.loads(capsys.readouterr().out)  # the whole of stdout is one object
    assert isinstance(data, dict), data
    if "error" in data and set(data) == {"error", "message", "hint", "fix", "exit"}:
        return data
    keys = set(data)
    assert any(always <= keys <= always | sometimes for always, sometimes in fields(key)), (
        key, sorted(keys), JSON_FIELDS[key])
    return data


def test_every_json_help_names_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    for key, named in JSON_FIELDS.items():
        assert main([*key.split(), "--help"]) == 0
        shown = " ".join(capsys.readouterr().out.split())
        assert f"with: {named}" in shown, key


@needs_torch
def test_every_command_prints_one_object_with_its_fields(
        hub_repo: HubRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"{hub_repo.spec}:v1.0"
    emitted(capsys, "check", "check", spec, code=1)
    emitted(capsys, "trust", "trust", spec)
    emitted(capsys, "load", "load", spec, "tiny")
    emitted(capsys, "load", "load", spec, "tiny", "--report")
    emitted(capsys, "list", "list", spec)
    emitted(capsys, "help", "help", spec, "tiny")
    emitted(capsys, "lock", "lock", spec)
    assert emitted(capsys, "lock", "lock", "--check")["ok"] is True
    emitted(capsys, "prefetch", "prefetch")
    listed = emitted(capsys, "cache ls", "cache", "ls")
    assert listed["entries"][0]["specs"] == [spec]  # the lockfile's spec for the commit
    emitted(capsys, "cache verify", "cache", "verify")
    emitted(capsys, "policy show", "policy", "show")
    policy = tmp_path / "p.toml"
    policy.write_text("[[allow]]\nrepo = 'a/b'\n")
    emitted(capsys, "policy validate", "policy", "validate", str(policy))
    emitted(capsys, "policy init", "policy", "init", "--path", str(tmp_path / "new.toml"))
    emitted(capsys, "policy init", "policy", "init", "--for", "admin")  # printed, not written
    emitted(capsys, "run", "run", "--dry-run", "--", "true")
    assert emitted(capsys, "run", "run", "--", "true")["exit"] == 0  # after the command
    emitted(capsys, "docs", "docs")
    emitted(capsys, "docs", "docs", "env")
    emitted(capsys, "untrust", "untrust", hub_repo.spec)
    emitted(capsys, "cache clear", "cache", "clear", "--yes")
    emitted(capsys, "load", "load", spec, "tiny", code=1)  # an error: one object too


@needs_torch
def test_load_passes_positional_arguments(hub_repo: HubRepo,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"{hub_repo.spec}:v1.0"
    data = emitted(capsys, "load", "load", spec, "tiny", "--trust", "--args", "[5]")
    assert data["result"]["parameters"] == 30  # Linear(5, 5)
    data = emitted(capsys, "load", "load", spec, "tiny", "--args", "[3, false]")
    assert data["result"]["parameters"] == 9  # Linear(3, 3, bias=False)


@pytest.mark.parametrize("given, said", [("5", "--args '[5]'"), ("[1", "not JSON")])
def test_args_must_be_a_json_list(given: str, said: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "acme/models:v1.0", "tiny", "--args", given]) == 2
    assert said in capsys.readouterr().err
