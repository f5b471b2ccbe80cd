"""Files of a verified tree, checked as code opens them (safehub/store/cache/integrity.py), on real
parts: a warm cache edited in place, swapped folders, lazy imports after the load returned,
every path form; and committed bytecode, which never runs in place of its source.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import TamperedError
from tests.conftest import HUBCONF, HubRepo


def policy(isolated: Path, text: str, where: str = "config") -> Path:
    path = isolated / where / "safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cache_tree(isolated: Path) -> Path:
    return next(isolated.rglob("commits/*/tree"))


def edit(path: Path, text: str) -> None:
    """Edit a sealed cache file in place, leaving its folder untouched."""
    path.chmod(0o644)
    path.write_text(text)
    path.chmod(0o444)


# -- a warm cache is re-checked on every read by the repo's code ---------------------------

READS = HUBCONF + '''
import os as _os

_here = _os.path.dirname(__file__)


def absolute():
    with open(_os.path.join(_here, "cfg.txt")) as f:
        return f.read()


def relative():
    old = _os.getcwd()
    _os.chdir(_here)
    try:
        with open("cfg.txt") as f:
            return f.read()
    finally:
        _os.chdir(old)


def as_bytes():
    with open(_os.fsencode(_os.path.join(_here, "cfg.txt"))) as f:
        return f.read()


def lazy():
    import lazypkg
    return lazypkg.Model()


def beside():
    with open(_os.path.join(_here, "..", "beside.txt")) as f:  # outside the tree
        return f.read()
'''

LAZY = {
    "lazypkg/__init__.py": "class Model:\n    def forward(self):\n"
                           "        from lazypkg import late\n        return late.run()\n"
                           "    def again(self):\n"
                           "        from lazypkg import later\n        return later.run()\n"
                           "    def deep(self):\n"
                           "        from lazypkg.inner import deep\n        return deep.run()\n",
    "lazypkg/late.py": "def run():\n    return 'good'\n",
    "lazypkg/later.py": "def run():\n    return 'good'\n",
    "lazypkg/inner/__init__.py": "",
    "lazypkg/inner/deep.py": "def run():\n    return 'good'\n",
}
EVIL = ("import os\nopen(os.environ['SAFEHUB_TEST_CANARY'], 'a').write('evil\\n')\n"
        "def run():\n    return 'EVIL'\n")


@pytest.fixture
def reader(make_hub_repo, isolated: Path) -> HubRepo:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    repo: HubRepo = make_hub_repo(files={"hubconf.py": READS, "cfg.txt": "good\n", **LAZY})
    policy(isolated, "[[allow]]\nrepo = 'acme/models'\n")
    return repo


@pytest.mark.parametrize("entrypoint", ["absolute", "relative", "as_bytes"])
def test_a_data_file_edited_in_a_warm_cache_is_refused_when_read(
    reader: HubRepo, isolated: Path, entrypoint: str
) -> None:
    assert safehub.load("acme/models:v1.0", entrypoint, verbose=False) == "good\n"
    edit(cache_tree(isolated) / "cfg.txt", "EVIL\n")
    with pytest.raises(safehub.IntegrityError, match="cfg.txt"):
        safehub.load("acme/models:v1.0", entrypoint, verbose=False)


@pytest.mark.usefixtures("clean_modules")
def test_a_module_imported_after_the_load_returned_is_rechecked(
    reader: HubRepo, isolated: Path, canary: Path
) -> None:
    safehub.load("acme/models:v1.0", "absolute", verbose=False)
    edit(cache_tree(isolated) / "lazypkg/late.py",
         "import os\nopen(os.environ['SAFEHUB_TEST_CANARY'], 'a').write('evil\\n')\n"
         "def run():\n    return 'EVIL'\n")
    model = safehub.load("acme/models:v1.0", "lazy", verbose=False)  # late.py not read yet
    with pytest.raises(safehub.IntegrityError, match="late.py"):
        model.forward()
    assert "evil" not in (canary.read_text() if canary.exists() else "")


@pytest.mark.usefixtures("clean_modules")
def test_an_untouched_warm_cache_reads_and_imports_as_before(reader: HubRepo) -> None:
    safehub.load("acme/models:v1.0", "absolute", verbose=False)
    for entrypoint in ("absolute", "relative", "as_bytes"):
        assert safehub.load("acme/models:v1.0", entrypoint, verbose=False) == "good\n"
    assert safehub.load("acme/models:v1.0", "lazy", verbose=False).forward() == "good"


def prepared(folder: Path, files: dict[str, str]) -> Path:
    """A copy made *before* the tree is verified, on the cache's filesystem: its files and
    folders read-only, all their ctimes older than the tree's sealed time."""
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    for path in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
        path.chmod(0o444 if path.is_file() else 0o555)
    return folder


def swap(place: Path, replacement: Path) -> None:
    """Rename ``place`` away and ``replacement`` in (what a writer of its parent can do)."""
    place.parent.chmod(0o755)
    place.rename(place.parent / f"aside-{place.name}")
    replacement.rename(place)


@pytest.mark.usefixtures("clean_modules")
def test_a_commit_folder_swapped_after_the_warm_check_is_refused_before_its_code_runs(
    reader: HubRepo, isolated: Path, canary: Path
) -> None:
    commits = isolated / "cache/safehub/v1/commits"
    commits.mkdir(parents=True)
    copy = prepared(commits.parent / "prepared", {
        f"tree/{rel}": text for rel, text in
        {"hubconf.py": READS, "cfg.txt": "good\n", **LAZY, "lazypkg/late.py": EVIL}.items()})
    safehub.load("acme/models:v1.0", "absolute", verbose=False)  # cold: verified, sealed
    model = safehub.load("acme/models:v1.0", "lazy", verbose=False)  # warm: folders checked
    swap(commits / reader.sha, copy)  # old ctimes, read-only: each file passes on its own
    with pytest.raises(TamperedError, match=r"cached folder '.*/tree' is not the "
                       r"folder safehub verified.*lazypkg.*late"):
        model.forward()
    assert "evil" not in (canary.read_text() if canary.exists() else "")


@pytest.mark.usefixtures("clean_modules")
def test_a_folder_inside_the_tree_swapped_after_the_load_is_refused(
    reader: HubRepo, isolated: Path, canary: Path
) -> None:
    commits = isolated / "cache/safehub/v1/commits"
    commits.mkdir(parents=True)
    copy = prepared(commits.parent / "prepared", {"__init__.py": "", "deep.py": EVIL})
    model = safehub.load("acme/models:v1.0", "lazy", verbose=False)
    swap(cache_tree(isolated) / "lazypkg/inner", copy)  # the tree folder itself untouched
    with pytest.raises(TamperedError, match=r"cached folder '.*/tree/lazypkg' changed "
                       r"after safehub verified it.*lazypkg/inner/"):
        model.deep()
    assert "evil" not in (canary.read_text() if canary.exists() else "")


@pytest.mark.usefixtures("clean_modules")
def test_lazy_imports_of_an_untouched_tree_keep_working_folder_checks_included(
    reader: HubRepo, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lazy imports from one folder, with bytecode writing on (as root it would succeed
    and change the folder): Python writes no ``__pycache__`` into a watched tree."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    safehub.load("acme/models:v1.0", "absolute", verbose=False)
    model = safehub.load("acme/models:v1.0", "lazy", verbose=False)
    assert (model.forward(), model.again(), model.deep()) == ("good", "good", "good")
    assert not list(cache_tree(isolated).rglob("__pycache__"))


def test_a_path_that_leaves_the_tree_through_dot_dot_is_not_the_trees(
    reader: HubRepo, isolated: Path
) -> None:
    safehub.load("acme/models:v1.0", "absolute", verbose=False)
    outside = cache_tree(isolated).parent / "beside.txt"
    outside.parent.chmod(0o755)
    outside.write_text("mine\n")  # written after the tree was sealed: not a tree file
    assert safehub.load("acme/models:v1.0", "beside", verbose=False) == "mine\n"


# -- bytecode committed to a repo never runs in place of its source ------------------------

def _unchecked_pyc(tmp_path: Path, source: str) -> bytes:
    import py_compile

    src, out = tmp_path / "evil.py", tmp_path / "evil.pyc"
    src.write_text(source)
    py_compile.compile(str(src), cfile=str(out), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return out.read_bytes()


EVIL_HUBCONF = '''import os
open(os.environ["SAFEHUB_TEST_CANARY"], "a").write("bytecode ran\\n")
dependencies = []


def model():
    return "HIDDEN BYTECODE"
'''


@pytest.mark.usefixtures("clean_modules")
@pytest.mark.parametrize("runtime", ["observe", "enforce"])
def test_committed_bytecode_never_runs_and_stays_part_of_the_tree(
    make_hub_repo, isolated: Path, tmp_path: Path, canary: Path, runtime: str  # type: ignore[no-untyped-def]
) -> None:


    tag = sys.implementation.cache_tag
    source = ('dependencies = []\n\n\ndef model():\n    import lib\n'
              '    return "REVIEWED SOURCE" if lib.VALUE == "source" else lib.VALUE\n')
    make_hub_repo("acme", "models", {
        "hubconf.py": source,
        f"__pycache__/hubconf.{tag}.pyc": _unchecked_pyc(tmp_path, EVIL_HUBCONF),
        "lib/__init__.py": "VALUE = 'source'\n",
        f"lib/__pycache__/__init__.{tag}.pyc": _unchecked_pyc(tmp_path, "VALUE = 'pyc'\n")})
    policy(isolated, f'[safehub]\nruntime = "{runtime}"\n[[allow]]\nrepo = "acme/models"\n',
           "config")
    for _ in range(2):  # cold, then warm
        assert safehub.load("acme/models:v1.0", "model", verbose=False) == "REVIEWED SOURCE"
    assert "bytecode ran" not in (canary.read_text() if canary.exists() else "")
    assert main(["cache", "verify"]) == 0  # the commit's bytecode is the tree's: kept


# -- 8. the caller's objects are never evaluated while safehub has paused the guard ----------


@pytest.mark.usefixtures("clean_modules")
def test_reads_outside_every_tree_are_untouched_in_every_form(reader: HubRepo,
                                                                tmp_path: Path) -> None:
    """The hook's fast path: files outside the watched tree open as without safehub,
    whatever the name looks like, and what the open itself raises is unchanged."""
    safehub.load("acme/models:v1.0", "absolute", verbose=False)
    mine = tmp_path / "mine.txt"
    mine.write_text("x")
    os.chdir(tmp_path)
    for name in (str(mine), "mine.txt", b"mine.txt", mine, f"{tmp_path}/./mine.txt",
                 f"{tmp_path}/../{tmp_path.name}/mine.txt"):
        with open(name) as f:  # type: ignore[call-overload]
            assert f.read() == "x"
    for missing in ("", "nope.txt", b"", "/nonexistent/../x"):
        with pytest.raises(FileNotFoundError):
            open(missing)  # noqa: SIM115
