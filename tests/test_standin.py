"""Tests of the loopback GitHub stand-in (safehub._internal.standin) against real git repos."""

from __future__ import annotations

import concurrent.futures
import doctest
import io
import stat
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from safehub._internal import standin
from safehub._internal.standin import (
    GitCommandError,
    GitHubStandIn,
    RequestRecord,
    TLSFiles,
    commit_files,
    git,
    make_repo,
    make_tls,
)


@dataclass(frozen=True)
class World:
    """An upstream repo and a fork of it, with the shas the tests expect."""

    tls: TLSFiles
    upstream: Path
    fork: Path
    c1: str  # main~1, tag v1 (lightweight), base of feature/x and b1..b3
    c2: str  # main, tag v2 (annotated)
    feature: str  # feature/x
    evil: str  # only in the fork: fork's main, evil-branch, evil-tag


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("standin")
    up = root / "upstream"
    c1 = make_repo(
        up,
        {
            "hubconf.py": "dependencies = []\n",
            "README.md": "hello\n",
            "scripts/run.sh": "#!/bin/sh\necho hi\n",
        },
        executable=["scripts/run.sh"],
        symlinks={"link": "README.md"},
    )
    git(up, "tag", "v1")
    git(up, "checkout", "-q", "-b", "feature/x")
    feature = commit_files(up, {"feature.txt": "f\n"}, "feature work")
    git(up, "checkout", "-q", "main")
    c2 = commit_files(up, {"README.md": "hello again\n"}, "second\n\nwith a body")
    git(up, "tag", "-a", "v2", "-m", "release v2")
    for branch in ("b1", "b2", "b3"):
        git(up, "branch", branch, c1)
    fork = root / "fork"
    git(root, "clone", "-q", str(up), str(fork))
    evil = commit_files(fork, {"hubconf.py": "import os\n"}, "evil")
    git(fork, "branch", "evil-branch")
    git(fork, "tag", "evil-tag")
    return World(make_tls(root / "tls"), up, fork, c1, c2, feature, evil)


@pytest.fixture
def gh(world: World) -> Iterator[GitHubStandIn]:
    with GitHubStandIn(world.tls) as server:
        server.add_repo("Org", "Vision", world.upstream, repo_id=42)
        server.add_repo("mallory", "vision", world.fork, fork_of=("org", "vision"))
        yield server
    assert server.server_errors == []


_SESSION = requests.Session()  # keep-alive across requests keeps the file fast


def get(gh: GitHubStandIn, url: str, **kwargs: Any) -> requests.Response:
    return _SESSION.get(url, verify=str(gh.ca_cert), timeout=10, **kwargs)


def commit_sha(gh: GitHubStandIn, repo: str, ref: str) -> str | int:
    """The sha the commits endpoint gives for ref, or the HTTP status if it fails."""
    answer = get(gh, f"{gh.api_url}/repos/{repo}/commits/{ref}")
    return str(answer.json()["sha"]) if answer.status_code == 200 else answer.status_code


def test_repo_metadata(gh: GitHubStandIn) -> None:
    answer = get(gh, f"{gh.api_url}/repos/org/VISION")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.headers["X-RateLimit-Remaining"] == "59"
    body = answer.json()
    assert body["id"] == 42
    assert body["full_name"] == "Org/Vision"
    assert body["name"] == "Vision"
    assert body["owner"] == {"login": "Org"}
    assert body["default_branch"] == "main"
    assert (body["fork"], body["private"]) == (False, False)
    assert body["html_url"] == f"{gh.web_url}/Org/Vision"

    fork = get(gh, f"{gh.api_url}/repos/mallory/vision").json()
    assert fork["fork"] is True
    assert fork["parent"]["full_name"] == "Org/Vision"

    missing = get(gh, f"{gh.api_url}/repos/org/nope")
    assert missing.status_code == 404
    assert missing.json()["message"] == "Not Found"
    assert "documentation_url" in missing.json()
    assert get(gh, f"https://localhost:{gh.port}/elsewhere").status_code == 404
    posted = _SESSION.post(f"{gh.api_url}/repos/Org/Vision", verify=str(gh.ca_cert), json={})
    assert posted.status_code == 404


def test_commits_by_name_sha_and_abbreviation(gh: GitHubStandIn, world: World) -> None:
    expected = {
        "main": world.c2,
        "HEAD": world.c2,
        "refs/heads/main": world.c2,
        "feature/x": world.feature,
        "refs/heads/feature/x": world.feature,
        "feature%2Fx": world.feature,
        "v1": world.c1,
        "refs/tags/v1": world.c1,
        "v2": world.c2,  # annotated tag, peeled to its commit
        world.c1: world.c1,
        world.c1[:7]: world.c1,
        world.c1.upper(): world.c1,
    }
    for ref, sha in expected.items():
        assert commit_sha(gh, "Org/Vision", ref) == sha, ref

    body = get(gh, f"{gh.api_url}/repos/Org/Vision/commits/main").json()
    assert body["commit"]["tree"]["sha"] == git(world.upstream, "rev-parse", "main^{tree}")
    assert body["commit"]["message"] == "second\n\nwith a body"
    assert body["parents"] == [
        {
            "sha": world.c1,
            "url": f"{gh.api_url}/repos/Org/Vision/commits/{world.c1}",
            "html_url": f"{gh.web_url}/Org/Vision/commit/{world.c1}",
        }
    ]
    assert body["html_url"] == f"{gh.web_url}/Org/Vision/commit/{world.c2}"


def test_commit_errors(gh: GitHubStandIn, world: World) -> None:
    unknown = get(gh, f"{gh.api_url}/repos/Org/Vision/commits/deadbeef")
    assert unknown.status_code == 422
    assert unknown.json()["message"] == "No commit found for SHA: deadbeef"
    blob = git(world.upstream, "rev-parse", "main:README.md")
    assert commit_sha(gh, "Org/Vision", blob) == 422
    assert commit_sha(gh, "Org/Vision", "no-such-branch") == 404
    assert commit_sha(gh, "Org/Vision", world.c1[:6]) == 404  # too short to be a sha
    for unsafe in ("main~1", "main^", "v1..main", "-h", "main@{0}", "HEAD:README.md", "origin"):
        assert commit_sha(gh, "Org/Vision", unsafe) == 404, unsafe


def test_fork_network_shares_commits_not_names(gh: GitHubStandIn, world: World) -> None:
    # GitHub serves a fork's commit under the parent's URLs, by sha only.
    assert commit_sha(gh, "Org/Vision", world.evil) == world.evil
    assert commit_sha(gh, "Org/Vision", world.evil[:8]) == world.evil
    assert commit_sha(gh, "Org/Vision", "evil-branch") == 404
    assert commit_sha(gh, "Org/Vision", "evil-tag") == 404
    # The fork's clone has refs/remotes/origin/*; those are not branches of the fork.
    assert commit_sha(gh, "mallory/vision", "feature/x") == 404
    assert commit_sha(gh, "mallory/vision", "origin/main") == 404
    assert commit_sha(gh, "mallory/vision", "main") == world.evil
    assert commit_sha(gh, "mallory/vision", world.feature) == world.feature
    branches = get(gh, f"{gh.api_url}/repos/mallory/vision/branches").json()
    assert [b["name"] for b in branches] == ["evil-branch", "main"]


def compare(gh: GitHubStandIn, repo: str, spec: str) -> requests.Response:
    return get(gh, f"{gh.api_url}/repos/{repo}/compare/{spec}")


def test_compare(gh: GitHubStandIn, world: World) -> None:
    ahead = compare(gh, "Org/Vision", "v1...main").json()
    assert (ahead["status"], ahead["ahead_by"], ahead["behind_by"]) == ("ahead", 1, 0)
    assert ahead["total_commits"] == 1
    assert ahead["base_commit"]["sha"] == world.c1
    assert ahead["merge_base_commit"]["sha"] == world.c1
    assert ahead["base_commit"]["commit"]["tree"]["sha"] == git(
        world.upstream, "rev-parse", "v1^{tree}"
    )
    assert [c["sha"] for c in ahead["commits"]] == [world.c2]

    behind = compare(gh, "Org/Vision", "main...v1").json()
    assert (behind["status"], behind["ahead_by"], behind["behind_by"]) == ("behind", 0, 1)
    same = compare(gh, "Org/Vision", f"main...{world.c2}").json()
    assert (same["status"], same["ahead_by"], same["behind_by"]) == ("identical", 0, 0)
    split = compare(gh, "Org/Vision", "main...feature/x").json()
    assert (split["status"], split["ahead_by"], split["behind_by"]) == ("diverged", 1, 1)
    assert split["merge_base_commit"]["sha"] == world.c1

    # Across the network: the fork commit is "ahead" of upstream main, seen from upstream.
    cross = compare(gh, "Org/Vision", f"main...{world.evil}").json()
    assert (cross["status"], cross["ahead_by"]) == ("ahead", 1)
    back = compare(gh, "Org/Vision", f"{world.evil[:10]}...main").json()
    assert (back["status"], back["behind_by"]) == ("behind", 1)

    assert compare(gh, "Org/Vision", "main...nope").status_code == 404
    assert compare(gh, "Org/Vision", "main...evil-branch").status_code == 404
    assert compare(gh, "Org/Vision", "main..v1").status_code == 404


def test_branches_and_tags_pagination(gh: GitHubStandIn, world: World) -> None:
    first = get(gh, f"{gh.api_url}/repos/Org/Vision/branches", params={"per_page": 2})
    assert [b["name"] for b in first.json()] == ["b1", "b2"]
    assert first.links["next"]["url"].endswith("/branches?per_page=2&page=2")
    assert first.links["last"]["url"].endswith("/branches?per_page=2&page=3")
    names, answer, pages = [], first, 0
    while True:
        pages += 1
        names += [b["name"] for b in answer.json()]
        if "next" not in answer.links:
            break
        answer = get(gh, answer.links["next"]["url"])
    assert pages == 3
    assert names == ["b1", "b2", "b3", "feature/x", "main"]
    assert set(answer.links) == {"prev", "first"}

    whole = get(gh, f"{gh.api_url}/repos/Org/Vision/branches")
    assert "Link" not in whole.headers
    assert {b["name"]: b["commit"]["sha"] for b in whole.json()}["feature/x"] == world.feature
    assert get(gh, f"{gh.api_url}/repos/Org/Vision/branches?page=9").json() == []

    tags = get(gh, f"{gh.api_url}/repos/Org/Vision/tags?per_page=100").json()
    assert [(t["name"], t["commit"]["sha"]) for t in tags] == [("v1", world.c1), ("v2", world.c2)]


def test_trees(gh: GitHubStandIn, world: World) -> None:
    tree = git(world.upstream, "rev-parse", "v1^{tree}")
    body = get(gh, f"{gh.api_url}/repos/Org/Vision/git/trees/{tree}?recursive=1").json()
    assert body["sha"] == tree
    assert body["truncated"] is False
    entries = {e["path"]: e for e in body["tree"]}
    assert set(entries) == {"README.md", "hubconf.py", "link", "scripts", "scripts/run.sh"}
    assert (entries["scripts/run.sh"]["mode"], entries["scripts/run.sh"]["type"]) == (
        "100755",
        "blob",
    )
    assert (entries["link"]["mode"], entries["link"]["size"]) == ("120000", len("README.md"))
    assert (entries["scripts"]["type"], entries["scripts"]["mode"]) == ("tree", "040000")
    assert "size" not in entries["scripts"]
    readme = entries["README.md"]
    assert readme["sha"] == git(world.upstream, "rev-parse", "v1:README.md")
    assert readme["size"] == len("hello\n")

    flat = get(gh, f"{gh.api_url}/repos/Org/Vision/git/trees/{tree}").json()
    assert {e["path"] for e in flat["tree"]} == {"README.md", "hubconf.py", "link", "scripts"}
    assert get(gh, f"{gh.api_url}/repos/Org/Vision/git/trees/{'0' * 40}").status_code == 404


def test_zipball_redirects_to_codeload(gh: GitHubStandIn, world: World) -> None:
    answer = get(gh, f"{gh.web_url}/org/vision/zipball/v1", allow_redirects=False)
    assert answer.status_code == 302
    location = answer.headers["Location"]
    assert location == f"{gh.codeload_url}/Org/Vision/legacy.zip/{world.c1}"
    assert urlsplit(location).hostname == "127.0.0.1"

    archive = get(gh, location)
    assert archive.headers["Content-Type"] == "application/zip"
    assert int(archive.headers["Content-Length"]) == len(archive.content)
    with zipfile.ZipFile(io.BytesIO(archive.content)) as zf:
        assert zf.comment == world.c1.encode()
        top = f"Org-Vision-{world.c1[:7]}/"
        assert all(name.startswith(top) for name in zf.namelist())
        infos = {info.filename[len(top) :]: info for info in zf.infolist()}
        assert zf.read(top + "README.md") == b"hello\n"
        assert stat.S_IMODE(infos["scripts/run.sh"].external_attr >> 16) & 0o111
        assert stat.S_ISLNK(infos["link"].external_attr >> 16)
    redirected = get(gh, f"{gh.web_url}/Org/Vision/zipball/v1")
    assert redirected.content == archive.content

    # A fork's commit is served under the parent's name, like GitHub does.
    fork_zip = get(gh, f"{gh.web_url}/Org/Vision/zipball/{world.evil}")
    assert zipfile.ZipFile(io.BytesIO(fork_zip.content)).comment == world.evil.encode()
    assert get(gh, f"{gh.web_url}/Org/Vision/zipball/nope").status_code == 404
    assert get(gh, f"{gh.codeload_url}/Org/Vision/legacy.zip/{'1' * 40}").status_code == 404


def test_rename_redirects(gh: GitHubStandIn, world: World) -> None:
    gh.rename_repo("Org", "Vision", "NewOrg", "vision2")
    old = f"{gh.api_url}/repos/org/vision/commits/main?per_page=1"
    moved = get(gh, old, allow_redirects=False)
    assert moved.status_code == 301
    assert moved.headers["Location"] == f"{gh.api_url}/repositories/42/commits/main?per_page=1"
    assert get(gh, old).json()["sha"] == world.c2

    by_id = get(gh, f"{gh.api_url}/repositories/42").json()
    assert by_id["full_name"] == "NewOrg/vision2"
    assert (
        get(gh, f"{gh.api_url}/repos/Org/Vision", allow_redirects=False).headers["Location"]
        == f"{gh.api_url}/repositories/42"
    )
    assert get(gh, f"{gh.api_url}/repos/neworg/VISION2").json()["id"] == 42
    assert get(gh, f"{gh.api_url}/repositories/999").status_code == 404

    web = get(gh, f"{gh.web_url}/Org/Vision/zipball/v1", allow_redirects=False)
    assert web.status_code == 301
    assert web.headers["Location"] == f"{gh.web_url}/NewOrg/vision2/zipball/v1"
    with zipfile.ZipFile(io.BytesIO(get(gh, web.headers["Location"]).content)) as zf:
        assert zf.namelist()[0].startswith(f"NewOrg-vision2-{world.c1[:7]}/")


def test_fail_next(gh: GitHubStandIn) -> None:
    url = f"{gh.api_url}/repos/Org/Vision"
    gh.fail_next(2, 502, path_prefix="/api/v3/repos/Org")
    assert get(gh, f"{gh.api_url}/repos/mallory/vision").status_code == 200  # other prefix
    assert [get(gh, url).status_code for _ in range(3)] == [502, 502, 200]
    gh.fail_next(1)
    assert get(gh, f"{gh.web_url}/Org/Vision/zipball/v1").status_code == 503
    assert get(gh, url).status_code == 200


def test_rate_limit(gh: GitHubStandIn) -> None:
    gh.rate_limit(True, reset_epoch=1_900_000_000)
    limited = get(gh, f"{gh.api_url}/repos/Org/Vision")
    assert limited.status_code == 403
    assert limited.json()["message"].startswith("API rate limit exceeded for 127.0.0.1.")
    assert limited.headers["X-RateLimit-Limit"] == "60"
    assert limited.headers["X-RateLimit-Remaining"] == "0"
    assert limited.headers["X-RateLimit-Reset"] == "1900000000"
    assert get(gh, f"{gh.web_url}/Org/Vision/zipball/v1").status_code == 200  # not the API
    gh.rate_limit(False)
    answer = get(gh, f"{gh.api_url}/repos/Org/Vision")
    assert (answer.status_code, answer.headers["X-RateLimit-Remaining"]) == (200, "59")


def test_truncate_tamper_and_replace_archives(gh: GitHubStandIn, world: World) -> None:
    url = f"{gh.codeload_url}/Org/Vision/legacy.zip/{world.c1}"
    original = get(gh, url).content
    gh.truncate_archives(True)
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.ConnectionError)):
        get(gh, url)
    gh.truncate_archives(False)
    assert get(gh, url).content == original

    gh.tamper_archive(world.c1, lambda data: data + b"tail")
    assert get(gh, url).content == original + b"tail"
    gh.tamper_archive(world.c1, None)
    gh.replace_archive(world.c1, b"not a zip")
    assert get(gh, f"{gh.web_url}/Org/Vision/zipball/v1").content == b"not a zip"
    gh.replace_archive(world.c1, None)
    assert get(gh, url).content == original


def test_release_assets_and_static(gh: GitHubStandIn) -> None:
    gh.add_release_asset("org", "vision", "v1", "model.sig", b"bundle")
    url = f"{gh.web_url}/Org/Vision/releases/download/v1/model.sig"
    assert get(gh, url).content == b"bundle"
    assert get(gh, f"{gh.web_url}/Org/Vision/releases/download/v2/model.sig").status_code == 404
    gh.add_static("/mirror/weights.bin", b"\x00\x01")
    assert get(gh, f"https://localhost:{gh.port}/mirror/weights.bin").content == b"\x00\x01"
    assert get(gh, f"https://localhost:{gh.port}/mirror/other.bin").status_code == 404


def test_request_log(gh: GitHubStandIn) -> None:
    gh.clear_log()
    headers = {"Authorization": "Bearer t0ken", "User-Agent": "probe/1"}
    get(gh, f"{gh.api_url}/repos/Org/Vision?x=1", headers=headers)
    get(gh, f"{gh.web_url}/Org/Vision/zipball/v1")
    assert gh.requests_log[0] == RequestRecord(
        "GET", "localhost", "/api/v3/repos/Org/Vision?x=1", "Bearer t0ken", "probe/1", "*/*"
    )
    assert gh.requests_log[2].host == "127.0.0.1"
    assert gh.requests_log[2].authorization is None
    assert (gh.count(), gh.count(gh.api_url), gh.count(gh.codeload_url)) == (3, 1, 1)
    gh.clear_log()
    assert gh.count() == 0


def test_concurrent_clients_and_prompt_stop(gh: GitHubStandIn, world: World) -> None:
    url = f"{gh.web_url}/Org/Vision/zipball/{world.c2}"

    def fetch(_: int) -> bytes:
        with requests.Session() as session:
            return session.get(url, verify=str(gh.ca_cert), timeout=10).content

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        bodies = set(pool.map(fetch, range(16)))
    assert len(bodies) == 1

    idle = requests.Session()  # holds a keep-alive connection open across stop()
    assert idle.get(f"{gh.api_url}/repos/Org/Vision", verify=str(gh.ca_cert)).ok
    started = time.monotonic()
    gh.stop()
    assert time.monotonic() - started < 1
    with pytest.raises(requests.ConnectionError):
        idle.get(f"{gh.api_url}/repos/Org/Vision", verify=str(gh.ca_cert), timeout=5)
    idle.close()


def test_add_repo_errors(gh: GitHubStandIn, tmp_path: Path, world: World) -> None:
    with pytest.raises(ValueError, match="not a git repository"):
        gh.add_repo("a", "b", tmp_path)
    with pytest.raises(ValueError, match="not a git repository"):
        gh.add_repo("a", "b", world.upstream / "scripts")  # inside a repo is not a repo
    with pytest.raises(ValueError, match="bad owner or repo name"):
        gh.add_repo("a/b", "c", world.upstream)
    with pytest.raises(ValueError, match="unknown repo"):
        gh.add_release_asset("no", "such", "v1", "x", b"")
    with pytest.raises(ValueError, match="already served"):
        gh.add_repo("ORG", "vision", world.upstream)
    with pytest.raises(ValueError, match="unknown repo"):
        gh.add_repo("a", "b", world.fork, fork_of=("no", "such"))


def test_make_tls_names_every_host(tmp_path: Path) -> None:
    from cryptography import x509

    files = make_tls(tmp_path / "tls", hosts=("example.test", "::1"))
    cert = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["example.test"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["::1"]
    assert stat.S_IMODE(files.server_key.stat().st_mode) == 0o600


def test_git_helpers_are_isolated_and_deterministic(tmp_path: Path) -> None:
    files = {"a.txt": "a\n"}
    first, second = make_repo(tmp_path / "one", files), make_repo(tmp_path / "two", files)
    assert first == second
    assert git(tmp_path / "one", "log", "-1", "--format=%an <%ae>") == (
        "Safehub Test <test@safehub.invalid>"
    )
    later = commit_files(tmp_path / "one", {}, "empty", delete=["a.txt"])
    assert git(tmp_path / "one", "ls-tree", later) == ""
    with pytest.raises(GitCommandError, match="not a git repository"):
        git(tmp_path, "rev-parse", "HEAD")


def test_module_docstring_example() -> None:
    assert doctest.testmod(standin).failed == 0
