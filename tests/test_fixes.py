"""Every refusal's fix works when applied as written.

Each case makes safehub refuse, takes the fix the error carries (``error.fix``, data:
safehub._internal.fixes), applies it mechanically (runs the command, adds the lines to the
file, sets the keys in the rule, removes the rule) and checks that the next attempt gets
past the refusal. Where two requirements block, both fixes are applied. The hint's text is
that data rendered (tests/test_newcomer.py applies it as printed).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import safehub
from safehub._internal.fixes import (
    AddLines,
    AllOf,
    AnyOf,
    Call,
    Fix,
    Noted,
    RemoveRule,
    Run,
    Say,
    SetKeys,
    render,
)
from safehub.cli import main
from safehub.errors import SafehubError
from tests.conftest import HUBCONF, HubRepo

pytest.importorskip("torch")

Mechanical = Run | AddLines | SetKeys | RemoveRule


def _bare(fix: Fix) -> Fix:
    """The fix without the words around it."""
    return _bare(fix.fix) if isinstance(fix, Noted) else fix


def _options(fix: Fix) -> list[Fix]:
    fix = _bare(fix)
    return [o for option in fix.options for o in _options(option)] if isinstance(
        fix, AnyOf) else [fix]


def needed(fix: Fix | None) -> list[list[Fix]]:
    """The fix as a conjunction of alternatives."""
    assert fix is not None, "no fix"
    fix = _bare(fix)
    return [_options(part) for part in (fix.needed if isinstance(fix, AllOf) else (fix,))]


def _blocks(lines: list[str], kind: str) -> list[tuple[int, int]]:
    """(start, end) line ranges of each [[kind]] table, in order."""
    starts = [i for i, line in enumerate(lines) if line.strip() == f"[[{kind}]]"]
    out = []
    for start in starts:
        end = start + 1
        while end < len(lines) and not (lines[end].startswith("[") and
                                        not lines[end].startswith(f"[[{kind}.")):
            end += 1
        out.append((start, end))
    return out


def apply(fix: Fix, env: dict[str, str] | None = None) -> None:
    if isinstance(fix, Run):
        args = shlex.split(fix.command)
        assert args[0] == "safehub", fix.command
        saved = dict(os.environ)
        try:
            os.environ.update(env or {})
            if "network" in fix.where:
                os.environ.pop("SAFEHUB_OFFLINE", None)
            assert main(args[1:]) == 0, fix.command
        finally:
            os.environ.clear()
            os.environ.update(saved)
    elif isinstance(fix, AddLines):
        path = Path(fix.file)
        path.parent.mkdir(parents=True, exist_ok=True)
        old = path.read_text() if path.exists() else ""
        path.write_text(old + "\n" + "\n".join(fix.lines) + "\n")
    elif isinstance(fix, (SetKeys, RemoveRule)):
        path = Path(fix.file)
        lines = path.read_text().splitlines()
        kind, number = re.match(r"\[\[(\w+)\]\] #(\d+)", fix.rule).groups()  # type: ignore[union-attr]
        start, end = _blocks(lines, kind)[int(number) - 1]
        if isinstance(fix, RemoveRule):
            del lines[start:end]
        for new in fix.keys if isinstance(fix, SetKeys) else ():
            key = new.split("=", 1)[0].strip()
            for i in range(start + 1, end):
                if lines[i].split("=", 1)[0].strip() == key:
                    lines[i] = new
                    break
            else:
                lines.insert(start + 1, new)
        path.write_text("\n".join(lines) + "\n")
    else:
        raise AssertionError(f"not mechanical: {fix}")


def refused(attempt: Callable[[], object], kind: type[SafehubError]) -> SafehubError:
    with pytest.raises(kind) as err:
        attempt()
    assert err.value.fix is not None and err.value.hint == render(err.value.fix), err.value
    return err.value


def apply_kind(error: SafehubError, kind: type[Mechanical],
               env: dict[str, str] | None = None) -> None:
    """Apply, for every requirement, the alternative of ``kind`` (or the only one)."""
    for options in needed(error.fix):
        chosen = [f for f in options if isinstance(f, kind)] or [
            f for f in options if not isinstance(f, Say)]
        assert chosen, f"no mechanical fix in {error.fix!r}"
        apply(chosen[0], env)


def apply_fix(fix: Fix | None) -> None:
    """Apply, for every requirement of ``fix``, its first mechanical alternative."""
    for options in needed(fix):
        mechanical = [f for f in options if not isinstance(f, Say)]
        assert mechanical, f"not mechanical: {fix!r}"
        apply(mechanical[0])


def user_policy(isolated: Path, text: str) -> Path:
    path = isolated / "config/safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load(spec: str, entrypoint: str = "echo", *args: object, **kwargs: object) -> object:
    return safehub.load(spec, entrypoint, *args, verbose=False, **kwargs)


# -- the table -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [Run, AddLines])
def test_untrusted_in_ci(hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch,
                         kind: type[Mechanical]) -> None:
    monkeypatch.setenv("CI", "true")
    error = refused(lambda: load("acme/models:v1.0"), safehub.UntrustedRepoError)
    apply_kind(error, kind)
    assert load("acme/models:v1.0", "echo", 1) == ((1,), {})


def test_unknown_repos_denied(hub_repo: HubRepo, isolated: Path) -> None:
    site = isolated / "site/safehub/policy.toml"
    site.parent.mkdir(parents=True)
    site.write_text("[safehub]\nunknown_repos = 'deny'\n")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True), safehub.PolicyDenied)
    apply_kind(error, AddLines)
    assert load("acme/models:v1.0", "echo", 2) == ((2,), {})


@pytest.mark.parametrize(("rule", "spec", "entrypoint"), [
    ("pin = 'commit'", "acme/models:v1.0", "echo"),
    ("refs = ['release-*']", "acme/models:v1.0", "echo"),
    ("entrypoints = ['tiny*']", "acme/models:v1.0", "echo"),
    ("refs = ['release-*']\npin = 'commit'", "acme/models:v1.0", "echo"),  # two at once
])
def test_requirements_of_an_allow_rule(hub_repo: HubRepo, isolated: Path, rule: str,
                                       spec: str, entrypoint: str) -> None:
    user_policy(isolated, f"[[allow]]\nrepo = 'acme/*'\n{rule}\n")
    error = refused(lambda: load(spec, entrypoint), safehub.PolicyDenied)
    apply_kind(error, SetKeys)
    assert load(spec, entrypoint, 3) == ((3,), {})


def test_a_deny_rule(hub_repo: HubRepo, isolated: Path) -> None:
    user_policy(isolated, "[[deny]]\nrepo = 'acme/*'\nreason = 'not reviewed'\n")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True), safehub.PolicyDenied)
    apply_kind(error, RemoveRule)
    assert load("acme/models:v1.0", "echo", 4, trust_repo=True) == ((4,), {})


def test_a_renamed_repo(hub_repo: HubRepo, server) -> None:  # type: ignore[no-untyped-def]
    server.rename_repo("acme", "models", "newco", "models")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True), safehub.RepoMovedError)
    apply_kind(error, AddLines)
    assert load("acme/models:v1.0", "echo", 5, trust_repo=True) == ((5,), {})


def test_a_moved_tag_of_a_locked_spec(hub_repo: HubRepo) -> None:
    assert main(["lock", "acme/models:v1.0"]) == 0
    hub_repo.commit({"new.py": "x = 1\n"})
    hub_repo.tag("v1.0")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True, force_reload=True),
                    safehub.PinError)
    apply_kind(error, Run)
    assert load("acme/models:v1.0", "echo", 6, trust_repo=True, force_reload=True) == ((6,), {})


def test_a_missing_lockfile_the_policy_names(hub_repo: HubRepo, isolated: Path) -> None:
    user_policy(isolated, f"[safehub]\nlockfile = '{isolated / 'team.lock'}'\n")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True), safehub.PinError)
    assert "does not exist" in error.message
    apply_kind(error, Run)
    assert load("acme/models:v1.0", "echo", 7, trust_repo=True) == ((7,), {})


def test_a_cache_edited_after_verification(hub_repo: HubRepo) -> None:
    load("acme/models:v1.0", trust_repo=True)
    tree = next(p for p in Path(os.environ["HOME"]).rglob("commits/*/tree"))
    (tree / "hubconf.py").chmod(0o644)
    (tree / "hubconf.py").write_text("raise SystemExit('edited')\n")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True), safehub.IntegrityError)
    apply_kind(error, Run)
    assert load("acme/models:v1.0", "echo", 8, trust_repo=True) == ((8,), {})


def test_offline_with_nothing_cached(hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True), safehub.OfflineError)
    assert "SAFEHUB_OFFLINE=1" in error.message  # where offline mode came from
    apply_kind(error, Run)
    assert load("acme/models:v1.0", "echo", 9, trust_repo=True) == ((9,), {})


@pytest.mark.parametrize(("source", "named", "off"), [
    ("env", "SAFEHUB_OFFLINE=1", "unset SAFEHUB_OFFLINE"),
    ("hub", "Hub(offline=True)", "build the Hub without offline=True"),
    ("project", "offline in ", "remove offline = true from"),
])
def test_offline_says_where_it_came_from(hub_repo, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                         source: str, named: str, off: str) -> None:
    from safehub.errors import OfflineError

    kwargs = {}
    if source == "env":
        monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    elif source == "hub":
        kwargs["offline"] = True
    else:
        Path("safehub.toml").write_text("[safehub]\noffline = true\n")
    with pytest.raises(OfflineError) as err:
        safehub.Hub(**kwargs).load("acme/models:v1.0", "echo", trust_repo=True, verbose=False)
    assert f"offline mode ({named}" in err.value.message and "(default)" not in err.value.message
    hint = err.value.hint or ""
    assert off in hint and "off (SAFEHUB_OFFLINE" not in hint  # no "off (on)" any more
    first = needed(err.value.fix)[0][0]
    assert isinstance(first, Run)
    where = first.where
    assert "network" in where and ("does not apply" in where) == (source == "project")


CONNECTS = '''\
import socket

dependencies = []


def connect(port):
    """Connect to 127.0.0.1:port."""
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    return "connected"


def weighted(url):
    """Download weights."""
    import torch
    return torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")
'''


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("with_rule", [True, False])
def test_a_connection_the_runtime_guard_refuses(make_hub_repo, isolated: Path,  # type: ignore[no-untyped-def]
                                                 listener: int, with_rule: bool) -> None:
    make_hub_repo("acme", "net", {"hubconf.py": CONNECTS})
    text = "[safehub]\nruntime = 'enforce'\n"
    user_policy(isolated, text + ("[[allow]]\nrepo = 'acme/net'\n" if with_rule else ""))
    error = refused(lambda: load("acme/net:v1.0", "connect", listener, trust_repo=True),
                    safehub.RuntimeGuardError)
    apply_kind(error, SetKeys if with_rule else AddLines)
    assert load("acme/net:v1.0", "connect", listener, trust_repo=True) == "connected"


def test_a_module_that_shadows_the_standard_library(make_hub_repo, isolated: Path) -> None:  # type: ignore[no-untyped-def]
    make_hub_repo("acme", "shadow", {"wave.py": "x = 1\n"})
    error = refused(lambda: load("acme/shadow:v1.0", trust_repo=True), safehub.RuntimeGuardError)
    apply_kind(error, AddLines)
    with pytest.warns(UserWarning, match="shadows"):
        assert load("acme/shadow:v1.0", "echo", 10, trust_repo=True) == ((10,), {})


def test_weights_from_a_url_the_policy_does_not_name(make_hub_repo, server,  # type: ignore[no-untyped-def]
                                                      isolated: Path) -> None:
    import io

    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.ones(1)}, buf)
    server.add_static("/models/w.pth", buf.getvalue())
    base = server.api_url.rsplit("/api", 1)[0]
    make_hub_repo("acme", "net", {"hubconf.py": CONNECTS})
    user_policy(isolated, f"[[allow]]\nrepo = 'acme/net'\nweights = ['{base}/other/*']\n")
    error = refused(lambda: load("acme/net:v1.0", "weighted", f"{base}/models/w.pth"),
                    safehub.PolicyDenied)
    apply_kind(error, SetKeys)
    assert list(load("acme/net:v1.0", "weighted", f"{base}/models/w.pth")) == ["w"]


def test_cli_hints_name_cli_fixes(hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CI", "true")
    assert main(["load", "acme/models:v1.0", "echo", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)
    assert "--trust" in error["hint"] and "trust_repo" not in error["hint"]
    said = [o["text"] for o in error["fix"]["options"] if o["kind"] == "call"]  # the data too
    assert said == ["add --trust to the command"], error["fix"]
    assert [o["argument"] for o in error["fix"]["options"] if o["kind"] == "call"] == [
        "trust_repo"]



def test_one_fix_is_written_for_each_surface() -> None:
    """The fix is data; each surface writes it from the data (no rewording of text)."""
    from safehub._internal import fixes

    trust = fixes.either(fixes.run("safehub cache clear " + "a" * 40),
                         fixes.call("trust_repo", "True", "load"),
                         fixes.noted(fixes.call("force_reload", "True"), "retry with "))
    line = fixes.CommandLine((("--cache-dir", "/c d"),),
                             {"cache clear": frozenset({"--cache-dir"})})
    assert render(trust).split("\n    or ")[1:] == ["pass trust_repo=True to safehub.load",
                                                   "retry with force_reload=True"]
    assert render(trust, "torchhub").split("\n    or ")[1:] == [
        "pass trust_repo=True to torch.hub.load", "retry with force_reload=True"]
    cli = render(trust, "cli", command_line=line).split("\n    or ")
    assert cli == ["run:\n      safehub cache clear " + "a" * 40 + " --cache-dir '/c d'",
                   "add --trust to the command", "retry with --force-reload"]
    data = json.loads(render(trust, "json"))
    assert data["options"][1] == {"kind": "call", "argument": "trust_repo", "value": "True",
                                  "function": "load",
                                  "text": "pass trust_repo=True to safehub.load"}
    assert fixes.from_json(data) == trust
    with pytest.raises(ValueError):
        render(trust, "html")


def test_torch_hub_callers_read_torch_hub_fixes(hub_repo: HubRepo,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Code that called torch.hub.load (routed through safehub) is told what to pass to
    torch.hub.load; the same refusal through safehub.load names safehub.load."""
    import torch

    monkeypatch.setenv("CI", "true")
    safehub.install()
    try:
        with pytest.raises(safehub.UntrustedRepoError) as routed:
            torch.hub.load("acme/models:v1.0", "echo")
    finally:
        safehub.uninstall()
    assert "pass trust_repo=True to torch.hub.load" in str(routed.value)
    with pytest.raises(safehub.UntrustedRepoError) as direct:
        safehub.load("acme/models:v1.0", "echo")
    assert "pass trust_repo=True to safehub.load" in (direct.value.hint or "")


# -- a runtime fix for a project's rule that would name a path outside it -------------------

WRITES = HUBCONF + '''

def write(path):
    with open(path, "w") as f:
        f.write("x")
'''


def test_a_write_outside_a_projects_folder_is_fixed_in_the_users_policy(
    make_hub_repo, isolated: Path, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    make_hub_repo("acme", "models", {"hubconf.py": WRITES})
    Path("safehub.toml").write_text('[safehub]\nruntime = "enforce"\n'
                                    '[[allow]]\nrepo = "acme/models"\n')
    target = tmp_path / "outside" / "out.txt"
    target.parent.mkdir()
    for _ in range(3):  # the canary's write, then the entrypoint's: each fix applied
        try:
            safehub.load("acme/models:v1.0", "write", str(target), verbose=False)
            break
        except safehub.RuntimeGuardError as refused:
            hint = refused.hint or ""
            assert "safehub.toml" not in hint.split("\n")[0], hint
            apply_fix(refused.fix)
    assert target.read_text() == "x"
    safehub.Hub()  # the project's file is still valid


NESTING = '''\
import torch

dependencies = ["torch"]


def outer(spec):
    """Load another hub repo from this repo's own code (as ZoeDepth loads MiDaS)."""
    return torch.hub.load(spec, "echo", "nested", trust_repo=True)
'''


def test_a_renamed_repo_loaded_by_a_repos_own_code(
        make_hub_repo, server, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CI", "true")
    make_hub_repo("acme", "outer", {"hubconf.py": NESTING})
    make_hub_repo("intel", "midas")
    server.rename_repo("intel", "midas", "Isl-Org", "MiDaS")  # as GitHub spells the new one
    error = refused(lambda: load("acme/outer:v1.0", "outer", "intel/midas:v1.0",
                                 trust_repo=True), safehub.RepoMovedError)
    hint = error.hint or ""
    assert "load it as" not in hint and "repo's code" in hint  # not a change the user can make
    assert 'repo = "Isl-Org/MiDaS"' in hint
    apply_kind(error, AddLines)
    assert load("acme/outer:v1.0", "outer", "intel/midas:v1.0", trust_repo=True) == (
        ("nested",), {})


def test_a_fork_commit_loaded_by_a_repos_own_code(
        make_hub_repo, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CI", "true")
    make_hub_repo("acme", "outer", {"hubconf.py": NESTING})
    inner = make_hub_repo("intel", "midas")
    fork = make_hub_repo("mallory", "midas", fork_of=inner, tag=None)
    evil = fork.commit({"evil.py": "x = 1\n"})
    error = refused(lambda: load("acme/outer:v1.0", "outer", f"intel/midas:{evil}",
                                 trust_repo=True), safehub.PinError)
    assert "load it" not in (error.hint or "") and "repo's code" in (error.hint or "")
    assert "asked for by the code of the repo" in error.message


def test_an_air_gap_without_a_registry(hub_repo: HubRepo, server, tmp_path: Path,  # type: ignore[no-untyped-def]
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``safehub lock``, then ``oci export``, then a load from the folder (issue 33, 1);
    a lockfile entry without an ``oci`` digest: ``check`` and the load say the same, and
    the printed fix (DIR: the layout folder) works."""
    assert main(["lock", "acme/models:v1.0"]) == 0
    Path("before.lock").write_text(Path("safehub.lock").read_text())
    layout = tmp_path / "layout"
    assert main(["oci", "export", "--lockfile", "safehub.lock", str(layout)]) == 0
    assert "oci = " in Path("safehub.lock").read_text()
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "node-cache"))
    monkeypatch.setenv("SAFEHUB_OCI", f"oci:{layout}")
    monkeypatch.setenv("SAFEHUB_LOCKFILE", "before.lock")
    capsys.readouterr()
    assert main(["check", "acme/models:v1.0", "--json"]) == 1
    said = json.loads(capsys.readouterr().out)
    error = refused(lambda: load("acme/models:v1.0", trust_repo=True), safehub.PinError)
    assert said["outcome"] == "refuse" and said["why"] == error.message
    export = needed(error.fix)[0][0]
    assert isinstance(export, Run) and export.command in (error.hint or ""), error.hint
    apply(Run(export.command.replace("DIR", str(layout))))  # in the same shell
    server.clear_log()
    assert load("acme/models:v1.0", "echo", 1, trust_repo=True) == ((1,), {})
    assert server.requests_log == []
    monkeypatch.setenv("SAFEHUB_LOCKFILE", "safehub.lock")
    assert main(["check", "acme/models:v1.0"]) == 0


@pytest.mark.parametrize("kind", [Run, AddLines])
def test_trust_repo_false_without_a_terminal(hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch,
                                             kind: type[Mechanical]) -> None:
    """torch.hub's trust_repo=False means "always ask": with nobody to ask, no trust or
    rule can help; the fix says to pass 'check' (then trust) or True (issue 33, 2)."""
    monkeypatch.setenv("CI", "true")
    error = refused(lambda: load("acme/models:v1.0", trust_repo=False),
                    safehub.UntrustedRepoError)
    assert "always ask" in error.message
    first, second = needed(error.fix)[0]
    assert isinstance(first, Call) and (first.argument, first.value) == ("trust_repo", "True")
    assert "pass trust_repo=True to safehub.load" in render(first)  # applied as written:
    assert load("acme/models:v1.0", "echo", 1, trust_repo=True) == ((1,), {})
    assert main(["untrust", "acme/models"]) == 0
    says, then = needed(second)
    assert "trust_repo='check'" in says[0].text  # type: ignore[union-attr]
    with pytest.raises(safehub.UntrustedRepoError):
        load("acme/models:v1.0", trust_repo="check")  # not trusted yet: the second part
    apply(next(f for f in then if isinstance(f, kind)))
    assert load("acme/models:v1.0", "echo", 1, trust_repo="check") == ((1,), {})


JOB = '''
import sys
import safehub
from safehub.errors import SafehubError
try:
    print("LISTED", safehub.list("acme/models:v1.0", verbose=False))
except SafehubError as e:
    print("REFUSED", type(e).__name__, e.message)
    print("HINT", e.hint)
'''


def test_a_port_a_confined_job_may_not_connect_to(hub_repo: HubRepo, server,  # type: ignore[no-untyped-def]
                                                  isolated: Path, tmp_path: Path) -> None:
    """Inside ``safehub run --confine``, a fetch to a port not in ``[confine]
    connect_ports``: the cause and the fix are said, and the fix works (issue 33, 4)."""
    from safehub.run.confine import _landlock

    if _landlock.abi() < 4:
        pytest.skip("confinement needs Landlock ABI 4 (Linux 6.7)")
    canaries = tmp_path / "canaries"  # the test hubconf writes its canary on import
    canaries.mkdir()
    policy = user_policy(isolated, '[[allow]]\nrepo = "acme/models"\n[confine]\n'
                         f'writes = ["{canaries}"]\n')
    job = tmp_path / "job.py"
    job.write_text(JOB)
    (tmp_path / "tmpdir").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmpdir"), "CI": "true",
           "SAFEHUB_TEST_CANARY": str(canaries / "canary")}

    def run_job() -> str:
        import subprocess
        import sys

        done = subprocess.run([sys.executable, "-m", "safehub", "run", "--confine", "--",
                               sys.executable, str(job)], env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stdout

    said = run_job()
    assert "REFUSED FetchError" in said and "connect_ports" in said, said
    assert f"port {server.port}" in said and "check the network" not in said
    line = re.search(r"set (connect_ports = \[[\d, ]+\]) in the \[confine\] table", said)
    assert line is not None, said
    policy.write_text(policy.read_text() + line.group(1) + "\n")  # as the fix says
    assert "LISTED" in run_job()


def test_a_write_a_confined_job_may_not_make(isolated: Path, tmp_path: Path) -> None:
    """A torch.save the kernel refuses in a job of ``safehub run --confine``: safehub run
    says what the kernel refuses and where to grant it; granting it works (issue 33, 4)."""
    import subprocess
    import sys

    from safehub.run.confine import _landlock

    if _landlock.abi() < 4:
        pytest.skip("confinement needs Landlock ABI 4 (Linux 6.7)")
    policy = user_policy(isolated, "[confine]\n")
    out = tmp_path / "checkpoints"
    out.mkdir()
    (tmp_path / "tmpdir").mkdir()
    job = f"import torch; torch.save({{'w': 1}}, {str(out / 'w.pt')!r})"
    command = [sys.executable, "-m", "safehub", "run", "--confine", "--", sys.executable,
               "-c", job]
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmpdir")}
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 1 and "torch.save outside the writes folders" in done.stderr
    assert "writes, exec or connect_ports in the [confine] table" in done.stderr
    policy.write_text(policy.read_text() + f'writes = ["{out}"]\n')  # as the fix says
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (out / "w.pt").stat().st_size > 0


def test_signing_a_folder_with_a_symbolic_link(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``safehub sign`` on a folder with a link: what is wrong and the option that signs
    it, which then verifies (issue 33, 6)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "key.pem", tmp_path / "key.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "hubconf.py").write_text("dependencies = []\n")
    (repo / "alias.py").symlink_to("hubconf.py")
    command = ["sign", str(repo), "--key", str(private)]
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "alias.py is a symbolic link" in err and "allow_symlinks`" not in err
    assert "PEM EC" not in err
    option = re.search(r"add (--[\w-]+) to `safehub sign`", err)
    assert option is not None, err
    assert main([*command, option.group(1)]) == 0
    assert main(["verify", str(repo), "--key", str(public)]) == 0


def test_offline_holds_safehub_and_the_guard_holds_the_code(  # type: ignore[no-untyped-def]
        make_hub_repo, isolated: Path, listener: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """What the README says offline covers (issue 33, 5): safehub's own requests; the
    repo's code connects unless the runtime guard (``network = []``) refuses it."""
    make_hub_repo("acme", "net", {"hubconf.py": CONNECTS})
    user_policy(isolated, "[[allow]]\nrepo = 'acme/net'\n")
    assert main(["prefetch", "acme/net:v1.0"]) == 0
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    capsys.readouterr()
    assert main(["load", "acme/net:v1.0", "connect", "--args", f"[{listener}]", "--report",
                 "-q"]) == 0
    assert f"127.0.0.1:{listener}" in capsys.readouterr().out  # recorded, not held
    with pytest.raises(safehub.OfflineError):
        load("acme/net:v2.0")  # safehub's own request: held
    user_policy(isolated, "[safehub]\nruntime = 'enforce'\n"
                "[[allow]]\nrepo = 'acme/net'\nnetwork = []\n")
    refused(lambda: load("acme/net:v1.0", "connect", listener), safehub.RuntimeGuardError)
