"""The CLI: thin, scriptable, with exit codes 0 ok, 1 refused, 2 usage; what it prints
for a spec typed as a URL, for ``safehub help``, and for ``--kwargs`` that name the loader's
own options."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from safehub.cli import main
from tests.conftest import HubRepo, child_pythonpath, needs_torch, runs
from tests.helpers_load import cli


@needs_torch
def test_load_and_cache_commands(hub_repo: HubRepo, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"{hub_repo.spec}:v1.0"
    assert main(["load", spec, "tiny", "--trust", "--kwargs", '{"n": 5}', "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # stdout is pure JSON
    assert result["result"] == {"type": "torch.nn.modules.linear.Linear", "parameters": 30}

    assert main(["cache", "ls", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed["entries"]
    assert rows[0]["commit"] == hub_repo.sha and rows[0]["repos"] == ["acme/models"]
    assert rows[0]["repo"] == "acme/models" and rows[0]["level"] == "tree"

    assert main(["cache", "verify"]) == 0
    assert "ok   " + hub_repo.sha in capsys.readouterr().out

    readme = Path(rows[0]["path"]) / "README.md"
    readme.parent.chmod(0o755)
    readme.chmod(0o644)
    readme.write_text("changed\n")
    assert main(["cache", "verify", hub_repo.sha[:8]]) == 1
    assert "README.md" in capsys.readouterr().out

    capsys.readouterr()
    assert main(["cache", "clear", "dead"]) == 1  # matches nothing: said, nothing removed
    assert "no cached commit starts with dead" in capsys.readouterr().err
    assert main(["cache", "clear", hub_repo.sha[:6]]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [f"  {hub_repo.sha}"]
    assert main(["cache", "clear", "--yes"]) == 0
    assert "removed 0 cached trees" in capsys.readouterr().out
    assert main(["cache", "ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == []


def test_refusal_exit_code_and_json(hub_repo: HubRepo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", f"{hub_repo.spec}:v1.0", "tiny", "--json"]) == 1
    captured = capsys.readouterr()
    error = json.loads(captured.out[captured.out.index("{"):])
    assert error["error"] == "UntrustedRepoError" and "--trust" in error["hint"]
    assert "UntrustedRepoError" in captured.err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "not-a-spec", "tiny"]) == 2
    assert "expected exactly one '/'" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert main(["load", "a/b", "m", "--kwargs", "[1]"]) == 2


def test_python_dash_m(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    proc = subprocess.run([sys.executable, "-m", "safehub", "--help"], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0 and "cache" in proc.stdout


@needs_torch
def test_a_fix_carries_the_cache_dir_and_lockfile_it_was_given(
    hub_repo: HubRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    """Applied as printed, the fix acts on the cache the command was pointed at."""
    cache = tmp_path / "elsewhere cache"
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    spec = f"{hub_repo.spec}:v1.0"
    assert main(["load", spec, "tiny", "--trust", "--cache-dir", str(cache)]) == 1
    err = capsys.readouterr().err
    fix = next(line.strip() for line in err.splitlines()
               if line.strip().startswith("safehub prefetch"))
    assert f"--cache-dir {shlex.quote(str(cache))}" in fix
    monkeypatch.delenv("SAFEHUB_OFFLINE")
    assert main(shlex.split(fix)[1:]) == 0  # run it where there is network
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    assert main(["load", spec, "tiny", "--trust", "--cache-dir", str(cache)]) == 0


def test_cli_fixes_name_cli_options(hub_repo: HubRepo, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``lock --check``'s fix is rendered from its data as every other fix: the command it
    names carries the ``--lockfile`` this command was given."""
    from safehub._internal import fixes

    retry = fixes.noted(fixes.call("force_reload", "True"), "retry with ")
    assert fixes.render(retry, "cli") == "retry with --force-reload"
    pins = str(tmp_path / "team pins.lock")
    assert main(["lock", f"{hub_repo.spec}:v1.0", "--lockfile", pins]) == 0
    hub_repo.commit({"README.md": "moved\n"})
    hub_repo.tag("v1.0")
    capsys.readouterr()
    assert main(["lock", "--check", "--lockfile", pins]) == 1
    fix = capsys.readouterr().out.split("fix: ")[1].splitlines()[1].strip()
    assert fix == f"safehub lock --upgrade {hub_repo.spec}:v1.0 --lockfile {shlex.quote(pins)}"
    assert main(shlex.split(fix)[1:]) == 0
    assert main(["lock", "--check", "--lockfile", pins, "--json"]) == 0


def test_lock_says_when_nothing_changed(hub_repo: HubRepo,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", f"{hub_repo.spec}:v1.0"]) == 0
    assert "wrote " in capsys.readouterr().out
    assert main(["lock", f"{hub_repo.spec}:v1.0"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(": nothing changed")


def test_the_report_lists_refused_actions_once_as_refused() -> None:
    from safehub.cli.text import runtime

    report = {"mode": "enforce", "repo": "acme/models", "hosts": [], "lookups": [],
              "programs": [], "writes": ["/home/u/x", "/home/u/y"], "libraries": [],
              "environ": [], "leftovers": [], "shadowing": [],
              "refused": [{"action": "write", "target": "/home/u/x", "key": "writes",
                           "message": "tried to write /home/u/x"}]}
    shown = runtime(report)
    assert "wrote outside its tree /home/u/y" in shown
    assert "REFUSED                tried to write /home/u/x" in shown


def test_terminal_escapes_from_a_repo_are_shown_escaped(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    from safehub.cli import _fail
    from safehub.cli.text import out

    out("docstring \x1b]52;c;cHduZWQ=\x07 with\ttab")
    _fail(False, "IntegrityError", "rule `x=\x1b[2K`", "fix \x9b", 1)
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err and "\x9b" not in captured.err
    assert "\\x1b]52" in captured.out and "\ttab" in captured.out


def test_a_cache_clear_fix_carries_the_cache_dir() -> None:
    """The fix is rendered from its data for the command line: the command it names
    carries the --cache-dir this command was given (the parser records who takes it)."""
    from safehub._internal import fixes
    from safehub.cli import COMMANDS
    from safehub.cli.common import Parser
    from safehub.cli.parser import build, command_line

    args = build(Parser, COMMANDS).parse_args(["check", "acme/models:v1.0", "--cache-dir",
                                               "/x y"])
    hint = fixes.render(fixes.run("safehub cache clear " + "a" * 40), "cli",
                        command_line=command_line(args))
    assert hint.endswith("safehub cache clear " + "a" * 40 + " --cache-dir '/x y'")
    assert fixes.render(fixes.run("safehub docs policy"), "cli",
                        command_line=command_line(args)).endswith("safehub docs policy")


@pytest.mark.parametrize(("source", "certain"), [
    ("for resnet in [1]:\n    pass\n", True),
    ("with open('x') as resnet:\n    pass\n", True),
    ("(resnet := print)\n", False),
    ("def g():\n    global resnet\n    resnet = print\ng()\n", False),
    ("eval('1')\n", False),
    ("match 1:\n    case resnet:\n        pass\n", False),
])
def test_check_entrypoint_knows_when_it_cannot_tell(source: str, certain: bool) -> None:
    """`check --entrypoint` reads hubconf.py's syntax tree: a name bound by a for or
    with target is found; one bound by :=, global, match or eval makes it say it cannot
    tell, never "has no entrypoint"."""
    from safehub._internal.hubconf_ast import entrypoints_of

    found = entrypoints_of(source)
    assert ("resnet" in found.names) if certain else not found.certain


def test_kwargs_cannot_smuggle_loader_options(hub_repo: HubRepo, canary: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "acme/models:v1.0", "echo", "--trust", "--kwargs",
                 '{"trust_repo": false}']) == 2
    assert "trust_repo" in capsys.readouterr().err
    assert runs(canary) == 0


@needs_torch
@pytest.mark.parametrize(("entrypoint", "line", "doc"), [
    ("tiny", "tiny(n=2, bias=True)", "A tiny linear model."),
    ("echo", "echo(*args, **kwargs)", "Return what it was given."),
])
def test_help_shows_the_signature(hub_repo, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                  entrypoint: str, line: str, doc: str) -> None:
    rc, out, _ = cli(capsys, "help", "acme/models:v1.0", entrypoint, "--trust")
    assert rc == 0 and out.splitlines()[:3] == [line, "", doc]
    rc, out, _ = cli(capsys, "help", "acme/models:v1.0", entrypoint, "--trust", "--json")
    shown = json.loads(out)
    assert (shown["signature"], shown["doc"]) == (line, doc)


@needs_torch
@pytest.mark.parametrize(("typed", "meant"), [
    ("https://github.com/acme/models", "acme/models"),
    ("https://github.com/acme/models.git", "acme/models"),
    ("https://github.com/acme/models/tree/v1.0", "acme/models:v1.0"),
    ("git@github.com:acme/models.git", "acme/models"),
])
def test_a_url_gets_the_spec_it_means(hub_repo, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                      typed: str, meant: str) -> None:
    rc, out, err = cli(capsys, "check", typed, "--json")
    error = json.loads(out)  # JSON only on stdout, for errors too
    assert (rc, error["error"]) == (2, "SpecError") and "fix:" in err
    suggested = error["hint"].split("'")[1]
    assert suggested == meant
    assert cli(capsys, "check", suggested, "--json")[0] == 1  # a spec now: untrusted, not bad
