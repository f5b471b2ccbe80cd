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


@pytest.mark.slow
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


@pytest.mark.slow
@needs_torch
def test_a_refusal_under_run_is_the_message_and_the_fix_for_the_call_made(
    hub_repo: HubRepo, tmp_path: Path, canary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch.hub\n\n\ndef main():\n"
                      f"    return torch.hub.load('{hub_repo.spec}:v1.0', 'tiny')\n\n\nmain()\n")
    monkeypatch.setenv("CI", "true")
    proc = subprocess.run(
        [sys.executable, "-m", "safehub", "run", "--", sys.executable, str(script)],
        capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 1 and runs(canary) == 0
    err = proc.stderr
    assert f'File "{script}", line 8' in err and "in main" in err  # the program's frames
    import safehub

    package = str(Path(safehub.__file__).parent)
    assert f'File "{package}' not in err and "<safehub" not in err
    assert "safehub: UntrustedRepoError: refused to run hubconf.py" in err
    assert "pass trust_repo=True to torch.hub.load" in err and "safehub.load" not in err
    # The fix, applied as printed: the call with trust_repo=True loads.
    script.write_text(script.read_text().replace("'tiny')", "'tiny', trust_repo=True)"))
    proc = subprocess.run(
        [sys.executable, "-m", "safehub", "run", "--", sys.executable, str(script)],
        capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr


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


# -- policy init: a machine-wide file only when asked for -----------------------------------


def site_target(isolated: Path) -> Path:
    from safehub.cli.admin import init_target

    target = init_target("admin")
    assert target.is_relative_to(isolated)  # the suite's stand-in for /etc/xdg
    return target


def test_init_for_admin_prints_the_file_and_the_command_that_installs_it(
        isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = site_target(isolated)
    assert main(["policy", "init", "--for", "admin"]) == 0  # no terminal: not written
    out = capsys.readouterr().out
    assert not target.exists()
    assert 'unknown_repos = "deny"' in out and f"Not written: {target}" in out
    install = out.split("install them with `", 1)[1].split("`", 1)[0]
    assert install == "safehub policy init --for admin --yes"
    assert main(["policy", "init", "--for", "admin", "--json"]) == 0
    data = out_json(capsys)
    assert isinstance(data, dict) and data["written"] is None and data["install"] == install
    assert main(install.split()[1:]) == 0  # the printed command, applied as printed
    assert target.is_file() and f"wrote {target}" in capsys.readouterr().out


@pytest.mark.parametrize("answer, written", [("y\n", True), ("\n", False), ("no\n", False)])
def test_init_for_admin_on_a_terminal_asks_naming_the_path_and_what_it_refuses(
        isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        answer: str, written: bool) -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    target = site_target(isolated)
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    assert main(["policy", "init", "--for", "admin"]) == 0
    captured = capsys.readouterr()
    assert f"Write {target}? [y/N]" in captured.err
    assert "every user" in captured.err and 'unknown_repos = "deny"' in captured.err
    assert target.exists() is written


@pytest.mark.parametrize("why", ["CI=true", "CI=buildkite", "SAFEHUB_NONINTERACTIVE=1",
                                 "SAFEHUB_CONFINED=1", "noninteractive = true"])
def test_init_never_asks_where_a_load_would_not_even_on_a_terminal(
        isolated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    """One decision (config.noninteractive) for every prompt: the policy's setting too."""
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    if "=" in why and " " not in why:
        monkeypatch.setenv(*why.split("=", 1))
    else:
        policy = tmp_path / "p.toml"
        policy.write_text(f"[safehub]\n{why}\n")
        monkeypatch.setenv("SAFEHUB_POLICY", str(policy))
    assert main(["policy", "init", "--for", "admin"]) == 0
    assert "[y/N]" not in capsys.readouterr().err and not site_target(isolated).exists()


def test_init_for_the_user_and_ci_writes_at_once(isolated: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.cli.admin import init_target

    assert main(["policy", "init"]) == 0 and init_target("team").is_file()
    assert main(["policy", "init", "--for", "ci"]) == 0 and init_target("ci").is_file()


def test_init_help_names_every_path_it_may_write(isolated: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.cli.admin import init_target

    assert main(["policy", "init", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    for flavour in ("admin", "team", "ci"):
        assert str(init_target(flavour)) in shown
    assert "--yes" in shown


# -- policy validate: each fault its own item, said once -------------------------------------


def test_validate_json_lists_each_fault_and_says_whether_the_file_is_in_force(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text("[safehub]\nmode = 'acme'\ngithub_url = 'acme'\n"
                   "[[allow]]\nrepo = 'x/y'\npin = 'acme'\nbogus = 1\n")
    assert main(["policy", "validate", str(bad), "--json"]) == 1
    report = out_json(capsys)
    assert isinstance(report, dict) and report["ok"] is False
    (result,) = report["files"]
    assert result["in_force"] is False and len(result["faults"]) == 4
    assert all(fault.count("(got ") <= 1 for fault in result["faults"]), result["faults"]
    assert "SAFEHUB_POLICY" in result["fix"] and "policy validate" not in result["fix"]
    assert main(["policy", "validate", str(bad)]) == 1
    text = capsys.readouterr().out
    assert "not in force" in text and text.count("(got 'acme')") == 3


def test_validate_says_when_a_file_is_in_force(isolated: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    user = isolated / "config/safehub/policy.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[[allow]]\nrepo = 'x/y'\npin = 'acme'\n")
    assert main(["policy", "validate", str(user)]) == 1
    text = capsys.readouterr().out
    assert "user file, in force" in text and "no repo loads" in text
