"""CLI: check, trust, untrust, policy show/validate, run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from safehub.cli import main
from tests.conftest import HubRepo, child_pythonpath, needs_torch, runs


def out_json(capsys: pytest.CaptureFixture[str]) -> object:
    text = capsys.readouterr().out
    return json.loads(text[text.index(next(c for c in text if c in "[{")):])


@needs_torch
def test_check_is_a_dry_run(hub_repo: HubRepo, capsys: pytest.CaptureFixture[str],
                            canary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert main(["check", f"{hub_repo.spec}:v1.0", "--json"]) == 1
    report = out_json(capsys)
    assert isinstance(report, dict)
    assert report["outcome"] == "refuse" and report["commit"] == hub_repo.sha
    assert f"safehub trust {hub_repo.spec}:{hub_repo.sha}" in report["fix"]  # the load's fix
    assert runs(canary) == 0

    assert main(["trust", f"{hub_repo.spec}:v1.0"]) == 0
    assert "trusted acme/models at " + hub_repo.sha in capsys.readouterr().out
    assert runs(canary) == 0  # trusting runs nothing

    assert main(["check", f"{hub_repo.spec}:v1.0"]) == 0
    assert "LOAD" in capsys.readouterr().out
    assert main(["load", f"{hub_repo.spec}:v1.0", "tiny", "-q"]) == 0  # no --trust needed now
    assert runs(canary) == 1

    assert main(["untrust", hub_repo.spec]) == 0
    assert "forgot 1" in capsys.readouterr().out
    assert main(["check", f"{hub_repo.spec}:v1.0"]) == 1


def test_check_denied_by_policy(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = isolated / "site/safehub/policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text("[[deny]]\nrepo = 'evil/*'\nreason = 'no'\n")
    assert main(["check", "evil/thing:v1", "--json"]) == 1
    report = out_json(capsys)
    assert isinstance(report, dict) and report["policy"] == "deny" and "no" in report["reasons"][0]


def test_policy_show_and_validate(isolated: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    site = isolated / "site/safehub/policy.toml"
    site.parent.mkdir(parents=True)
    site.write_text("[safehub]\nfinal = true\nunknown_repos = 'deny'\n[[allow]]\nrepo = 'a/*'\n")
    user = isolated / "config/safehub/policy.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[[allow]]\nrepo = 'b/*'\n")
    assert main(["policy", "show"]) == 0
    text = capsys.readouterr().out
    assert f"({site} #1)" in text and "adds requirements only" in text
    assert main(["policy", "show", "--json"]) == 0
    data = out_json(capsys)
    assert isinstance(data, dict) and data["unknown_repos"] == {"value": "deny", "from": str(site)}

    bad = tmp_path / "bad.toml"
    bad.write_text("[[allow]]\nrepo = 'x/y'\npin = 'always'\n")
    assert main(["policy", "validate", str(site), str(bad)]) == 1
    text = capsys.readouterr().out
    assert f"ok   {site}" in text and "allow[0].pin" in text


@needs_torch
def test_run_routes_torch_hub_in_a_child_program(
    hub_repo: HubRepo, tmp_path: Path, canary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch.hub\n"
        f"torch.hub.load('{hub_repo.spec}:v1.0', 'tiny')\n"
    )
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())
    monkeypatch.setenv("CI", "true")
    proc = subprocess.run(
        [sys.executable, "-m", "safehub", "run", "--", sys.executable, str(script)],
        capture_output=True, text=True, env=dict(os.environ),
    )
    # torch.hub.load would have asked (and crashed in CI); through safehub it is refused.
    assert proc.returncode != 0 and "UntrustedRepoError" in proc.stderr
    assert runs(canary) == 0
    assert main(["trust", f"{hub_repo.spec}:v1.0"]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "safehub", "run", "--", sys.executable, str(script)],
        capture_output=True, text=True, env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    assert runs(canary) == 1


def test_run_needs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"]) == 2


# -- the admin's fixed site folder holds whatever XDG_CONFIG_DIRS says ------------------------

SITE_FLOOR = ("[safehub]\nversion = 1\nfinal = true\nunknown_repos = 'deny'\n"
              "[[allow]]\nrepo = 'acme/*'\n[[deny]]\nrepo = 'evil/*'\nreason = 'admin says no'\n")


def fixed_site(isolated: Path) -> Path:
    """Where the suite puts /etc/xdg/safehub/policy.toml (tests/conftest.py isolated)."""
    from safehub.policy import files

    assert isolated / "etc-xdg" == files.SYSTEM_CONFIG_DIR
    path = isolated / "etc-xdg/safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SITE_FLOOR)
    return path


def test_xdg_config_dirs_cannot_drop_the_fixed_site_policy(
        isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.policy import load_policy
    from safehub.spec import RepoSpec

    site = fixed_site(isolated)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "empty"))  # a project's .envrc
    assert main(["check", "evil/thing:v1", "--json"]) == 1
    report = out_json(capsys)
    assert isinstance(report, dict) and report["policy"] == "deny"
    assert "admin says no" in report["reasons"][0] and str(site) in report["reasons"][0]
    policy = load_policy()
    assert policy.decide(RepoSpec.parse("stranger/models:v1")).verdict == "deny"  # the floor
    assert policy.decide(RepoSpec.parse("acme/models:v1")).verdict == "allow"  # honest case

    assert main(["policy", "show"]) == 0
    text = capsys.readouterr().out
    assert f"found   site     {site}" in text
    assert f"absent  site     {tmp_path / 'empty/safehub/policy.toml'}" in text
    assert text.index(str(site)) < text.index(str(tmp_path / "empty"))  # first in merge order
    assert main(["policy", "show", "--json"]) == 0
    data = out_json(capsys)
    assert isinstance(data, dict)
    assert data["unknown_repos"] == {"value": "deny", "from": str(site)}
    assert data["searched"][0] == {"path": str(site), "origin": "site", "exists": True}


def test_the_fixed_site_folder_is_read_once_however_it_is_also_named(
        isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.policy import load_policy, searched

    site = fixed_site(isolated)
    (tmp_path / "alias").symlink_to(isolated / "etc-xdg")
    monkeypatch.setenv("XDG_CONFIG_DIRS", os.pathsep.join(
        [str(tmp_path / "alias"), str(isolated / "etc-xdg"), str(isolated / "site")]))
    places = [c for c in searched() if c.origin == "site"]
    assert [c.path for c in places] == [site, isolated / "site/safehub/policy.toml"]
    assert load_policy().files == (str(site),)


def test_no_test_and_no_child_python_sees_the_machines_etc_xdg(tmp_path: Path) -> None:
    """The suite's seam: in process and in every child Python it starts (tests/sitehook),
    the fixed folder is a temporary one, never the machine's /etc/xdg."""
    from safehub.policy import searched

    assert not any(str(c.path).startswith("/etc/") for c in searched())
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    proc = subprocess.run([sys.executable, "-m", "safehub", "policy", "show", "--json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    paths = [c["path"] for c in json.loads(proc.stdout)["searched"]]
    assert paths[0] == os.environ["SAFEHUB_TEST_SYSTEM_CONFIG_DIR"] + "/safehub/policy.toml"
    assert not any(p.startswith("/etc/") for p in paths)


def test_untrust_an_abbreviated_commit_without_the_network(
    hub_repo: HubRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    """untrust asks no server: an abbreviation of a trusted commit is enough; a ref it
    has never resolved says which commits are trusted."""
    assert main(["trust", f"{hub_repo.spec}:v1.0"]) == 0
    assert main(["untrust", f"{hub_repo.spec}:nosuchbranch"]) == 1
    assert hub_repo.sha[:12] in capsys.readouterr().err
    assert main(["untrust", f"{hub_repo.spec}:{hub_repo.sha[:8]}"]) == 0
    from safehub import Hub

    assert Hub().consents.list(hub_repo.spec) == []
