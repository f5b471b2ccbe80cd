"""The cached tree's folder scan (safehub/store/cache/integrity.py): the warm load's check that
no entry was added, removed, renamed or replaced anywhere in a verified tree. The scan by
the recorded folder list (what a warm load runs) must equal the scan that lists every
folder (what was recorded at verification), and any change must make them differ."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from safehub.errors import IntegrityError
from safehub.store.cache.integrity import scan_folders, survey


def _tree(root: Path) -> Path:
    tree = root / "tree"
    for rel in ("a/b/c", "a/d", "e"):
        (tree / rel).mkdir(parents=True)
    for rel in ("hubconf.py", "a/b/c/m.py", "a/d/n.py", "e/o.py"):
        (tree / rel).write_text("x = 1\n")
    return tree


def test_the_scan_by_folder_list_equals_the_listing_scan(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    recorded = survey(tree)
    assert set(recorded.folders) == {"", "a", "a/b", "a/b/c", "a/d", "e"}
    assert scan_folders(tree, recorded.folders) == recorded.dirs == scan_folders(tree)


def _add(tree: Path) -> None:
    (tree / "a/b/c/new.py").write_text("")


def _remove_folder(tree: Path) -> None:
    (tree / "a/d/n.py").unlink()
    (tree / "a/d").rmdir()


def _rename(tree: Path) -> None:
    os.rename(tree / "e/o.py", tree / "e/p.py")


def _folder_to_link(tree: Path) -> None:
    os.rename(tree / "a/b", tree.parent / "b-elsewhere")
    os.symlink(tree.parent / "b-elsewhere", tree / "a/b")


def _tree_to_link(tree: Path) -> None:
    os.rename(tree, tree.parent / "real")
    os.symlink(tree.parent / "real", tree)


@pytest.mark.parametrize("change", [_add, _remove_folder, _rename, _folder_to_link])
def test_a_change_anywhere_changes_the_scan(tmp_path: Path,
                                            change: Callable[[Path], None]) -> None:
    tree = _tree(tmp_path)
    recorded = survey(tree)
    change(tree)
    assert scan_folders(tree, recorded.folders) != recorded.dirs


def test_a_tree_swapped_for_a_link_cannot_be_scanned(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    recorded = survey(tree)
    _tree_to_link(tree)
    with pytest.raises(IntegrityError, match="cannot be listed"):
        scan_folders(tree, recorded.folders)
