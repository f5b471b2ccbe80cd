"""The README's first command runs the shipped example end to end, offline, on a small
loopback GitHub of its own (safehub/demo/server.py), which answers the requests the client
makes as well as the ones it may make instead (checked here against git)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from safehub.cli import main
from safehub.demo.server import DemoGitHub, git
from tests.conftest import needs_torch

SHA_MEDIA = {"Accept": "application/vnd.github.sha"}


@needs_torch
def test_demo_runs_and_every_attack_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("refused, as it should be") == 4
    assert "0 requests" in out and "every check behaved as expected" in out


def test_the_demo_server_is_small() -> None:
    import safehub.demo.server as module

    assert module.__file__ is not None
    assert len(Path(module.__file__).read_text().splitlines()) <= 300


@dataclass(frozen=True)
class Demo:
    gh: DemoGitHub
    repo: Path
    fork: Path
    sha: str
    fork_sha: str

    def get(self, path: str, **kwargs: object) -> requests.Response:
        url = path if path.startswith("https://") else f"{self.gh.api_url}/repos/{path}"
        return requests.get(url, verify=str(self.gh.ca_cert), timeout=10,  # type: ignore[arg-type]
                            **kwargs)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    root = tmp_path_factory.mktemp("demo")
    repo, fork = root / "repo", root / "fork"
    repo.mkdir()
    (repo / "hubconf.py").write_text("dependencies = []\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "tag", "v1.0")
    (repo / "README.md").write_text("two\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two")
    git(repo, "tag", "-a", "v2.0", "-m", "annotated")
    git(root, "clone", "-q", str(repo), str(fork))
    (fork / "hubconf.py").write_text("evil = 1\n")
    git(fork, "commit", "-q", "-a", "-m", "evil")
    with DemoGitHub(root) as gh:
        gh.add_repo("demo", "tiny-hub", repo)
        gh.add_repo("mallory", "tiny-hub", fork, fork_of="demo/tiny-hub")
        yield Demo(gh, repo, fork, git(repo, "rev-parse", "HEAD"), git(fork, "rev-parse", "HEAD"))


def test_the_demo_server_resolves_as_git_does(demo: Demo) -> None:
    for ref in ("main", "heads/main", "refs/heads/main", "v1.0", "tags/v1.0", "v2.0",
                demo.sha, demo.sha[:7]):
        answer = demo.get(f"demo/tiny-hub/commits/{ref}", headers=SHA_MEDIA)
        assert answer.text == git(demo.repo, "rev-parse", f"{ref}^{{commit}}"), ref
        body = demo.get(f"Demo/Tiny-Hub/commits/{ref}").json()
        assert body["sha"] == answer.text
        assert body["commit"]["tree"]["sha"] == git(demo.repo, "rev-parse", f"{ref}^{{tree}}")
    assert demo.get(f"demo/tiny-hub/commits/{demo.fork_sha}", headers=SHA_MEDIA).text == (
        demo.fork_sha)  # by sha across the fork network, as on GitHub
    for missing in ("nope", "v1.0~1", "-h", "origin/main"):
        assert demo.get(f"demo/tiny-hub/commits/{missing}").status_code == 422, missing
    body = demo.get("demo/tiny-hub/commits/main").json()
    assert body["files"] == [{"filename": "README.md", "additions": 1, "deletions": 0,
                              "changes": 1, "status": "added"}]
    assert body["stats"] == {"additions": 1, "deletions": 0, "total": 1}


def test_the_demo_server_answers_the_git_database(demo: Demo) -> None:
    ref = demo.get("demo/tiny-hub/git/ref/tags/v2.0").json()
    tag = git(demo.repo, "rev-parse", "refs/tags/v2.0")
    assert (ref["ref"], ref["object"]["type"], ref["object"]["sha"]) == (
        "refs/tags/v2.0", "tag", tag)
    assert demo.get("demo/tiny-hub/git/ref/tags/v2").status_code == 404
    assert demo.get("demo/tiny-hub/git/ref/heads/main").json()["object"]["sha"] == demo.sha
    listed = demo.get("demo/tiny-hub/git/matching-refs/tags/v").json()
    assert [r["ref"] for r in listed] == ["refs/tags/v1.0", "refs/tags/v2.0"]
    assert demo.get("mallory/tiny-hub/git/matching-refs/heads/").json()[0]["ref"] == (
        "refs/heads/main")
    tag_object = demo.get(f"demo/tiny-hub/git/tags/{tag}").json()
    assert tag_object["object"] == {"sha": demo.sha, "type": "commit"}
    commit = demo.get(f"demo/tiny-hub/git/commits/{demo.sha}").json()
    assert commit["tree"]["sha"] == git(demo.repo, "rev-parse", "main^{tree}")
    assert demo.get(f"demo/tiny-hub/git/commits/{demo.sha[:12]}").status_code == 404
    tree = demo.get(f"demo/tiny-hub/git/trees/{commit['tree']['sha']}?recursive=1").json()
    readme = next(e for e in tree["tree"] if e["path"] == "README.md")
    blob = demo.get(f"demo/tiny-hub/git/blobs/{readme['sha']}").json()
    assert blob["content"] == "dHdvCg=="


def test_the_demo_server_compares_and_lists(demo: Demo) -> None:
    fork_vs_main = demo.get(f"demo/tiny-hub/compare/{demo.fork_sha}...main").json()
    assert (fork_vs_main["status"], fork_vs_main["behind_by"]) == ("behind", 1)
    assert fork_vs_main["merge_base_commit"]["sha"] == demo.sha
    assert (fork_vs_main["commits"], fork_vs_main["files"]) == ([], [])
    ahead = demo.get("demo/tiny-hub/compare/v1.0...main").json()
    assert (ahead["status"], ahead["ahead_by"], [c["sha"] for c in ahead["commits"]]) == (
        "ahead", 1, [demo.sha])
    assert [f["filename"] for f in ahead["files"]] == ["README.md"]
    assert [b["name"] for b in demo.get("demo/tiny-hub/branches?per_page=100").json()] == [
        "main"]
    assert [t["name"] for t in demo.get("demo/tiny-hub/tags").json()] == ["v1.0", "v2.0"]


def test_the_demo_server_redirects_archives_to_codeload(demo: Demo) -> None:
    for url in (f"{demo.gh.web_url}/demo/tiny-hub/zipball/v2.0",
                f"{demo.gh.api_url}/repos/demo/tiny-hub/zipball/v2.0"):
        hop = demo.get(url, allow_redirects=False)
        assert hop.headers["Location"] == (
            f"{demo.gh.codeload_url}/demo/tiny-hub/legacy.zip/{demo.sha}")
        archive = demo.get(url)
        assert zipfile.ZipFile(io.BytesIO(archive.content)).comment == demo.sha.encode()
    assert demo.get(f"{demo.gh.web_url}/demo/tiny-hub/zipball/nope").status_code == 404


# -- safehub demo --serve: a hub to try commands against ------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from safehub.demo.serve import serving

    with serving() as world:
        yield world


def use(served: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paste the printed export lines (as the user does)."""
    for name, value in served.env.items():  # type: ignore[attr-defined]
        monkeypatch.setenv(name, value)


def test_serve_prints_the_lines_to_paste_and_the_commands_to_try(served: object) -> None:
    exports = served.exports()  # type: ignore[attr-defined]
    for name in ("SAFEHUB_GITHUB_API_URL", "SAFEHUB_GITHUB_URL", "REQUESTS_CA_BUNDLE",
                 "SAFEHUB_CACHE_DIR", "SAFEHUB_POLICY"):
        assert f"export {name}=" in exports
    root = str(served.root)  # type: ignore[attr-defined]
    assert all(root in v or v.startswith("https://localhost:") or v == "127.0.0.1"
               for v in served.env.values())  # type: ignore[attr-defined]
    tries = served.tries()  # type: ignore[attr-defined]
    assert tries.count("safehub ") >= 7


def test_serve_commits_are_the_readmes(served: object) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    commit = served.commits["demo/tiny-hub:v1.0"]  # type: ignore[attr-defined]
    assert f'hub.load("demo/tiny-hub:{commit}", "tiny_mlp")' in readme


@needs_torch
def test_serve_shows_each_repo_as_promised(served: object, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    use(served, monkeypatch)
    commits = served.commits  # type: ignore[attr-defined]
    assert main(["load", "demo/tiny-hub:v1.0", "tiny_mlp", "--trust", "-q"]) == 0
    fork = commits["mallory/tiny-hub"]
    assert main(["load", f"demo/tiny-hub:{fork[:12]}", "tiny_mlp", "--trust"]) == 1
    assert "fork" in capsys.readouterr().err
    assert main(["load", "demo/signed-hub:v1.0", "tiny_mlp", "-q"]) == 0  # the policy allows
    key = str(served.key)  # type: ignore[attr-defined]
    assert main(["verify", "demo/signed-hub:v1.0", "--key", key]) == 0
    lockfile = str(served.lockfile)  # type: ignore[attr-defined]
    assert main(["lock", "--check", "--lockfile", lockfile]) == 1
    assert "MOVED demo/moved-hub:v1.0" in capsys.readouterr().out
    assert main(["load", "demo/phone-home:v1.0", "model", "--trust", "--report", "-q"]) == 0
    assert "connected to           127.0.0.1:" in capsys.readouterr().out
    assert main(["cache", "ls"]) == 0
    listed = capsys.readouterr().out
    assert "SAFEHUB_CACHE_DIR" in listed
    for repo in ("demo/tiny-hub", "demo/signed-hub", "demo/phone-home"):
        assert repo in listed


def test_serve_stops_on_ctrl_c_and_removes_its_files() -> None:
    import threading

    from safehub.demo.serve import serve

    said: list[str] = []
    stop = threading.Event()
    stop.set()  # as if Ctrl-C came at once
    serve(0, said.append, stop)
    root = Path(said[0].split("(files in ", 1)[1].split(";", 1)[0])
    assert not root.exists() and said[-1].startswith("safehub demo hub stopped")
    assert said[-1].endswith("unset SAFEHUB_GITHUB_API_URL SAFEHUB_GITHUB_URL "
                             "REQUESTS_CA_BUNDLE SAFEHUB_ALLOWED_HOSTS SAFEHUB_CACHE_DIR "
                             "SAFEHUB_POLICY")


def test_port_goes_with_serve(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--port", "8443"]) == 2
    assert "safehub demo --serve --port 8443" in capsys.readouterr().err
    assert main(["demo", "--serve", "--port", "0"]) == 2


def test_a_port_in_use_is_said_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot serve on port {port}" in err and "leave --port out" in err


def test_serve_in_a_process_of_its_own_ends_cleanly_on_sigterm(tmp_path: Path) -> None:
    import os
    import signal

    from tests.docs_support import demo_serve

    with demo_serve(dict(os.environ), tmp_path) as served:
        root = Path(served.exports["SAFEHUB_CACHE_DIR"]).parent
        assert root.is_dir()
        served.process.send_signal(signal.SIGTERM)
        rest, _ = served.process.communicate(timeout=60)
    assert "stopped" in rest and served.process.returncode == 0 and not root.exists()
    # The export lines, then the unset line it printed on stopping, in one shell: that
    # shell's environment is as it was (issue 33, 3).
    unset = [line for line in rest.splitlines() if line.startswith("unset ")]
    assert len(unset) == 1
    pasted = [line for line in served.printed if line.startswith("export ")]
    script = "\n".join([*pasted, unset[0], "env -0"])
    import subprocess

    after = subprocess.run(["sh", "-c", script], capture_output=True, check=True,
                           env={"PATH": os.environ["PATH"]}).stdout
    names = {item.split(b"=", 1)[0].decode() for item in after.split(b"\0") if item}
    assert not names & set(served.exports), names
