"""Hostile archives are refused before anything is written; honest ones extract exactly."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from archive_helpers import (
    FILE,
    GITLINK,
    Case,
    Entry,
    Layout,
    Repo,
    ZipItem,
    git_env,
    layout,
    patch,
    rezip,
    unix,
)

from safehub.config import Limits
from safehub.digest import blob_id
from safehub.errors import IntegrityError, SafehubError
from safehub.verify.archive import (
    Extracted,
    Reason,
    check_tree,
    drop_empty_dirs,
    extract,
    resolve_link,
)

SHA = "0123456789abcdef0123456789abcdef01234567"
TOP = "o-r-0123456/"


def make_zip(path: Path, entries: list[tuple[str, bytes, int | None]], comment: str = SHA) -> Path:
    """Write a zip like `git archive` does; mode None means a DOS entry (plain file/dir),
    0 a DOS folder flag."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            if mode:
                info.create_system = 3
                info.external_attr = mode << 16
            else:
                info.create_system = 0
                info.external_attr = 0x10 if mode == 0 else 0
            zf.writestr(info, data)
        zf.comment = comment.encode()
    return path


def honest(extra: list[tuple[str, bytes, int | None]] = ()) -> list[tuple[str, bytes, int | None]]:  # type: ignore[assignment]
    return [
        (TOP, b"", None),
        (TOP + "hubconf.py", b"def m():\n    return 1\n", None),
        (TOP + "pkg/", b"", None),
        (TOP + "pkg/mod.py", b"X = 1\n", None),
        (TOP + "run.sh", b"#!/bin/sh\n", 0o100755),
        (TOP + "link.py", b"pkg/mod.py", 0o120777),
        *extra,
    ]


def test_honest_archive_extracts_read_only(tmp_path: Path) -> None:
    z = make_zip(tmp_path / "a.zip", honest())
    ext = extract(z, tmp_path / "out", commit=SHA, limits=Limits())
    assert [f.path for f in ext.files] == ["hubconf.py", "link.py", "pkg/mod.py", "run.sh"]
    assert (tmp_path / "out/link.py").is_symlink()
    assert (tmp_path / "out/hubconf.py").read_text().startswith("def m")
    mode = (tmp_path / "out/run.sh").stat().st_mode
    assert mode & stat.S_IXUSR and not mode & stat.S_IWUSR
    assert not (tmp_path / "out/pkg").stat().st_mode & stat.S_IWUSR
    assert {f.path: f.mode for f in ext.files}["run.sh"] == "100755"
    assert ext.digest.startswith("sha256:")


def test_git_archive_matches_git_tree(tmp_path: Path) -> None:
    """The tree id of a real `git archive` equals the commit's tree id."""
    repo = tmp_path / "repo"
    env = git_env(tmp_path)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    repo.mkdir()
    git("init", "-q")
    (repo / "a b.py").write_text("x = 1\n")
    (repo / "d").mkdir()
    (repo / "d/z.txt").write_text("z\n")
    (repo / "d.txt").write_text("sorts between d and d/\n")
    (repo / "exe").write_text("#!/bin/sh\n")
    (repo / "exe").chmod(0o755)
    (repo / "ln").symlink_to("d/z.txt")
    git("add", "-A")
    git("commit", "-qm", "c")
    sha = git("rev-parse", "HEAD")
    zip_path = tmp_path / "g.zip"
    zip_path.write_bytes(subprocess.run(
        ["git", "archive", "--format=zip", f"--prefix=o-r-{sha[:7]}/", sha],
        cwd=repo, env=env, check=True, capture_output=True).stdout)
    ext = extract(zip_path, tmp_path / "out", commit=sha, limits=Limits())
    assert ext.tree_id == git("rev-parse", "HEAD^{tree}")
    assert check_tree(ext, ext.tree_id, None, allow_fallback=False).level == "tree"


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("/etc/passwd", b"x", None)], "top folder"),
        ([(TOP, b"", None), (TOP + "../evil.py", b"x", None)], "'..'"),
        ([(TOP, b"", None), (TOP + "a/../../evil.py", b"x", None)], "'..'"),
        ([(TOP, b"", None), (TOP + "/abs.py", b"x", None)], "empty"),
        ([(TOP, b"", None), ("other/evil.py", b"x", None)], "outside"),
        ([(TOP, b"", None), (TOP + "a\\..\\b.py", b"x", None)], "backslash"),
        ([(TOP, b"", None), (TOP + ".git/hooks/post-checkout", b"x", None)], ".git"),
        ([(TOP, b"", None), (TOP + "fifo", b"", 0o010644)], "special file"),
        ([(TOP, b"", None), (TOP + "dev", b"", 0o060644)], "special file"),
        pytest.param([(TOP, b"", None), (TOP + "h.py", b"1", None), (TOP + "h.py", b"2", None)],
                     "twice", marks=pytest.mark.filterwarnings("ignore:Duplicate name")),
        ([(TOP, b"", None), (TOP + "hubconf.py", b"1", None), (TOP + "HUBCONF.py", b"2", None)],
         "same up to case"),
        ([(TOP, b"", None), (TOP + "a", b"1", None), (TOP + "a/b.py", b"2", None)],
         "not a directory"),
        ([(TOP, b"", None), (TOP + "l", b"/etc/passwd", 0o120777)], "absolute"),
        ([(TOP, b"", None), (TOP + "l", b"../../etc", 0o120777)], "outside the tree"),
        ([(TOP, b"", None), (TOP + "d/", b"", None), (TOP + "d/up", b"..", 0o120777),
          (TOP + "x", b"d/up/..", 0o120777)], "outside the tree"),
        ([(TOP, b"", None), (TOP + "l", b"../l2", 0o120777), (TOP + "l2", b"l", 0o120777)],
         "outside the tree"),
        ([(TOP, b"", None), (TOP + "x" * 300, b"1", None)], "longer than 255 bytes"),
        ([(TOP, b"", None), (TOP + "\u00e9" * 128, b"1", None)], "longer than 255 bytes"),
        ([(TOP, b"", None), (TOP + "d/", b"", 0o100644)], "directory flag"),
        ([(TOP, b"", None), (TOP + "d", b"", 0)], "directory flag"),  # a DOS folder
        ([(TOP, b"", None), (TOP + "d/", b"data", None)], "directory entry with content"),
        ([(TOP, b"", None), (TOP + "l", b"a\x00b", 0o120777)], "malformed symlink"),
        ([(TOP, b"", None), (TOP + "l", b"sub", 0o120777), (TOP + "l/x.py", b"1", None)],
         "not a directory"),
        ([(TOP, b"", None), (TOP + "d", b"", 0o040755)], "directory flag"),
        # macOS: 'X' reaches the link 'd/up' through 'D/up' (case-insensitive lookups).
        ([(TOP, b"", None), (TOP + "d/", b"", None), (TOP + "d/up", b"..", 0o120777),
          (TOP + "X", b"D/up/D/up/../../../..", 0o120777)], "outside the tree"),
        ([(TOP, b"", None), (TOP + "L", b"sub", 0o120777), (TOP + "l/x.py", b"1", None)],
         "not a directory"),
        ([(TOP, b"", None), (TOP + "caf\u00e9.py", b"1", None),
          (TOP + "cafe\u0301.py", b"2", None)], "same up to case"),
    ],
)
def test_hostile_archives_are_refused(
    tmp_path: Path, entries: list[tuple[str, bytes, int | None]], message: str
) -> None:
    z = make_zip(tmp_path / "a.zip", entries)
    with pytest.raises(IntegrityError) as err:
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())
    assert message in err.value.message
    assert not (tmp_path / "out").exists()  # nothing was written
    assert err.value.hint


def test_comment_must_name_the_commit(tmp_path: Path) -> None:
    z = make_zip(tmp_path / "a.zip", honest(), comment="f" * 40)
    with pytest.raises(IntegrityError, match="says it is commit"):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())
    z = make_zip(tmp_path / "b.zip", honest(), comment="")
    with pytest.raises(IntegrityError, match="nothing"):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())


def test_not_a_zip(tmp_path: Path) -> None:
    bad = tmp_path / "a.zip"
    bad.write_bytes(b"<html>rate limited</html>")
    with pytest.raises(IntegrityError, match="not a valid zip"):
        extract(bad, tmp_path / "out", commit=SHA, limits=Limits())


def test_too_many_files_and_bytes(tmp_path: Path) -> None:
    z = make_zip(tmp_path / "a.zip", honest())
    with pytest.raises(IntegrityError, match="more than the limit of 3"):
        extract(z, tmp_path / "o1", commit=SHA, limits=Limits(max_files=3))
    with pytest.raises(IntegrityError, match="unpacks to"):
        extract(z, tmp_path / "o2", commit=SHA, limits=Limits(max_tree_bytes=10))


def test_zip_bomb_is_capped_by_declared_size(tmp_path: Path) -> None:
    """A deflated entry of 50 MB of zeros is refused by the byte limit before inflating."""
    z = tmp_path / "bomb.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(TOP, b"")
        zf.writestr(TOP + "zeros.bin", b"\0" * 50_000_000)
        zf.comment = SHA.encode()
    assert z.stat().st_size < 200_000
    with pytest.raises(IntegrityError, match="unpacks to"):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits(max_tree_bytes=1_000_000))


def test_corrupt_entry_is_refused(tmp_path: Path) -> None:
    z = make_zip(tmp_path / "a.zip", honest())
    data = bytearray(z.read_bytes())
    i = data.index(b"X = 1")
    data[i] = ord("Y")  # CRC no longer matches
    z.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="corrupt"):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())


def test_resolve_link() -> None:
    links = {"a/up": "..", "b": "a", "c": "b/../.."}
    assert resolve_link("a/up", links) == ""
    assert resolve_link("b/up/a", links) == "a"
    assert resolve_link("c", links) is None


def test_links_that_loop_reach_nothing_and_are_kept(tmp_path: Path) -> None:
    """git archives self-referencing links; the OS answers ELOOP: harmless."""
    z = make_zip(tmp_path / "a.zip", [(TOP, b"", None), (TOP + "l", b"l2", 0o120777),
                                      (TOP + "l2", b"l", 0o120777),
                                      (TOP + "s", b"s/x", 0o120777)])
    ext = extract(z, tmp_path / "out", commit=SHA, limits=Limits())
    assert [f.path for f in ext.files] == ["l", "l2", "s"]


# -- what the archive reader refuses, before parsing what it cannot bound ----------------

def _mutate(z: Path, change: Callable[[bytes, Layout], bytes]) -> Path:
    data = z.read_bytes()
    z.write_bytes(change(data, layout(data)))
    return z


def _pack(fmt: str, *values: int) -> bytes:
    return struct.pack(fmt, *values)


@pytest.mark.parametrize(("change", "message"), [
    # compression method 99 (AES) in the local and the central header
    (lambda d, lay: patch(patch(d, lay.local[1] + 8, _pack("<H", 99)), lay.central[1] + 10,
                          _pack("<H", 99)), "compression method 99"),
    # the encryption flag
    (lambda d, lay: patch(patch(d, lay.local[1] + 6, _pack("<H", 1)), lay.central[1] + 8,
                          _pack("<H", 1)), "encrypted entry"),
    # a name flagged as UTF-8 that is not
    (lambda d, lay: patch(patch(patch(d, lay.central[1] + 8, _pack("<H", 0x800)),
                                lay.central[1] + 46 + len(TOP), b"\xff"),
                          lay.local[1] + 30 + len(TOP), b"\xff"), "flagged as UTF-8"),
    # the central entry and the local header name different files
    (lambda d, lay: patch(d, lay.local[1] + 30 + len(TOP), b"H"), "names another file"),
    # an extra field longer than the entry's extra data
    (lambda d, lay: patch(d, lay.central[1] + 30, _pack("<H", 4)) + b"", "extra"),
    # a size that lies (the central directory says 1 byte more)
    (lambda d, lay: patch(d, lay.central[1] + 24, _pack("<L", 1 + struct.unpack_from(
        "<L", d, lay.central[1] + 24)[0])), "two different sizes"),
    # an offset into another entry: the two overlap
    (lambda d, lay: patch(d, lay.central[2] + 42, _pack("<L", lay.local[1])), "overlaps"),
    # the end record declares fewer entries than the directory holds
    (lambda d, lay: patch(d, lay.eocd + 8, _pack("<HH", 2, 2)), "more than the 2 entries"),
    # ... or more
    (lambda d, lay: patch(d, lay.eocd + 8, _pack("<HH", 9, 9)), "cannot fit"),
    # truncated in the middle of the central directory
    (lambda d, lay: d[:lay.central[2]] + d[lay.eocd:], "central directory"),
    # truncated anywhere else
    (lambda d, lay: d[:len(d) // 2], "not a valid zip"),
    # a second archive glued before it
    (lambda d, lay: d + d, "not where the end record says"),
    # a comment that does not end the file
    (lambda d, lay: d + b"junk", "not a valid zip"),
    # a multi-volume archive
    (lambda d, lay: patch(d, lay.eocd + 4, _pack("<H", 1)), "multi-volume"),
])
def test_malformed_zips_are_integrity_errors(tmp_path: Path, change: Callable[[bytes, Layout],
                                             bytes], message: str) -> None:
    z = _mutate(make_zip(tmp_path / "a.zip", honest()), change)
    with pytest.raises(IntegrityError, match=message):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())
    assert not (tmp_path / "out").exists()


def test_a_corrupt_stream_is_refused_while_writing(tmp_path: Path) -> None:
    z = tmp_path / "a.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(TOP, b"")
        zf.writestr(TOP + "big.py", b"print(1)\n" * 1000)
        zf.comment = SHA.encode()
    lay = layout(z.read_bytes())
    _mutate(z, lambda d, _: patch(d, lay.local[1] + 30 + len(TOP) + 6 + 9 + 20, b"\xff\xff"))
    with pytest.raises(IntegrityError, match="inflate|CRC|bytes it declares|does not end"):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())


def test_zip64_end_records_are_read_and_must_agree(tmp_path: Path) -> None:
    """git writes zip64 end records past 65,535 entries; they are read (and checked)."""
    plain = make_zip(tmp_path / "a.zip", honest()).read_bytes()
    lay = layout(plain)
    count, size, start = struct.unpack_from("<HLL", plain, lay.eocd + 10)

    def zip64(entries: int) -> bytes:
        record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries,
                             size, start)
        locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, lay.eocd, 1)
        end = patch(plain[lay.eocd:], 8, struct.pack("<HHLL", 0xFFFF, 0xFFFF, size,
                                                      0xFFFFFFFF))
        return plain[:lay.eocd] + record + locator + end

    (tmp_path / "b.zip").write_bytes(zip64(count))
    ext = extract(tmp_path / "b.zip", tmp_path / "out", commit=SHA, limits=Limits())
    assert len(ext.files) == 4
    (tmp_path / "c.zip").write_bytes(zip64(10**12))
    with pytest.raises(IntegrityError, match="more than the limit"):
        extract(tmp_path / "c.zip", tmp_path / "out2", commit=SHA, limits=Limits())
    (tmp_path / "d.zip").write_bytes(zip64(count - 1))
    with pytest.raises(IntegrityError, match="more than the"):
        extract(tmp_path / "d.zip", tmp_path / "out3", commit=SHA, limits=Limits())


def test_the_entry_cap_comes_before_parsing(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An end record claiming millions of entries is refused from the last bytes alone:
    the (sparse, 138 MB) central directory is never read."""
    import safehub.verify.archive._extract as module

    def never(*args: object) -> None:
        raise AssertionError("the central directory was parsed")

    monkeypatch.setattr(module, "read_central", never)
    n = 3_000_000
    z = tmp_path / "huge.zip"
    with open(z, "wb") as f:
        f.truncate(46 * n)
        f.seek(46 * n)
        f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 46 * n, 0, 40))
        f.write(SHA.encode())
    # (a plain end record holds at most 65,535; a zip64 one says 3,000,000)
    data = z.read_bytes()[-62:]
    with open(z, "r+b") as f:
        f.seek(46 * n)
        f.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, 46 * n, 0))
        f.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, 46 * n, 1))
        f.write(patch(data, 16, struct.pack("<L", 0xFFFFFFFF)))
    with pytest.raises(IntegrityError, match="3,000,000 entries, more than the limit"):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())
    assert not (tmp_path / "out").exists()


def test_nothing_is_written_outside_the_staging_folder(tmp_path: Path) -> None:
    """A folder that exists where the archive wants a file, or a missing parent: errors,
    and never a write through a link."""
    z = make_zip(tmp_path / "a.zip", honest())
    with pytest.raises(SafehubError):
        extract(z, tmp_path / "missing" / "out", commit=SHA, limits=Limits())
    (tmp_path / "out").mkdir()
    with pytest.raises(SafehubError):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())
    assert list((tmp_path / "out").iterdir()) == []


def test_files_are_written_with_their_modes_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        ext = extract(make_zip(tmp_path / "a.zip", honest()), tmp_path / "o", commit=SHA,
                      limits=Limits())
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "o/run.sh").stat().st_mode) == 0o555
    assert stat.S_IMODE((tmp_path / "o/hubconf.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((tmp_path / "o/pkg").stat().st_mode) == 0o555
    assert ext.commit == SHA


# -- tying the files to the commit -------------------------------------------------------

def test_tree_mismatch_without_listing(tmp_path: Path) -> None:
    ext = extract(make_zip(tmp_path / "a.zip", honest()), tmp_path / "o", commit=SHA,
                  limits=Limits())
    with pytest.raises(IntegrityError, match="do not match the commit's tree"):
        check_tree(ext, "f" * 40, None, allow_fallback=True)


def test_an_extra_empty_folder_is_refused_even_when_the_tree_matches(tmp_path: Path) -> None:
    ext = extract(make_zip(tmp_path / "a.zip", honest([(TOP + "extra/", b"", None)])),
                  tmp_path / "o", commit=SHA, limits=Limits())
    assert ext.empty_dirs == ("extra",)
    with pytest.raises(IntegrityError, match="empty folder 'extra'"):
        check_tree(ext, ext.tree_id, None, allow_fallback=True)
    assert drop_empty_dirs(ext).empty_dirs == () and not (tmp_path / "o/extra").exists()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return Repo(tmp_path_factory.mktemp("repo") / "r.git")


def _archive(repo: Repo, case: Case, tmp: Path, zip_bytes: bytes | None = None) -> Extracted:
    repo.commit_all([case])
    tmp.mkdir(exist_ok=True)
    path = tmp / f"{case.commit}.zip"
    path.write_bytes(zip_bytes if zip_bytes is not None else repo.archive(case))
    return extract(path, tmp / case.commit, commit=case.commit, limits=Limits())


def test_a_folder_that_holds_only_a_submodule(repo: Repo, tmp_path: Path) -> None:
    """DeepLearningExamples: PyTorch/SpeechRecognition/Jasper/external/ holds a gitlink.
    git archive writes the parent folder and an empty folder for the submodule; the
    files are exactly the commit's, so no fallback permission is needed."""
    case = Case({"hubconf.py": Entry(FILE, b"x = 1\n"),
                 "PyTorch/SpeechRecognition/Jasper/external/sub": Entry(GITLINK, sha="1" * 40)})
    ext = _archive(repo, case, tmp_path)
    assert ext.empty_dirs == ("PyTorch/SpeechRecognition/Jasper/external/sub",)
    check = check_tree(ext, case.tree, case.listing(), allow_fallback=False)
    assert check.level == "per-file" and check.unverified == ()
    assert [(d.path, d.reason) for d in check.differences] == [
        ("PyTorch/SpeechRecognition/Jasper/external/sub/", Reason.SUBMODULE)]
    assert "writes as an empty folder" in check.describe()


def test_export_rules_are_explained_path_by_path(repo: Repo, tmp_path: Path) -> None:
    attrs = (b"[attr]skip export-ignore\n**/tests skip\ndocs/**/internal export-ignore\n"
             b"version.py export-subst\n*.txt eol=crlf ident\n.gitattributes export-ignore\n")
    case = Case({".gitattributes": Entry(FILE, attrs), "tests/t.py": Entry(FILE, b"t\n"),
                 "a/tests/u.py": Entry(FILE, b"u\n"), "docs/internal/x": Entry(FILE, b"i\n"),
                 "docs/a/b/internal/y": Entry(FILE, b"i\n"), "docs/keep.md": Entry(FILE, b"k\n"),
                 "version.py": Entry(FILE, b"V = '$Format:%H$'\n"),
                 "notes.txt": Entry(FILE, b"$Id$\none\ntwo\n"), "hubconf.py": Entry(FILE, b"h\n")})
    ext = _archive(repo, case, tmp_path)
    with pytest.raises(IntegrityError, match="forbidden by policy"):
        check_tree(ext, case.tree, case.listing(), allow_fallback=False,
                   fetch_blob=case.fetch_blob)
    check = check_tree(ext, case.tree, case.listing(), allow_fallback=True,
                       fetch_blob=case.fetch_blob)
    assert check.unverified == ("version.py",)
    assert check.omitted == (".gitattributes", "a/tests/u.py", "docs/a/b/internal/y",
                             "docs/internal/x", "tests/t.py")
    reasons = {(d.path, d.reason) for d in check.differences}
    assert reasons >= {("tests/", Reason.EXPORT_IGNORE), ("a/tests/", Reason.EXPORT_IGNORE),
                       ("docs/internal/", Reason.EXPORT_IGNORE),
                       ("notes.txt", Reason.IDENT), ("notes.txt", Reason.EOL),
                       ("version.py", Reason.EXPORT_SUBST)}
    text = check.describe()
    assert ".gitattributes:2: `**/tests skip` (through the macro skip)" in text
    assert "version.py: placeholders expanded by export-subst (NOT verifiable)" in text
    assert (ext.root / "notes.txt").read_bytes() == (
        b"$Id: " + blob_id(b"$Id$\none\ntwo\n").encode() + b" $\r\none\r\ntwo\r\n")


def test_refusals_name_the_path_and_the_reason(repo: Repo, tmp_path: Path) -> None:
    case = Case({".gitattributes": Entry(FILE, b"*.py eol=lf\n*.txt eol=crlf\n"),
                 "hubconf.py": Entry(FILE, b"x = 1\n"), "a.txt": Entry(FILE, b"a\n"),
                 "ext": Entry(GITLINK, sha="2" * 40)})
    repo.commit_all([case])
    honest_zip = repo.archive(case)

    def refused(change: Callable[[list[ZipItem]], list[ZipItem]], message: str) -> None:
        d = tmp_path / f"t{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        (d / "a.zip").write_bytes(rezip(honest_zip, change))
        got = extract(d / "a.zip", d / "out", commit=case.commit, limits=Limits())
        with pytest.raises(IntegrityError, match=message):
            check_tree(got, case.tree, case.listing(), allow_fallback=True,
                       fetch_blob=case.fetch_blob)

    def swap(name: str, data: bytes) -> Callable[[list[ZipItem]], list[ZipItem]]:
        return lambda items: [ZipItem(i.name, data, i.system, i.external)
                              if i.name.endswith("/" + name) else i for i in items]

    refused(swap("hubconf.py", b"evil = 1\n"),
            r"'hubconf.py' differs from the commit's blob .* no .gitattributes rule")
    refused(swap("a.txt", b"b\r\n"), r"'a.txt' differs .* would write other bytes \(eol by")
    refused(lambda items: [i for i in items if not i.name.endswith("/ext/")],
            "lacks the empty folder 'ext' that `git archive` writes for the submodule")
    refused(lambda items: [*items, ZipItem(items[0].name + "new/", b"", 0, 0x10)],
            "empty folder 'new', which the commit does not explain")
    refused(lambda items: [*items, ZipItem(items[0].name + "x.py", b"", 0, 0)],
            "'x.py', which is not a file of the commit's tree")
    refused(lambda items: [i for i in items if not i.name.endswith("/a.txt")],
            "lacks 'a.txt', and no export-ignore rule")
    refused(lambda items: [ZipItem(i.name, i.data, *unix(0o100755))
                           if i.name.endswith("hubconf.py") else i for i in items],
            "'hubconf.py' has mode 100755 in the archive but 100644")


def test_lfs_content_in_place_of_the_pointer(repo: Repo, tmp_path: Path) -> None:
    """GitHub puts the LFS object in archives when a repo opts in; it must match the
    pointer's SHA-256 and size."""
    obj = b"\x00weights" * 100
    pointer = (b"version https://git-lfs.github.com/spec/v1\noid sha256:"
               + hashlib.sha256(obj).hexdigest().encode() + b"\nsize %d\n" % len(obj))
    case = Case({".gitattributes": Entry(FILE, b"*.bin filter=lfs diff=lfs merge=lfs -text\n"),
                 "w.bin": Entry(FILE, pointer)})
    repo.commit_all([case])
    plain = repo.archive(case)
    swapped = rezip(plain, lambda items: [ZipItem(i.name, obj, i.system, i.external)
                                          if i.name.endswith("w.bin") else i for i in items])
    ext = _archive(repo, case, tmp_path / "a", swapped)
    check = check_tree(ext, case.tree, case.listing(), allow_fallback=True,
                       fetch_blob=case.fetch_blob)
    assert [(d.path, d.reason) for d in check.differences] == [("w.bin", Reason.LFS)]
    evil = rezip(plain, lambda items: [ZipItem(i.name, obj + b"!", i.system, i.external)
                                       if i.name.endswith("w.bin") else i for i in items])
    ext = _archive(repo, case, tmp_path / "b", evil)
    with pytest.raises(IntegrityError, match="'w.bin' differs"):
        check_tree(ext, case.tree, case.listing(), allow_fallback=True,
                   fetch_blob=case.fetch_blob)


def test_working_tree_encoding_is_applied_by_git_archive(repo: Repo, tmp_path: Path) -> None:
    """git archive re-encodes (gitattributes(5) leaves it unsaid; git 2.39 and 2.55 do)."""
    text = "héllo\nwörld\n".encode()
    case = Case({".gitattributes": Entry(FILE, b"*.txt working-tree-encoding=UTF-16\n"),
                 "a.txt": Entry(FILE, text)})
    ext = _archive(repo, case, tmp_path)
    assert (ext.root / "a.txt").read_bytes() == b"\xff\xfe" + text.decode().encode("utf-16-le")
    check = check_tree(ext, case.tree, case.listing(), allow_fallback=True)
    assert [(d.path, d.reason) for d in check.differences] == [("a.txt", Reason.ENCODING)]


def test_an_empty_tree_leaves_no_folder(repo: Repo, tmp_path: Path) -> None:
    blob = repo.git("hash-object", "-w", "--stdin", data=b"x\n").decode().strip()
    empty = repo.git("mktree", data=b"").decode().strip()
    tree = repo.git("mktree", data=f"100644 blob {blob}\tx.py\n040000 tree {empty}\te\n"
                    .encode()).decode().strip()
    commit = repo.git("commit-tree", "-m", "m", tree).decode().strip()
    data = repo.git("archive", "--format=zip", f"--prefix=o-r-{commit[:7]}/", commit)
    (tmp_path / "a.zip").write_bytes(data)
    ext = extract(tmp_path / "a.zip", tmp_path / "o", commit=commit, limits=Limits())
    listing = [{"path": "x.py", "mode": "100644", "type": "blob", "sha": blob},
               {"path": "e", "mode": "040000", "type": "tree", "sha": empty}]
    check = check_tree(ext, tree, listing, allow_fallback=False)
    assert [(d.path, d.reason) for d in check.differences] == [("e/", Reason.EMPTY_TREE)]
    with pytest.raises(IntegrityError, match="do not add up"):
        check_tree(ext, tree, listing[:1], allow_fallback=True)


@pytest.fixture
def threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode on the helper threads even for a small archive."""
    import safehub.verify.archive._stream as stream

    monkeypatch.setattr(stream, "_THREAD", 0)
    monkeypatch.setattr(stream, "_WHOLE", 64)
    monkeypatch.setattr(stream, "_BATCH", 128)


def test_helper_threads_give_the_same_tree(tmp_path: Path, threaded: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import safehub.verify.archive._stream as stream

    entries = honest([(TOP + f"pkg/m{n}.py", b"x = %d\n" % n * 40, None) for n in range(30)])
    one = extract(make_zip(tmp_path / "a.zip", entries), tmp_path / "o", commit=SHA,
                  limits=Limits())
    monkeypatch.setattr(stream, "_THREAD", 1 << 40)  # now inline
    two = extract(make_zip(tmp_path / "b.zip", entries), tmp_path / "p", commit=SHA,
                  limits=Limits())
    assert one.files == two.files and one.tree_id == two.tree_id


def test_helper_threads_hand_over_errors(tmp_path: Path, threaded: None) -> None:
    entries = honest([(TOP + f"pkg/m{n}.py", b"y = %d\n" % n * 40, None) for n in range(30)])
    z = make_zip(tmp_path / "a.zip", entries)
    data = z.read_bytes()
    z.write_bytes(data.replace(b"y = 17\n", b"y = 71\n", 1))  # stored: the CRC fails
    with pytest.raises(IntegrityError, match="CRC"):
        extract(z, tmp_path / "o", commit=SHA, limits=Limits())
    import threading

    assert not [t for t in threading.enumerate() if t.name == "safehub-extract"]
