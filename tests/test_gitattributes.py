"""Attributes read as git reads them: `git check-attr` is the oracle.

Hypothesis writes random `.gitattributes` files (top level and nested, random patterns
over git's glob alphabet, quoted patterns, macros, every kind of state) and asks git and
safehub about random paths, files and folders (`path/`, as `git archive` asks).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from archive_helpers import FILE, Case, Entry, Repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safehub.verify.gitattributes import Attributes, parse_file
from safehub.verify.gitattributes._wildmatch import Pattern, byte_set

SCALE = int(os.environ.get("SAFEHUB_FUZZ_SCALE", "1"))
GLOB = [*list("ab*?[]!^-\\/:."), "é", "[:alpha:]", "[:digit:]", "[:nope:]", "**", "x/"]
COMPONENT = st.text(alphabet=[*list("ab*?[]!^-:.x\\"), "é"], min_size=1, max_size=4).filter(
    lambda c: c not in (".", "..") and c.lower() != ".git")
STATES = ["s1", "-s1", "!s1", "s2=v", "s2", "-s2", "m1", "-m1", "m2", "binary", "text",
          "eol=crlf", "s3=v=w", "=x", "bad@name"]  # builtin_*: reserved since git 2.43
MACROS = ["[attr]m1 s1 -s2", "[attr]m2 m1 s3=deep", "[attr]binary s1", "[attr] s1",
          "[attr]bad@ s1"]


@st.composite
def lines(draw: st.DrawFn, top: bool) -> bytes:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            out.append(draw(st.sampled_from(MACROS)))
            continue
        pattern = "".join(draw(st.lists(st.sampled_from(GLOB), min_size=1, max_size=6)))
        if kind == 1:
            escaped = pattern.replace("\\", "\\\\").replace('"', '\\"')
            pattern = '"' + escaped + draw(st.sampled_from(["", "\\t", " b", "\\101"])) + '"'
        states = draw(st.lists(st.sampled_from(STATES), max_size=3))
        out.append(" ".join([pattern, *states]))
    return ("\n".join(out) + "\n").encode()


@st.composite
def setups(draw: st.DrawFn) -> tuple[dict[str, bytes], list[tuple[str, bool]]]:
    folders = ["", *draw(st.lists(st.builds("/".join, st.lists(COMPONENT, min_size=1,
                                                                  max_size=2)), max_size=2))]
    files = {(f + "/" if f else "") + ".gitattributes": draw(lines(not f)) for f in folders}
    paths = draw(st.lists(st.tuples(st.lists(COMPONENT, min_size=1, max_size=4),
                                    st.booleans()), min_size=1, max_size=12))
    asked = [("/".join(parts), isdir) for parts, isdir in paths]
    asked += [(f"{f}/{parts[-1]}", isdir) for f in folders if f for parts, isdir in paths[:3]]
    return files, asked


def _git_answers(repo: Repo, case: Case, asked: list[tuple[str, bool]]) -> list[dict[str, str]]:
    repo.git("read-tree", case.commit)
    query = b"".join((p + ("/" if d else "")).encode() + b"\0" for p, d in asked)
    out = repo.git("check-attr", "--cached", "-a", "-z", "--stdin", data=query).split(b"\0")
    answers: dict[str, dict[str, str]] = {}
    for k in range(0, len(out) - 1, 3):
        path, attr, value = (x.decode() for x in out[k:k + 3])
        answers.setdefault(path, {})[attr] = value
    return [answers.get(p + ("/" if d else ""), {}) for p, d in asked]


def _ours(attrs: Attributes, path: str, isdir: bool) -> dict[str, str]:
    shown = {True: "set", False: "unset"}
    return {name: shown.get(a.value, a.value) if not isinstance(a.value, str) else a.value
            for name, a in attrs.lookup(path, isdir=isdir).items() if a.value is not None}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    work = tmp_path_factory.mktemp("attrs") / "work"
    r = Repo.__new__(Repo)
    r.path, r.env = work, Repo(work.parent / "unused.git").env
    work.mkdir()
    r.git("init", "-q")
    return r


@pytest.mark.slow
@settings(max_examples=25 * SCALE, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(setups(), min_size=8, max_size=8))
def test_attributes_match_git_check_attr(repo: Repo, batch: list[
        tuple[dict[str, bytes], list[tuple[str, bool]]]]) -> None:
    cases = [Case({p: Entry(FILE, data) for p, data in files.items()}) for files, _ in batch]
    repo.commit_all(cases)
    for case, (files, asked) in zip(cases, batch, strict=True):
        attrs = Attributes(files, legacy=True)  # this git is older than 2.52
        for (path, isdir), theirs in zip(asked, _git_answers(repo, case, asked), strict=True):
            assert _ours(attrs, path, isdir) == theirs, (path, isdir, files)


@pytest.mark.parametrize(("pattern", "path", "isdir", "expected"), [
    ("**/tests", "tests", False, True),             # a leading **/ also matches at the top
    ("**/tests", "a/b/tests", False, True),
    ("docs/**/internal", "docs/internal", False, True),  # /**/ matches zero folders
    ("docs/**/internal", "docs/a/b/internal", False, True),
    ("a/**", "a", True, False),                     # a trailing /** is what is inside
    ("a/**", "a/b/c", False, True),
    ("tests/", "tests", False, False),              # a trailing / matches folders only
    ("tests/", "tests", True, True),
    ("tests/", "x/tests", True, True),
    ("/x.py", "a/x.py", False, False),              # a / anchors
    ("d/x.py", "a/d/x.py", False, False),
    ("*.py", "a/b.py", False, True),                # no / : the last component
    ("X.py", "x.py", False, False),                 # case matters
    ("?", "é", False, False),                       # ? is one byte
    ("[[:alpha:]]*", "é", False, False),            # classes are ASCII
    ("foo**/bar", "foobar", False, False),          # git 2.52 and later
    ("a[", "a[", False, False),                     # a malformed set matches nothing
    ("\\*", "*", False, True),
])
def test_patterns(pattern: str, path: str, isdir: bool, expected: bool) -> None:
    assert Pattern(pattern.encode()).matches(path.encode(), isdir=isdir) is expected


def test_byte_sets() -> None:
    members, end = byte_set(b"[a-c\\]x]", 0)
    assert members == frozenset(b"abc]x") and end == 8
    assert byte_set(b"[[:nope:]]", 0)[0] is None


def test_line_grammar() -> None:
    data = (b"\xef\xbb\xbf*.py text\n"          # a BOM stays part of the first pattern
            b"  # comment\n"
            b"*.a " + b"x" * 2048 + b"\n"       # a line of 2048 bytes or more is ignored
            b"*.b s1 bad@name\n"                # one invalid name drops the line
            b"!*.c s1\n"                        # negative patterns are not allowed
            b"\"q d.py\"s1 -s2 !s3 s4=v\r\n"    # quoted; CR is a blank
            b"[attr]mac s1\n"
            b"*.e s1\0*.f s1\n")                # nothing after a NUL counts
    top = parse_file(".gitattributes", data, macros_ok=True)
    assert [line.number for line in top] == [1, 6, 7, 8]
    quoted = top[1]
    assert quoted.pattern is not None and quoted.pattern.raw == b"q d.py"
    assert [(s.name, s.value) for s in quoted.states] == [
        ("s1", True), ("s2", False), ("s3", None), ("s4", "v")]
    assert not parse_file("a/.gitattributes", b"[attr]mac s1\n", macros_ok=False)
    assert not parse_file("a", b"*.py builtin_objectmode\n", macros_ok=True)
    assert not parse_file("a", b"*" * (100 * 1024 * 1024), macros_ok=True)


def test_deeper_files_and_later_lines_win_and_macros_fill_what_is_left() -> None:
    attrs = Attributes({
        ".gitattributes": b"[attr]skip export-ignore -diff\n* text skip\n*.py -text\n",
        "a/.gitattributes": b"*.py text=auto !skip\n[attr]nested export-ignore\n*.py nested\n",
    })
    top = attrs.lookup("x.py")
    assert top["text"].value is False and top["export-ignore"].value is True
    assert top["export-ignore"].macro == "skip" and top["export-ignore"].line.number == 2
    deep = attrs.lookup("a/x.py")
    assert deep["text"].value == "auto" and deep["skip"].value is None
    assert "export-ignore" not in deep and "nested" in deep  # macros only at the top
    # A folder's own .gitattributes does not apply to the folder itself.
    assert Attributes({"a/.gitattributes": b"* export-ignore\n"}).value(
        "a", "export-ignore", isdir=True) is None
    # binary, and a redefinition of it at the top.
    assert Attributes({".gitattributes": b"*.bin binary\n"}).value("x.bin", "text") is False
    redefined = Attributes({".gitattributes": b"[attr]binary export-ignore\n*.bin binary\n"})
    assert redefined.value("x.bin", "export-ignore") is True
    assert redefined.value("x.bin", "text") is None


def test_the_pre_2_52_reading_is_kept_apart(tmp_path: Path) -> None:
    files = {".gitattributes": b"foo**/bar export-ignore\n"}
    assert Attributes(files).version_sensitive
    assert Attributes(files).value("foobar", "export-ignore") is None
    assert Attributes(files, legacy=True).value("foobar", "export-ignore") is True
