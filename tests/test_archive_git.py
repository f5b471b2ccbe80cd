"""git is the oracle: safehub accepts every archive `git archive` makes of a random repo,
and refuses it after any single change to an entry that no attribute explains.

Hypothesis draws small trees (files, executables, links, submodules at any depth) with
random `.gitattributes` files (root and nested) written in the grammar of gitattributes(5);
git writes one commit per tree in a single fast-import run and archives each commit as
GitHub does. Each archive must extract and tie to its commit (the API's listing stands in
for GitHub's); then each single change of one entry (content, mode, name, an added file or
folder, a removed file or folder, an omitted file put back) must be refused.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from archive_helpers import (
    EXEC,
    FILE,
    GITLINK,
    LINK,
    Case,
    Entry,
    Repo,
    ZipItem,
    read_zip,
    unix,
    write_zip,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safehub.config import Limits
from safehub.digest import parents
from safehub.errors import IntegrityError
from safehub.verify.archive import check_tree, extract

SCALE = int(os.environ.get("SAFEHUB_FUZZ_SCALE", "1"))
CASES_PER_EXAMPLE = 8

NAMES = ["a", "b", "x.py", "y.txt", "tests", "docs", "sub", "internal", "é.md", "a b",
         "v.py", "c.bin", "*star", "[x]"]
LFS = (b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"5" * 64 + b"\nsize 12\n")
CONTENTS = [b"", b"x\n", b"a\r\nb\n", b"mixed\r\nlf\n", b"$Id$\nz\n", b"$Id: old $\n$Id$",
            b"V = '$Format:%H$'\n", b"$Format:%h %s$", b"\x00\x01bin\n", "hé\n".encode(),
            b'refnames = "$Format:%d$"\nfull = "$Format:%H$"\ndate = "$Format:%ci$"\n',
            b"$Format:%D|%T|%t|%P|%p|%cI|%ct|%ad|%aD|%as|%an <%ae>|%B|%b%n%%x%x41$ $Id$\n",
            b"no newline", b"lf\nlf\n", b"cr\ronly\n", LFS, b"\xff\xfe\n"]
COMPONENTS = ["*", "**", "?", "a", "tests", "docs", "x.py", "*.py", "*.txt", "[ab]", "[!x]*",
              "int*", "sub", "é.md", "a b", "v.py", "[[:alpha:]]*", "\\*star", "[x]", "?*.bin"]
STATES = ["export-ignore", "-export-ignore", "!export-ignore", "export-subst", "ident",
          "-ident", "text", "-text", "text=auto", "eol=crlf", "eol=lf", "crlf", "-crlf",
          "crlf=input", "binary", "working-tree-encoding=UTF-16",
          "working-tree-encoding=ISO-8859-1", "working-tree-encoding=UTF-16LE-BOM",
          "-working-tree-encoding", "filter=lfs", "skip", "-skip", "crlfy", "diff", "bad name!"]
MACROS = ["[attr]skip export-ignore", "[attr]crlfy eol=crlf ident", "[attr]binary export-subst",
          "[attr]skip -export-ignore crlfy"]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=3))
    text = "/".join(parts)
    text = draw(st.sampled_from(["", "/"])) + text + draw(st.sampled_from(["", "", "/"]))
    if draw(st.integers(0, 9)) == 0:
        text = '"' + text.replace("\\", "\\\\") + '"'
    if draw(st.integers(0, 14)) == 0:
        text = "!" + text  # negative patterns are ignored by git
    return text


@st.composite
def attribute_file(draw: st.DrawFn, top: bool) -> bytes:
    lines = draw(st.lists(st.sampled_from(MACROS), max_size=2)) if top else []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.integers(0, 12))
        if kind == 0:
            lines.append("# " + draw(st.sampled_from(STATES)))
        elif kind == 1:
            lines.append(draw(st.sampled_from(MACROS)))  # not allowed below the top
        else:
            states = draw(st.lists(st.sampled_from(STATES), min_size=1, max_size=3))
            lines.append(draw(patterns()) + " " + " ".join(states))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return eol.join(lines).encode() + eol.encode()


@st.composite
def trees(draw: st.DrawFn, depth: int = 0) -> dict[str, Entry]:
    """A folder: at most 4 names, each a file, link, submodule or folder."""
    out: dict[str, Entry] = {}
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True)):
        kind = draw(st.integers(0, 9))
        if kind <= 4 or depth >= 3:
            mode = EXEC if kind == 4 else FILE
            out[name] = Entry(mode, draw(st.sampled_from(CONTENTS)))
        elif kind == 5:
            out[name] = Entry(LINK, draw(st.sampled_from(["a", "x.py", "sub/x.py", "."])).encode())
        elif kind == 6:
            out[name] = Entry(GITLINK, sha=draw(st.sampled_from(["1" * 40, "2" * 40])))
        else:
            sub = draw(trees(depth + 1))
            if draw(st.booleans()):
                sub[".gitattributes"] = Entry(FILE, draw(attribute_file(False)))
            if not sub:
                sub["x.py"] = Entry(FILE, b"x\n")
            out.update({f"{name}/{p}": e for p, e in sub.items()})
    return out


@st.composite
def cases(draw: st.DrawFn) -> Case:
    entries = draw(trees())
    if draw(st.integers(0, 4)):
        entries[".gitattributes"] = Entry(FILE, draw(attribute_file(True)))
    if not entries:
        entries["x.py"] = Entry(FILE, b"x\n")
    return Case(entries)


def _mutations(case: Case, items: list[ZipItem]) -> list[tuple[str, list[ZipItem]]]:
    """Every single change of one entry that no attribute can explain."""
    top = items[0].name
    files = [k for k, i in enumerate(items) if not i.is_dir]
    dirs = {i.name for i in items if i.is_dir}
    above = {d + "/" for i in items for d in parents(i.name.rstrip("/"))}
    leaves = [k for k, i in enumerate(items) if i.is_dir and i.name not in above and k]
    out: list[tuple[str, list[ZipItem]]] = []

    def replaced(k: int, item: ZipItem | None) -> list[ZipItem]:
        return items[:k] + ([item] if item else []) + items[k + 1:]

    for k in files[:2]:
        item = items[k]
        rel = item.name[len(top):]
        committed = case.entries[rel]
        if b"$Format:" not in committed.data:
            out.append((f"content of {rel}", replaced(k, ZipItem(
                item.name, item.data + b"#", item.system, item.external))))
        elif item.data.startswith(before := committed.data.partition(b"$Format:")[0]):
            injected = before + b'"; import os; x = "' + item.data[len(before):]
            out.append((f"code injected in an expansion of {rel}", replaced(k, ZipItem(
                item.name, injected, item.system, item.external))))
        mode = 0o100644 if committed.mode == EXEC else 0o100755
        out.append((f"mode of {rel}", replaced(k, ZipItem(item.name, item.data, *unix(mode)))))
        out.append((f"name of {rel}", replaced(k, ZipItem(
            item.name + "~", item.data, item.system, item.external))))
        out.append((f"removed {rel}", replaced(k, None)))
    out.append(("added a file", [*items, ZipItem(top + "zz_added.py", b"x\n", 0, 0)]))
    out.append(("added a folder", [*items, ZipItem(top + "zz_added/", b"", 0, 0x10)]))
    for k in leaves[:2]:
        out.append((f"removed the folder {items[k].name}", replaced(k, None)))
    have = {i.name for i in items}
    for path, e in sorted(case.entries.items()):
        if e.mode in (FILE, EXEC) and top + path not in have and all(
                top + d + "/" in dirs for d in parents(path)):
            back = ZipItem(top + path, e.data, 0, 0)
            out.append((f"put back the omitted {path}", [*items, back]))
            break
    return out


def _accepts(case: Case, zip_bytes: bytes, tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    (tmp / "a.zip").write_bytes(zip_bytes)
    ext = extract(tmp / "a.zip", tmp / "tree", commit=case.commit, limits=Limits())
    check_tree(ext, case.tree, case.listing() if ext.tree_id != case.tree else None,
               allow_fallback=True, fetch_blob=case.fetch_blob, fetch_commit=case.fetch_commit)


def _refused(case: Case, zip_bytes: bytes, tmp: Path) -> bool:
    """True if refused, or if the change made the archive the commit's very tree (putting
    back the only file export-ignore left out)."""
    try:
        _accepts(case, zip_bytes, tmp)
    except IntegrityError:
        return True
    return extract(tmp / "a.zip", tmp / "again", commit=case.commit,
                   limits=Limits()).tree_id == case.tree


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return Repo(tmp_path_factory.mktemp("oracle") / "repo.git")


@pytest.mark.slow
@settings(max_examples=40 * SCALE, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(batch=st.lists(cases(), min_size=CASES_PER_EXAMPLE, max_size=CASES_PER_EXAMPLE))
def test_every_git_archive_is_accepted_and_every_change_refused(
        repo: Repo, tmp_path: Path, batch: list[Case]) -> None:
    repo.commit_all(batch)
    for case in batch:
        zip_bytes = repo.archive(case)
        _accepts(case, zip_bytes, tmp_path / "c")
        items, comment = read_zip(zip_bytes)
        # A rewrite by another zip writer changes nothing that matters.
        _accepts(case, write_zip(items, comment), tmp_path / "c")
        for label, changed in _mutations(case, items):
            assert _refused(case, write_zip(changed, comment), tmp_path / "c"), label
