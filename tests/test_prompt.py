"""The trust prompt through a real pseudo-terminal."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect
import pytest

from tests.conftest import HubRepo, child_pythonpath, needs_torch, runs

CHILD = """
import sys, safehub
try:
    model = safehub.load(sys.argv[1], "tiny", verbose=False)
except safehub.UntrustedRepoError as e:
    print("REFUSED", e.message)
    sys.exit(1)
print("LOADED", type(model).__name__)
"""


def spawn(spec: str, cwd: Path) -> pexpect.spawn:
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    env.pop("CI", None)
    return pexpect.spawn(sys.executable, ["-c", CHILD, spec], cwd=str(cwd), env=env,
                         encoding="utf-8", timeout=120)


def answer(child: pexpect.spawn, repo: HubRepo, reply: str) -> str:
    child.expect(r"\[y/N\] ")
    shown = child.before
    assert repo.spec in shown and repo.sha in shown and "sha256:" in shown
    child.sendline(reply)
    child.expect(pexpect.EOF)
    child.close()
    return str(child.before)


@pytest.mark.parametrize("reply", ["n", "", "maybe"])
def test_anything_but_yes_refuses(hub_repo: HubRepo, canary: Path, tmp_path: Path,
                                  reply: str) -> None:
    out = answer(spawn(f"{hub_repo.spec}:v1.0", tmp_path), hub_repo, reply)
    assert "REFUSED" in out
    assert runs(canary) == 0


@pytest.mark.slow
@needs_torch
def test_yes_loads_and_is_remembered_for_this_content_only(
    hub_repo: HubRepo, canary: Path, tmp_path: Path
) -> None:
    out = answer(spawn(f"{hub_repo.spec}:v1.0", tmp_path), hub_repo, "y")
    assert "LOADED Linear" in out and runs(canary) == 1
    again = spawn(f"{hub_repo.spec}:v1.0", tmp_path)  # same content: no question
    again.expect("LOADED Linear")
    again.expect(pexpect.EOF)
    # A new commit asks again.
    hub_repo.commit({"hubconf.py": (hub_repo.path / "hubconf.py").read_text() + "# v2\n"})
    hub_repo.tag("v2")
    out = answer(spawn(f"{hub_repo.spec}:v2", tmp_path), hub_repo, "yes")
    assert "LOADED" in out and runs(canary) == 3


def test_closed_stdin_refuses_at_once_without_ci_variables(
    hub_repo: HubRepo, canary: Path, tmp_path: Path
) -> None:
    """No TTY and no CI=true: never input(), an immediate refusal that says how to fix it."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    env.pop("CI", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, f"{hub_repo.spec}:v1.0"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 1
    assert "REFUSED" in proc.stdout and "nobody can be asked" in proc.stdout
    assert "EOFError" not in proc.stderr
    assert runs(canary) == 0
