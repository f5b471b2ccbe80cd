"""The environment hook (``safehub install --environment``, safehub/run/environment.py): one
``.pth`` file in the environment's site-packages routes torch.hub through safehub in every
Python process of that environment, started with ``-I`` or ``-E`` or a scrubbed environment
too; ``uninstall --environment`` removes it; ``policy show`` says whether it is in place; a
policy's ``environment_hook = "required"`` refuses a load (and ``check``) where it is not.

The end-to-end tests make a real virtual environment, install the hook with the CLI inside
it, and start real child Pythons with those flags; unit tests point the hook at a
temporary folder (never this interpreter's own site-packages)."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.cli.parser import ENV_HOOK
from safehub.run import environment
from tests.conftest import ROOT, needs_torch

CHILD = """
import torch.hub
routed = "safehub" in torch.hub.load.__code__.co_filename
print("routed" if routed else "plain", flush=True)
if routed:
    try:
        torch.hub.load("evil/payload", "model", trust_repo=True)
    except Exception as e:
        print(type(e).__module__, type(e).__name__)
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The hook's folder for in-process tests: a temporary one."""
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    monkeypatch.setattr(environment, "site_packages", lambda: site_dir)
    return site_dir


def test_the_parser_names_the_file_the_hook_writes() -> None:
    assert ENV_HOOK == environment.FILE_NAME


def test_install_and_uninstall_with_the_cli(folder: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "--environment", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"path": str(folder / environment.FILE_NAME), "state": "installed"}
    assert (folder / environment.FILE_NAME).read_text() == environment.LINE
    assert main(["policy", "show", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["environment_hook"]["state"] == "installed"
    assert main(["uninstall", "--environment", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] is True
    assert not (folder / environment.FILE_NAME).exists()
    assert main(["policy", "show"]) == 0
    assert "environment hook: missing" in capsys.readouterr().out
    assert main(["uninstall", "--environment"]) == 0  # nothing to remove: said, not an error
    assert "no environment hook" in capsys.readouterr().out


def test_install_without_environment_is_a_usage_error(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install"]) == 2
    assert "--environment" in capsys.readouterr().err
    assert not (folder / environment.FILE_NAME).exists()


def test_a_file_of_that_name_that_is_not_the_hook_is_said(folder: Path) -> None:
    (folder / environment.FILE_NAME).write_text("import os; os.system('true')\n")
    found = environment.hook()
    assert found.state == "changed" and not found.installed
    assert environment.install().installed  # written again over it


def test_a_required_hook_refuses_a_load_where_it_is_missing(
        folder: Path, isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site_file = isolated / "site/safehub/policy.toml"
    site_file.parent.mkdir(parents=True, exist_ok=True)
    site_file.write_text('[safehub]\nenvironment_hook = "required"\n')
    with pytest.raises(safehub.PolicyDenied, match="requires the environment hook") as refused:
        safehub.load("acme/models:v1", "tiny", trust_repo=True)
    assert str(site_file) in refused.value.message
    assert "safehub install --environment" in (refused.value.hint or "")
    assert main(["check", "acme/models:v1"]) == 1  # check says what the load would do
    assert "requires the environment hook" in capsys.readouterr().out
    other = isolated.parent / "work/local-code"
    other.mkdir()
    with pytest.raises(safehub.PolicyDenied, match="requires the environment hook"):
        safehub.load(str(other), "tiny", source="local")  # local folders too


def test_a_required_hook_in_place_lets_the_load_go_on(folder: Path, isolated: Path) -> None:
    site_file = isolated / "site/safehub/policy.toml"
    site_file.parent.mkdir(parents=True, exist_ok=True)
    site_file.write_text('[safehub]\nenvironment_hook = "required"\n')
    environment.install()
    # past the gate: the next refusal is the stand-in that is not there (conftest)
    with pytest.raises(safehub.SafehubError) as refused:
        safehub.load("acme/models:v1", "tiny", trust_repo=True)
    assert "environment hook" not in refused.value.message


def test_a_later_file_cannot_drop_the_requirement(folder: Path, isolated: Path) -> None:
    site_file = isolated / "site/safehub/policy.toml"
    site_file.parent.mkdir(parents=True, exist_ok=True)
    site_file.write_text('[safehub]\nenvironment_hook = "required"\n')
    user = isolated / "config/safehub/policy.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text('[safehub]\nenvironment_hook = "optional"\nmode = "warn"\n')
    with pytest.raises(safehub.PolicyDenied, match="requires the environment hook"):
        safehub.load("acme/models:v1", "tiny", trust_repo=True)


# -- end to end: a real virtual environment and real child Pythons --------------------------------


def _environment(tmp_path: Path) -> Path:
    """A new virtual environment that sees this interpreter's packages and safehub's
    source through a .pth file of its own (read under -I too, unlike PYTHONPATH)."""
    where = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-I", "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    paths = [str(ROOT), *site.getsitepackages(), *sys.path]
    Path(purelib, "00-test-paths.pth").write_text(
        "\n".join(dict.fromkeys(p for p in paths if p and os.path.isdir(p))) + "\n")
    return python


@pytest.mark.slow
@needs_torch
def test_every_python_process_of_the_environment_is_routed(
        tmp_path: Path, isolated: Path) -> None:
    python = _environment(tmp_path)
    user = isolated / "config/safehub/policy.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text('[[deny]]\nrepo = "evil/*"\n')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run([str(python), "-I", "-m", "safehub", "install",
                                "--environment", "--json"], env=env, capture_output=True,
                               text=True, check=True)
    hook_path = Path(json.loads(installed.stdout)["path"])
    assert hook_path.parent.is_relative_to(tmp_path / "venv")  # the environment's own
    scrubbed = {k: os.environ[k] for k in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME",
                                            "XDG_DATA_HOME", "XDG_STATE_HOME",
                                            "XDG_CONFIG_DIRS", "TORCH_HOME", "PATH")}
    for flags, child_env in ((["-I"], env), (["-E"], env), ([], scrubbed)):
        ran = subprocess.run([str(python), *flags, "-c", CHILD], env=child_env,
                             capture_output=True, text=True, timeout=600)
        assert ran.stdout.split() == ["routed", "safehub.errors", "PolicyDenied"], (
            flags, ran.stderr[-2000:])
    subprocess.run([str(python), "-I", "-m", "safehub", "uninstall", "--environment"],
                   env=env, check=True, capture_output=True)
    assert not hook_path.exists()
    ran = subprocess.run([str(python), "-I", "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    assert ran.stdout.split() == ["plain"], ran.stderr[-2000:]
