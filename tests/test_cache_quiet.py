"""A warm load's folder scan, not repeated while the kernel reports no change
(safehub/store/cache/quiet.py): inotify watches set before a scan that passed. Every
change the scan would see must still be seen, by a real kernel event, on a real tree; the
cases inotify cannot vouch for (another filesystem, no inotify, a forked child, a swapped
folder above the tree, an overflowing queue) scan every time."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import safehub
from safehub._internal import inotify
from safehub.store.cache import integrity, quiet, warm
from safehub.store.cache.integrity import Survey, survey
from safehub.store.cache.warm import unchanged
from tests.conftest import HubRepo, runs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


@pytest.fixture(autouse=True)
def watcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[quiet.Watcher]:
    """A watcher of this test's own (the process's one is left as it was)."""
    fresh = quiet.Watcher()
    monkeypatch.setattr(warm.STATE, "watcher", fresh)
    yield fresh
    if fresh.fd is not None:
        os.close(fresh.fd)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folder scans run (their trees), counted."""
    seen: list[str] = []
    real = integrity.scan_folders

    def counted(root: Path, folders: object = None) -> str:
        seen.append(str(root))
        return real(root, folders)  # type: ignore[arg-type]

    monkeypatch.setattr(integrity, "scan_folders", counted)
    return seen


def _tree(root: Path) -> Path:
    tree = root / "entry" / "tree"
    for rel in ("a/b/c", "a/d", "e"):
        (tree / rel).mkdir(parents=True)
    for rel in ("hubconf.py", "a/b/c/m.py", "a/d/n.py", "e/o.py"):
        (tree / rel).write_text("x = 1\n")
    return tree


def _armed(tmp_path: Path) -> tuple[Path, Survey]:
    tree = _tree(tmp_path)
    recorded = survey(tree)
    assert unchanged(tree, recorded, checked_on_open=True)  # scans, with the watches set
    return tree, recorded


def test_a_second_check_reads_the_queue_instead_of_scanning(tmp_path: Path,
                                                            scans: list[str]) -> None:
    tree, recorded = _armed(tmp_path)
    assert len(scans) == 1
    for _ in range(3):
        assert unchanged(tree, recorded, checked_on_open=True)
    assert len(scans) == 1
    # The entry scan (check, verify, lock) is never replaced by the watches.
    assert unchanged(tree, recorded, checked_on_open=False)


def _add(tree: Path) -> None:
    (tree / "a/b/c/new.py").write_text("")


def _remove(tree: Path) -> None:
    (tree / "a/d/n.py").unlink()


def _remove_folder(tree: Path) -> None:
    (tree / "a/d/n.py").unlink()
    (tree / "a/d").rmdir()


def _rename(tree: Path) -> None:
    os.rename(tree / "e/o.py", tree / "e/p.py")


def _move_out_and_back(tree: Path) -> None:
    os.rename(tree / "a/b", tree.parent / "b-away")
    os.rename(tree.parent / "b-away", tree / "a/b")


def _chmod_folder(tree: Path) -> None:
    (tree / "a/b").chmod(0o700)


def _folder_to_link(tree: Path) -> None:
    os.rename(tree / "a/b", tree.parent / "b-elsewhere")
    os.symlink(tree.parent / "b-elsewhere", tree / "a/b")


def _tree_swapped_for_a_copy(tree: Path) -> None:
    os.rename(tree, tree.parent / "old")
    shutil.copytree(tree.parent / "old", tree, symlinks=True)


def _folder_above_swapped(tree: Path) -> None:
    entry = tree.parent
    os.rename(entry, entry.parent / "entry-old")
    shutil.copytree(entry.parent / "entry-old", entry, symlinks=True)


@pytest.mark.parametrize("change", [_add, _remove, _remove_folder, _rename,
                                    _move_out_and_back, _chmod_folder, _folder_to_link,
                                    _tree_swapped_for_a_copy, _folder_above_swapped])
def test_every_change_the_scan_sees_is_still_seen(tmp_path: Path, scans: list[str],
                                                  change: Callable[[Path], None],
                                                  watcher: quiet.Watcher) -> None:
    tree, recorded = _armed(tmp_path)
    assert unchanged(tree, recorded, checked_on_open=True)  # armed and quiet
    change(tree)
    assert not unchanged(tree, recorded, checked_on_open=True)
    assert len(scans) == 2  # the change sent it back to the scan
    assert not quiet.quiet(watcher, str(tree), recorded.dirs)


def test_a_childs_attributes_cost_a_scan_that_passes_then_it_is_quiet_again(
        tmp_path: Path, scans: list[str]) -> None:
    """chmod of a file raises an event on its folder but changes no folder: the scan runs,
    passes, and the watches vouch again (the file itself is refused if opened: its ctime)."""
    tree, recorded = _armed(tmp_path)
    (tree / "a/d/n.py").chmod(0o600)
    assert unchanged(tree, recorded, checked_on_open=True)
    assert unchanged(tree, recorded, checked_on_open=True)
    assert len(scans) == 2


def test_a_file_written_in_place_raises_no_event_and_is_left_to_the_check_on_open(
        tmp_path: Path, scans: list[str]) -> None:
    tree, recorded = _armed(tmp_path)
    (tree / "a/d/n.py").write_text("x = 2\n")
    assert unchanged(tree, recorded, checked_on_open=True)
    assert len(scans) == 1  # as the scan itself would say: no folder changed


def test_a_tree_on_another_filesystem_is_scanned_every_time(
        tmp_path: Path, scans: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inotify, "fs_type", lambda path: 0x6969)  # NFS
    tree = _tree(tmp_path)
    recorded = survey(tree)
    for _ in range(3):
        assert unchanged(tree, recorded, checked_on_open=True)
    assert len(scans) == 3


def test_without_inotify_every_check_scans(tmp_path: Path, scans: list[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> int:
        raise OSError(24, "Too many open files")  # out of inotify instances

    monkeypatch.setattr(inotify, "init", refused)
    tree = _tree(tmp_path)
    recorded = survey(tree)
    for _ in range(3):
        assert unchanged(tree, recorded, checked_on_open=True)
    assert len(scans) == 3


def test_too_many_folders_are_scanned_every_time(tmp_path: Path, scans: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quiet, "MAX_WATCHES", 3)
    tree = _tree(tmp_path)
    recorded = survey(tree)
    for _ in range(2):
        assert unchanged(tree, recorded, checked_on_open=True)
    assert len(scans) == 2


def test_an_overflowing_queue_means_a_scan(tmp_path: Path, scans: list[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    tree, recorded = _armed(tmp_path)
    real = inotify.events
    monkeypatch.setattr(inotify, "events", lambda fd: iter([(-1, inotify.OVERFLOW)]))
    assert unchanged(tree, recorded, checked_on_open=True)
    monkeypatch.setattr(inotify, "events", real)
    assert len(scans) == 2


def test_a_forked_child_does_not_read_its_parents_queue(tmp_path: Path, scans: list[str],
                                                        watcher: quiet.Watcher) -> None:
    """A child shares its parent's inotify file: were it to read the queue, the parent
    would miss the events. It scans on its own, and the parent still sees a change."""
    tree, recorded = _armed(tmp_path)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: not quiet (its parent's watches), then a scan of its own
        try:
            ok = (not quiet.quiet(watcher, str(tree), recorded.dirs)
                  and unchanged(tree, recorded, checked_on_open=True)
                  and quiet.quiet(watcher, str(tree), recorded.dirs))
            _add(tree)
            ok = ok and not unchanged(tree, recorded, checked_on_open=True)
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"ok"
    assert not unchanged(tree, recorded, checked_on_open=True)  # the parent saw it too


def test_the_event_reader_parses_names_of_any_length(tmp_path: Path) -> None:
    fd = inotify.init()
    assert fd is not None
    try:
        inotify.add_watch(fd, str(tmp_path))
        names = ["a", "b" * 200, "c" * 17]
        for name in names:
            (tmp_path / name).write_text("")
        got = list(inotify.events(fd))
        assert len(got) == len(names) and all(mask & 0x100 for _, mask in got)  # IN_CREATE
        assert list(inotify.events(fd)) == []  # drained, and it did not block
    finally:
        os.close(fd)


def test_a_link_is_not_watched(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    fd = inotify.init()
    assert fd is not None
    try:
        with pytest.raises(OSError):
            inotify.add_watch(fd, str(tmp_path / "link"))
    finally:
        os.close(fd)


# -- through real loads -------------------------------------------------------------------

def _load(spec: str) -> object:
    return safehub.load(spec, "tiny", trust_repo=True, verbose=False)


def _cache_tree(commit: str) -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "safehub/v1/commits" / commit / "tree"


def test_warm_loads_in_one_process_scan_once_and_still_refuse_a_removed_file(
        make_hub_repo, scans: list[str], canary: Path) -> None:  # type: ignore[no-untyped-def]
    repo: HubRepo = make_hub_repo(files={"zoo/__init__.py": "", "zoo/net.py": "V = 1\n",
                                         "zoo/deep/more.py": "W = 2\n"})
    spec = f"{repo.spec}:v1.0"
    _load(spec)  # cold: verified, nothing scanned
    for _ in range(3):
        _load(spec)
    assert len(scans) == 1  # the first warm load scanned, with the watches set
    tree = _cache_tree(repo.sha)
    (tree / "zoo/deep").chmod(0o755)
    (tree / "zoo/deep/more.py").unlink()  # a removal: no file is opened to notice it
    with pytest.raises(safehub.IntegrityError):
        _load(spec)
    assert runs(canary) == 4
