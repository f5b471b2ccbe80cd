"""The load pipeline end to end: loopback GitHub, real git repos, real torch modules.

Each rule has the attack refused (and the canary proving nothing ran) and the honest case
loading.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

import safehub
from tests.conftest import HUBCONF, HubRepo, runs
from tests.support import GitHubStandIn

torch = pytest.importorskip("torch")


def load(spec: str, model: str = "tiny", *args: object, **kwargs: object) -> object:
    kwargs.setdefault("trust_repo", True)
    return safehub.load(spec, model, *args, **kwargs)


def cache_tree(commit: str) -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "safehub/v1/commits" / commit / "tree"


# -- resolve once ----------------------------------------------------------------------

def test_cold_then_warm_by_tag(hub_repo: HubRepo, server: GitHubStandIn, canary: Path) -> None:
    model = load(f"{hub_repo.spec}:v1.0", "tiny", 3, bias=False)
    assert isinstance(model, torch.nn.Linear) and model.in_features == 3 and model.bias is None
    assert runs(canary) == 1
    # Two API calls (the tag by its full name, the commit's tree), then the archive
    # (zipball redirects to the codeload host).
    assert server.count(server.api_url) == 2
    assert server.count() == 4
    server.clear_log()
    load(f"{hub_repo.spec}:v1.0")
    assert server.count() == 0  # warm: no network at all
    assert runs(canary) == 2


def test_default_branch_and_case_insensitive_names(
    hub_repo: HubRepo, server: GitHubStandIn
) -> None:
    load(hub_repo.spec)
    assert [r.path for r in server.requests_log[:3]] == [
        "/api/v3/repos/acme/models", "/api/v3/repos/acme/models/git/ref/heads/main",
        f"/api/v3/repos/acme/models/git/commits/{hub_repo.sha}"]
    server.clear_log()
    load("ACME/Models")  # GitHub names compare case-insensitively: the same cache entry
    assert server.count() == 0


def test_args_and_kwargs_pass_through(hub_repo: HubRepo) -> None:
    assert load(f"{hub_repo.spec}:v1.0", "echo", 1, [2], key="v") == ((1, [2]), {"key": "v"})


def test_old_commit_of_the_repo_loads_by_sha(
    hub_repo: HubRepo, server: GitHubStandIn, canary: Path
) -> None:
    old = hub_repo.sha
    hub_repo.commit({"hubconf.py": "raise SystemExit('newer commit ran')\n"})
    load(f"{hub_repo.spec}:{old}")
    assert runs(canary) == 1
    server.clear_log()
    load(f"{hub_repo.spec}:{old}")
    assert server.count() == 0  # pinned and cached: zero requests
    load(f"{hub_repo.spec}:{old[:10]}")  # an abbreviated sha resolves to the same commit


def test_commit_on_a_release_branch_loads_by_sha(hub_repo: HubRepo) -> None:
    hub_repo.git("checkout", "-q", "-b", "release/1.x")
    sha = hub_repo.commit({"extra.py": "X = 1\n"}, "release fix")
    hub_repo.git("checkout", "-q", "main")
    hub_repo.commit({"other.py": "Y = 2\n"}, "main moves on")
    assert load(f"{hub_repo.spec}:{sha}", "echo") == ((), {})


# -- provenance: fork commits -----------------------------------------------------------

def test_fork_commit_is_refused_under_the_parent_name(
    hub_repo: HubRepo, make_hub_repo, server: GitHubStandIn, canary: Path  # type: ignore[no-untyped-def]
) -> None:
    fork: HubRepo = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"hubconf.py": "import os\nopen(os.environ['SAFEHUB_TEST_CANARY'],'a')"
                        ".write('evil\\n')\ndef tiny(): pass\n"}, "evil")
    server.clear_log()
    with pytest.raises(safehub.PinError, match="not in the history") as err:
        load(f"{hub_repo.spec}:{evil}", skip_validation=True)  # never disables the fork check
    assert "fork" in str(err.value)
    assert runs(canary) == 0
    assert not any("zipball" in r.path for r in server.requests_log)  # nothing downloaded
    # The same commit loads under the fork's own name, where it does belong ...
    load(f"{fork.spec}:{evil}", "tiny")
    assert runs(canary) == 1
    # ... and being in the cache does not make it the parent's.
    with pytest.raises(safehub.PinError):
        load(f"{hub_repo.spec}:{evil}")
    assert runs(canary) == 1


def test_pull_request_refs_are_refused_before_io(server: GitHubStandIn) -> None:
    with pytest.raises(safehub.SpecError, match="refs/heads"):
        load("acme/models:refs/pull/1/head")
    assert server.count() == 0


# -- trust -------------------------------------------------------------------------------

def test_ci_refuses_without_consent_and_says_how(
    hub_repo: HubRepo, canary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(safehub.UntrustedRepoError) as err:
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny")
    assert "trust_repo=True" in str(err.value) and hub_repo.sha in str(err.value)
    assert runs(canary) == 0
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 1
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny")  # consent recorded for this content
    # New content under the same name asks again (and in CI, refuses).
    hub_repo.commit({"hubconf.py": (hub_repo.path / "hubconf.py").read_text() + "\n# v2\n"})
    hub_repo.tag("v2.0")
    with pytest.raises(safehub.UntrustedRepoError):
        safehub.load(f"{hub_repo.spec}:v2.0", "tiny")
    assert runs(canary) == 2


def test_module_level_calls_obey_a_policy_changed_between_them(
        hub_repo: HubRepo, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The module-level functions keep their Hub between calls (issue 18), and still obey
    a policy file edited, added or removed, a variable set, or a new working directory."""
    spec = f"{hub_repo.spec}:v1.0"
    load(spec)
    user = isolated / "config/safehub/policy.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    deny = f'[[deny]]\nrepo = "{hub_repo.spec}"\n'
    user.write_text(deny)  # added
    with pytest.raises(safehub.PolicyDenied):
        load(spec)
    user.write_text(deny.replace("deny", "allo"))  # edited in place, same size, at once
    with pytest.raises(safehub.SafehubError):  # [[allo]] is no key: the file is read again
        load(spec)
    user.unlink()  # removed
    load(spec)
    other = isolated.parent / "other.toml"
    other.write_text(deny)
    monkeypatch.setenv("SAFEHUB_POLICY", str(other))  # a variable
    with pytest.raises(safehub.PolicyDenied):
        load(spec)
    monkeypatch.delenv("SAFEHUB_POLICY")
    load(spec)
    project = isolated.parent / "project"
    project.mkdir()
    (project / "safehub.toml").write_text(deny)
    monkeypatch.chdir(project)  # a working directory with a project file
    with pytest.raises(safehub.PolicyDenied):
        load(spec)


#: What only a cold load needs: the archive checks, the HTTPS stack (urllib3, spoken to
#: directly) and GitHub, the cross-process locks (the kernel's flock: the filelock package
#: only where there is none). Only their names are checked, never a time.
COLD_PATH = ("safehub.verify.archive", "safehub.sources.github", "safehub.sources.transport",
             "safehub.sources.connections", "urllib3", "safehub._internal.locks")
#: What only an archive whose git tree differs from the commit's needs: the per-file check
#: and the ``.gitattributes`` reading that explains each difference.
PER_FILE = {"safehub.verify.archive._perfile", "safehub.verify.archive._expected",
            "safehub.verify.gitattributes", "safehub.verify.gitattributes.export",
            "safehub.verify.gitattributes.subst"}


def _imported_by_a_load(spec: str) -> set[str]:
    """The modules a new Python process has imported after one ``safehub.load(spec)``."""
    code = ("import sys, safehub\n"
            f"safehub.load({spec!r}, 'tiny', trust_repo=True)\n"
            "print('\\n'.join(sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(out.stdout.split())


def test_a_warm_load_in_a_new_process_imports_nothing_of_the_cold_path(
        hub_repo: HubRepo, canary: Path) -> None:
    """A fresh process's warm load imports what it uses (issue 18): not the archive
    checks, the transport, GitHub, the locks, the signature verifier and signer (no
    policy asks for a signature), the lockfile module (there is none) or the Hub files
    code (the repo's code downloads nothing); a weights transport is made only for a
    download. A cold load still imports the cold path, and not requests (the transport
    speaks urllib3 directly; requests is sigstore's), nor the per-file archive check."""
    spec = f"{hub_repo.spec}:v1.0"
    cold = _imported_by_a_load(spec)
    assert set(COLD_PATH) <= cold
    assert "requests" not in cold
    warm = _imported_by_a_load(spec)
    assert runs(canary) == 2
    unused = (*COLD_PATH, "filelock", "requests", "safehub.verify.signatures.verify",
              "safehub.verify.signatures.sign", "safehub.verify.signatures.locate",
              "safehub.store.lockfile", "sysconfig", "safehub.run.hfhub")
    assert sorted(warm & set(unused)) == []
    assert sorted(cold & PER_FILE) == []  # the archive is the commit's tree exactly
    assert "filelock" not in cold


def test_a_cold_load_imports_the_attribute_checks_only_for_an_archive_they_explain(
        make_hub_repo, canary: Path) -> None:  # type: ignore[no-untyped-def]
    """A ``.gitattributes`` that changes nothing ``git archive`` writes leaves the git tree
    ids equal: the exact check ties the archive, and neither the per-file check nor the
    attribute modules are imported. Where an ``export-subst`` rule rewrote a file, they
    are, and explain it (the load goes on, its code runs)."""
    plain = make_hub_repo("acme", "plain", {".gitattributes": "*.py text diff=python\n",
                                            "sub/.gitattributes": "*.txt -text\n",
                                            "sub/n.txt": "n\n"})
    assert sorted(_imported_by_a_load(f"{plain.spec}:v1.0") & PER_FILE) == []
    subst = make_hub_repo("acme", "subst", {"sub/.gitattributes": "v.py export-subst\n",
                                            "sub/v.py": "V = '$Format:%H$'\n"})
    assert sorted(PER_FILE - _imported_by_a_load(f"{subst.spec}:v1.0")) == []
    assert runs(canary) == 2
    done = safehub.Hub().prepare(f"{subst.spec}:v1.0", trust_repo=True, verbose=False)
    assert (done.path / "sub/v.py").read_text() == f"V = '{subst.sha}'\n"


def test_trust_repo_false_always_asks(hub_repo: HubRepo) -> None:
    load(f"{hub_repo.spec}:v1.0")
    with pytest.raises(safehub.UntrustedRepoError):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=False)


def test_trust_repo_none_loads_with_a_warning(hub_repo: HubRepo) -> None:
    with pytest.warns(UserWarning, match="legacy"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=None)


def test_bad_trust_repo_value(hub_repo: HubRepo) -> None:
    with pytest.raises(safehub.SpecError, match="trust_repo"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo="yes")


# -- the cache re-checks what it serves -------------------------------------------------

def _writable(path: Path) -> None:
    path.parent.chmod(0o755)
    path.chmod(0o644)


def test_tampered_hubconf_in_cache_is_refused(hub_repo: HubRepo, canary: Path) -> None:
    load(f"{hub_repo.spec}:v1.0")
    hubconf = cache_tree(hub_repo.sha) / "hubconf.py"
    _writable(hubconf)
    hubconf.write_text(hubconf.read_text().replace("A tiny", "A tampered"))
    with pytest.raises(safehub.IntegrityError, match="hubconf.py") as err:
        load(f"{hub_repo.spec}:v1.0")
    assert "different content" in str(err.value)
    assert runs(canary) == 1
    # force_reload fetches and verifies a fresh copy, replacing the tampered one.
    load(f"{hub_repo.spec}:v1.0", force_reload=True)
    assert "A tiny" in hubconf.read_text()
    assert runs(canary) == 2


def test_tamper_that_keeps_size_and_mtime_is_still_caught(hub_repo: HubRepo) -> None:
    load(f"{hub_repo.spec}:v1.0")
    hubconf = cache_tree(hub_repo.sha) / "hubconf.py"
    st = hubconf.stat()
    _writable(hubconf)
    hubconf.write_text(hubconf.read_text().replace("tiny", "tinY"))
    os.utime(hubconf, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(safehub.IntegrityError, match="different content"):
        load(f"{hub_repo.spec}:v1.0")


@pytest.mark.parametrize("runtime", ["observe", "off"])
def test_a_file_edited_in_place_without_touching_its_folder_is_caught(
    hub_repo: HubRepo, canary: Path, isolated: Path, runtime: str
) -> None:
    """A warm load checks folders up front and each file as the repo's code opens it
    (with the runtime guard), or every file up front (runtime = "off")."""
    policy = isolated / "config/safehub/policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(f"[safehub]\nruntime = '{runtime}'\n")
    load(f"{hub_repo.spec}:v1.0")
    hubconf = cache_tree(hub_repo.sha) / "hubconf.py"
    hubconf.chmod(0o644)  # the folder stays as it was
    hubconf.write_text(hubconf.read_text() + "\nraise SystemExit('tampered')\n")
    hubconf.chmod(0o444)
    with pytest.raises(safehub.IntegrityError, match="hubconf.py"):
        load(f"{hub_repo.spec}:v1.0")
    assert runs(canary) == 1


@pytest.mark.parametrize("runtime", ["observe", "enforce", "off"])
def test_a_module_edited_in_place_is_caught_in_every_runtime_mode(
        make_hub_repo, isolated: Path, runtime: str,  # type: ignore[no-untyped-def]
        clean_modules: None) -> None:
    """The per-open check is the cache's, not a runtime rule: ``runtime = "off"`` records
    and refuses nothing, yet a module the entrypoint imports, edited in place (its folder
    untouched), is refused before its bytes run; unedited, the warm load works."""
    repo = make_hub_repo(files={"hubconf.py": HUBCONF + "\n\ndef lazy():\n"
                                "    from zoo import net\n    return net.VALUE\n",
                                "zoo/__init__.py": "", "zoo/net.py": "VALUE = 7\n"})
    policy = isolated / "config/safehub/policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(f"[safehub]\nruntime = '{runtime}'\n")
    assert load(f"{repo.spec}:v1.0", "lazy") == 7
    assert load(f"{repo.spec}:v1.0", "lazy") == 7  # warm
    for name in [m for m in sys.modules if m == "zoo" or m.startswith("zoo.")]:
        del sys.modules[name]
    net = cache_tree(repo.sha) / "zoo/net.py"
    net.chmod(0o644)
    net.write_text("VALUE = 666\n")
    net.chmod(0o444)
    with pytest.raises(safehub.IntegrityError, match="net.py"):
        load(f"{repo.spec}:v1.0", "lazy")


def test_extra_module_in_cache_is_refused(hub_repo: HubRepo, canary: Path) -> None:
    """A module dropped beside hubconf.py would shadow an import."""
    load(f"{hub_repo.spec}:v1.0")
    tree = cache_tree(hub_repo.sha)
    tree.chmod(0o755)
    (tree / "numpy.py").write_text("evil")
    with pytest.raises(safehub.IntegrityError, match="not part of the verified tree"):
        load(f"{hub_repo.spec}:v1.0")
    assert runs(canary) == 1


def test_planted_bytecode_is_removed_before_anything_runs(hub_repo: HubRepo,
                                                          canary: Path) -> None:
    """A .pyc would replace the verified source; it is deleted, never executed."""
    load(f"{hub_repo.spec}:v1.0")
    tree = cache_tree(hub_repo.sha)
    tree.chmod(0o755)
    pyc = tree / "__pycache__/hubconf.cpython-311.pyc"
    # Planted by another process: this one makes no __pycache__ in a tree it watches.
    subprocess.run(["mkdir", str(pyc.parent)], check=True)
    pyc.write_bytes(b"evil bytecode")
    load(f"{hub_repo.spec}:v1.0")
    assert not pyc.parent.exists() and runs(canary) == 2


def test_rewritten_cache_with_a_consistent_verdict_is_refused(
    hub_repo: HubRepo, canary: Path
) -> None:
    """Someone who can write the cache edits hubconf.py AND rewrites the verdict and
    entry records so that they add up: the per-user record of what was verified says no."""
    import json

    from safehub.digest import FileEntry, content_digest, git_tree_id

    load(f"{hub_repo.spec}:v1.0")
    tree = cache_tree(hub_repo.sha)
    entry_dir = tree.parent
    hubconf = tree / "hubconf.py"
    _writable(hubconf)
    evil = hubconf.read_text() + "\nopen(os.environ['SAFEHUB_TEST_CANARY'], 'a').write('EVIL\\n')\n"
    hubconf.write_text(evil)
    for name in ("verdict.json", "entry.json"):
        (entry_dir / name).chmod(0o644)
    entry_dir.chmod(0o755)
    verdict = json.loads((entry_dir / "verdict.json").read_text())
    rows = [FileEntry.from_bytes(r[0], r[1], (tree / r[0]).read_bytes()) for r in verdict["files"]]
    verdict["files"] = [[f.path, f.mode, f.size, f.sha256, f.blob] for f in rows]
    verdict["digest"] = content_digest(rows)
    verdict["tree"] = git_tree_id(rows)  # even the git tree id is made to add up
    (entry_dir / "verdict.json").write_text(json.dumps(verdict))
    entry = json.loads((entry_dir / "entry.json").read_text())
    entry["digest"], entry["tree"] = verdict["digest"], verdict["tree"]
    (entry_dir / "entry.json").write_text(json.dumps(entry))
    with pytest.raises(safehub.IntegrityError, match="the cache was rewritten"):
        load(f"{hub_repo.spec}:v1.0")
    assert "EVIL" not in canary.read_text()


def test_no_bytecode_is_written_into_the_tree(hub_repo: HubRepo) -> None:
    hub_repo.commit({"helper.py": "VALUE = 7\n", "hubconf.py": "import helper\n"
                     "def value():\n    return helper.VALUE\n"})
    hub_repo.tag("v2")
    assert load(f"{hub_repo.spec}:v2", "value") == 7
    assert load(f"{hub_repo.spec}:v2", "value") == 7  # re-checked: no __pycache__ appeared


def test_copied_cache_with_same_bytes_still_loads(hub_repo: HubRepo) -> None:
    """New inodes and times (a cache copied to another disk) fall back to re-hashing."""
    load(f"{hub_repo.spec}:v1.0")
    hubconf = cache_tree(hub_repo.sha) / "hubconf.py"
    data = hubconf.read_bytes()
    _writable(hubconf)
    hubconf.unlink()
    hubconf.write_bytes(data)
    hubconf.chmod(0o444)
    assert isinstance(load(f"{hub_repo.spec}:v1.0"), torch.nn.Linear)


def test_missing_file_in_cache(hub_repo: HubRepo) -> None:
    load(f"{hub_repo.spec}:v1.0")
    readme = cache_tree(hub_repo.sha) / "README.md"
    _writable(readme)
    readme.unlink()
    with pytest.raises(safehub.IntegrityError, match="README.md.*missing"):
        load(f"{hub_repo.spec}:v1.0")


def test_cache_files_are_read_only(hub_repo: HubRepo) -> None:
    load(f"{hub_repo.spec}:v1.0")
    tree = cache_tree(hub_repo.sha)
    assert not tree.stat().st_mode & stat.S_IWUSR
    assert not (tree / "hubconf.py").stat().st_mode & stat.S_IWUSR


def test_cache_dir_not_writable(hub_repo: HubRepo, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(safehub.CacheError, match="SAFEHUB_CACHE_DIR"):
        load(f"{hub_repo.spec}:v1.0")


# -- what the server sends is verified ----------------------------------------------------

def _rezip(data: bytes, change: dict[str, bytes], comment: bytes | None = None) -> bytes:
    src = zipfile.ZipFile(BytesIO(data))
    out = BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            rel = info.filename.split("/", 1)[1]
            dst.writestr(info, change.get(rel, src.read(info)))
        dst.comment = src.comment if comment is None else comment
    return out.getvalue()


def test_altered_archive_is_refused(hub_repo: HubRepo, server: GitHubStandIn,
                                    canary: Path) -> None:
    evil = b"import os\nopen(os.environ['SAFEHUB_TEST_CANARY'],'a').write('evil\\n')\n"
    server.tamper_archive(hub_repo.sha, lambda z: _rezip(z, {"hubconf.py": evil}))
    with pytest.raises(safehub.IntegrityError, match="hubconf.py"):
        load(f"{hub_repo.spec}:v1.0")
    assert runs(canary) == 0
    assert not cache_tree(hub_repo.sha).exists()


def test_archive_of_another_commit_is_refused(hub_repo: HubRepo, server: GitHubStandIn) -> None:
    first = hub_repo.sha
    second = hub_repo.commit({"x.py": "1"})
    server.tamper_archive(second, lambda z: _rezip(z, {}, comment=first.encode()))
    with pytest.raises(safehub.IntegrityError, match="says it is commit"):
        load(f"{hub_repo.spec}:{second}")


def test_truncated_download_never_reaches_the_cache(
    hub_repo: HubRepo, server: GitHubStandIn, canary: Path
) -> None:
    server.truncate_archives(True)
    with pytest.raises(safehub.FetchError, match="cut short"):
        load(f"{hub_repo.spec}:v1.0")
    assert not cache_tree(hub_repo.sha).exists()
    assert runs(canary) == 0
    server.truncate_archives(False)
    load(f"{hub_repo.spec}:v1.0")  # and the next try succeeds cleanly
    assert runs(canary) == 1


def test_archive_size_cap(hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEHUB_MAX_ARCHIVE_BYTES", "100")
    with pytest.raises(safehub.IntegrityError, match="100-byte limit"):
        load(f"{hub_repo.spec}:v1.0")


def test_gitattributes_export_rules_use_the_per_file_fallback(
    make_hub_repo, server: GitHubStandIn  # type: ignore[no-untyped-def]
) -> None:
    """Real `git archive` output with export-subst, eol=crlf, export-ignore, and a
    .gitattributes that leaves itself out (its rules are fetched by blob id)."""
    repo: HubRepo = make_hub_repo(files={
        ".gitattributes": "version.py export-subst\n*.txt eol=crlf\nnotes/ export-ignore\n"
                          ".gitattributes export-ignore\n",
        "version.py": "V = '$Format:%H$'\n",
        "data.txt": "one\ntwo\n",
        "notes/todo.txt": "internal\n",
    })
    with pytest.warns(UserWarning, match="gitattributes"):
        load(f"{repo.spec}:v1.0")
    tree = cache_tree(repo.sha)
    verdict = json.loads((tree.parent / "verdict.json").read_text())
    assert verdict["level"] == "per-file" and verdict["unverified"] == ["version.py"]
    assert repo.sha in (tree / "version.py").read_text()
    assert (tree / "data.txt").read_bytes() == b"one\r\ntwo\r\n"  # verified by undoing it
    assert not (tree / "notes").exists() and not (tree / ".gitattributes").exists()
    assert any("/git/blobs/" in r.path for r in server.requests_log)


def test_fallback_refuses_a_tampered_file_under_a_line_ending_rule(
    make_hub_repo, server: GitHubStandIn, canary: Path  # type: ignore[no-untyped-def]
) -> None:
    repo: HubRepo = make_hub_repo(files={".gitattributes": "*.py eol=lf\n"})
    evil = b"import os\nopen(os.environ['SAFEHUB_TEST_CANARY'],'a').write('evil\\n')\n"
    server.tamper_archive(repo.sha, lambda z: _rezip(z, {"hubconf.py": evil}))
    with pytest.raises(safehub.IntegrityError, match="no .gitattributes rule"):
        load(f"{repo.spec}:v1.0")
    assert runs(canary) == 0


# -- network failures -------------------------------------------------------------------

def test_unknown_repo_and_ref(hub_repo: HubRepo) -> None:
    with pytest.raises(safehub.NotFoundError, match="GITHUB_TOKEN"):
        load("acme/nope")
    with pytest.raises(safehub.NotFoundError, match="no branch or tag named 'v9'"):
        load(f"{hub_repo.spec}:v9")
    with pytest.raises(safehub.NotFoundError):
        load(f"{hub_repo.spec}:{'f' * 40}")


def test_rate_limit_says_how_to_fix(hub_repo: HubRepo, server: GitHubStandIn) -> None:
    server.rate_limit(True)
    with pytest.raises(safehub.RateLimitError) as err:
        load(f"{hub_repo.spec}:v1.0")
    assert "GITHUB_TOKEN" in str(err.value)


def test_transient_5xx_is_retried(hub_repo: HubRepo, server: GitHubStandIn) -> None:
    server.fail_next(2, 502)
    assert isinstance(load(f"{hub_repo.spec}:v1.0"), torch.nn.Linear)


def test_server_down(monkeypatch: pytest.MonkeyPatch, server: GitHubStandIn) -> None:
    port = server.port
    server.stop()
    monkeypatch.setenv("SAFEHUB_GITHUB_API_URL", f"https://localhost:{port}/api/v3")
    with pytest.raises(safehub.UnreachableError, match="network is unreachable") as err:
        load("acme/models:v1.0")
    assert "prefetch" in str(err.value)  # the fixes that work without a network


def test_loopback_is_never_sent_through_a_proxy(
    hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy cannot reach this machine's loopback (the demo, a local mirror): with
    HTTPS_PROXY set and NO_PROXY not naming it, the stand-in is still reached directly."""
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert isinstance(load(f"{hub_repo.spec}:v1.0"), torch.nn.Linear)


def test_an_unreachable_proxy_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://someone:secret@127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("SAFEHUB_GITHUB_API_URL", "https://api.github.invalid")
    with pytest.raises(safehub.UnreachableError) as err:
        load("acme/models:v1.0")
    text = str(err.value)
    assert "through the proxy http://127.0.0.1:9" in text and "NO_PROXY" in text
    assert "secret" not in text


def test_token_goes_to_the_api_host_only(
    hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    load(f"{hub_repo.spec}:v1.0")
    api = [r for r in server.requests_log if r.path.startswith("/api/")]
    other = [r for r in server.requests_log if not r.path.startswith("/api/")]
    assert api and all(r.authorization == "Bearer ghp_secret" for r in api)
    assert other and all(r.authorization is None for r in other)


def test_redirect_to_a_host_not_allowed(
    hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SAFEHUB_ALLOWED_HOSTS")  # the codeload stand-in is 127.0.0.1
    with pytest.raises(safehub.FetchError, match="not an allowed host"):
        load(f"{hub_repo.spec}:v1.0")


def test_plain_http_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEHUB_GITHUB_API_URL", "http://localhost:1/api")
    with pytest.raises(safehub.SpecError, match="https"):
        load("acme/models:v1.0")


# -- hubconf -------------------------------------------------------------------------------

def test_unknown_entrypoint(hub_repo: HubRepo) -> None:
    with pytest.raises(safehub.HubconfError, match="no callable entrypoint 'nope'"):
        load(f"{hub_repo.spec}:v1.0", "nope")


def test_repo_without_hubconf(make_hub_repo) -> None:  # type: ignore[no-untyped-def]
    repo: HubRepo = make_hub_repo("acme", "plain")
    repo.commit({}, delete=["hubconf.py"])
    repo.tag("v2")
    with pytest.raises(safehub.HubconfError, match="no hubconf.py"):
        load(f"{repo.spec}:v2")


def test_list_and_help(hub_repo: HubRepo, canary: Path) -> None:
    assert safehub.list(f"{hub_repo.spec}:v1.0", trust_repo=True) == ["echo", "tiny"]
    assert safehub.help(f"{hub_repo.spec}:v1.0", "tiny") == "A tiny linear model."


def test_list_needs_trust_too(hub_repo: HubRepo, canary: Path) -> None:
    with pytest.raises(safehub.UntrustedRepoError):
        safehub.list(f"{hub_repo.spec}:v1.0")
    assert runs(canary) == 0


def test_local_source(tmp_path: Path, canary: Path) -> None:
    from tests.conftest import HUBCONF

    (tmp_path / "local").mkdir()
    (tmp_path / "local/hubconf.py").write_text(HUBCONF)
    model = safehub.load(str(tmp_path / "local"), "tiny", 4, source="local")
    assert isinstance(model, torch.nn.Linear) and model.in_features == 4
    with pytest.raises(safehub.SpecError, match="Unknown source"):
        safehub.load(str(tmp_path / "local"), "tiny", source="gitlab")


def test_private_repo_archive_through_the_api_with_a_token(
    hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The web host 404s for private repos; with GITHUB_TOKEN the REST zipball is used."""
    server.fail_next(10, 404, f"/web/acme/models/zipball/{hub_repo.sha}")
    with pytest.raises(safehub.NotFoundError):
        load(f"{hub_repo.spec}:v1.0")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_private")
    server.clear_log()
    assert isinstance(load(f"{hub_repo.spec}:v1.0"), torch.nn.Linear)
    api_zip = [r for r in server.requests_log if r.path.endswith(f"/zipball/{hub_repo.sha}")
               and r.path.startswith("/api/")]
    assert api_zip and api_zip[0].authorization == "Bearer ghp_private"
    codeload = [r for r in server.requests_log if "/legacy.zip/" in r.path]
    assert codeload and codeload[0].authorization is None


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for p in root.rglob("*"):
        if p.name == "audit.jsonl":
            continue
        st = p.lstat()
        out[str(p)] = (st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    return out


@pytest.mark.parametrize("trust", [True, "check"])
def test_a_warm_load_writes_nothing_but_its_audit_line(
    hub_repo: HubRepo, isolated: Path, trust: object
) -> None:
    load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=trust)
    before = _snapshot(isolated)
    audit = next(isolated.rglob("audit.jsonl"))
    lines = len(audit.read_text().splitlines())
    load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=trust)
    assert _snapshot(isolated) == before
    assert len(audit.read_text().splitlines()) == lines + 1


# -- source="local": a folder on this machine, held to local_dirs ----------------------

def _local(tmp_path: Path, name: str = "local") -> Path:
    from tests.conftest import HUBCONF

    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "hubconf.py").write_text(HUBCONF)
    return folder


def _policy(isolated: Path, where: str, text: str) -> Path:
    path = isolated / where / "safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _apply(fix: str) -> None:
    """Apply a refusal's fix as written: 'in FILE, under [safehub], set: LINE'."""
    import re

    found = list(re.finditer(r"in (\S+)[^\n]*\n?\s*(local_dirs = \[.*\])", fix))
    assert found, fix
    for one in found:
        path = Path(one[1].rstrip(":,"))
        text = path.read_text() if path.exists() else ""
        lines = [ln for ln in text.splitlines() if not ln.startswith("local_dirs")]
        out = []
        for ln in lines:
            out.append(ln)
            if ln.strip() == "[safehub]":
                out.append(one[2])
        if "[safehub]" not in text:
            out = ["[safehub]", one[2], *out]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(out) + "\n")


def test_a_strict_policy_refuses_a_local_folder_and_its_fix_works(
    tmp_path: Path, isolated: Path, canary: Path
) -> None:
    folder = _local(tmp_path)
    _policy(isolated, "site", '[safehub]\nunknown_repos = "deny"\n')
    with pytest.raises(safehub.PolicyDenied, match="local load") as refused:
        safehub.load(str(folder), "tiny", source="local")
    assert runs(canary) == 0
    assert str(folder.resolve()) in str(refused.value)
    _apply(refused.value.hint or "")
    assert isinstance(safehub.load(str(folder), "tiny", source="local"), torch.nn.Linear)


def test_local_dirs_admit_subfolders_and_resolve_symlinks(
    tmp_path: Path, isolated: Path, canary: Path
) -> None:
    allowed = tmp_path / "models"
    inside = _local(allowed, "team/net")
    outside = _local(tmp_path, "elsewhere")
    _policy(isolated, "config", f'[safehub]\nlocal_dirs = ["{allowed}"]\n')
    assert isinstance(safehub.load(str(inside), "tiny", source="local"), torch.nn.Linear)
    link = allowed / "link"
    link.symlink_to(outside)  # a link inside the allowed folder to code outside it
    for spelled in (outside, link, allowed / "team/../../elsewhere"):
        with pytest.raises(safehub.PolicyDenied, match="not in local_dirs"):
            safehub.load(str(spelled), "tiny", source="local")
    sibling = _local(tmp_path, "models-evil")  # a prefix of the name is not a subfolder
    with pytest.raises(safehub.PolicyDenied, match="not in local_dirs"):
        safehub.load(str(sibling), "tiny", source="local")
    assert runs(canary) == 1


def test_a_final_site_deny_is_not_loosened_by_a_users_local_dirs(
    tmp_path: Path, isolated: Path, canary: Path
) -> None:
    folder = _local(tmp_path)
    site = _policy(isolated, "site", '[safehub]\nfinal = true\nunknown_repos = "deny"\n')
    _policy(isolated, "config", f'[safehub]\nlocal_dirs = ["{tmp_path}"]\n')
    with pytest.raises(safehub.PolicyDenied, match="local load") as refused:
        safehub.load(str(folder), "tiny", source="local")
    assert str(site) in (refused.value.hint or "")
    assert runs(canary) == 0
    # Both files must admit it: the site's own local_dirs, then the user's.
    site.write_text(f'[safehub]\nfinal = true\nunknown_repos = "deny"\n'
                    f'local_dirs = ["{tmp_path / "other"}"]\n')
    with pytest.raises(safehub.PolicyDenied, match="not in local_dirs"):
        safehub.load(str(folder), "tiny", source="local")
    site.write_text(f'[safehub]\nfinal = true\nlocal_dirs = ["{tmp_path}"]\n')
    assert isinstance(safehub.load(str(folder), "tiny", source="local"), torch.nn.Linear)


def test_a_local_load_is_audited(tmp_path: Path, isolated: Path) -> None:
    import json

    folder = _local(tmp_path)
    safehub.load(str(folder), "tiny", source="local")
    audit = next(isolated.rglob("audit.jsonl"))
    line = json.loads(audit.read_text().splitlines()[-1])
    assert line["source"] == "local" and str(folder.resolve()) in json.dumps(line)


def test_the_audit_user_is_the_processs_account_not_a_variable(
        tmp_path: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """USER and LOGNAME are the caller's to set: the audit line names the account of the
    process's effective uid (the uid where the system names none)."""
    import json
    import pwd

    from safehub import audit

    monkeypatch.setenv("USER", "someone-else")
    monkeypatch.setenv("LOGNAME", "someone-else")
    audit._who.cache_clear()
    try:
        safehub.load(str(_local(tmp_path)), "tiny", source="local")
    finally:
        audit._who.cache_clear()
    line = json.loads(next(isolated.rglob("audit.jsonl")).read_text().splitlines()[-1])
    try:
        expected = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        expected = str(os.geteuid())
    assert line["user"] == expected != "someone-else"


def test_a_repo_may_load_its_own_verified_folder_locally(
    make_hub_repo: object, isolated: Path, canary: Path
) -> None:
    """MiDaS-like: hubconf calls torch.hub.load(its own dir, source="local"); a strict
    policy that refuses other local folders lets the verified tree load itself."""
    nested = (
        "import os, torch\n"
        "def outer(*a, **k):\n"
        "    return torch.hub.load(os.path.dirname(__file__), 'tiny', 2, source='local')\n")
    repo: HubRepo = make_hub_repo("acme", "selfload")  # type: ignore[operator]
    from tests.conftest import HUBCONF

    repo.commit({"hubconf.py": HUBCONF + nested})
    repo.tag("v1")
    _policy(isolated, "site", '[safehub]\nunknown_repos = "deny"\n'
            f'[[allow]]\nrepo = "{repo.spec}"\n')
    model = safehub.load(f"{repo.spec}:v1", "outer", trust_repo=True)
    assert isinstance(model, torch.nn.Linear) and model.in_features == 2


def test_a_projects_deny_is_fixed_in_the_users_file(tmp_path: Path, isolated: Path,
                                                     canary: Path) -> None:
    """A project may not set local_dirs: the fix names the user's policy file."""
    folder = _local(tmp_path)
    Path("safehub.toml").write_text('[safehub]\nunknown_repos = "deny"\n')
    with pytest.raises(safehub.PolicyDenied, match="local load") as refused:
        safehub.load(str(folder), "tiny", source="local")
    hint = refused.value.hint or ""
    assert "safehub.toml" not in hint and str(isolated / "config/safehub/policy.toml") in hint
    _apply(hint)
    assert isinstance(safehub.load(str(folder), "tiny", source="local"), torch.nn.Linear)


def test_every_file_that_must_admit_a_folder_is_named_at_once(
    tmp_path: Path, isolated: Path, canary: Path
) -> None:
    folder = _local(tmp_path)
    site = _policy(isolated, "site", f'[safehub]\nlocal_dirs = ["{tmp_path / "a"}"]\n')
    user = _policy(isolated, "config", f'[safehub]\nlocal_dirs = ["{tmp_path / "b"}"]\n')
    with pytest.raises(safehub.PolicyDenied) as refused:
        safehub.load(str(folder), "tiny", source="local")
    assert str(site) in str(refused.value) and str(user) in str(refused.value)
    _apply(refused.value.hint or "")
    assert isinstance(safehub.load(str(folder), "tiny", source="local"), torch.nn.Linear)


def test_a_local_folder_that_does_not_exist_is_said_so(tmp_path: Path, isolated: Path) -> None:
    _policy(isolated, "site", '[safehub]\nunknown_repos = "deny"\n')
    with pytest.raises(safehub.HubconfError, match="does not exist"):
        safehub.load(str(tmp_path / "nowhere"), "tiny", source="local")
