"""The user's store of compiled modules, by itself: keys, entries, its bound."""

from __future__ import annotations

import marshal
import stat
from pathlib import Path

import pytest

from safehub.store import bytecode
from safehub.store.bytecode import BytecodeStore, key


def test_the_key_changes_with_every_input_of_the_compiler() -> None:
    base = key("/t/a.py", b"x = 1\n", 0)
    assert len({base, key("/t/b.py", b"x = 1\n", 0), key("/t/a.py", b"x = 2\n", 0),
                key("/t/a.py", b"x = 1\n", 1)}) == 4
    assert key("/t/a.py", b"x = 1\n", 0) == base


def test_an_entry_reads_back_as_the_code_written(tmp_path: Path) -> None:
    store = BytecodeStore(tmp_path)
    code = compile("VALUE = 3\n", "/t/a.py", "exec", dont_inherit=True)
    assert store.read("k") is None
    assert store.write("k", code)
    assert store.read("k") == code
    assert stat.S_IMODE((store.root / "k").stat().st_mode) == 0o400
    assert [p.name for p in store.root.iterdir()] == ["k"]  # no temp file left


@pytest.mark.parametrize("data", [b"", b"\xe3\x00", marshal.dumps(["not", "code"]),
                                  b"garbage" * 10])
def test_what_is_not_a_code_object_reads_as_absent(tmp_path: Path, data: bytes) -> None:
    store = BytecodeStore(tmp_path)
    store.root.mkdir()
    (store.root / "k").write_bytes(data)
    assert store.read("k") is None


def test_a_store_that_cannot_be_written_is_no_store(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the data dir should be\n")  # even as root
    store = BytecodeStore(tmp_path / "data")
    assert not store.write("k", compile("", "x", "exec"))
    assert store.read("k") is None


def test_a_store_grown_past_its_bound_starts_afresh(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bytecode, "MAX_ENTRIES", 3)
    code = compile("", "x", "exec")
    old = BytecodeStore(tmp_path)
    for name in "abcd":
        old.write(name, code)  # one process checks once, on its first write
    assert len(list(old.root.iterdir())) == 4
    BytecodeStore(tmp_path).write("e", code)  # the next process finds it too large
    assert [p.name for p in old.root.iterdir()] == ["e"]
