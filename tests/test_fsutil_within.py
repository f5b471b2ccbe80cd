"""``within`` and ``within_any``: one decision (is a path in a folder, by whole
components), two spellings; the second answers for many folders in one test."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from safehub._internal.fsutil import those_within, within, within_any

PATHS = st.lists(st.sampled_from(["a", "b", os.sep, ".", "ab"]), max_size=8).map("".join)


@settings(derandomize=True)
@given(PATHS, st.lists(PATHS, max_size=5))
def test_within_any_is_within_for_one_of_them(path: str, folders: list[str]) -> None:
    assert within_any(path, folders) == any(within(path, f) for f in folders)
    assert those_within([path, path + "x"], folders) == [
        p for p in (path, path + "x") if any(within(p, f) for f in folders)]


def test_whole_components_only() -> None:
    assert within_any("/data/run", ["/x", "/data"]) and within_any("/data", ["/data/"])
    assert not within_any("/data2", ["/data"]) and not within_any("/data", [])
