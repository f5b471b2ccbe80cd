"""What a project's ``./safehub.toml`` may set. A cloned project is not the user: its file
only tightens. It cannot loosen ``mode``, ``runtime`` or ``unknown_repos`` below what the
user's and the site's files set, nor switch the runtime guard off, but it can turn the
guard to ``enforce`` and narrow a repo's runtime keys. It may not set the keys of the
machine (``cache_dir``) nor name paths outside the project folder, and
``safehub policy validate`` judges a file by the rules of the role it plays (named by
``--as``, or by its name), as the load will.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import safehub
from safehub.errors import PolicyDenied
from tests.conftest import HUBCONF, needs_torch, runs
from tests.helpers_load import cli, policy
from tests.test_signatures import new_key

# -- a project's file only tightens mode, runtime and unknown repos ---------------------------

PHONE = HUBCONF + '''

def phone():
    import subprocess
    return subprocess.run(["true"]).returncode
'''


@pytest.fixture
def site(make_hub_repo, isolated: Path) -> Path:  # type: ignore[no-untyped-def]
    make_hub_repo("acme", "models", {"hubconf.py": PHONE})
    make_hub_repo("evil", "x")
    make_hub_repo("stranger", "y")
    return policy(isolated, "[safehub]\nunknown_repos = 'deny'\nruntime = 'observe'\n"
                            "[[allow]]\nrepo = 'acme/models'\nsubprocess = false\n"
                            "[[deny]]\nrepo = 'evil/*'\nreason = 'known malware'\n", "site")


@pytest.mark.parametrize("loosen", ["mode = 'warn'", "runtime = 'off'",
                                    "unknown_repos = 'prompt'"])
def test_a_project_file_cannot_loosen_the_strictest_keys(site: Path, loosen: str,
                                                         canary: Path) -> None:
    Path("safehub.toml").write_text(f"[safehub]\n{loosen}\n")
    with pytest.raises(PolicyDenied, match="known malware"):
        safehub.load("evil/x:v1.0", "echo", trust_repo=True, verbose=False)
    with pytest.raises(PolicyDenied, match="stranger/y"):  # unknown_repos = "deny" holds
        safehub.load("stranger/y:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0


def test_a_project_file_cannot_switch_the_runtime_guard_off(site: Path) -> None:
    pytest.importorskip("torch")
    Path("safehub.toml").write_text("[safehub]\nruntime = 'off'\nmode = 'warn'\n")
    with pytest.raises(safehub.RuntimeGuardError, match="subprocess"):
        safehub.load("acme/models:v1.0", "phone", verbose=False)


def test_a_project_file_can_tighten(site: Path) -> None:
    pytest.importorskip("torch")
    site.write_text(site.read_text().replace("subprocess = false\n", ""))
    assert safehub.load("acme/models:v1.0", "phone", verbose=False) == 0  # observed only
    Path("safehub.toml").write_text("[safehub]\nruntime = 'enforce'\n"
                                    "[[allow]]\nrepo = 'acme/models'\nsubprocess = false\n")
    with pytest.raises(safehub.RuntimeGuardError, match="subprocess"):
        safehub.load("acme/models:v1.0", "phone", verbose=False)


# -- policy validate checks a file by the rules of its role -----------------------------------

PROJECT_FAULTS = "[safehub]\ncache_dir = '/tmp/elsewhere'\n"  # a project may not set it
OUTSIDE = "[[allow]]\nrepo = 'a/*'\nsignature = 'required'\nkeys = ['../k.pub']\n"


@needs_torch
@pytest.mark.parametrize(("name", "text", "role", "code", "said"), [
    ("safehub.toml", PROJECT_FAULTS, None, 1, "cannot be set in a project's"),
    ("safehub.toml", OUTSIDE, None, 1, "leads outside the project folder"),
    ("safehub.toml", PROJECT_FAULTS, "user", 0, ""),
    ("safehub.toml", OUTSIDE, "site", 0, ""),
    ("team.toml", PROJECT_FAULTS, None, 0, ""),
    ("team.toml", PROJECT_FAULTS, "project", 1, "cannot be set in a project's"),
], ids=["project-key", "project-path", "as-user", "as-site", "other-name", "as-project"])
def test_policy_validate_by_role(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 name: str, text: str, role: str | None, code: int,
                                 said: str) -> None:
    folder = tmp_path / "work" / "proj"
    folder.mkdir(parents=True)
    (folder.parent / "k.pub").write_bytes(new_key(tmp_path / "k.pem"))
    path = folder / name
    path.write_text(text)
    words = ["policy", "validate", str(path), "--json"] + (["--as", role] if role else [])
    rc, out, _ = cli(capsys, *words)
    report = json.loads(out)
    result = report["files"][0]
    assert rc == code and report["ok"] is (code == 0), result
    assert result["role"] == (role or ("project" if name == "safehub.toml" else "extra"))
    if code:
        assert any(said in fault for fault in result["faults"]), result
        # The fix says what to do about these faults, not to run validate again.
        assert "policy validate" not in result["fix"] and "edit the file" in result["fix"]


@needs_torch
def test_a_project_file_that_validate_passes_loads(hub_repo, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
                                                  ) -> None:
    Path("safehub.toml").write_text(PROJECT_FAULTS)
    assert cli(capsys, "policy", "validate", "safehub.toml")[0] == 1  # as the load sees it
    rc, out, err = cli(capsys, "policy", "show")
    assert rc == 1 and out == ""
    message, fix = err.splitlines()  # one line, and the fix
    assert "cannot be set in a project's" in message and fix.startswith("  fix: ")
    Path("safehub.toml").write_text("[[allow]]\nrepo = 'acme/*'\n")
    assert cli(capsys, "policy", "validate", "safehub.toml")[0] == 0
    assert cli(capsys, "check", "acme/models:v1.0")[0] == 0


# -- a project's [confine] only narrows: validate and show say what it cannot grant ----------

WIDENING = "[confine]\nexec = ['sh']\nconnect_ports = [443, 22]\n"


def test_validate_notes_what_a_project_file_cannot_grant(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Valid (a site or user file may grant it, where the project's file then narrows to
    it), and the notes say that on its own it grants none of it."""
    Path("safehub.toml").write_text(WIDENING)
    rc, out, _ = cli(capsys, "policy", "validate", "safehub.toml")
    assert rc == 0 and out.startswith("ok ")
    assert "note: " in out and "[confine] exec 'sh' is not granted" in out
    rc, out, _ = cli(capsys, "policy", "validate", "safehub.toml", "--json")
    notes = json.loads(out)["files"][0]["notes"]
    assert rc == 0 and len(notes) == 2 and "connect_ports 22" in notes[1], notes
    rc, out, _ = cli(capsys, "policy", "validate", "safehub.toml", "--as", "user", "--json")
    assert json.loads(out)["files"][0]["notes"] == []  # the user's own file may widen


def test_policy_show_prints_the_merged_confine_and_what_was_not_granted(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy(isolated, "[confine]\nexec = ['git', 'sh']\n")  # the user's file
    Path("safehub.toml").write_text(WIDENING.replace("'sh'", "'git'"))
    rc, out, _ = cli(capsys, "policy", "show", "--json")
    shown = json.loads(out)["confine"]
    assert rc == 0 and shown["exec"]["value"] == ["git"]
    assert shown["exec"]["from"].endswith("safehub.toml")  # it narrowed the user's list
    assert [layer["value"] for layer in shown["exec"]["layers"]] == [["git", "sh"], ["git"]]
    assert shown["connect_ports"]["value"] == [443]
    assert any("connect_ports 22 is not granted" in n for n in shown["connect_ports"]["notes"])
    rc, out, _ = cli(capsys, "policy", "show")
    assert "[confine] exec = ['git']" in out and "[confine] connect_ports = [443]" in out
    assert "note: " in out and "the default [443]" in out
