"""Fuzzing the archive reader with mutated real `git archive` zips.

Whatever the bytes (fields of the end records, central and local headers, names, flags,
sizes, modes, offsets, extra fields, comments, truncation, insertions), only a
SafehubError may escape :func:`extract` and :func:`check_tree`, and nothing may be
written outside the staging folder.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from archive_helpers import EXEC, FILE, GITLINK, LINK, Case, Entry, Repo, layout, patch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safehub._internal.fsutil import rmtree
from safehub.config import Limits
from safehub.errors import SafehubError
from safehub.verify.archive import check_tree, extract

SCALE = int(os.environ.get("SAFEHUB_FUZZ_SCALE", "1"))

# Offsets and widths of the fixed fields of each record (APPNOTE 4.3.7, 4.3.12, 4.3.16).
LOCAL = [(4, 2), (6, 2), (8, 2), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2)]
CENTRAL = [(4, 2), (6, 2), (8, 2), (10, 2), (16, 4), (20, 4), (24, 4), (28, 2), (30, 2),
           (32, 2), (34, 2), (38, 4), (42, 4)]
END = [(4, 2), (6, 2), (8, 2), (10, 2), (12, 4), (16, 4), (20, 2)]
SPECIAL = [0, 1, 0x10, 0x800, 0xFFFF, 0xFFFFFFFF, 0x7FFFFFFF, 0o100755 << 16, 0o120777 << 16,
           0o040755 << 16, 0o020644 << 16, 0o010644 << 16]
NAME_BYTES = [b"/", b".", b"..", b"\\", b"\0", b"\xff", b"\n", b"A", b"\xc3\xa9", b"//", b"~"]


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Case, bytes]]:
    repo = Repo(tmp_path_factory.mktemp("fuzz") / "r.git")
    cases = [
        Case({"hubconf.py": Entry(FILE, b"def m():\n    return 1\n" * 20),
              "pkg/__init__.py": Entry(FILE, b""), "pkg/run.sh": Entry(EXEC, b"#!/bin/sh\n"),
              "pkg/link.py": Entry(LINK, b"../hubconf.py"), "caf\u00e9/n.txt": Entry(FILE, b"n\n"),
              "ext/sub": Entry(GITLINK, sha="3" * 40)}),
        Case({".gitattributes": Entry(FILE, b"*.txt eol=crlf ident\nv.py export-subst\n"
                                            b"tests/ export-ignore\n"),
              "a.txt": Entry(FILE, b"$Id$\none\n"), "v.py": Entry(FILE, b"V='$Format:%h$'\n"),
              "tests/t.py": Entry(FILE, b"t\n"), "w.bin": Entry(FILE, bytes(range(256)) * 40)}),
    ]
    repo.commit_all(cases)
    return [(case, repo.archive(case)) for case in cases]


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    lay = layout(data)
    kind = draw(st.integers(0, 7))
    k = draw(st.integers(0, len(lay.central) - 1))
    if kind <= 2:
        base, fields = [(lay.local[k], LOCAL), (lay.central[k], CENTRAL), (lay.eocd, END)][kind]
        offset, width = draw(st.sampled_from(fields))
        value = draw(st.one_of(st.sampled_from(SPECIAL), st.integers(0, 2 ** (8 * width) - 1)))
        old = int.from_bytes(data[base + offset:base + offset + width], "little")
        value = draw(st.sampled_from([value, old + 1, max(old - 1, 0)])) % 2 ** (8 * width)
        return patch(data, base + offset, value.to_bytes(width, "little"))
    if kind == 3:  # a byte of a name, in the central entry, the local header, or both
        name_len = struct.unpack_from("<H", data, lay.central[k] + 28)[0]
        at = draw(st.integers(0, max(name_len - 1, 0)))
        new = draw(st.sampled_from(NAME_BYTES))[:max(name_len - at, 0)]
        where = draw(st.sampled_from([(lay.central[k] + 46,), (lay.local[k] + 30,),
                                      (lay.central[k] + 46, lay.local[k] + 30)]))
        for base in where:
            data = patch(data, base + at, new)
        return data
    if kind == 4:  # bytes overwritten anywhere
        at = draw(st.integers(0, len(data) - 1))
        return patch(data, at, draw(st.binary(min_size=1, max_size=8))[:len(data) - at])
    if kind == 5:  # truncated, or junk appended
        cut = draw(st.integers(0, len(data)))
        return data[:cut] + draw(st.binary(max_size=4))
    if kind == 6:  # bytes inserted (everything after shifts)
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=64)) + data[at:]
    # the extra field of an entry rewritten (zip64, unix times, garbage)
    extra = draw(st.sampled_from([b"\x01\x00\x08\x00" + b"\xff" * 8, b"\x01\x00\x00\x00",
                                  b"UT\x05\x00\x01\x00\x00\x00", b"\xff" * 9,
                                  b"\x01\x00\x10\x00" + b"\x00" * 16]))
    base = lay.central[k]
    name_len, extra_len = struct.unpack_from("<2H", data, base + 28)
    start = base + 46 + name_len
    return patch(data, start, extra[:extra_len]) if extra_len else data


def _snapshot(root: Path) -> set[tuple[str, int]]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            out.add((os.path.relpath(p, root), os.lstat(p).st_mtime_ns))
    return out


@pytest.mark.slow
@settings(max_examples=1000 * SCALE, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_only_safehub_errors_and_nothing_outside_the_stage(
        archives: list[tuple[Case, bytes]], tmp_path: Path, data: st.DataObject) -> None:
    case, honest = data.draw(st.sampled_from(archives))
    mutated = data.draw(mutations(honest))
    outside, stage = tmp_path / "outside", tmp_path / "stage"
    rmtree(stage)
    stage.mkdir()
    outside.mkdir(exist_ok=True)
    (outside / "victim").write_text("keep")
    (tmp_path / "a.zip").write_bytes(mutated)
    before = _snapshot(tmp_path / "outside")
    try:
        ext = extract(tmp_path / "a.zip", stage / "tree", commit=case.commit,
                      limits=Limits(max_files=64, max_tree_bytes=1 << 20))
        check_tree(ext, case.tree, case.listing(), allow_fallback=True,
                   fetch_blob=case.fetch_blob)
    except SafehubError:
        pass
    assert _snapshot(tmp_path / "outside") == before
    assert sorted(os.listdir(stage)) in ([], ["tree"])
    tree = stage / "tree"
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if p.is_symlink():
                assert os.path.realpath(p).startswith(os.path.realpath(tree) + os.sep) or \
                    not p.exists()
