"""Every byte an attacker controls ends in a SafehubError, in time, inside the cache.

One section per class of attack (refs, weights redirects, records read back from disk,
time, the error contract of the HTTP layer, nested loads); each shows the attack refused
and the honest case working, on the loopback GitHub with real git repos.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

import safehub
from safehub.errors import CacheError, FetchError, PinError, PolicyDenied, SafehubError
from tests.conftest import HubRepo, runs
from tests.support import GitHubStandIn, Reply


def load(spec: str, entrypoint: str = "echo", *args: object, **kwargs: object) -> object:
    return safehub.load(spec, entrypoint, *args, trust_repo=True, verbose=False, **kwargs)


def policy(isolated: Path, text: str) -> None:
    path = isolated / "config/safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- 1. refs: hex is a commit proven to be the repo's own; a name is a branch or a tag ------

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


# -- 2. weights: every redirect hop matched against the policy, never http ----------------

WEIGHTED = '''\
import torch

dependencies = ["torch"]


def weighted(url):
    """Load a state dict from url."""
    return torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")
'''


@pytest.fixture
def weights(server: GitHubStandIn, make_hub_repo, isolated: Path):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"w": torch.ones(1)}, buf)
    server.add_static("/weights/good.pth", buf.getvalue())
    server.add_static("/other/good.pth", buf.getvalue())
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    policy(isolated, "[[allow]]\nrepo = 'acme/weighted'\n"
           f"weights = ['{server.api_url.rsplit('/api', 1)[0]}/weights/*']\n")
    return f"{server.api_url.rsplit('/api', 1)[0]}/weights/good.pth"


def test_an_allowed_weights_url_loads(weights: str) -> None:
    state = safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert list(state) == ["w"]


@pytest.mark.parametrize("target", ["foreign", "path", "http"])
def test_a_weights_redirect_outside_the_policy_is_refused(
    weights: str, server: GitHubStandIn, target: str
) -> None:
    location = {
        "foreign": f"{server.foreign_url}/weights/good.pth",
        "path": weights.replace("/weights/", "/other/"),
        "http": weights.replace("https://", "http://"),
    }[target]
    server.intercept("/weights/good.pth", Reply.redirect(location))
    with pytest.raises(SafehubError) as err:
        safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert isinstance(err.value, PolicyDenied | FetchError)
    assert not any(r.path == "/other/good.pth" or r.host == server.host("foreign")
                   for r in server.requests_log)


# -- 3. what is read back from disk is input -----------------------------------------------

def _repo_record(isolated: Path) -> Path:
    return next((isolated / "cache").rglob("repos/acme/models.json"))


def test_a_cache_record_cannot_name_a_path(hub_repo: HubRepo, isolated: Path) -> None:
    load("acme/models:v1.0")
    record = _repo_record(isolated)
    data = json.loads(record.read_text())
    data["refs"]["v1.0"]["commit"] = "../../x"
    record.write_text(json.dumps(data))
    sentinel = record.parents[3] / "x-keep"
    sentinel.mkdir()
    with pytest.raises(CacheError, match="malformed"):
        load("acme/models:v1.0")
    assert sentinel.is_dir()


@pytest.mark.parametrize("text", ['{"refs": []}', "[1, 2]", '{"refs": {"v1.0": 3}}',
                                  '{"commits": {"abc": {"tree": 1}}}', "{" * 5000, "not json",
                                  '{"moved_to": "../../evil"}'])
def test_a_malformed_cache_record_is_a_cache_error(hub_repo: HubRepo, isolated: Path,
                                                   text: str) -> None:
    load("acme/models:v1.0")
    _repo_record(isolated).write_text(text)
    with pytest.raises(CacheError):
        load("acme/models:v1.0")


@pytest.mark.parametrize("text", ["[]", '{"digest": 3}', '{"scans": []}', "{" * 5000, "x"])
def test_a_malformed_verification_record_is_as_if_absent(
    hub_repo: HubRepo, isolated: Path, text: str
) -> None:
    load("acme/models:v1.0")
    for path in (isolated / "data").rglob("verified/*.json"):
        path.write_text(text)
    assert load("acme/models:v1.0", "echo", 3) == ((3,), {})  # re-verified, then served


@pytest.mark.parametrize("text", ['{"consents": {}}', "[]", "{" * 5000])
def test_a_malformed_consent_record_is_a_cache_error(hub_repo: HubRepo, isolated: Path,
                                                     text: str) -> None:
    load("acme/models:v1.0")
    for path in (isolated / "data").rglob("trust/acme/models.json"):
        path.write_text(text)
    with pytest.raises(CacheError, match="trust record"):
        load("acme/models:v1.0")


@pytest.mark.parametrize("field", ["commit", "digest", "tree", "level"])
def test_a_malformed_cache_entry_is_an_integrity_error(hub_repo: HubRepo, isolated: Path,
                                                       field: str) -> None:
    load("acme/models:v1.0")
    entry = next((isolated / "cache").rglob("commits/*/entry.json"))
    entry.parent.chmod(0o755)
    entry.chmod(0o644)
    data = json.loads(entry.read_text())
    data[field] = "../../etc" if field != "level" else ["x"]
    entry.write_text(json.dumps(data))
    with pytest.raises(safehub.IntegrityError):
        load("acme/models:v1.0")


# -- 4. time: every request has a total deadline; pages are bounded -----------------------

def test_a_server_that_drips_is_cut_off_at_the_deadline(
    hub_repo: HubRepo, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAFEHUB_TIMEOUT", "1.5")
    server.drip(server.codeload_url, chunk_size=1, delay=0.1)  # bytes keep coming, slowly
    started = time.monotonic()
    with pytest.raises(FetchError, match="longer than 1.5 s"):
        load("acme/models:v1.0")
    assert time.monotonic() - started < 15  # one deadline per attempt, not forever


def test_ref_listing_is_bounded(hub_repo: HubRepo, make_hub_repo,  # type: ignore[no-untyped-def]
                                server: GitHubStandIn) -> None:
    fork = make_hub_repo("mallory", "models", fork_of=hub_repo, tag=None)
    evil = fork.commit({"evil.py": "x = 1\n"})
    page = [{"name": f"b{i}", "commit": {"sha": "f" * 40, "url": "x"}} for i in range(100)]

    def endless(record: object) -> Reply:
        return Reply.json(page, headers=[("Link", '<https://x/?page=2>; rel="next"')])

    server.intercept(lambda r: "/branches" in r.path or "/tags?" in r.path, endless)
    started = time.monotonic()
    with pytest.raises(PinError):
        load(f"acme/models:{evil}")
    listed = [r for r in server.requests_log if "/branches" in r.path or "/tags?" in r.path]
    assert len(listed) <= 20 and len(server.requests_log) < 60
    assert time.monotonic() - started < 30


# -- 5. the SafehubError contract of the HTTP layer and JSON -----------------------------

@pytest.mark.parametrize("reply", [
    Reply(302, b"", (("Location", "http://[::1"),)),                     # unparsable
    Reply(302, b"", (("Location", "https://evil.example/x"),)),         # a host not allowed
    Reply(302, b"", (("Location", "http://127.0.0.1/x"),)),              # a downgrade
    Reply(200, b"[" * 100_000 + b"]" * 100_000, (("Content-Type", "application/json"),)),
    Reply(200, b'{"ref": 1, "object": [1]}', (("Content-Type", "application/json"),)),
    Reply(200, b"\xff\xfe not json"),
    Reply(200, b"{}", (("Content-Length", "99999999999999999999999"),)),
    Reply(403, b'{"message": "API rate limit exceeded"}', (("x-ratelimit-remaining", "0"),
                                                         ("x-ratelimit-reset", "9" * 40))),
], ids=["bad-location", "foreign-host", "http", "deep-json", "wrong-shape", "not-json",
        "huge-length", "rate-limit"])
def test_hostile_api_answers_end_in_a_safehub_error(
    hub_repo: HubRepo, server: GitHubStandIn, canary: Path, reply: Reply,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAFEHUB_TIMEOUT", "1")  # a body shorter than announced stalls
    server.intercept("/api/v3/repos/acme/models/git/ref/tags/v1.0", reply)
    with pytest.raises(SafehubError):
        load("acme/models:v1.0")
    assert runs(canary) == 0


def test_random_api_answers_end_in_a_safehub_error(
    hub_repo: HubRepo, server: GitHubStandIn, canary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shapes, nesting, sizes and headers from hypothesis, on every endpoint of a load."""
    monkeypatch.setenv("SAFEHUB_TIMEOUT", "2")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20)
        | st.sampled_from([hub_repo.sha, "main", "v1.0", "commit", "tag", "refs/tags/v1.0"]),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
            st.sampled_from(["sha", "ref", "object", "type", "tree", "commit", "status",
                             "default_branch", "full_name", "merge_base_commit", "x"]),
            inner, max_size=5),
        max_leaves=20)
    headers = st.lists(st.tuples(
        st.sampled_from(["Content-Type", "Location", "x-ratelimit-remaining", "Link",
                         "Retry-After"]),
        st.sampled_from(["application/json", "0", "https://127.0.0.5/x", "-1", "abc",
                         "http://x"])), max_size=2)
    endpoints = st.sampled_from(["/git/ref/tags/v1.0", "/git/commits/", "/zipball/"])

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(endpoints, st.sampled_from([200, 301, 302, 400, 403, 404, 422, 500]), json_values,
           headers)
    def attack(endpoint: str, status: int, body: object, extra: list[tuple[str, str]]) -> None:
        reply = Reply(status, json.dumps(body).encode(), tuple(extra))
        rule = server.intercept(lambda r: endpoint in r.path, reply)
        try:
            with pytest.raises(SafehubError):
                safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False,
                             force_reload=True)
        finally:
            rule.remove()

    attack()
    assert runs(canary) == 0


# -- 9. nested loads: through safehub, with the same policy; the repo grants nothing ----------

NESTING = '''\
import torch

dependencies = ["torch"]


def outer(spec):
    """Load another hub repo, trusting it on the user's behalf."""
    return torch.hub.load(spec, "echo", "nested", trust_repo=True)
'''


def test_a_nested_load_goes_through_safehub_and_its_trust_repo_grants_nothing(
    make_hub_repo, isolated: Path, canary: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    make_hub_repo("acme", "outer", {"hubconf.py": NESTING})
    make_hub_repo("other", "inner")
    policy(isolated, "[[allow]]\nrepo = 'acme/outer'\n")
    with pytest.raises(safehub.UntrustedRepoError, match="other/inner"):
        safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    assert runs(canary) == 0  # the inner repo's hubconf never ran
    policy(isolated, "[[allow]]\nrepo = 'acme/outer'\n[[deny]]\nrepo = 'other/*'\n")
    with pytest.raises(PolicyDenied, match="other/inner"):
        safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    policy(isolated, "[[allow]]\nrepo = 'acme/outer'\n[[allow]]\nrepo = 'other/inner'\n")
    result = safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    assert result == (("nested",), {}) and runs(canary) == 1
    audit = next(isolated.rglob("audit.jsonl")).read_text().splitlines()
    assert any(json.loads(line)["repo"] == "other/inner" and
               json.loads(line)["decision"] == "allow" for line in audit)
