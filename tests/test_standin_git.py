"""The stand-in's git endpoints, with ``git`` itself as the oracle.

``commits/{ref}`` (the sha media type and the JSON form with its diff), ``git/ref``,
``git/matching-refs``, ``git/tags``, ``git/commits`` and ``compare``: every answer is
checked against what git says about the same repos, and against the required fields of
GitHub's published REST description (github/rest-api-description).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import World, fetch
from tests.support import GitHubStandIn, commit_files, git, make_repo, run_git
from tests.support.gitrepo import EMPTY_TREE

# Required fields of GitHub's schemas (components/schemas in rest-api-description).
COMMIT = {"url", "sha", "node_id", "html_url", "comments_url", "commit", "author", "committer",
          "parents"}
DIFF_ENTRY = {"sha", "filename", "status", "additions", "deletions", "changes", "blob_url",
              "raw_url", "contents_url"}
COMPARISON = {"url", "html_url", "permalink_url", "diff_url", "patch_url", "base_commit",
              "merge_base_commit", "status", "ahead_by", "behind_by", "total_commits",
              "commits"}
GIT_REF = {"ref", "node_id", "url", "object"}
GIT_TAG = {"node_id", "tag", "sha", "url", "message", "tagger", "object"}
GIT_COMMIT = {"sha", "node_id", "url", "html_url", "author", "committer", "tree", "message",
              "parents", "verification"}
SHA_MEDIA = {"Accept": "application/vnd.github.sha"}


def api(gh: GitHubStandIn, path: str, **kwargs: object) -> requests.Response:
    return fetch(gh, f"{gh.api_url}/repos/{path}", **kwargs)


def rev_parse(repo: Path, expression: str) -> str | None:
    found = run_git(["rev-parse", "--verify", "--quiet", expression], cwd=repo, check=False)
    return found.stdout.decode().strip() if found.returncode == 0 else None


# -- commits/{ref} with the sha media type ---------------------------------------------------


def test_the_sha_media_type_answers_what_git_rev_parse_says(gh: GitHubStandIn,
                                                            world: World) -> None:
    refs = ["main", "heads/main", "refs/heads/main", "feature/x", "heads/feature/x", "v1",
            "tags/v1", "refs/tags/v1", "v2", "tags/v2", "b3", world.c1, world.c2[:4],
            world.c2[:7], world.feature[:12], world.c1.upper()]
    for ref in refs:
        answer = api(gh, f"Org/Vision/commits/{ref}", headers=SHA_MEDIA)
        assert answer.status_code == 200, ref
        assert answer.headers["Content-Type"].startswith("application/vnd.github.sha")
        assert answer.text == rev_parse(world.upstream, f"{ref}^{{commit}}"), ref
    # The older spelling of the media type, and a fork's commit under the parent's name.
    older = api(gh, f"Org/Vision/commits/{world.evil}",
                headers={"Accept": "application/vnd.github.v3.sha"})
    assert older.text == rev_parse(world.fork, f"{world.evil}^{{commit}}") == world.evil
    missing = api(gh, "Org/Vision/commits/evil-branch", headers=SHA_MEDIA)
    assert (missing.status_code, missing.json()["message"]) == (
        422, "No commit found for SHA: evil-branch")


def test_the_sha_media_type_takes_the_sha_as_an_etag(gh: GitHubStandIn, world: World) -> None:
    first = api(gh, "Org/Vision/commits/main", headers=SHA_MEDIA)
    assert first.headers["ETag"] == f'"{world.c2}"'
    same = api(gh, "Org/Vision/commits/main",
               headers={**SHA_MEDIA, "If-None-Match": first.headers["ETag"]})
    assert (same.status_code, same.content) == (304, b"")
    moved = api(gh, "Org/Vision/commits/main",
                headers={**SHA_MEDIA, "If-None-Match": f'"{world.c1}"'})
    assert (moved.status_code, moved.text) == (200, world.c2)


# -- commits/{ref} as JSON: the commit and its diff ------------------------------------------


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, world: World) -> Iterator[
        tuple[GitHubStandIn, Path, dict[str, str]]]:
    """A repo whose commits add, change, rename, delete, chmod and merge; one has 305 files."""
    repo = tmp_path_factory.mktemp("history") / "repo"
    shas = {"root": make_repo(repo, {"a.txt": "one\ntwo\n", "bin.dat": b"\x00\x01\x02",
                                     "old.py": "x = 1\n" * 20, "odd [1]*?.txt": "odd\n",
                                     "ünï.txt": "u\n"})}
    shas["change"] = commit_files(repo, {"a.txt": "one\n2\nthree\n", "b.txt": "new\n"}, "change")
    git(repo, "mv", "old.py", "new.py")
    shas["rename"] = commit_files(repo, {}, "rename")
    shas["delete"] = commit_files(repo, {}, "delete", delete=["b.txt"])
    shas["chmod"] = commit_files(repo, {}, "chmod", executable=["a.txt"])
    git(repo, "checkout", "-q", "-b", "side", shas["root"])
    shas["side"] = commit_files(repo, {"side.txt": "s\n"}, "side")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "side")
    shas["merge"] = git(repo, "rev-parse", "HEAD")
    shas["big"] = commit_files(repo, {f"many/f{i:03d}.txt": f"{i}\n" for i in range(305)}, "big")
    with GitHubStandIn(world.tls) as server:
        server.add_repo("o", "h", repo)
        yield server, repo, shas


def git_diff(repo: Path, sha: str) -> list[tuple[str, int, int]]:
    """(path, additions, deletions) of the diff to the first parent, as git counts them."""
    parent = rev_parse(repo, f"{sha}^") or EMPTY_TREE
    out = git(repo, "diff-tree", "-r", "-M", "--numstat", parent, sha)
    rows = []
    for line in out.splitlines():
        adds, dels, path = line.split("\t", 2)
        if " => " in path:  # a rename, shown as {old => new}
            path = path.split(" => ")[-1].rstrip("}")
        rows.append((path, int(adds) if adds != "-" else 0, int(dels) if dels != "-" else 0))
    return rows


@pytest.mark.parametrize("name", ["root", "change", "rename", "delete", "chmod", "merge"])
def test_the_json_commit_carries_the_diff_git_computes(
        history: tuple[GitHubStandIn, Path, dict[str, str]], name: str) -> None:
    gh, repo, shas = history
    body = api(gh, f"o/h/commits/{shas[name]}").json()
    assert set(body) >= COMMIT and {"files", "stats"} <= set(body)
    files = body["files"]
    assert all(set(f) >= DIFF_ENTRY for f in files)
    assert [(f["filename"], f["additions"], f["deletions"]) for f in files] == git_diff(
        repo, shas[name])
    assert body["stats"] == {"total": sum(f["changes"] for f in files),
                             "additions": sum(f["additions"] for f in files),
                             "deletions": sum(f["deletions"] for f in files)}
    parent = rev_parse(repo, f"{shas[name]}^") or EMPTY_TREE
    patched = [f for f in files if "patch" in f]
    assert patched or name in ("chmod", "rename")  # no hunks: no patch
    for f in patched:  # the hunks of git's own patch for that file, without its header
        text = git(repo, "diff", "--no-color", "-M", parent, shas[name], "--",
                   *{f["filename"], f.get("previous_filename", f["filename"])})
        assert f["patch"].startswith("@@") and text.endswith(f["patch"]), f["filename"]


def test_diff_entries_say_what_happened(
        history: tuple[GitHubStandIn, Path, dict[str, str]]) -> None:
    gh, _, shas = history

    def files(name: str) -> dict[str, dict[str, object]]:
        return {f["filename"]: f for f in api(gh, f"o/h/commits/{shas[name]}").json()["files"]}

    root = files("root")
    assert {f["status"] for f in root.values()} == {"added"}
    assert "patch" not in root["bin.dat"]  # binary: no patch, as on GitHub
    assert root["a.txt"]["patch"] == "@@ -0,0 +1,2 @@\n+one\n+two"
    assert root["odd [1]*?.txt"]["patch"] == "@@ -0,0 +1 @@\n+odd"  # not a glob to git
    assert root["ünï.txt"]["patch"] == "@@ -0,0 +1 @@\n+u"
    assert files("change")["a.txt"]["status"] == "modified"
    renamed = files("rename")["new.py"]
    assert (renamed["status"], renamed["previous_filename"]) == ("renamed", "old.py")
    assert files("delete")["b.txt"]["status"] == "removed"
    assert set(files("merge")) == {"side.txt"}  # the merge's diff to its first parent


def test_a_large_commit_lists_300_files_a_page(
        history: tuple[GitHubStandIn, Path, dict[str, str]]) -> None:
    gh, _, shas = history
    first = api(gh, f"o/h/commits/{shas['big']}")
    assert len(first.json()["files"]) == 300
    assert first.json()["stats"]["additions"] == 305
    assert first.links["next"]["url"].endswith(f"/commits/{shas['big']}?page=2")
    second = fetch(gh, first.links["next"]["url"])
    assert [f["filename"] for f in second.json()["files"]] == [
        f"many/f{i:03d}.txt" for i in range(300, 305)]
    assert "next" not in second.links
    sha_only = api(gh, f"o/h/commits/{shas['big']}", headers=SHA_MEDIA)
    assert len(sha_only.content) == 40 < len(first.content) // 100  # what the media type saves


# -- the git database: refs, tags, commits ---------------------------------------------------


def test_git_ref_matches_exactly(gh: GitHubStandIn, world: World) -> None:
    for name, kind in (("heads/main", "commit"), ("heads/feature/x", "commit"),
                       ("tags/v1", "commit"), ("tags/v2", "tag"), ("pull/7/head", "commit")):
        body = api(gh, f"Org/Vision/git/ref/{name}").json()
        assert set(body) >= GIT_REF
        assert body["ref"] == f"refs/{name}"
        assert body["object"]["type"] == kind
        assert body["object"]["sha"] == rev_parse(world.upstream, f"refs/{name}")
        assert body["url"] == f"{gh.api_url}/repos/Org/Vision/git/refs/{name}"
        assert body["object"]["url"] == (
            f"{gh.api_url}/repos/Org/Vision/git/{kind}s/{body['object']['sha']}")
    for missing in ("heads/mai", "heads/feature", "main", "v1", "refs/heads/main",
                    "tags/evil-tag", "heads/evil-branch", world.c1):
        assert api(gh, f"Org/Vision/git/ref/{missing}").status_code == 404, missing
    for remote in ("remotes/origin/main", "heads/origin/main"):
        assert api(gh, f"mallory/vision/git/ref/{remote}").status_code == 404
    assert api(gh, "mallory/vision/git/ref/tags/evil-tag").json()["object"]["sha"] == world.evil


def test_matching_refs_lists_by_prefix(gh: GitHubStandIn, world: World) -> None:
    def listed(repo: str, prefix: str) -> list[str]:
        answer = api(gh, f"{repo}/git/matching-refs/{prefix}")
        assert answer.status_code == 200
        return [r["ref"] for r in answer.json()]

    def by_git(path: Path, prefix: str) -> list[str]:
        out = git(path, "for-each-ref", "--format=%(refname)")
        return [r for r in out.splitlines() if r.startswith(f"refs/{prefix}")
                and not r.startswith("refs/remotes/")]

    for prefix in ("heads/", "heads/b", "heads/feature", "tags/", "tags/v2", "", "pull/"):
        assert listed("Org/Vision", prefix) == by_git(world.upstream, prefix), prefix
    assert listed("Org/Vision", "heads/zzz") == []
    assert listed("mallory/vision", "") == by_git(world.fork, "")
    assert not any("remotes" in r for r in listed("mallory/vision", ""))


def test_git_tags_describes_annotated_tags(gh: GitHubStandIn, world: World) -> None:
    tag_sha = rev_parse(world.upstream, "refs/tags/v2")
    assert tag_sha is not None and tag_sha != world.c2
    body = api(gh, f"Org/Vision/git/tags/{tag_sha}").json()
    assert set(body) >= GIT_TAG
    assert (body["tag"], body["sha"], body["message"]) == ("v2", tag_sha, "release v2\n")
    assert body["object"] == {"sha": world.c2, "type": "commit",
                              "url": f"{gh.api_url}/repos/Org/Vision/git/commits/{world.c2}"}
    assert body["tagger"]["name"] == "Safehub Test"
    for not_a_tag in (world.c2, tag_sha[:12], "0" * 40, "v2"):
        assert api(gh, f"Org/Vision/git/tags/{not_a_tag}").status_code == 404, not_a_tag


def test_git_commits_takes_full_shas_only(gh: GitHubStandIn, world: World) -> None:
    body = api(gh, f"Org/Vision/git/commits/{world.c2}").json()
    assert set(body) >= GIT_COMMIT
    assert body["tree"]["sha"] == rev_parse(world.upstream, f"{world.c2}^{{tree}}")
    assert [p["sha"] for p in body["parents"]] == [world.c1]
    assert body["message"] == "second\n\nwith a body"
    assert body["author"]["date"] == "2024-01-01T00:01:00Z"
    fork_commit = api(gh, f"Org/Vision/git/commits/{world.evil}")  # one object store per network
    assert fork_commit.json()["sha"] == world.evil
    tree = rev_parse(world.upstream, "main^{tree}")
    for wrong in (world.c2[:12], "main", tree, "0" * 40):
        assert api(gh, f"Org/Vision/git/commits/{wrong}").status_code == 404, wrong


# -- compare ---------------------------------------------------------------------------------


def test_compare_agrees_with_git_for_every_pair(gh: GitHubStandIn, world: World) -> None:
    """Three dots: head relative to base, commits and files from the merge base to head."""
    commits = [world.c1, world.c2, world.feature, world.evil]
    names = {world.c1: "v1", world.c2: "main", world.feature: "feature/x"}
    oracle = world.fork  # its clone holds every commit of the network
    for base, head in itertools.product(commits, repeat=2):
        spec = f"{names.get(base, base)}...{names.get(head, head[:10])}"
        body = api(gh, f"Org/Vision/compare/{spec}").json()
        assert set(body) >= COMPARISON, spec
        merge_base = git(oracle, "merge-base", base, head)
        ahead = git(oracle, "rev-list", "--reverse", f"{base}..{head}").split()
        behind = int(git(oracle, "rev-list", "--count", f"{head}..{base}"))
        base_in_head = run_git(["merge-base", "--is-ancestor", base, head], cwd=oracle,
                               check=False).returncode == 0
        head_in_base = run_git(["merge-base", "--is-ancestor", head, base], cwd=oracle,
                               check=False).returncode == 0
        status = ("identical" if base == head else "ahead" if base_in_head
                  else "behind" if head_in_base else "diverged")
        assert (body["status"], body["ahead_by"], body["behind_by"]) == (
            status, len(ahead), behind), spec
        assert body["total_commits"] == len(ahead)
        assert [c["sha"] for c in body["commits"]] == ahead, spec
        assert body["base_commit"]["sha"] == base
        assert body["merge_base_commit"]["sha"] == merge_base
        changed = git(oracle, "diff-tree", "-r", "-M", "--name-only", merge_base, head)
        assert [f["filename"] for f in body["files"]] == changed.splitlines(), spec


def test_compare_of_a_branch_with_its_ancestor_is_empty(gh: GitHubStandIn,
                                                        world: World) -> None:
    """What clients prove "this commit is in the branch" with: no commits, no files."""
    body = api(gh, f"Org/Vision/compare/main...{world.c1}").json()
    assert (body["status"], body["behind_by"], body["commits"], body["files"]) == (
        "behind", 1, [], [])
    assert body["merge_base_commit"]["sha"] == world.c1
    assert body["url"] == f"{gh.api_url}/repos/Org/Vision/compare/main...{world.c1}"


def test_compare_errors(gh: GitHubStandIn, world: World, tmp_path: Path) -> None:
    assert api(gh, "Org/Vision/compare/main...nope").status_code == 404
    assert api(gh, "Org/Vision/compare/main...evil-branch").status_code == 404
    assert api(gh, "Org/Vision/compare/main..v1").status_code == 404
    git(world.upstream, "checkout", "-q", "--orphan", "lonely")
    try:
        lonely = commit_files(world.upstream, {"x": "x\n"}, "unrelated")
    finally:
        git(world.upstream, "checkout", "-q", "-f", "main")
        git(world.upstream, "branch", "-q", "-D", "lonely")
    answer = api(gh, f"Org/Vision/compare/main...{lonely}")
    assert answer.status_code == 404
    assert answer.json()["message"] == f"No common ancestor between main and {lonely}."


def test_compare_lists_at_most_250_commits(world: World, tmp_path: Path) -> None:
    repo = tmp_path / "long"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    stream = []
    for i in range(1, 262):
        stream.append(f"commit refs/heads/main\nmark :{i}\n"
                      f"committer T <t@t> {1_704_067_200 + i} +0000\ndata 1\n{i % 10}\n"
                      f"M 644 inline f\ndata {len(str(i)) + 1}\n{i}\n")
    run_git(["fast-import", "--quiet"], cwd=repo, stdin="".join(stream).encode())
    log = git(repo, "rev-list", "--reverse", "main").split()
    with GitHubStandIn(world.tls) as gh:
        gh.add_repo("o", "long", repo)
        body = api(gh, f"o/long/compare/{log[0]}...main").json()
    assert (body["status"], body["ahead_by"], body["total_commits"]) == ("ahead", 260, 260)
    assert [c["sha"] for c in body["commits"]] == log[1:251]  # the oldest 250, oldest first
    assert [f["filename"] for f in body["files"]] == ["f"]
