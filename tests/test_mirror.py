"""Mirrors and names as GitHub spells them (issue 10, item 4); warm loads of large trees.

GitHub compares owner and repo names case-insensitively; a static mirror or an object store
does not. Requests and mirror layouts therefore keep ``Owner/Name`` as GitHub spells it (the
API's ``full_name``, recorded in the lockfile's ``repo``), and only cache, policy and
lockfile keys fold case. The mirror here is a real folder served as it is, case-sensitively
(``serve_directory``), never anything the test arranges by hand.

Nodes served by a mirror load the same trees again and again: a warm load checks the tree's
folders by the list recorded when this user verified it (one ``lstat`` each, no listing;
issue 10, item 6), and each file as the repo's code opens it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.store.lockfile import Lockfile
from tests.conftest import HubRepo, runs
from tests.support import GitHubStandIn
from tests.test_load import _rezip

EVIL = b"import os\nopen(os.environ['SAFEHUB_TEST_CANARY'],'a').write('evil\\n')\n"


@pytest.fixture
def mixed(make_hub_repo) -> HubRepo:  # type: ignore[no-untyped-def]
    """A hub repo GitHub spells ``Acme/Models`` (tag v1.0)."""
    repo: HubRepo = make_hub_repo("Acme", "Models")
    return repo


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def use_mirror(server: GitHubStandIn, mirror: Path, node: Path,
               monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that fetches archives from ``mirror`` (served as it is) into its own cache."""
    monkeypatch.setenv("SAFEHUB_GITHUB_URL", server.serve_directory(mirror))
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(node))
    server.clear_log()


def test_lock_records_the_name_as_github_spells_it(mixed: HubRepo, server: GitHubStandIn
                                                   ) -> None:
    assert main(["lock", "acme/models:v1.0", f"ACME/models:{mixed.sha}", "acme/MODELS"]) == 0
    entries = Lockfile.load(Path.cwd() / "safehub.lock").entries
    assert sorted(entries) == ["acme/models", f"acme/models:{mixed.sha}", "acme/models:v1.0"]
    assert {e.repo for e in entries.values()} == {"Acme/Models"}
    assert server.server_errors == []


def test_a_case_sensitive_mirror_serves_locked_loads_in_any_case(
    mixed: HubRepo, server: GitHubStandIn, tmp_path: Path, canary: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert main(["lock", "acme/models:v1.0"]) == 0
    mirror = tmp_path / "mirror"
    assert main(["prefetch", "--mirror", str(mirror)]) == 0
    assert files_under(mirror) == [f"Acme/Models/zipball/{mixed.sha}"]
    for i, typed in enumerate(("acme/models:v1.0", "ACME/Models:v1.0", "Acme/Models:v1.0")):
        use_mirror(server, mirror, tmp_path / f"node{i}", monkeypatch)
        safehub.load(typed, "tiny", trust_repo=True)
        assert [(r.role, r.path) for r in server.requests_log] == [
            ("mirror", f"/mirror/Acme/Models/zipball/{mixed.sha}")]  # one request, no API
    assert runs(canary) == 3
    assert server.server_errors == []


def test_prefetch_of_a_spec_typed_in_another_case_lays_out_githubs_spelling(
    mixed: HubRepo, server: GitHubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No lockfile: the name comes from the API's ``full_name``; the mirror is laid out as
    GitHub spells it, and a node that locks the same spec later finds it there."""
    mirror = tmp_path / "mirror"
    assert main(["prefetch", "--mirror", str(mirror), "acme/models:v1.0",
                 f"aCmE/mOdElS:{mixed.sha[:10]}"]) == 0
    assert files_under(mirror) == [f"Acme/Models/zipball/{mixed.sha}"]
    assert main(["lock", "acme/models:v1.0"]) == 0
    use_mirror(server, mirror, tmp_path / "node", monkeypatch)
    safehub.load("acme/models:v1.0", "tiny", trust_repo=True)
    assert [r.role for r in server.requests_log] == ["mirror"]


def test_a_mirror_laid_out_in_lower_case_misses_rather_than_guessing(
    mixed: HubRepo, server: GitHubStandIn, tmp_path: Path, canary: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The legitimate layout is exact; a mirror filled by other means in another case is a
    clear not-found from the mirror (nothing ran), not a silent second guess."""
    assert main(["lock", "acme/models:v1.0"]) == 0
    mirror = tmp_path / "mirror"
    assert main(["prefetch", "--mirror", str(mirror)]) == 0
    (mirror / "Acme/Models").rename(mirror / "Acme/models")
    (mirror / "Acme").rename(mirror / "acme")
    use_mirror(server, mirror, tmp_path / "node", monkeypatch)
    with pytest.raises(safehub.FetchError, match="404"):
        safehub.load("acme/models:v1.0", "tiny", trust_repo=True)
    assert [r.path for r in server.requests_log] == [
        f"/mirror/Acme/Models/zipball/{mixed.sha}"]
    assert runs(canary) == 0


def test_a_tampered_case_sensitive_mirror_is_refused(
    mixed: HubRepo, server: GitHubStandIn, tmp_path: Path, canary: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert main(["lock", "acme/models:v1.0"]) == 0
    mirror = tmp_path / "mirror"
    assert main(["prefetch", "--mirror", str(mirror)]) == 0
    archive = mirror / "Acme/Models/zipball" / mixed.sha
    archive.write_bytes(_rezip(archive.read_bytes(), {"hubconf.py": EVIL}))
    use_mirror(server, mirror, tmp_path / "node", monkeypatch)
    with pytest.raises(safehub.IntegrityError, match="pins sha256:"):
        safehub.load("ACME/models:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 0
    assert [r.role for r in server.requests_log] == ["mirror"]
    # prefetch into the same mirror notices and replaces what it cannot verify
    monkeypatch.setenv("SAFEHUB_GITHUB_URL", server.web_url)
    assert main(["prefetch", "--mirror", str(mirror)]) == 0
    use_mirror(server, mirror, tmp_path / "node2", monkeypatch)
    safehub.load("acme/models:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 1


@pytest.mark.parametrize("full_name", ["mallory/Models", "../../outside", "Acme/Models/x",
                                       "Acme/Models:v1.0"])
def test_a_full_name_that_names_another_repo_is_refused(
    mixed: HubRepo, server: GitHubStandIn, tmp_path: Path, full_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The spelling goes into URLs, mirror paths and the lockfile: an API answer whose
    ``full_name`` is not this repo (case aside) is refused, and nothing is written."""
    import json

    from tests.support import Reply

    def other_name(record):  # type: ignore[no-untyped-def]
        reply = server.route(record)
        data = json.loads(reply.body)
        data["full_name"] = full_name
        return Reply.json(data)

    server.intercept(lambda r: r.path.rstrip("/").lower() == "/api/v3/repos/acme/models",
                     other_name)
    mirror = tmp_path / "mirror"
    assert main(["prefetch", "--mirror", str(mirror), "acme/models:v1.0"]) == 1
    assert main(["lock", "acme/models:v1.0"]) == 1
    assert capsys.readouterr().err.count(f"full_name {full_name!r} names another repo") == 2
    assert not mirror.exists() or files_under(mirror) == []
    assert not (Path.cwd() / "safehub.lock").exists()


# -- warm loads check the recorded folders -------------------------------------------------

NESTED: dict[str, str | bytes] = {
    "zoo/__init__.py": "", "zoo/nets/__init__.py": "", "zoo/nets/deep/__init__.py": "",
    "zoo/nets/deep/er/layers.py": "X = 1\n", "docs/a/b/c/d/notes.md": "# notes\n",
    "tools/run.py": "print('hi')\n",
}


@pytest.fixture
def nested(make_hub_repo) -> HubRepo:  # type: ignore[no-untyped-def]
    repo: HubRepo = make_hub_repo("Acme", "Nested", NESTED)
    return repo


def _tree(sha: str) -> Path:
    hit = safehub.Hub().cache.lookup(sha)
    assert hit is not None
    return hit.path


def _record(isolated: Path, sha: str) -> Path:
    return isolated / "data/safehub/verified" / f"{sha}.json"


def _folders(tree: Path) -> list[str]:
    return sorted("" if d == str(tree) else os.path.relpath(d, tree) for d, _, _ in os.walk(tree))


def test_warm_loads_check_the_recorded_folders_and_list_none(
    nested: HubRepo, isolated: Path, canary: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = f"{nested.spec}:v1.0"
    safehub.load(spec, "echo", trust_repo=True)
    tree = _tree(nested.sha)
    recorded = json.loads(_record(isolated, nested.sha).read_text())["folders"][str(tree)]
    assert sorted(recorded) == _folders(tree) and "docs/a/b/c/d" in recorded
    listed: list[str] = []
    real = os.scandir

    def scandir(path: str | int = ".") -> object:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    before = _record(isolated, nested.sha).read_bytes()
    assert safehub.load(spec, "echo") == ((), {})
    assert [p for p in listed if p.startswith(str(tree))] == []
    assert _record(isolated, nested.sha).read_bytes() == before  # nothing written
    assert runs(canary) == 2


def _add_deep_file(tree: Path) -> None:
    folder = tree / "docs/a/b/c/d"
    folder.chmod(0o755)
    (folder / "extra.py").write_text("evil\n")
    folder.chmod(0o555)


def _remove_deep_folder(tree: Path) -> None:
    (tree / "docs/a/b/c").chmod(0o755)
    (tree / "docs/a/b/c/d").chmod(0o755)
    shutil.rmtree(tree / "docs/a/b/c/d")
    (tree / "docs/a/b/c").chmod(0o555)


def _folder_to_link(tree: Path) -> None:
    parent = tree / "zoo/nets/deep"
    parent.chmod(0o755)
    (parent / "er").chmod(0o755)
    shutil.rmtree(parent / "er")
    (parent / "er").symlink_to("../../../tools")
    parent.chmod(0o555)


@pytest.mark.parametrize("change", [_add_deep_file, _remove_deep_folder, _folder_to_link])
def test_a_change_deep_in_a_cached_tree_is_refused(
    nested: HubRepo, canary: Path, change,  # type: ignore[no-untyped-def]
) -> None:
    spec = f"{nested.spec}:v1.0"
    safehub.load(spec, "echo", trust_repo=True)
    change(_tree(nested.sha))
    with pytest.raises(safehub.IntegrityError, match=r"docs/a/b/c/d|zoo/nets/deep/er"):
        safehub.load(spec, "echo")
    assert runs(canary) == 1


@pytest.mark.parametrize("edit", ["drop", "shorten", "malformed"])
def test_a_verification_record_without_a_usable_folder_list(
    nested: HubRepo, isolated: Path, canary: Path, monkeypatch: pytest.MonkeyPatch,
    edit: str,
) -> None:
    """Records written before folder lists (``drop``) still serve warm loads, by listing
    the folders, without re-hashing; a list that misses folders (``shorten``) cannot skip
    them: the scan differs, the tree is re-hashed (and is fine); a malformed one counts as
    never verified."""
    from safehub.store.cache import CachedTree, integrity

    spec = f"{nested.spec}:v1.0"
    safehub.load(spec, "echo", trust_repo=True)
    path = _record(isolated, nested.sha)
    data = json.loads(path.read_text())
    key = str(_tree(nested.sha))
    if edit == "drop":
        del data["folders"]
    elif edit == "shorten":
        data["folders"][key] = [d for d in data["folders"][key] if not d.startswith("docs")]
    else:
        data["folders"][key] = "docs"
    path.write_text(json.dumps(data))
    monkeypatch.setattr("safehub.store.cache.warm.STATE.surveys", {})  # as in a new process
    rehashed: list[str] = []
    real = integrity.rehash

    def rehash(tree: CachedTree) -> None:
        rehashed.append(tree.commit)
        real(tree)

    monkeypatch.setattr(integrity, "rehash", rehash)
    assert safehub.load(spec, "echo") == ((), {})
    assert rehashed == ([] if edit == "drop" else [nested.sha])
    assert runs(canary) == 2
