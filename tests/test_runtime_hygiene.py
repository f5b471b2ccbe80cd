"""Module hygiene: which top-level names of a repo shadow what, and what stays imported."""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

import pytest

from safehub.errors import RuntimeGuardError
from safehub.run.hygiene import top_level_owners
from safehub.run.runtime import RuntimeGuard, RuntimeRules, leftovers, shadowing

# A standard-library module nothing in this test process imports.
UNUSED_STDLIB = "wave"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "hubconf.py").write_text("dependencies = []\n")
    return tree



def package(tree: Path, name: str) -> None:
    (tree / name).mkdir()
    (tree / name / "__init__.py").write_text("")


def test_yolov5_layout_shadows_nothing_here(tree: Path) -> None:
    """The folders and scripts of a yolov5-like repo are not flagged without a namesake."""
    for name in ("utils", "models", "segment", "classify"):
        package(tree, name)
    for name in ("export", "detect", "train", "val", "benchmarks", "setup"):
        (tree / f"{name}.py").write_text("")
    for name in ("data", "tools", "docs", "test", "tests"):  # no __init__.py: not packages
        (tree / name).mkdir()
    (tree / "requirements.txt").write_text("torch\n")
    assert shadowing(tree) == []


def test_standard_library_names_are_flagged(tree: Path) -> None:
    assert UNUSED_STDLIB not in sys.modules
    (tree / f"{UNUSED_STDLIB}.py").write_text("")
    (tree / "json.py").write_text("")                      # json is imported already
    (tree / "sys.py").write_text("")                       # built in: cannot be shadowed
    (tree / "this.py").write_text("")                      # a demo nobody imports
    (tree / f"email{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_text("")  # compiled
    found = {s.name: s for s in shadowing(tree)}
    assert sorted(found) == ["email", "json", UNUSED_STDLIB]
    assert found[UNUSED_STDLIB].shadows == "stdlib" and found[UNUSED_STDLIB].takes_effect
    assert found["json"].imported and not found["json"].takes_effect
    assert found["email"].path.name.startswith("email.")


def test_a_distribution_module_is_named_with_its_distribution(tree: Path) -> None:
    owners = top_level_owners()
    name = next(n for n in sorted(owners) if n.isidentifier() and n not in sys.modules
                and n not in sys.stdlib_module_names and not n.startswith("_")
                and importlib.machinery.PathFinder.find_spec(n) is not None)
    package(tree, name)
    [found] = shadowing(tree)
    assert found.name == name and found.kind == "distribution"
    assert found.shadows == "distribution " + ", ".join(owners[name])
    assert found.takes_effect


def test_the_callers_own_module_is_reported_but_never_refused(tree: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    project = tmp_path / "project"
    project.mkdir()
    package(project, "utils")
    monkeypatch.syspath_prepend(str(project))
    package(tree, "utils")
    [found] = shadowing(tree)
    assert found.kind == "module" and str(project / "utils") in found.shadows
    guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo="acme/yolo", tree=tree)
    with guard.active() as report:
        pass
    assert report.shadowing == [found] and report.refused == []


@pytest.mark.parametrize("mode", ["enforce", "observe"])
def test_a_shadow_is_refused_before_any_code_runs(tree: Path, tmp_path: Path, mode: str) -> None:
    canary = tmp_path / "canary"
    (tree / f"{UNUSED_STDLIB}.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    guard = RuntimeGuard(RuntimeRules(mode=mode), repo="acme/models", tree=tree)  # type: ignore[arg-type]
    with pytest.raises(RuntimeGuardError) as info, guard.active():
        raise AssertionError("the block must not run")
    assert info.value.action == "module" and info.value.key == "shadows"
    assert f"replace the standard library's module {UNUSED_STDLIB}" in info.value.message
    assert info.value.hint is not None and 'shadowing = "warn"' in info.value.hint
    assert not canary.exists()
    allowed = RuntimeGuard(RuntimeRules(mode="enforce", shadows=(UNUSED_STDLIB,)),
                           repo="acme/models", tree=tree)
    with allowed.active() as report:
        pass
    assert [s.name for s in report.shadowing] == [UNUSED_STDLIB]
    warned = RuntimeGuard(RuntimeRules(mode=mode, shadowing="warn"),  # type: ignore[arg-type]
                          repo="acme/models", tree=tree)
    with pytest.warns(UserWarning, match=f"module {UNUSED_STDLIB}"), warned.active() as report:
        pass
    assert report.refused == [] and [s.name for s in report.shadowing] == [UNUSED_STDLIB]


@pytest.mark.usefixtures("clean_modules")
def test_a_shadowing_module_is_what_later_imports_get(tree: Path) -> None:
    (tree / f"{UNUSED_STDLIB}.py").write_text("FROM_THE_REPO = True\n")
    package(tree, "acme_helpers")
    (tree / "acme_helpers" / "io.py").write_text("")
    guard = RuntimeGuard(RuntimeRules(mode="observe", shadowing="warn"), repo="acme/models",
                         tree=tree)
    with pytest.warns(UserWarning), guard.active() as report:
        sys.path.insert(0, str(tree))  # as torch does while it imports hubconf
        __import__(UNUSED_STDLIB)
        __import__("acme_helpers.io")
        sys.path.remove(str(tree))
    assert report.leftovers == ["acme_helpers", "acme_helpers.io", UNUSED_STDLIB]
    # after the load, the whole process gets the repo's module for the stdlib name
    assert getattr(__import__(UNUSED_STDLIB), "FROM_THE_REPO", False)
    assert leftovers(tree, before=["acme_helpers", "acme_helpers.io"]) == [UNUSED_STDLIB]


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Install a distribution ``timmish`` on sys.path (its own top-level package), whose
    metadata names ``huggingface/pytorch-image-models`` as its source, as timm's does."""
    from safehub.run import hygiene

    site = tmp_path / "site-packages"
    site.mkdir()
    package(site, "timmish")
    info = site / "timmish-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: timmish\nVersion: 1.0\n"
        "Project-URL: homepage, https://github.com/huggingface/pytorch-image-models\n"
        "Project-URL: Documentation, https://huggingface.co/docs/timm\n")
    (info / "top_level.txt").write_text("timmish\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(hygiene, "_OWNERS", None)  # read the distributions afresh
    yield
    hygiene._OWNERS = None


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("repo", ["huggingface/pytorch-image-models",
                                  "HuggingFace/Pytorch-Image-Models"])
def test_the_source_of_an_installed_distribution_is_warned_about_not_refused(
    tree: Path, repo: str
) -> None:
    package(tree, "timmish")
    guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo=repo, tree=tree)
    with pytest.warns(UserWarning, match="shadows distribution timmish.*its own distribution"), \
            guard.active() as report:
        pass
    assert report.refused == [] and report.shadowing[0].own_distribution


@pytest.mark.usefixtures("installed")
def test_another_repo_shadowing_that_distribution_is_refused(tree: Path) -> None:
    package(tree, "timmish")  # a fork, or any repo carrying a package of that name
    guard = RuntimeGuard(RuntimeRules(mode="observe"), repo="someone/pytorch-image-models",
                         tree=tree)
    with pytest.raises(RuntimeGuardError, match="replace distribution timmish's module"), \
            guard.active():
        raise AssertionError("the block must not run")


@pytest.mark.usefixtures("installed")
def test_the_standard_library_stays_refused_for_a_distributions_source(tree: Path) -> None:
    package(tree, "timmish")
    (tree / f"{UNUSED_STDLIB}.py").write_text("")
    guard = RuntimeGuard(RuntimeRules(mode="observe"), repo="huggingface/pytorch-image-models",
                         tree=tree)
    with pytest.raises(RuntimeGuardError, match="standard library's module"), \
            pytest.warns(UserWarning), guard.active():
        raise AssertionError("the block must not run")


def test_the_listing_shortcut_finds_what_a_path_search_finds(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Differential: for every top-level name importable here, and names that are not,
    the search narrowed by one listing per folder answers as the path finder does."""
    import importlib
    import pkgutil

    from safehub.run import hygiene

    extra = tmp_path / "extra"
    (extra / "pkgdir").mkdir(parents=True)
    (extra / "pkgdir" / "__init__.py").write_text("")
    (extra / "Mixed_Case.py").write_text("")
    (extra / "dotted.name.py").write_text("")
    (extra / "nsdir").mkdir()  # a namespace portion: no location
    monkeypatch.syspath_prepend(str(extra))
    importlib.invalidate_caches()
    importlib.machinery.PathFinder.find_spec("pkgdir", [str(extra)])  # the finder is cached
    monkeypatch.setattr(hygiene, "_SPECS", {})
    others = tuple(sys.path)
    names = sorted({m.name for m in pkgutil.iter_modules()} | {
        "pkgdir", "Mixed_Case", "mixed_case", "dotted", "nsdir", "no_such_module_xyz",
        "os", "torch", "safehub", "json"})
    listed = hygiene._listed(others)
    for name in names:
        spec = importlib.machinery.PathFinder.find_spec(name, list(others))
        want = spec.origin if spec is not None and spec.has_location else None
        assert hygiene._origin(name, others, listed) == want, name
    # A module added later is found: its folder's listing is taken again.
    (extra / "added_later.py").write_text("")
    os.utime(extra, ns=(1, 1))  # an mtime surely unlike the one listed
    importlib.invalidate_caches()
    assert hygiene._origin("added_later", others, hygiene._listed(others)) == str(
        extra / "added_later.py")


@pytest.mark.usefixtures("installed", "clean_modules")
def test_a_renamed_repo_asked_by_its_old_name_is_judged_by_the_name_it_resolved_to(
        make_hub_repo, server, isolated: Path) -> None:  # type: ignore[no-untyped-def]
    """The old name (``rwightman/...``) resolves to the new one, which the distribution
    names as its source: the guard is built for the repo that runs, so the shadowing is its
    own distribution's (a warning), as it is when the new name is asked for."""
    import safehub

    hubconf = 'import timmish\ndependencies = []\n\ndef tiny():\n    """t"""\n    return 1\n'
    make_hub_repo("rwightman", "pytorch-image-models",
                  {"hubconf.py": hubconf, "timmish/__init__.py": ""})
    server.rename_repo("rwightman", "pytorch-image-models", "huggingface",
                       "pytorch-image-models")
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text('[safehub]\nruntime = "enforce"\n'
                      '[[allow]]\nrepo = "huggingface/pytorch-image-models"\n')
    with pytest.warns(UserWarning, match="its own distribution"):
        assert safehub.load("rwightman/pytorch-image-models:v1.0", "tiny",
                            verbose=False) == 1


def test_the_owners_of_a_few_names_are_the_whole_maps_answer() -> None:
    """Differential: looking up only some names (the shortcut a load takes) answers as the
    map of every installed distribution does, for names owned, shared and unowned."""
    from safehub.run.hygiene import owners_of

    owners = top_level_owners()
    names = [*sorted(owners)[:40], "no_such_module_here", "json"]
    assert owners_of(names) == {n: owners.get(n, ()) for n in names}


def test_a_distribution_installed_later_is_seen_by_the_kept_owners(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept answer is dropped when a sys.path entry changes (a new .dist-info folder
    there changes its mtime), so a distribution installed after the first look counts."""
    from safehub.run.hygiene import owners_of

    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert owners_of(["lateinstall"]) == {"lateinstall": ()}
    before = os.stat(site).st_mtime_ns
    info = site / "lateinstall-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: LateInstall\nVersion: 1.0\n")
    (info / "RECORD").write_text("lateinstall/__init__.py,,\n"
                                 "lateinstall-1.0.dist-info/METADATA,,\n")
    os.utime(site, ns=(before + 10**9, before + 10**9))  # a coarse clock still moves on
    assert owners_of(["lateinstall"]) == {"lateinstall": ("LateInstall",)}


@pytest.mark.usefixtures("installed")
def test_a_shadow_is_warned_about_once_per_process_and_recorded_on_every_load(
        tree: Path) -> None:
    import warnings

    package(tree, "timmish")
    guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo="huggingface/pytorch-image-models",
                         tree=tree)
    with pytest.warns(UserWarning, match="shadows distribution timmish"), guard.active():
        pass
    again = RuntimeGuard(RuntimeRules(mode="enforce"), repo="huggingface/pytorch-image-models",
                         tree=tree)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would fail here
        with again.active() as report:
            pass
    assert report.shadowing[0].own_distribution and report.refused == []
