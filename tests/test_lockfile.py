"""Lockfile pinning, moved tags, forks, renames, offline and fleet loading; a lockfile
entry whose ``repo`` names another repo is a move, not a free pass; an invalid lockfile is
refused and the fix printed for it writes a valid one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import safehub
from safehub import operations
from safehub.cli import main
from safehub.errors import OfflineError, PinError, PolicyDenied, RepoMovedError
from safehub.store.cache.integrity import scan_entries
from safehub.store.lockfile import Lockfile
from tests.conftest import HUBCONF, HubRepo, child_pythonpath, needs_torch, runs
from tests.helpers_load import cli, policy
from tests.support import GitHubStandIn

NEW_HUBCONF = "import os\nopen(os.environ['SAFEHUB_TEST_CANARY'],'a').write('new\\n')\n" \
              "def tiny():\n    return 'new'\n"


def lock(*args: str) -> int:
    return main(["lock", *args])


def api_calls(server: GitHubStandIn) -> int:
    return server.count(server.api_url)


def canary_lines(canary: Path) -> list[str]:
    return canary.read_text().splitlines() if canary.exists() else []


def test_lockfile_round_trip_is_stable_byte_for_byte(
    hub_repo: HubRepo, make_hub_repo, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    other: HubRepo = make_hub_repo("Zeta", "Other")
    assert lock(f"{other.spec}:v1.0", f"{hub_repo.spec}:v1.0", hub_repo.spec,
                f"{hub_repo.spec}:{hub_repo.sha}") == 0
    path = Path.cwd() / "safehub.lock"
    text = path.read_text()
    assert text.startswith("# safehub.lock")
    specs = [line.split('"')[1] for line in text.splitlines() if line.startswith("spec = ")]
    assert specs == sorted(specs) == [
        "acme/models", f"acme/models:{hub_repo.sha}", "acme/models:v1.0", "zeta/other:v1.0"]
    assert Lockfile.load(path).dumps() == text
    assert lock(f"{hub_repo.spec}:v1.0") == 0  # already locked: kept, file unchanged
    assert path.read_text() == text
    spec_list = tmp_path / "specs.txt"
    spec_list.write_text(f"# models we use\n{hub_repo.spec}:v1.0  # the release\n")
    assert lock("--from", str(spec_list)) == 0
    assert path.read_text() == text


def test_locked_cold_load_makes_no_api_call(hub_repo: HubRepo, server: GitHubStandIn) -> None:
    assert lock(f"{hub_repo.spec}:v1.0") == 0
    safehub.Hub().cache.clear()
    server.clear_log()
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert api_calls(server) == 0
    assert [r.path.split("/")[-2] for r in server.requests_log] == ["zipball", "legacy.zip"]
    server.clear_log()
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny")
    assert server.count() == 0


def test_moved_tag_with_a_warm_cache(hub_repo: HubRepo, canary: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    locked = hub_repo.sha
    assert lock(f"{hub_repo.spec}:v1.0") == 0
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    moved = hub_repo.commit({"hubconf.py": NEW_HUBCONF})
    hub_repo.tag("v1.0")  # the tag now names other code (tj-actions style)
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny")  # keeps the locked commit
    with pytest.raises(PinError) as err:
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", force_reload=True)
    text = str(err.value)
    assert locked in text and moved in text and "safehub lock --upgrade acme/models:v1.0" in text
    assert "new" not in canary_lines(canary)
    capsys.readouterr()
    assert lock("--check") == 1
    out = capsys.readouterr().out
    assert "MOVED acme/models:v1.0" in out
    said, fix = out.split("fix: ")[1].splitlines()[:2]
    assert said == "run if the move is expected (review the new commit first):"
    assert fix.strip() == "safehub lock --upgrade acme/models:v1.0"
    fix = fix.strip()
    assert main(fix.split()[1:]) == 0  # moving the pin on purpose, as the fix says
    assert f"upgraded  acme/models:v1.0 {moved} (was {locked})" in capsys.readouterr().out
    assert safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True) == "new"


def test_moved_tag_without_a_warm_cache(hub_repo: HubRepo, canary: Path) -> None:
    assert lock(f"{hub_repo.spec}:v1.0") == 0
    hub_repo.commit({"hubconf.py": NEW_HUBCONF})
    hub_repo.tag("v1.0")
    model = safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert model.__class__.__name__ == "Linear"  # the locked commit's code, not the new one
    assert canary_lines(canary) == ["ran"]


def test_pin_commit_policy(isolated: Path, hub_repo: HubRepo, server: GitHubStandIn) -> None:
    policy = isolated / "site/safehub/policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text("[[allow]]\nrepo = 'acme/*'\npin = 'commit'\n")
    server.clear_log()
    with pytest.raises(PolicyDenied, match="safehub lock"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny")
    assert server.count() == 0
    assert safehub.load(f"{hub_repo.spec}:{hub_repo.sha}", "echo") == ((), {})
    assert lock(f"{hub_repo.spec}:v1.0") == 0
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo") == ((), {})


def test_fork_commit_cannot_be_locked_under_the_parent(
    hub_repo: HubRepo, make_hub_repo  # type: ignore[no-untyped-def]
) -> None:
    fork: HubRepo = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"hubconf.py": NEW_HUBCONF})
    with pytest.raises(PinError, match="fork"):
        operations.lock(safehub.Hub(), [f"{hub_repo.spec}:{evil}"])
    assert not (Path.cwd() / "safehub.lock").exists()


def test_renamed_repo_is_refused_unless_the_policy_names_the_new_one(
    isolated: Path, hub_repo: HubRepo, server: GitHubStandIn, canary: Path
) -> None:
    server.rename_repo("acme", "models", "acme-labs", "models")
    with pytest.raises(RepoMovedError) as err:
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert "acme-labs/models" in str(err.value) and "repo-jacking" in str(err.value)
    assert runs(canary) == 0
    policy = isolated / "site/safehub/policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text("[[allow]]\nrepo = 'acme-labs/models'\n")
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo") == ((), {})
    # unknown_repos = "allow" is not naming it: still refused
    policy.write_text("[safehub]\nunknown_repos = 'allow'\n")
    safehub.Hub().cache.clear()
    with pytest.raises(RepoMovedError):
        safehub.load(f"{hub_repo.spec}:v1.0", "echo")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any outgoing connection fails loudly."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a socket connected in offline mode: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_offline_warm_and_cold(hub_repo: HubRepo, make_hub_repo,  # type: ignore[no-untyped-def]
                               monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
                               ) -> None:
    other: HubRepo = make_hub_repo("acme", "other", {"other.py": "X = 1\n"})
    assert lock(f"{hub_repo.spec}:v1.0", f"{other.spec}:v1.0") == 0
    safehub.Hub().cache.remove(other.sha)  # locking fetched it; make it cold again
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    safehub.load(f"{hub_repo.spec}:{hub_repo.sha}", "tiny", trust_repo=True)
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    request.getfixturevalue("no_network")
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny")      # locked + cached
    safehub.load(f"{hub_repo.spec}:{hub_repo.sha}", "tiny")  # pinned + cached
    with pytest.raises(OfflineError, match="safehub prefetch"):
        safehub.load(f"{other.spec}:v1.0", "tiny", trust_repo=True)  # locked, not cached
    with pytest.raises(OfflineError, match="safehub prefetch"):
        safehub.load(f"{hub_repo.spec}:main", "tiny", trust_repo=True)  # not resolved yet
    # `check` says what the load would: cached answers LOAD, not cached a refusal (exit 1)
    assert main(["check", f"{hub_repo.spec}:v1.0"]) == 0
    assert main(["check", f"{other.spec}:v1.0", "--json"]) == 1


def _snapshot(root: Path) -> list[tuple[str, int, int]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            st = os.lstat(os.path.join(dirpath, name))
            out.append((os.path.join(dirpath, name), st.st_mtime_ns, st.st_size))
    return sorted(out)


READER = """
import sys, safehub
sys.stdin.readline()
prepared = safehub.Hub().prepare(sys.argv[1], trust_repo=True, verbose=False)
print("ok", prepared.tree.digest)
"""


@pytest.mark.slow
def test_read_only_shared_cache_read_by_32_processes(
    hub_repo: HubRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared-cache"
    assert lock(f"{hub_repo.spec}:v1.0") == 0
    assert main(["prefetch", "--cache-dir", str(shared), "--read-only"]) == 0
    entry = safehub.Hub(cache_dir=shared).cache.lookup(hub_repo.sha)
    assert entry is not None
    recorded = safehub.Hub().verified.get(hub_repo.sha)
    assert recorded is not None  # prefetch verified it: sealing kept the recorded scan valid
    assert recorded.scans[str(entry.path)] == scan_entries(entry.path)
    assert not (shared / "v1").stat().st_mode & 0o222
    before = _snapshot(shared)
    env = {**os.environ, "SAFEHUB_CACHE_DIR": str(shared), "SAFEHUB_OFFLINE": "1",
           "PYTHONPATH": child_pythonpath()}
    procs = [subprocess.Popen([sys.executable, "-c", READER, f"{hub_repo.spec}:v1.0"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(32)]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs[0][1]
    assert len({out for out, _ in outs}) == 1 and outs[0][0].startswith("ok sha256:")
    assert _snapshot(shared) == before  # not a byte, not a timestamp written
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(shared))
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=True) == ((), {})
    assert _snapshot(shared) == before
    subprocess.run(["chmod", "-R", "u+w", str(shared)], check=True)


def test_a_sealed_cache_is_only_read_even_by_root(
    hub_repo: HubRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folder modes do not stop root: the seal marker does. Its owner adds to it with
    `prefetch --read-only`, which seals it again."""
    shared = tmp_path / "shared-cache"
    v1 = hub_repo.sha
    hub_repo.commit({"more.py": "x = 1\n"})
    hub_repo.tag("v2.0")
    assert main(["prefetch", "--cache-dir", str(shared), "--read-only",
                 f"{hub_repo.spec}:v1.0"]) == 0
    before = _snapshot(shared)
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(shared))
    with pytest.raises(safehub.CacheError, match="sealed") as refused:
        safehub.load(f"{hub_repo.spec}:v2.0", "echo", trust_repo=True)
    assert "prefetch --read-only" in (refused.value.hint or "")
    assert main(["cache", "clear"]) == 1
    assert main(["trust", f"{hub_repo.spec}:{v1}"]) == 0  # by sha: nothing recorded in it
    assert _snapshot(shared) == before  # not a byte written, whoever runs it
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=True) == ((), {})
    assert main(["prefetch", "--cache-dir", str(shared), "--read-only",
                 f"{hub_repo.spec}:v2.0", "acme/nosuch:v1"]) == 1  # one fails: sealed again
    assert (shared / "v1/SEALED").exists() and not (shared / "v1").stat().st_mode & 0o222
    assert main(["prefetch", "--cache-dir", str(shared), "--read-only",
                 f"{hub_repo.spec}:v2.0"]) == 0
    assert safehub.load(f"{hub_repo.spec}:v2.0", "echo", trust_repo=True) == ((), {})
    assert (shared / "v1/SEALED").exists() and not (shared / "v1").stat().st_mode & 0o222
    subprocess.run(["chmod", "-R", "u+w", str(shared)], check=True)


def test_untrusted_mirror_is_checked_against_the_lockfile(
    hub_repo: HubRepo, server: GitHubStandIn, tmp_path: Path, canary: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mirror = tmp_path / "mirror"
    assert lock(f"{hub_repo.spec}:v1.0") == 0
    assert main(["prefetch", "--mirror", str(mirror)]) == 0
    archive = mirror / "acme/models/zipball" / hub_repo.sha
    assert archive.is_file()
    server.add_static(f"/mirror/acme/models/zipball/{hub_repo.sha}", archive.read_bytes())
    monkeypatch.setenv("SAFEHUB_GITHUB_URL", f"https://localhost:{server.port}/mirror")
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "node-cache"))
    server.clear_log()
    safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert [r.path for r in server.requests_log] == [
        f"/mirror/acme/models/zipball/{hub_repo.sha}"]  # one request, no API
    # The mirror now serves a tampered archive (same commit in its zip comment).
    from tests.test_load import _rezip

    evil = b"import os\nopen(os.environ['SAFEHUB_TEST_CANARY'],'a').write('evil\\n')\n"
    server.add_static(f"/mirror/acme/models/zipball/{hub_repo.sha}",
                      _rezip(archive.read_bytes(), {"hubconf.py": evil}))
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "node2-cache"))
    with pytest.raises(safehub.IntegrityError, match="pins sha256:"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert "evil" not in canary_lines(canary)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version = 1\n[[repo]\n", "not valid TOML"),
        ("version = 2\n", "version"),
        ("version = 1\n[[repo]]\nspec = 'a/b:v1'\ncommit = 'xyz'\ntree = 'x'\ndigest = 'y'\n",
         "repo[0].commit"),
        (f"version = 1\n[[repo]]\nspec = 'A/B:v1'\ncommit = '{'a' * 40}'\ntree = '{'b' * 40}'\n"
         f"digest = 'sha256:{'c' * 64}'\n", "must be written 'a/b:v1'"),
        (f"version = 1\n[[repo]]\nspec = 'a/b:v1'\ncommit = '{'a' * 40}'\ntree = '{'b' * 40}'\n"
         f"digest = 'sha256:{'c' * 64}'\npinned = true\n", "repo[0].pinned"),
        ("version = 1\n" + 2 * (f"[[repo]]\nspec = 'a/b:v1'\ncommit = '{'a' * 40}'\n"
         f"tree = '{'b' * 40}'\ndigest = 'sha256:{'c' * 64}'\n"), "twice"),
    ],
)
def test_malformed_lockfile_fails_closed(hub_repo: HubRepo, canary: Path, text: str,
                                         message: str) -> None:
    (Path.cwd() / "safehub.lock").write_text(text)
    with pytest.raises(PinError) as err:
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)
    assert message in str(err.value) and "safehub.lock" in str(err.value)
    assert runs(canary) == 0


def test_named_lockfile_must_exist(hub_repo: HubRepo, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEHUB_LOCKFILE", str(tmp_path / "missing.lock"))
    with pytest.raises(PinError, match="does not exist"):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", trust_repo=True)


def test_a_followed_rename_keeps_the_new_names_rules_on_warm_loads(
    isolated: Path, hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.rename_repo("acme", "models", "acme-labs", "models")
    policy = isolated / "site/safehub/policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text("[[allow]]\nrepo = 'acme-labs/models'\n")
    monkeypatch.setenv("CI", "true")
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo") == ((), {})  # cold
    assert safehub.load(f"{hub_repo.spec}:v1.0", "echo") == ((), {})  # warm: same rules
    policy.write_text("[[allow]]\nrepo = 'acme-labs/models'\n[[deny]]\nrepo = 'acme-labs/*'\n")
    with pytest.raises(RepoMovedError):
        safehub.load(f"{hub_repo.spec}:v1.0", "echo")


def test_untrust_a_locked_spec_and_refuse_to_guess(
    hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lock(f"{hub_repo.spec}:v1.0") == 0
    assert main(["trust", f"{hub_repo.spec}:v1.0"]) == 0
    safehub.Hub().cache.clear()  # no cached resolution left: only the lockfile knows
    assert main(["untrust", f"{hub_repo.spec}:v1.0"]) == 0
    assert "forgot 1" in capsys.readouterr().out
    monkeypatch.setenv("CI", "true")
    with pytest.raises(safehub.UntrustedRepoError):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny")
    assert main(["untrust", f"{hub_repo.spec}:main"]) == 1  # unknown commit: no silent no-op


def test_any_lockfile_document_is_read_or_refused_with_a_pin_error() -> None:
    """Whatever the file holds, reading it gives validated entries that write back to the
    same file, or a PinError naming the fault: never a bare exception."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from safehub.store.lockfile import Lockfile, parse

    sha, sha2, digest = "a" * 40, "b" * 40, "sha256:" + "c" * 64
    values = st.one_of(
        st.sampled_from([sha, sha2, digest, "v1", "a/b:v1", "A/B:v1", "a/b", "", "sha256:x",
                         "https://h/w.pth", "d" * 64, "tree", "per-file", "Org/Repo"]),
        st.integers(-1, 3), st.booleans(), st.none(),
    )
    keys = st.sampled_from(["spec", "commit", "tree", "digest", "ref", "proof", "level",
                            "signer", "weights", "repo", "extra"])
    weight = st.dictionaries(st.sampled_from(["url", "sha256", "x"]), values, max_size=3)
    entry = st.dictionaries(keys, st.one_of(values, st.lists(weight, max_size=2)), max_size=9)
    base = {"spec": "a/b:v1", "commit": sha, "tree": sha2, "digest": digest}
    mutated = st.builds(lambda b, m, drop: {**{k: v for k, v in b.items() if k not in drop}, **m},
                        st.just(base), entry, st.sets(st.sampled_from(list(base)), max_size=2))
    valid = st.builds(lambda ref, repo: {**base, "spec": f"a/b:{ref}", "ref": ref, "repo": repo},
                      st.sampled_from(["v1", "v2", "main"]), st.sampled_from(["", "A/b"]))
    document = st.fixed_dictionaries({
        "version": st.one_of(st.just(1), st.just(1), values),  # mostly the right version
        "repo": st.lists(st.one_of(mutated, valid, valid), max_size=3)})
    accepted = []

    @settings(max_examples=400, deadline=None, derandomize=True, database=None)
    @given(document)
    def check(raw: dict[str, object]) -> None:
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib

        try:
            entries = parse(raw, Path("x.lock"))
        except PinError:
            return
        accepted.append(entries)
        text = Lockfile(Path("x.lock"), entries).dumps()
        again = parse(tomllib.loads(text), Path("x.lock"))
        assert again == sorted(entries, key=lambda e: e.spec)

    check()  # the same examples every run: whether it is vacuous cannot change by chance
    assert sum(1 for e in accepted if e) > 5, len(accepted)  # not vacuous


@pytest.mark.parametrize("text", ["", "version = 1\n"])
def test_an_empty_lockfile_says_what_is_missing_and_how_to_write_it(
    hub_repo: HubRepo, text: str
) -> None:
    Path("safehub.lock").write_text(text)
    if text:
        assert safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=True) == ((), {})
        return  # a lockfile with no entries is valid: nothing is locked
    with pytest.raises(safehub.PinError) as refused:
        safehub.load(f"{hub_repo.spec}:v1.0", "echo", trust_repo=True)
    assert "version: required key is missing" in str(refused.value)
    assert "{" not in (refused.value.hint or "") and "lock --rewrite" in (refused.value.hint or "")


# -- a lockfile entry naming another repo is a move ------------------------------------------

def test_a_lockfile_entry_naming_another_repo_is_refused_and_reported(
    make_hub_repo, isolated: Path, canary: Path, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    make_hub_repo("acme", "models")
    make_hub_repo("evil", "x", {"hubconf.py": HUBCONF + "\nX = 'evil'\n"})
    policy(isolated, "[[allow]]\nrepo = 'acme/models'\npin = 'commit'\n"
                     "[[allow]]\nrepo = 'evil/x'\n")
    assert main(["lock", "evil/x:v1.0", "--lockfile", "evil.lock"]) == 0
    assert main(["lock", "acme/models:v1.0"]) == 0
    assert safehub.load("acme/models:v1.0", "echo", 1, verbose=False) == ((1,), {})
    honest = Path("safehub.lock").read_text()
    evil = Path("evil.lock").read_text()
    forged = honest
    for key in ("commit", "tree", "digest"):
        forged = forged.replace(_field(honest, key), _field(evil, key))
    forged = forged.replace('repo = "acme/models"', 'repo = "evil/x"')
    assert forged != honest
    Path("safehub.lock").write_text(forged)
    policy(isolated, "[[allow]]\nrepo = 'acme/models'\npin = 'commit'\n")
    before = runs(canary)
    with pytest.raises(RepoMovedError, match="evil/x"):
        safehub.load("acme/models:v1.0", "echo", verbose=False)
    assert runs(canary) == before
    capsys.readouterr()
    assert main(["lock", "--check"]) == 1
    assert "locked to code from evil/x" in capsys.readouterr().out


def _field(text: str, key: str) -> str:
    for line in text.splitlines():
        if line.startswith(f"{key} = "):
            return line.split('"')[1]
    raise AssertionError(key)


# -- an invalid lockfile's fix writes a valid one (it looped: `safehub lock` re-read it) -----

SHA, DIGEST = "a" * 40, "sha256:" + "c" * 64


@needs_torch
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
    from safehub._internal.fixes import render
    from tests.test_fixes import apply_fix  # it needs torch: imported where it is used

    path = Path("safehub.lock") if named_by == "cwd" else tmp_path / "team.lock"
    path.write_text(text)
    extra = [] if named_by == "cwd" else ["--lockfile", str(path)]
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json", *extra)
    report = json.loads(out)
    assert rc == 1 and report["error"] == "PinError" and named in report["why"]
    if "[[repo" not in text:  # nothing to re-lock: the fix says what to write
        assert "safehub lock --rewrite" in report["fix"] and "SPEC..." in report["fix"]
        return
    hub = safehub.Hub() if named_by == "cwd" else safehub.Hub(lockfile=path)
    fix = operations.check(hub, "acme/models:v1.0").fix  # the report's fix, as data
    assert fix is not None and render(fix) == report["fix"]
    apply_fix(fix)  # the first alternative: `safehub lock --rewrite ...`
    capsys.readouterr()
    rc, out, _ = cli(capsys, "check", "acme/models:v1.0", "--json", *extra)
    assert rc == 1 and json.loads(out)["error"] is None  # past the lockfile: not trusted yet
    assert f"commit = \"{hub_repo.sha}\"" in path.read_text()


@needs_torch
def test_lock_rewrite_needs_specs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "lock", "--rewrite")
    assert rc == 2 and "--rewrite needs the specs" in err


def test_weight_pins_carry_size_and_a_hub_files_commit(tmp_path: Path) -> None:
    sha, commit = "ab" * 32, "cd" * 20
    text = ('version = 1\n\n[[repo]]\nspec = "o/r:v1"\ncommit = "' + commit + '"\n'
            'tree = "' + commit + '"\ndigest = "sha256:' + sha + '"\n\n'
            '[[repo.weights]]\nurl = "https://example.org/w.pt"\nsha256 = "' + sha + '"\n'
            'size = 7\n\n[[repo.weights]]\nurl = "hf://org/name@main/model.safetensors"\n'
            'sha256 = "' + sha + '"\nsize = 0\ncommit = "' + commit + '"\n')
    path = tmp_path / "safehub.lock"
    path.write_text(text)
    locked = Lockfile.load(path)
    pins = next(iter(locked.entries.values())).weights
    assert [(p.url, p.size, p.commit) for p in pins] == [
        ("https://example.org/w.pt", 7, ""), ("hf://org/name@main/model.safetensors", 0, commit)]
    tables = "".join(text.partition("\n\n[[repo.weights]]")[1:])
    assert Lockfile(path, locked.entries.values()).dumps().endswith(tables)
    for bad, says in (('size = -1', "size"), ('size = "7"', "size"),
                      ('commit = "' + commit + '"', "only for hf://"),
                      ('commit = "main"', "40-hex"), ('mirror = "x"', "nothing else")):
        path.write_text(text.replace('size = 7', bad))
        with pytest.raises(PinError) as e:
            Lockfile.load(path)
        assert says in str(e.value.details)
