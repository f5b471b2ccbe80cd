"""Resolution and provenance (steps 2 to 4: decide, resolve, prove): a ref names a branch
or a tag, however it is spelled; hex names a commit proven to be the repo's own, never a
fork's.

Most cases run against the in-memory source: no TLS, no git, no server. The section at the
end runs the attacks that need real git refs (hidden namespaces, a fork's commits abbreviated)
end to end, on the loopback GitHub; tests/test_admission.py holds every operation to the same
verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import safehub
from safehub.errors import NotFoundError, PinError, PolicyDenied, RepoMovedError
from safehub.hub import Hub
from safehub.policy import Policy
from safehub.spec import RepoSpec
from tests.conftest import HubRepo, runs
from tests.support import GitHubStandIn
from tests.support.memory import MemoryRepo, MemorySource


@pytest.fixture
def source() -> MemorySource:
    return MemorySource()


@pytest.fixture
def repo(source: MemorySource) -> MemoryRepo:
    repo = source.repo("Acme/Models")
    first = repo.commit(branch="main")
    repo.tag("v1.0", first)
    repo.commit(branch="main")
    repo.commit(branch="dev", parents=(first,))
    return repo


def hub(source: MemorySource, tmp_path: Path, policy: str = "") -> Hub:
    return Hub(policy=Policy.from_text(policy, "test.toml"), source=source,
               cache_dir=tmp_path / "cache", data_dir=tmp_path / "data",
               log_dir=tmp_path / "log")


def admit(h: Hub, spec: str) -> tuple[str, str, str]:
    r = h.admission.admit(RepoSpec.parse(spec)).resolved
    return r.commit, r.full_ref, r.proof


@pytest.mark.parametrize("asked", ["v1.0", "tags/v1.0", "refs/tags/v1.0"])
def test_a_tag_in_every_spelling_resolves_to_its_commit(source: MemorySource, repo: MemoryRepo,
                                                         tmp_path: Path, asked: str) -> None:
    commit, full, _ = admit(hub(source, tmp_path), f"acme/models:{asked}")
    assert commit == repo.tags["v1.0"] and full == "refs/tags/v1.0"


def test_no_ref_is_the_default_branch(source: MemorySource, repo: MemoryRepo,
                                      tmp_path: Path) -> None:
    commit, full, proof = admit(hub(source, tmp_path), "acme/models")
    assert commit == repo.heads["main"] and full == "refs/heads/main"
    assert "default branch main" in proof


def test_a_second_resolution_comes_from_the_cache(source: MemorySource, repo: MemoryRepo,
                                                  tmp_path: Path) -> None:
    h = hub(source, tmp_path)
    admit(h, "acme/models:v1.0")
    source.calls.clear()
    assert admit(hub(source, tmp_path), "acme/models:v1.0")[0] == repo.tags["v1.0"]
    assert source.calls == []


@pytest.mark.parametrize("length", [7, 12, 40])
def test_an_ancestor_of_a_branch_resolves_at_any_length(source: MemorySource, repo: MemoryRepo,
                                                        tmp_path: Path, length: int) -> None:
    first = repo.tags["v1.0"]
    commit, _, proof = admit(hub(source, tmp_path), f"acme/models:{first[:length]}")
    assert commit == first and "ancestor of branch main" in proof


def test_a_commit_only_on_another_branch_is_found_by_listing(source: MemorySource,
                                                              repo: MemoryRepo,
                                                              tmp_path: Path) -> None:
    commit, _, proof = admit(hub(source, tmp_path), f"acme/models:{repo.heads['dev']}")
    assert commit == repo.heads["dev"] and "dev" in proof


def test_a_fork_commit_served_under_the_parents_name_is_refused(
    source: MemorySource, repo: MemoryRepo, tmp_path: Path
) -> None:
    fork = source.repo("evil/models", fork_of=repo)
    planted = fork.commit(branch="main", message="a backdoor")
    h = hub(source, tmp_path)
    for asked in (planted, planted[:10]):
        with pytest.raises(PinError, match="may come from a fork"):
            admit(h, f"acme/models:{asked}")
    assert admit(h, f"evil/models:{planted}")[0] == planted  # from the fork itself: its own


def test_a_denied_repo_asks_the_source_nothing(source: MemorySource, repo: MemoryRepo,
                                               tmp_path: Path) -> None:
    h = hub(source, tmp_path, '[[deny]]\nrepo = "acme/*"\nreason = "no"\n')
    with pytest.raises(PolicyDenied):
        admit(h, "acme/models:v1.0")
    assert source.calls == []


def test_a_rename_is_followed_only_where_a_rule_names_the_new_repo(
    source: MemorySource, repo: MemoryRepo, tmp_path: Path
) -> None:
    source.moved["acme/old"] = "Acme/Models"
    with pytest.raises(RepoMovedError, match="moved to Acme/Models"):
        admit(hub(source, tmp_path), "acme/old:v1.0")
    h = hub(source, tmp_path / "again", '[[allow]]\nrepo = "acme/models"\n')
    commit, _, proof = admit(h, "acme/old:v1.0")
    assert commit == repo.tags["v1.0"] and "moved from acme/old" in proof


def test_a_ref_the_repo_does_not_have(source: MemorySource, repo: MemoryRepo,
                                      tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no branch or tag named 'v9'"):
        admit(hub(source, tmp_path), "acme/models:v9")


def test_the_policy_decides_again_on_what_was_resolved(source: MemorySource, repo: MemoryRepo,
                                                       tmp_path: Path) -> None:
    """A rule for tags only: the default branch (a spec without a ref) is refused once
    resolution says what it is."""
    h = hub(source, tmp_path, '[safehub]\nunknown_repos = "deny"\n'
            '[[allow]]\nrepo = "acme/models"\nrefs = ["refs/tags/*"]\n')
    assert admit(h, "acme/models:v1.0")[0] == repo.tags["v1.0"]
    with pytest.raises(PolicyDenied, match="main"):
        admit(h, "acme/models")


# -- end to end: real git refs on the loopback GitHub --------------------------------------

def load(spec: str, entrypoint: str = "echo", *args: object, **kwargs: object) -> object:
    return safehub.load(spec, entrypoint, *args, trust_repo=True, verbose=False, **kwargs)


@pytest.mark.parametrize("length", [4, 5, 6, 7, 12])
def test_an_abbreviated_sha_of_a_fork_commit_is_refused_at_any_length(
    hub_repo: HubRepo, make_hub_repo, canary: Path, length: int,  # type: ignore[no-untyped-def]
) -> None:
    fork = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"evil.py": "x = 1\n"})
    with pytest.raises((PinError, safehub.NotFoundError)):
        load(f"acme/models:{evil[:length]}")
    assert runs(canary) == 0


@pytest.mark.parametrize("length", [4, 7, 40])
def test_an_abbreviated_sha_of_the_repos_own_commit_loads(hub_repo: HubRepo,
                                                          length: int) -> None:
    old = hub_repo.sha
    hub_repo.commit({"later.py": "y = 2\n"})
    assert load(f"acme/models:{old[:length]}", "echo", 1) == ((1,), {})


def test_a_name_in_a_hidden_namespace_is_not_a_branch_or_tag(
    hub_repo: HubRepo, make_hub_repo, canary: Path,  # type: ignore[no-untyped-def]
) -> None:
    fork = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"hubconf.py": "raise SystemExit('evil')\n"})
    hub_repo.git("fetch", "-q", str(fork.path), f"{evil}:refs/hidden/evil")
    hub_repo.git("update-ref", "refs/pull/7/head", evil)
    for ref in ("hidden/evil", "evil"):
        with pytest.raises(safehub.NotFoundError, match="no branch or tag named"):
            load(f"acme/models:{ref}")
    assert runs(canary) == 0


@pytest.mark.parametrize("ref", ["v1.0", "tags/v1.0", "refs/tags/v1.0", "main", "heads/main",
                                 "refs/heads/main"])
def test_every_spelling_of_a_branch_or_tag_loads(hub_repo: HubRepo, ref: str) -> None:
    assert load(f"acme/models:{ref}", "echo", 2) == ((2,), {})


def test_a_tag_named_like_a_branch_is_asked_fully_qualified(
    hub_repo: HubRepo, server: GitHubStandIn
) -> None:
    load("acme/models:v1.0")
    asked = [r.path for r in server.requests_log if "/git/ref/" in r.path]
    assert asked == ["/api/v3/repos/acme/models/git/ref/tags/v1.0"]


def test_the_rename_rule_says_the_same_from_the_source_and_from_the_cache_record(
    source: MemorySource, repo: MemoryRepo, tmp_path: Path
) -> None:
    """One rule (``Resolver.follow``): followed where a rule names the new repo; refused
    with the same reason once the policy no longer names it (the cache's record)."""
    source.moved["acme/old"] = "Acme/Models"
    with pytest.raises(RepoMovedError) as online:
        admit(hub(source, tmp_path / "a"), "acme/old:v1.0")
    followed = hub(source, tmp_path / "b", '[[allow]]\nrepo = "acme/models"\n')
    admit(followed, "acme/old:v1.0")
    again = Hub(policy=Policy.from_text("", "test.toml"), source=source,
                cache_dir=tmp_path / "b" / "cache", data_dir=tmp_path / "b" / "data",
                log_dir=tmp_path / "b" / "log")
    with pytest.raises(RepoMovedError) as recorded:
        admit(again, "acme/old:v1.0")
    for err in (online.value, recorded.value):
        assert "repo-jacking" in err.message
        assert "none names acme/models" in err.message.lower()
        assert err.new.lower() == "acme/models"


def test_a_plan_that_stops_at_admission_fetches_nothing(
    source: MemorySource, repo: MemoryRepo, tmp_path: Path
) -> None:
    from safehub import pipeline

    h = hub(source, tmp_path)
    passed = pipeline.steps(h.context, RepoSpec.parse("acme/models:v1.0"),
                            pipeline.Plan(upto="admit"))
    assert passed.admitted.commit == repo.tags["v1.0"] and passed.tree is None
    assert not [c for c in source.calls if c[0] == "download_archive"]


def test_a_dry_run_with_nothing_cached_checks_no_signature(
    source: MemorySource, repo: MemoryRepo, tmp_path: Path
) -> None:
    from safehub import pipeline

    h = hub(source, tmp_path, '[[allow]]\nrepo = "acme/models"\nsignature = "required"\n'
            '[[allow.signers]]\nissuer = "https://token.actions.githubusercontent.com"\n'
            'identity = "https://github.com/acme/models/.github/workflows/r.yml@refs/tags/*"\n')
    passed = pipeline.steps(h.context, RepoSpec.parse("acme/models:v1.0"),
                            pipeline.Plan(fetch=False, dry_run=True))
    assert passed.tree is None and passed.signature is not None
    assert passed.signature.kind == "NOT_CHECKED" and passed.signature.error is None
    assert not [c for c in source.calls if c[0] == "download_archive"]
