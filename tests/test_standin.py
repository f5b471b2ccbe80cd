"""Tests of the loopback GitHub stand-in (tests/support) against real git repos: hosts,
redirects, names, forks, paging, archives, static files, the request log and its lifecycle.

The endpoints checked against git itself are in test_standin_git.py, the knobs for attack
tests in test_standin_knobs.py; the repos (``world``) and the server (``gh``) in conftest.py.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import io
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.conftest import World, fetch
from tests.support import (
    ROLES,
    STANDIN_HOSTS,
    GitCommandError,
    GitHubStandIn,
    RequestRecord,
    commit_files,
    git,
    make_repo,
    make_tls,
)


def get(gh: GitHubStandIn, url: str, **kwargs: object) -> requests.Response:
    return fetch(gh, url, **kwargs)


def commit_sha(gh: GitHubStandIn, repo: str, ref: str) -> str | int:
    """The sha the commits endpoint gives for ref, or the HTTP status if it fails."""
    answer = get(gh, f"{gh.api_url}/repos/{repo}/commits/{ref}")
    return str(answer.json()["sha"]) if answer.status_code == 200 else answer.status_code


def test_the_readme_example(tmp_path: Path) -> None:
    """The usage shown in tests/support/server.py's docstring (formerly a doctest)."""
    sha = make_repo(tmp_path / "repo", {"hubconf.py": "dependencies = []\n"})
    with GitHubStandIn(make_tls(tmp_path / "tls")) as gh:
        gh.add_repo("Org", "Repo", tmp_path / "repo")
        answer = requests.get(f"{gh.api_url}/repos/org/repo/commits/main",
                              verify=str(gh.ca_cert), timeout=10).json()
    assert answer["sha"] == sha


def test_the_server_is_not_part_of_the_package() -> None:
    assert importlib.util.find_spec("safehub._internal.standin") is None
    code = ("import sys, safehub, safehub.hub, safehub.cli; "
            "print(sorted(m for m in sys.modules if 'standin' in m or 'demo_server' in m "
            "or m.startswith('tests')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent.parent).stdout
    assert out.strip() == "[]"


# -- hosts ---------------------------------------------------------------------------------


def test_every_role_has_its_own_host(gh: GitHubStandIn) -> None:
    urls = {"api": gh.api_url, "web": gh.web_url, "codeload": gh.codeload_url,
            "release_assets": gh.release_assets_url, "foreign": gh.foreign_url,
            "mirror": gh.mirror_url}
    hosts = {role: urlsplit(url).hostname for role, url in urls.items()}
    assert hosts == ROLES
    assert len(set(hosts.values())) == len(hosts)
    assert {urlsplit(url).port for url in urls.values()} == {gh.port}
    assert set(ROLES.values()) <= set(STANDIN_HOSTS)
    assert gh.redirect_hosts == (ROLES["codeload"], ROLES["release_assets"])
    assert gh.url("api") == gh.api_url and gh.host("web") == ROLES["web"]


def test_each_host_answers_only_for_its_role(gh: GitHubStandIn, world: World) -> None:
    port = gh.port
    assert get(gh, f"{gh.api_url}/repos/org/vision").status_code == 200
    assert get(gh, f"https://localhost:{port}/api/v3/repos/org/vision").status_code == 200
    for role in ("web", "codeload", "release_assets", "foreign", "mirror"):
        assert get(gh, f"https://{ROLES[role]}:{port}/api/v3/repos/org/vision").status_code == 404
    assert get(gh, f"https://{ROLES['foreign']}:{port}/web/org/vision/zipball/v1",
               allow_redirects=False).status_code == 404
    assert get(gh, f"https://{ROLES['api']}:{port}/codeload/Org/Vision/legacy.zip/"
                   f"{world.c1}").status_code == 404
    assert [r.role for r in gh.requests_log[:2]] == ["api", "api"]
    assert {r.role for r in gh.requests_log[2:]} == {
        "web", "codeload", "release_assets", "foreign", "mirror", "api"}


def test_start_refuses_a_certificate_that_misses_a_host(tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "tls", hosts=("localhost", "127.0.0.1"))
    with pytest.raises(ValueError, match=r"does not name 127\.0\.0\.2"):
        GitHubStandIn(tls).start()


# -- repos, names, forks ---------------------------------------------------------------------


def test_repo_metadata(gh: GitHubStandIn) -> None:
    answer = get(gh, f"{gh.api_url}/repos/org/VISION")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "application/json; charset=utf-8"
    assert answer.headers["X-RateLimit-Remaining"] == "59"
    body = answer.json()
    assert body["id"] == 42
    assert body["full_name"] == "Org/Vision"
    assert body["name"] == "Vision"
    assert body["owner"]["login"] == "Org"
    assert body["default_branch"] == "main"
    assert (body["fork"], body["private"]) == (False, False)
    assert body["html_url"] == f"{gh.web_url}/Org/Vision"
    assert body["url"] == f"{gh.api_url}/repos/Org/Vision"

    fork = get(gh, f"{gh.api_url}/repos/mallory/vision").json()
    assert fork["fork"] is True
    assert fork["parent"]["full_name"] == "Org/Vision"
    assert fork["source"]["full_name"] == "Org/Vision"

    missing = get(gh, f"{gh.api_url}/repos/org/nope")
    assert missing.status_code == 404
    assert missing.json()["message"] == "Not Found"
    assert "documentation_url" in missing.json()
    assert get(gh, f"https://localhost:{gh.port}/elsewhere").status_code == 404
    posted = requests.post(f"{gh.api_url}/repos/Org/Vision", verify=str(gh.ca_cert), json={},
                           timeout=10)
    assert posted.status_code == 404


def test_commits_by_name_sha_and_abbreviation(gh: GitHubStandIn, world: World) -> None:
    expected = {
        "main": world.c2,
        "HEAD": world.c2,
        "refs/heads/main": world.c2,
        "heads/main": world.c2,
        "feature/x": world.feature,
        "refs/heads/feature/x": world.feature,
        "feature%2Fx": world.feature,
        "v1": world.c1,
        "tags/v1": world.c1,
        "refs/tags/v1": world.c1,
        "v2": world.c2,  # annotated tag, peeled to its commit
        "pull/7/head": world.c1,  # git's refs/<name> rule reaches hidden namespaces too
        world.c1: world.c1,
        world.c1[:7]: world.c1,
        world.c1[:4]: world.c1,  # git's shortest abbreviation
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
    named = get(gh, f"{gh.api_url}/repos/Org/Vision/commits/no-such-branch")
    assert named.status_code == 422  # GitHub says "SHA" for names too
    assert named.json()["message"] == "No commit found for SHA: no-such-branch"
    assert commit_sha(gh, "Org/Vision", world.c1[:3]) == 422  # too short to be a sha
    for unsafe in ("main~1", "main^", "v1..main", "-h", "main@{0}", "HEAD:README.md", "origin",
                   "remotes/origin/main", "refs/remotes/origin/main"):
        assert commit_sha(gh, "Org/Vision", unsafe) == 422, unsafe
    assert commit_sha(gh, "org/nope", "main") == 404


def test_the_former_404_for_unknown_names(world: World) -> None:
    with GitHubStandIn(world.tls, name_miss_status=404) as server:
        server.add_repo("Org", "Vision", world.upstream)
        assert commit_sha(server, "Org/Vision", "no-such-branch") == 404
        assert commit_sha(server, "Org/Vision", "deadbeef") == 422
    with pytest.raises(ValueError, match="404 or 422"):
        GitHubStandIn(world.tls, name_miss_status=500)


def test_fork_network_shares_commits_not_names(gh: GitHubStandIn, world: World) -> None:
    # GitHub serves a fork's commit under the parent's URLs, by sha only.
    assert commit_sha(gh, "Org/Vision", world.evil) == world.evil
    assert commit_sha(gh, "Org/Vision", world.evil[:8]) == world.evil
    assert commit_sha(gh, "Org/Vision", "evil-branch") == 422
    assert commit_sha(gh, "Org/Vision", "evil-tag") == 422
    # The fork's clone has refs/remotes/origin/*; those are not branches of the fork.
    assert commit_sha(gh, "mallory/vision", "feature/x") == 422
    assert commit_sha(gh, "mallory/vision", "origin/main") == 422
    assert commit_sha(gh, "mallory/vision", "main") == world.evil
    assert commit_sha(gh, "mallory/vision", world.feature) == world.feature
    branches = get(gh, f"{gh.api_url}/repos/mallory/vision/branches").json()
    assert [b["name"] for b in branches] == ["evil-branch", "main"]


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
    by_name = {b["name"]: b for b in whole.json()}
    assert by_name["feature/x"]["commit"]["sha"] == world.feature
    assert by_name["main"]["protected"] is False
    assert get(gh, f"{gh.api_url}/repos/Org/Vision/branches?page=9").json() == []

    tags = get(gh, f"{gh.api_url}/repos/Org/Vision/tags?per_page=100").json()
    assert [(t["name"], t["commit"]["sha"]) for t in tags] == [("v1", world.c1), ("v2", world.c2)]
    assert tags[0]["zipball_url"] == f"{gh.api_url}/repos/Org/Vision/zipball/refs/tags/v1"


def test_trees_and_blobs(gh: GitHubStandIn, world: World) -> None:
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

    blob = get(gh, readme["url"]).json()
    assert (blob["encoding"], blob["size"], blob["content"]) == ("base64", 6, "aGVsbG8K")
    assert get(gh, f"{gh.api_url}/repos/Org/Vision/git/blobs/{tree}").status_code == 404


# -- redirects and downloads -----------------------------------------------------------------


def test_zipball_redirects_to_codeload(gh: GitHubStandIn, world: World) -> None:
    answer = get(gh, f"{gh.web_url}/org/vision/zipball/v1", allow_redirects=False)
    assert answer.status_code == 302
    location = answer.headers["Location"]
    assert location == f"{gh.codeload_url}/Org/Vision/legacy.zip/{world.c1}"
    assert urlsplit(location).hostname == ROLES["codeload"]
    rest = get(gh, f"{gh.api_url}/repos/ORG/vision/zipball/v1", allow_redirects=False)
    assert (rest.status_code, rest.headers["Location"]) == (302, location)

    archive = get(gh, location)
    assert archive.headers["Content-Type"] == "application/zip"
    assert archive.headers["Content-Disposition"] == (
        f"attachment; filename=Org-Vision-{world.c1[:7]}.zip")
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
    assert get(gh, f"{gh.codeload_url}/org/VISION/legacy.zip/v1").content == archive.content

    # A fork's commit is served under the parent's name, like GitHub does.
    fork_zip = get(gh, f"{gh.web_url}/Org/Vision/zipball/{world.evil}")
    assert zipfile.ZipFile(io.BytesIO(fork_zip.content)).comment == world.evil.encode()
    assert get(gh, f"{gh.web_url}/Org/Vision/zipball/nope").status_code == 404
    assert get(gh, f"{gh.codeload_url}/Org/Vision/legacy.zip/{'1' * 40}").status_code == 404


def test_release_downloads_redirect_to_the_release_assets_host(gh: GitHubStandIn) -> None:
    url = gh.add_release_asset("org", "vision", "v1", "model.sig", b"bundle")
    assert url == f"{gh.web_url}/Org/Vision/releases/download/v1/model.sig"
    hop = get(gh, url, allow_redirects=False)
    assert hop.status_code == 302
    location = urlsplit(hop.headers["Location"])
    assert (location.scheme, location.hostname) == ("https", ROLES["release_assets"])
    assert location.path.startswith("/github-production-release-asset/42/")
    query = parse_qs(location.query)
    assert query["rscd"] == ["attachment; filename=model.sig"] and "sig" in query
    answer = get(gh, hop.headers["Location"])
    assert (answer.status_code, answer.content) == (200, b"bundle")
    assert answer.headers["Content-Disposition"] == "attachment; filename=model.sig"
    # The signed URL is good for that asset only.
    forged = hop.headers["Location"].replace("sig=", "sig=0")
    assert get(gh, forged).status_code == 403
    assert get(gh, f"{gh.web_url}/Org/Vision/releases/download/v2/model.sig").status_code == 404
    gh.add_release_asset("org", "vision", "v1", "model.sig", b"replaced")
    assert get(gh, url).content == b"replaced"


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


# -- static content --------------------------------------------------------------------------


def test_static_files_on_every_host(gh: GitHubStandIn) -> None:
    gh.add_static("/mirror/weights.bin", b"\x00\x01")
    assert get(gh, f"https://localhost:{gh.port}/mirror/weights.bin").content == b"\x00\x01"
    assert get(gh, f"{gh.foreign_url}/mirror/weights.bin").content == b"\x00\x01"
    assert get(gh, f"https://localhost:{gh.port}/mirror/other.bin").status_code == 404
    with pytest.raises(ValueError, match="must start with '/'"):
        gh.add_static("relative", b"")


def test_a_case_sensitive_static_mirror(gh: GitHubStandIn, tmp_path: Path) -> None:
    """Like an object store: a client must ask for names exactly as they were written."""
    (tmp_path / "Org/Vision/zipball").mkdir(parents=True)
    (tmp_path / "Org/Vision/zipball/abc").write_bytes(b"zip")
    (tmp_path / "secret").write_bytes(b"no")
    (tmp_path / "Org/link").symlink_to(tmp_path / "secret")
    base = gh.serve_directory(tmp_path / "Org", "/m")
    assert base == f"{gh.mirror_url}/m"
    assert get(gh, f"{base}/Vision/zipball/abc").content == b"zip"
    assert get(gh, f"{base}/Vision/zipball/abc?x=1").content == b"zip"
    for wrong in ("vision/zipball/abc", "Vision/Zipball/abc", "Vision/zipball/ABC",
                  "Vision/zipball", "Vision/zipball/", "Vision/../../secret", "link",
                  "Vision/zipball/abc/x"):
        assert get(gh, f"{base}/{wrong}").status_code == 404, wrong
    with pytest.raises(ValueError, match="not a directory"):
        gh.serve_directory(tmp_path / "secret", "/x")
    with pytest.raises(ValueError, match="mount prefix"):
        gh.serve_directory(tmp_path, "/x/")


# -- the request log -------------------------------------------------------------------------


def test_request_log(gh: GitHubStandIn) -> None:
    gh.clear_log()
    headers = {"Authorization": "Bearer t0ken", "User-Agent": "probe/1",
               "Accept": "application/vnd.github.sha", "X-Probe": "1"}
    get(gh, f"{gh.api_url}/repos/Org/Vision?x=1", headers=headers)
    get(gh, f"{gh.web_url}/Org/Vision/zipball/v1")
    first = gh.requests_log[0]
    assert first == RequestRecord(
        "GET", ROLES["api"], "/api/v3/repos/Org/Vision?x=1", "Bearer t0ken", "probe/1",
        "application/vnd.github.sha", "api",
    )
    assert first.header("x-probe") == "1" and first.header("missing") is None
    assert [(r.host, r.role) for r in gh.requests_log[1:]] == [
        (ROLES["web"], "web"), (ROLES["codeload"], "codeload")]
    assert gh.requests_log[2].authorization is None
    assert (gh.count(), gh.count(gh.api_url), gh.count(gh.codeload_url)) == (3, 1, 1)
    gh.clear_log()
    assert gh.count() == 0


# -- lifecycle and helpers -------------------------------------------------------------------


def test_concurrent_clients_and_prompt_stop(gh: GitHubStandIn, world: World) -> None:
    url = f"{gh.web_url}/Org/Vision/zipball/{world.c2}"

    def download(_: int) -> bytes:
        with requests.Session() as session:
            return session.get(url, verify=str(gh.ca_cert), timeout=10).content

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        bodies = set(pool.map(download, range(16)))
    assert len(bodies) == 1

    idle = requests.Session()  # holds a keep-alive connection open across stop()
    assert idle.get(f"{gh.api_url}/repos/Org/Vision", verify=str(gh.ca_cert)).ok
    gh.stop()  # returns although a client holds a connection (else the test times out)
    with pytest.raises(requests.RequestException):
        idle.get(f"{gh.api_url}/repos/Org/Vision", verify=str(gh.ca_cert), timeout=5)
    idle.close()
    gh.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not started"):
        _ = GitHubStandIn(world.tls).port


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
    with pytest.raises(ValueError, match="already used"):
        gh.add_repo("a", "b", world.fork, repo_id=42)
    with pytest.raises(RuntimeError, match="already running"):
        gh.start()


def test_make_tls_names_every_host(tmp_path: Path) -> None:
    from cryptography import x509

    files = make_tls(tmp_path / "tls", hosts=("example.test", "::1"))
    cert = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["example.test"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["::1"]
    assert stat.S_IMODE(files.server_key.stat().st_mode) == 0o600
    with pytest.raises(ValueError, match="at least one host"):
        make_tls(tmp_path / "none", hosts=())


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


def test_a_stopped_server_starts_again(gh: GitHubStandIn, world: World) -> None:
    gh.stop()
    gh.start()
    assert commit_sha(gh, "Org/Vision", "main") == world.c2
