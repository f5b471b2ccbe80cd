"""Hostile answers from the GitHub API end in a SafehubError, never a bare exception and
never code run: redirects that do not parse, leave the allowed hosts or drop to http; JSON
nested too deep, of the wrong shape or no JSON at all; lengths that lie; rate limits with
absurd reset times; and, from hypothesis, random shapes, statuses and headers on every
endpoint a load asks. The canary proves the repo's hubconf never ran. On the loopback
GitHub, with real git repos.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import safehub
from safehub.errors import SafehubError
from tests.conftest import HubRepo, runs
from tests.support import GitHubStandIn, Reply


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
        safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False)
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

    @settings(max_examples=60, deadline=None, derandomize=True,
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
