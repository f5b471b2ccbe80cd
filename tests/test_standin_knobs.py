"""The stand-in's knobs for attack and failure tests: intercepts, slow drips, rate limits,
failures, cut-short and altered archives. Each is shown doing what its docstring says."""

from __future__ import annotations

import concurrent.futures
import http.client
import itertools
import json
import ssl
import threading
from pathlib import Path

import pytest
import requests

from tests.conftest import World, fetch
from tests.support import ROLES, Drip, GitHubStandIn, Reply, RequestRecord


def raw_get(gh: GitHubStandIn, host: str, path: str) -> http.client.HTTPResponse:
    """A GET with http.client, which hands back headers exactly as they came."""
    context = ssl.create_default_context(cafile=str(gh.ca_cert))
    conn = http.client.HTTPSConnection(host, gh.port, context=context, timeout=10)
    conn.request("GET", path)
    return conn.getresponse()


# -- failures and rate limits ----------------------------------------------------------------


def test_fail_next(gh: GitHubStandIn) -> None:
    url = f"{gh.api_url}/repos/Org/Vision"
    gh.fail_next(2, 502, path_prefix="/api/v3/repos/Org")
    assert fetch(gh, f"{gh.api_url}/repos/mallory/vision").status_code == 200  # other prefix
    assert [fetch(gh, url).status_code for _ in range(3)] == [502, 502, 200]
    gh.fail_next(1)
    assert fetch(gh, f"{gh.web_url}/Org/Vision/zipball/v1").status_code == 503
    assert fetch(gh, url).status_code == 200


def test_primary_rate_limit(gh: GitHubStandIn) -> None:
    gh.rate_limit(True, reset_epoch=1_900_000_000)
    limited = fetch(gh, f"{gh.api_url}/repos/Org/Vision")
    assert limited.status_code == 403
    assert limited.json()["message"].startswith("API rate limit exceeded for 127.0.0.1.")
    assert limited.headers["x-ratelimit-limit"] == "60"
    assert limited.headers["x-ratelimit-remaining"] == "0"
    assert limited.headers["x-ratelimit-used"] == "60"
    assert limited.headers["x-ratelimit-reset"] == "1900000000"
    assert limited.headers["x-ratelimit-resource"] == "core"
    assert "retry-after" not in limited.headers
    token = fetch(gh, f"{gh.api_url}/repos/Org/Vision", headers={"Authorization": "Bearer t"})
    assert token.json()["message"] == "API rate limit exceeded for user ID 1."
    assert token.headers["x-ratelimit-limit"] == "5000"
    assert fetch(gh, f"{gh.web_url}/Org/Vision/zipball/v1").status_code == 200  # not the API
    gh.rate_limit(True, status=429)
    assert fetch(gh, f"{gh.api_url}/repos/Org/Vision").status_code == 429
    gh.rate_limit(False)
    answer = fetch(gh, f"{gh.api_url}/repos/Org/Vision")
    assert (answer.status_code, answer.headers["X-RateLimit-Remaining"]) == (200, "59")


def test_secondary_rate_limit(gh: GitHubStandIn) -> None:
    gh.rate_limit(True, secondary=True, retry_after=30)
    limited = fetch(gh, f"{gh.api_url}/repos/Org/Vision/commits/main")
    assert limited.status_code == 403
    assert limited.json()["message"].startswith("You have exceeded a secondary rate limit.")
    assert limited.headers["retry-after"] == "30"
    assert limited.headers["x-ratelimit-remaining"] != "0"
    gh.rate_limit(False)


def test_truncate_tamper_and_replace_archives(gh: GitHubStandIn, world: World) -> None:
    url = f"{gh.codeload_url}/Org/Vision/legacy.zip/{world.c1}"
    original = fetch(gh, url).content
    gh.truncate_archives(True)
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.ConnectionError)):
        fetch(gh, url)
    gh.truncate_archives(False)
    assert fetch(gh, url).content == original

    gh.tamper_archive(world.c1, lambda data: data + b"tail")
    assert fetch(gh, url).content == original + b"tail"
    gh.tamper_archive(world.c1, None)
    gh.replace_archive(world.c1, b"not a zip")
    assert fetch(gh, f"{gh.web_url}/Org/Vision/zipball/v1").content == b"not a zip"
    gh.replace_archive(world.c1, None)
    assert fetch(gh, url).content == original


# -- intercept -------------------------------------------------------------------------------


def test_intercept_by_path_url_or_predicate(gh: GitHubStandIn, world: World) -> None:
    branches = f"{gh.api_url}/repos/Org/Vision/branches"
    with gh.intercept("/api/v3/repos/Org/Vision/branches", Reply.json({"not": "a list"})) as rule:
        assert fetch(gh, branches).json() == {"not": "a list"}
        assert fetch(gh, branches + "?page=2").json() == {"not": "a list"}  # a prefix
        assert rule.hits == 2
    assert isinstance(fetch(gh, branches).json(), list)  # removed on leaving the block

    gh.intercept(gh.web_url + "/Org/Vision/zipball", Reply.redirect("http://127.0.0.1/x"),
                 times=1)
    hop = fetch(gh, f"{gh.web_url}/Org/Vision/zipball/v1", allow_redirects=False)
    assert (hop.status_code, hop.headers["Location"]) == (302, "http://127.0.0.1/x")
    again = fetch(gh, f"{gh.web_url}/Org/Vision/zipball/v1", allow_redirects=False)
    assert again.headers["Location"].startswith(gh.codeload_url)  # times=1 is used up

    seen: list[RequestRecord] = []

    def only_sha_media(request: RequestRecord) -> bool:
        return request.accept == "application/vnd.github.sha"

    def spy(request: RequestRecord) -> Reply | None:
        seen.append(request)
        return None  # the normal answer

    gh.intercept(only_sha_media, spy)
    commits = f"{gh.api_url}/repos/Org/Vision/commits/main"
    assert fetch(gh, commits, headers={"Accept": "application/vnd.github.sha"}).text == world.c2
    assert fetch(gh, commits).json()["sha"] == world.c2
    assert [r.path for r in seen] == ["/api/v3/repos/Org/Vision/commits/main"]


def test_intercept_can_alter_the_normal_answer(gh: GitHubStandIn, world: World) -> None:
    def lie(request: RequestRecord) -> Reply:
        body = json.loads(gh.route(request).body)  # type: ignore[arg-type]
        body["status"] = "ahead"  # a compare that claims the fork commit is on main
        return Reply.json(body)

    gh.intercept("/api/v3/repos/Org/Vision/compare/", lie)
    answer = fetch(gh, f"{gh.api_url}/repos/Org/Vision/compare/{world.evil}...main").json()
    assert (answer["status"], answer["behind_by"]) == ("ahead", 1)


def test_intercept_sends_what_no_real_server_would(gh: GitHubStandIn) -> None:
    gh.intercept("/bad-location", Reply(302, b"", (("Location", "http://[::1"),)))
    gh.intercept("/deep", Reply.json(json.loads("[" * 300 + "]" * 300)))
    gh.intercept("/no-length", Reply(200, iter([b"abc", b"def"])))
    gh.intercept("/short", Reply(200, b"0123456789", cut_after=4))
    foreign = ROLES["foreign"]
    assert raw_get(gh, foreign, "/bad-location").getheader("Location") == "http://[::1"
    deep = raw_get(gh, foreign, "/deep").read()
    assert deep.replace(b" ", b"").replace(b"\n", b"") == b"[" * 300 + b"]" * 300
    streamed = raw_get(gh, foreign, "/no-length")
    assert streamed.getheader("Content-Length") is None and streamed.read() == b"abcdef"
    short = raw_get(gh, foreign, "/short")
    assert short.getheader("Content-Length") == "10"
    with pytest.raises(http.client.IncompleteRead) as cut:
        short.read()
    assert cut.value.partial == b"0123"


def test_endless_pagination_and_endless_bodies(gh: GitHubStandIn) -> None:
    def next_page(request: RequestRecord) -> Reply:
        page = int(request.path.rpartition("page=")[2] or 1) if "page=" in request.path else 1
        link = f'<{gh.api_url}/repos/Org/Vision/tags?page={page + 1}>; rel="next"'
        return Reply.json([{"name": f"t{page}", "commit": {"sha": "0" * 40}}],
                          headers=(("Link", link),))

    gh.intercept("/api/v3/repos/Org/Vision/tags", next_page)
    url, pages = f"{gh.api_url}/repos/Org/Vision/tags", 0
    while pages < 50:  # a client must stop by itself; the server never does
        answer = fetch(gh, url)
        url, pages = answer.links["next"]["url"], pages + 1
    assert url.endswith("?page=51")

    gh.intercept("/forever", Reply(200, itertools.repeat(b"x" * 65536)))
    with requests.get(f"{gh.foreign_url}/forever", verify=str(gh.ca_cert), stream=True,
                      timeout=10) as endless:
        got = 0
        for chunk in endless.iter_content(65536):
            got += len(chunk)
            if got > 10 * 2**20:
                break
    assert got > 10 * 2**20


def test_a_failing_handler_answers_500_and_is_recorded(world: World) -> None:
    with GitHubStandIn(world.tls) as server:
        server.intercept("/", lambda request: 1 // 0)  # type: ignore[arg-type,return-value]
        assert fetch(server, f"{server.api_url}/repos/x/y").status_code == 500
        assert "ZeroDivisionError" in server.server_errors[0]
    with pytest.raises(ValueError, match="at least 1"):
        server.intercept("/", Reply(200), times=0)
    with pytest.raises(RuntimeError, match="not started"):
        GitHubStandIn(world.tls).route(RequestRecord("GET", "h", "/", None, None))


def test_intercepts_count_exactly_under_concurrent_requests(gh: GitHubStandIn) -> None:
    gh.intercept("/api/v3/repos/Org/Vision", Reply.json({"intercepted": True}), times=5)

    def ask(_: int) -> bool:
        with requests.Session() as session:
            answer = session.get(f"{gh.api_url}/repos/Org/Vision", verify=str(gh.ca_cert),
                                 timeout=10)
        return "intercepted" in answer.json()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert sum(pool.map(ask, range(40))) == 5


# -- slow drip -------------------------------------------------------------------------------


def test_drip_sends_a_body_whole_in_pieces(gh: GitHubStandIn, world: World) -> None:
    """What a drip sends, not how long it takes: no timing and no timeout's exception class
    (which requests makes ConnectionError or ReadTimeout depending on where the wait falls)."""
    url = f"{gh.codeload_url}/Org/Vision/legacy.zip/{world.c1}"
    body = fetch(gh, url).content
    with gh.drip("/codeload/", chunk_size=-(-len(body) // 5), delay=0.001):
        assert fetch(gh, url).content == body
    assert fetch(gh, url).content == body  # the rule is gone

    gh.intercept("/slow", Reply(200, b"abcdef", drip=Drip(chunk_size=2, delay=0.001)))
    assert raw_get(gh, ROLES["foreign"], "/slow").read() == b"abcdef"
    with pytest.raises(ValueError, match="bad drip"):
        Drip(chunk_size=0)


def test_stop_ends_a_drip_at_once(world: World, tmp_path: Path) -> None:
    arrived = threading.Event()
    with GitHubStandIn(world.tls) as server:

        def mark(request: RequestRecord) -> Reply:
            arrived.set()
            return Reply(200, b"x" * 100, drip=Drip(chunk_size=1, delay=30))

        server.intercept("/stuck", mark)
        errors: list[BaseException] = []

        def client() -> None:
            try:
                fetch(server, f"{server.foreign_url}/stuck", timeout=60)
            except requests.RequestException as e:
                errors.append(e)

        thread = threading.Thread(target=client)
        thread.start()
        assert arrived.wait(10)
    thread.join(10)  # the stop ended the 30 s pauses: the client is not left waiting
    assert not thread.is_alive() and len(errors) == 1
