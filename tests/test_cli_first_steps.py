"""The command line's first steps: ``safehub`` alone, ``--version``, ``check`` when the
network fails, a folder named where a repo goes, ``cache ls``/``cache clear``, ``trust
--list``, shell completion and cosign's option names. Each as a newcomer meets it: what the
command prints, and its exit code."""

from __future__ import annotations

import io
import json
from importlib import metadata

import pytest

from safehub.cli import main
from tests.conftest import HubRepo
from tests.helpers_load import cli
from tests.support.server import GitHubStandIn


def test_safehub_alone_is_a_usage_error_that_names_three_commands(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys)
    assert (code, out) == (2, "")  # argparse's exit code for a usage error
    lines = err.splitlines()
    assert lines[0].startswith("safehub: usage error: no COMMAND given (usage: safehub COMMAND")
    commands = [line.strip() for line in lines if line.startswith("      ")]
    assert commands == ["safehub demo", "safehub check owner/repo:v1.0",
                        "safehub load owner/repo:v1.0 ENTRYPOINT"]


def test_version_names_the_packages_safehub_works_with(
        capsys: pytest.CaptureFixture[str]) -> None:
    import safehub

    code, out, _ = cli(capsys, "--version")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"safehub {safehub.__version__} (Python ")
    for package, line in zip(("torch", "sigstore", "model-signing", "requests"), lines[1:],
                             strict=True):
        try:
            assert line == f"  {package} {metadata.version(package)}"
        except metadata.PackageNotFoundError:
            assert line == f"  {package} not installed"


# -- check: a network failure is not a verdict ------------------------------------------------

@pytest.mark.parametrize("failure", ["down", "5xx", "rate-limited"])
def test_check_says_unknown_with_exit_3_when_the_network_fails(
        hub_repo: HubRepo, server: GitHubStandIn, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    if failure == "down":
        port = server.port
        server.stop()
        monkeypatch.setenv("SAFEHUB_GITHUB_API_URL", f"https://localhost:{port}/api/v3")
    elif failure == "5xx":
        server.fail_next(50, 502)
    else:
        server.rate_limit(True)
    code, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json")
    report = json.loads(out)
    assert (code, report["outcome"]) == (3, "unknown"), report
    assert report["fix"]  # what to do (the network's fix), still
    code, out, _ = cli(capsys, "check", "acme/models:v1.0")
    assert code == 3 and out.startswith("acme/models:v1.0: UNKNOWN (not a verdict: the network "
                                        "failed before anything decided: ")


def test_check_still_refuses_what_is_not_there_and_allows_what_is(
        hub_repo: HubRepo, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", "acme/models:v9", "--json")
    assert (code, json.loads(out)["outcome"]) == (1, "refuse")  # a 404 is an answer
    cli(capsys, "trust", "acme/models:v1.0")
    assert cli(capsys, "check", "acme/models:v1.0")[0] == 0


# -- a folder where a repo goes -----------------------------------------------------------------

@pytest.mark.parametrize("folder", ["./localhub", "../hub", "/srv/hub", "~/hub", "."])
def test_a_folder_path_is_told_to_use_source_local(
        capsys: pytest.CaptureFixture[str], folder: str) -> None:
    code, _, err = cli(capsys, "load", folder, "tiny")
    assert code == 2 and "a folder path, not owner/name[:ref]" in err
    assert "add --source 'local' to the command" in err


def test_the_fix_for_a_folder_path_works(tmp_path, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    hub = tmp_path / "work" / "localhub"
    hub.mkdir()
    (hub / "hubconf.py").write_text("def tiny():\n    return 'tiny'\n")
    code, _, err = cli(capsys, "load", "./localhub", "tiny")
    assert code == 2 and "--source 'local'" in err
    assert main(["load", "./localhub", "tiny", "--source", "local"]) == 0


# -- offline: refused, without announcing a download first ---------------------------------------

def test_an_offline_load_says_no_download_before_refusing(
        hub_repo: HubRepo, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    import safehub

    assert cli(capsys, "load", "acme/models:v1.0", "tiny", "--trust")[0] == 0
    assert cli(capsys, "cache", "clear", hub_repo.sha)[0] == 0  # the tree, gone
    with pytest.raises(safehub.OfflineError):  # the ref's answer is remembered, the tree not
        safehub.Hub(offline=True).load("acme/models:v1.0", "tiny", trust_repo=True)
    assert "downloading" not in capsys.readouterr().err
    code, _, err = cli(capsys, "load", "acme/models:v1.0", "tiny", "--trust")  # honest case
    assert code == 0 and "safehub: downloading acme/models@" in err


# -- cache ls and cache clear, as hf cache scan / delete -----------------------------------------

class _Terminal(io.StringIO):
    """A stdin that is a terminal, with the answer typed."""

    def isatty(self) -> bool:
        return True


def test_cache_ls_shows_size_and_last_load(hub_repo: HubRepo,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    v1 = hub_repo.sha
    hub_repo.commit({"extra.txt": "x" * 3000})
    hub_repo.tag("v2")
    assert cli(capsys, "load", "acme/models:v1.0", "tiny", "--trust")[0] == 0
    assert cli(capsys, "prefetch", "acme/models:v2")[0] == 0  # fetched, never loaded
    _, out, _ = cli(capsys, "cache", "ls", "--json")
    entries = {e["commit"]: e for e in json.loads(out)["entries"]}
    assert entries[v1]["last_used"].startswith("20") and entries[hub_repo.sha]["last_used"] == ""
    assert entries[hub_repo.sha]["bytes"] > entries[v1]["bytes"]
    _code, out, _ = cli(capsys, "cache", "ls")
    header, *rows = out.splitlines()[1:]
    assert header.split() == ["COMMIT", "REPO", "SPECS", "FILES", "SIZE", "LAST", "LOAD",
                              "DIGEST", "LEVEL"]
    row = {line.split()[0]: line for line in rows}
    assert " KiB " in row[hub_repo.sha[:12]] and " - " in row[hub_repo.sha[:12]]
    assert f" {entries[v1]['last_used'][:10]} " in row[v1[:12]]
    assert out.splitlines()[-1].startswith("2 cached trees, ")


def _cached(capsys: pytest.CaptureFixture[str]) -> int:
    return len(json.loads(cli(capsys, "cache", "ls", "--json")[1])["entries"])


def _fill(capsys: pytest.CaptureFixture[str]) -> int:
    assert cli(capsys, "prefetch", "acme/models:v1.0")[0] == 0
    return _cached(capsys)


def test_cache_clear_of_everything_is_refused_without_a_terminal_and_says_what(
        hub_repo: HubRepo, capsys: pytest.CaptureFixture[str]) -> None:
    assert _fill(capsys) == 1
    code, _out, err = cli(capsys, "cache", "clear")  # pytest's stdin is no terminal
    assert code == 1 and f"acme/models@{hub_repo.sha[:12]}" in err
    assert "\n      safehub cache clear --yes\n" in err
    assert _cached(capsys) == 1  # nothing removed
    assert cli(capsys, "cache", "clear", "--yes")[0] == 0  # the fix, as printed
    assert json.loads(cli(capsys, "cache", "ls", "--json")[1])["entries"] == []
    assert cli(capsys, "cache", "clear")[0] == 0  # an empty cache: nothing to ask


@pytest.mark.parametrize(("answer", "kept"), [("y\n", 0), ("n\n", 1), ("", 1)])
def test_cache_clear_asks_on_a_terminal(hub_repo: HubRepo, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch, answer: str,
                                        kept: int) -> None:
    assert _fill(capsys) == 1
    monkeypatch.setattr("sys.stdin", _Terminal(answer))
    code, _out, err = cli(capsys, "cache", "clear")
    assert code == 0 and "Remove them all? [y/N]" in err
    assert _cached(capsys) == kept


def test_cache_clear_never_asks_in_ci(hub_repo: HubRepo, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert _fill(capsys) == 1
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    monkeypatch.setenv("CI", "true")
    assert cli(capsys, "cache", "clear")[0] == 1 and _cached(capsys) == 1
    assert cli(capsys, "cache", "clear", hub_repo.sha[:8])[0] == 0  # named: no question
    assert _cached(capsys) == 0


# -- trust --list -------------------------------------------------------------------------------

def test_trust_list_shows_what_was_trusted_and_untrust_forgets_it(
        make_hub_repo, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    first, second = make_hub_repo("acme", "models"), make_hub_repo("Other", "Hub")
    code, out, _ = cli(capsys, "trust", "--list")
    assert code == 0 and out.startswith("0 trusted commits")
    assert cli(capsys, "trust", "acme/models:v1.0")[0] == 0
    assert cli(capsys, "trust", "Other/Hub:v1.0")[0] == 0
    listed = json.loads(cli(capsys, "trust", "--list", "--json")[1])["consents"]
    assert [(c["repo"], c["commit"]) for c in listed] == [
        ("acme/models", first.sha), ("other/hub", second.sha)]
    assert all(c["how"] and c["at"] and c["digest"].startswith("sha256:") for c in listed)
    code, out, _ = cli(capsys, "trust", "--list", "other/hub")
    assert code == 0 and out.splitlines()[0].startswith(f"other/hub  {second.sha}  sha256:")
    assert cli(capsys, "untrust", "acme/models")[0] == 0
    assert [c["repo"] for c in json.loads(cli(capsys, "trust", "--list", "--json")[1])[
        "consents"]] == ["other/hub"]
    assert cli(capsys, "trust")[0] == 2  # neither a spec nor --list: a usage error


# -- a misspelt repo is named as such, not as a missing ref ---------------------------------------

def test_a_repo_that_does_not_exist_is_not_reported_as_a_missing_ref(
        hub_repo: HubRepo, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "load", "acme/modles:v1.0", "tiny", "--trust")
    assert code == 1 and "repo acme/modles does not exist at " in err
    assert "branch or tag" not in err and "GITHUB_TOKEN" in err
    code, _, err = cli(capsys, "load", "acme/models:v1.1", "tiny", "--trust")
    assert code == 1 and "acme/models has no branch or tag named 'v1.1'" in err
    assert "the repo exists" in err


# -- policy validate: where the file is wrong, and the key meant ----------------------------------

def test_policy_validate_points_at_the_toml_error_instead_of_itself(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "p.toml"
    bad.write_text('[safehub]\nunknown_repos = "deny"\n[[allow]\nrepo = "x/y"\n')
    code, out, _ = cli(capsys, "policy", "validate", str(bad))
    fix = out.split("  fix: ", 1)[1]
    assert code == 1 and f"edit {bad} at line 3, column 8" in fix
    assert "policy validate" not in fix
    bad.write_text('[safehub]\nunknown_repos = "deny"\n[[allow]]\nrepo = "x/y"\n')  # fixed
    assert cli(capsys, "policy", "validate", str(bad))[0] == 0


def test_a_misspelt_policy_key_is_named_with_the_key_meant(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "p.toml"
    bad.write_text('[safehub]\nofline = true\n[[allow]]\nrepo = "x/y"\nsignatur = "required"\n'
                   'zzz = 1\n')
    code, out, _ = cli(capsys, "policy", "validate", str(bad))
    assert code == 1
    assert "allow[0].signatur: unknown key (did you mean 'signature'?)" in out
    assert "safehub.ofline: unknown key (did you mean 'offline'?)" in out
    assert "zzz: unknown key; allowed keys" in out  # nothing close: no guess


def test_docs_env_says_what_each_variable_does_not_that_it_is_itself(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "docs", "env")
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| `")]
    assert code == 0 and len(rows) > 10
    for first, _, meaning in rows:
        name = first.strip("| ")  # `SAFEHUB_CACHE_DIR`
        assert f"as {name}" not in meaning and f"as {name[:-1]}=" not in meaning, name
        assert meaning.strip(" |"), name


# -- shell completion, made from the parser -------------------------------------------------------

@pytest.mark.parametrize(("typed", "offered"), [
    ("safehub lo", ["load", "lock"]),
    ("safehub cache ", ["ls", "verify", "clear"]),
    ("safehub cache clear --", ["--help", "--json", "--cache-dir", "--yes"]),
    ("safehub load acme/models:v1.0 tiny --tr", ["--trust"]),
    ("safehub verify . --certificate-", ["--certificate-identity", "--certificate-oidc-issuer"]),
    ("safehub completion ", ["bash", "--help"]),
])
def test_bash_completion_offers_what_the_parser_takes(
        capsys: pytest.CaptureFixture[str], tmp_path, typed: str,  # type: ignore[no-untyped-def]
        offered: list[str]) -> None:
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash here")
    code, script, _ = cli(capsys, "completion", "bash")
    assert code == 0
    (tmp_path / "complete.sh").write_text(script)
    words = typed.split(" ")
    probe = (f"source {tmp_path / 'complete.sh'}\n"
             f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
             "_safehub; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    out = subprocess.run([bash, "--norc", "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == offered, out


def test_check_refuses_on_a_servers_own_answer(hub_repo: HubRepo, server: GitHubStandIn,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    server.fail_next(50, 403)  # forbidden, no rate limit: an answer, not a failure
    code, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json")
    assert (code, json.loads(out)["outcome"]) == (1, "refuse")
