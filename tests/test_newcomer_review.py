"""What a newcomer review found: each refusal tells the truth, and its fix works as written.

Table-driven like tests/test_fixes.py: each case makes safehub refuse (or answer), applies
the printed fix mechanically with that file's reader, and checks the next answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safehub.cli import main
from tests.test_fixes import apply, parse
from tests.test_signatures import new_key
from tests.test_signed_load import Signed, require_key

pytest.importorskip("torch")


def cli(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    code = main(list(words))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def apply_hint(hint: str) -> None:
    for options in parse(hint):
        mechanical = [f for f in options if f.kind != "say"]
        assert mechanical, f"not mechanical: {hint}"
        apply(mechanical[0])


# -- N2: check tells the truth about a required signature ----------------------------------

@pytest.mark.parametrize(("right_key", "outcome", "code"), [
    (True, "load", 0), (False, "refuse", 1)], ids=["signed-by-the-key", "another-key"])
def test_check_of_a_required_signature(server, tmp_path: Path, isolated: Path,  # type: ignore[no-untyped-def]
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, right_key: bool,
                                       outcome: str, code: int) -> None:
    monkeypatch.setenv("CI", "true")
    signed = Signed(tmp_path, server)
    pub = signed.pub
    if not right_key:
        pub = tmp_path / "other.pub"
        pub.write_bytes(new_key(tmp_path / "other.pem"))
    require_key(isolated, pub)
    spec = f"{signed.spec}:v1.0"
    rc, out, _ = cli(capsys, "check", spec, "--json")
    report = json.loads(out)
    assert (rc, report["outcome"]) == (1, "conditional")  # not LOAD: nothing was checked
    assert str(pub) in report["why"] and "signature" in report["why"]
    apply_hint(report["fix"])
    capsys.readouterr()
    rc, out, _ = cli(capsys, "check", spec, "--json")
    report = json.loads(out)
    assert (rc, report["outcome"]) == (code, outcome), report
    assert report["signature"] != "MISSING"
    assert cli(capsys, "load", spec, "tiny")[0] == code  # check said what the load does


def test_check_says_a_required_signature_is_missing(hub_repo, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    isolated: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pub = tmp_path / "k.pub"
    pub.write_bytes(new_key(tmp_path / "k.pem"))
    require_key(isolated, pub)
    cli(capsys, "prefetch", f"{hub_repo.spec}:v1.0")  # fetches the (unsigned) tree
    rc, out, _ = cli(capsys, "check", f"{hub_repo.spec}:v1.0", "--json")
    report = json.loads(out)
    assert (rc, report["outcome"], report["signature"]) == (1, "refuse", "MISSING"), report


# -- N3: policy validate checks a file by the rules of its role ----------------------------

PROJECT_FAULTS = "[safehub]\ncache_dir = '/tmp/elsewhere'\n"  # a project may not set it
OUTSIDE = "[[allow]]\nrepo = 'a/*'\nsignature = 'required'\nkeys = ['../k.pub']\n"


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
    result = json.loads(out)[0]
    assert rc == code, result
    if code:
        assert said in result["error"]
        # The fix's command reports the same faults (the role is in it where needed).
        command = result["fix"].split("`")[1].split()[1:]
        rc2, out2, _ = cli(capsys, *command, "--json")
        assert (rc2, json.loads(out2)[0]["error"]) == (1, result["error"])


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


# -- N4: an invalid lockfile's fix writes a valid one (it looped: `safehub lock` re-read it) --

SHA, DIGEST = "a" * 40, "sha256:" + "c" * 64


@pytest.mark.parametrize(("text", "named"), [
    ("version = 1\n[[repo]]\nspec = 'acme/models:v1.0'\ncommit = 'abc'\ntree = 'x'\n"
     "digest = 'y'\n", "repo[0].commit"),
    ("version = 1\n[[repo]\nspec = \"acme/models:v1.0\"\n", "line 2"),
    (f"version = 1\n[[repo]]\nspec = 'Acme/Models:v1.0'\ncommit = '{SHA}'\ntree = '{SHA}'\n"
     f"digest = '{DIGEST}'\n", "must be written 'acme/models:v1.0'"),
    ("version = 3\n", "version"),
], ids=["bad-sha", "bad-toml", "not-canonical", "no-specs"])
@pytest.mark.parametrize("named_by", ["cwd", "--lockfile"])
def test_an_invalid_lockfiles_fix_writes_a_valid_one(
        hub_repo, capsys: pytest.CaptureFixture[str], tmp_path: Path,  # type: ignore[no-untyped-def]
        text: str, named: str, named_by: str) -> None:
    path = Path("safehub.lock") if named_by == "cwd" else tmp_path / "team.lock"
    path.write_text(text)
    extra = [] if named_by == "cwd" else ["--lockfile", str(path)]
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json", *extra)
    report = json.loads(out)
    assert rc == 1 and report["error"] == "PinError" and named in report["why"]
    if "[[repo" not in text:  # nothing to re-lock: the fix says what to write
        assert "safehub lock --rewrite" in report["fix"] and "SPEC..." in report["fix"]
        return
    apply_hint(report["fix"])  # the first alternative: `safehub lock --rewrite ...`
    capsys.readouterr()
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json", *extra)
    assert rc == 1 and json.loads(out)["error"] is None  # past the lockfile: not trusted yet
    assert f"commit = \"{hub_repo.sha}\"" in path.read_text()


def test_lock_rewrite_needs_specs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "lock", "--rewrite")
    assert rc == 2 and "--rewrite needs the specs" in err


# -- N11: offline messages say where offline mode came from, and how to turn it off ----------

@pytest.mark.parametrize(("source", "named", "off"), [
    ("env", "SAFEHUB_OFFLINE=1", "unset SAFEHUB_OFFLINE"),
    ("hub", "Hub(offline=True)", "build the Hub without offline=True"),
    ("project", "offline in ", "remove offline = true from"),
])
def test_offline_says_where_it_came_from(hub_repo, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                         source: str, named: str, off: str) -> None:
    import safehub
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
    where = parse(hint)[0][0].where
    assert "network" in where and ("does not apply" in where) == (source == "project")


# -- N12: the error types are importable from safehub; the sha rule is stated as it is -------

@pytest.mark.parametrize("name", ["TamperedError", "RepoMovedError", "OfflineError"])
def test_error_types_are_exported(name: str) -> None:
    import safehub
    from safehub import errors

    assert name in safehub.__all__ and getattr(safehub, name) is getattr(errors, name)


@pytest.mark.parametrize("ref", ["v1..0", "a b"])
def test_an_invalid_refs_hint_states_the_sha_rule(ref: str) -> None:
    from safehub.errors import SpecError
    from safehub.spec import RepoSpec, looks_like_sha

    with pytest.raises(SpecError) as err:
        RepoSpec.parse(f"acme/models:{ref}")
    assert "4 to 40 hex digits" in (err.value.hint or "")
    assert looks_like_sha("abcd") and not looks_like_sha("abc")  # the rule it states


# -- N13: safehub help shows how to call the entrypoint, not only its docstring -------------

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


# -- N14: small ones ------------------------------------------------------------------------

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


@pytest.mark.parametrize("asked", ["nosuch", "dependencies", "os"])
def test_check_entrypoint_lists_the_real_ones(hub_repo, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                              asked: str) -> None:
    Path("safehub.toml").write_text("[[allow]]\nrepo = 'acme/*'\n")
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--entrypoint", asked, "--json")
    report = json.loads(out)
    assert (rc, report["entrypoint_found"]) == (1, False)
    assert report["why"].endswith("it defines: echo, tiny")  # no dependencies, no modules
    assert cli(capsys, "check", "acme/models:v1.0", "--entrypoint", "tiny")[0] == 0


@pytest.mark.parametrize("words", [["run", "--", "no_such_program_x"],
                                   ["check", "not a spec", "--json"],
                                   ["verify", "nosuchdir/", "--key", "k.pub", "--json"]])
def test_errors_are_one_line_and_the_fix(capsys: pytest.CaptureFixture[str],
                                         words: list[str]) -> None:
    rc, out, err = cli(capsys, *words)
    assert rc in (1, 2) and "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("safehub: ") and lines[1].startswith("  fix: ")
    if "--json" in words:
        assert json.loads(out)["exit"] == rc
    else:
        assert out == ""


def test_verify_with_a_key_says_how_to_require_it(hub_repo, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  isolated: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.signatures import sign_directory

    folder = tmp_path / "signed"
    folder.mkdir()
    (folder / "hubconf.py").write_text("dependencies = []\n")
    pub = tmp_path / "k.pub"
    pub.write_bytes(new_key(tmp_path / "k.pem"))
    sign_directory(folder, tmp_path / "k.pem")
    rc, out, _ = cli(capsys, "verify", str(folder), "--key", str(pub))
    assert rc == 0
    lines = out.splitlines()
    assert "[[allow]] rule" in lines[1]
    rule = "\n".join(line.strip() for line in lines[2:])
    policy = isolated / "config/safehub/policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(f"[[allow]]\nrepo = 'acme/*'\n{rule}\n")  # as printed, in a real rule
    assert cli(capsys, "policy", "validate", str(policy))[0] == 0
    monkeypatch.setenv("CI", "true")
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json")
    assert json.loads(out)["requirements"]["signature"] == "required"
