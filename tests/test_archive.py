"""Hostile archives are refused before anything is written; honest ones extract exactly."""

from __future__ import annotations

import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from safehub.archive import check_tree, extract, resolve_link
from safehub.config import Limits
from safehub.errors import IntegrityError

SHA = "0123456789abcdef0123456789abcdef01234567"
TOP = "o-r-0123456/"


def make_zip(path: Path, entries: list[tuple[str, bytes, int | None]], comment: str = SHA) -> Path:
    """Write a zip like `git archive` does; mode None means a DOS entry (plain file/dir)."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            if mode is not None:
                info.create_system = 3
                info.external_attr = mode << 16
            else:
                info.create_system = 0
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
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path),
           "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@x", "PATH": "/usr/bin:/bin"}

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
        ([(TOP, b"", None), (TOP + "l", b"l2", 0o120777), (TOP + "l2", b"l", 0o120777)],
         "outside the tree"),
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


def test_tree_mismatch_without_fallback(tmp_path: Path) -> None:
    ext = extract(make_zip(tmp_path / "a.zip", honest()), tmp_path / "o", commit=SHA,
                  limits=Limits())
    with pytest.raises(IntegrityError, match="do not match the commit's tree"):
        check_tree(ext, "f" * 40, None, allow_fallback=True)


def _listing(ext_files: list[tuple[str, str, str]]) -> list[dict[str, object]]:
    return [{"path": p, "mode": m, "sha": s, "type": "blob"} for p, m, s in ext_files]


def test_gitattributes_fallback(tmp_path: Path) -> None:
    """export-subst/export-ignore make the tree differ; each file is checked instead."""
    attrs = b"version.py export-subst\ntests/ export-ignore\n"
    ext = extract(make_zip(tmp_path / "a.zip", honest([
        (TOP + ".gitattributes", attrs, None),
        (TOP + "version.py", b"V = 'abc1234'\n", None),
    ])), tmp_path / "o", commit=SHA, limits=Limits())
    blobs = {f.path: (f.mode, f.blob) for f in ext.files}
    listing = _listing([(p, m, b) for p, (m, b) in blobs.items()])
    listing = [i if i["path"] != "version.py" else {**i, "sha": "1" * 40} for i in listing]
    listing.append({"path": "tests/t.py", "mode": "100644", "sha": "2" * 40, "type": "blob"})
    check = check_tree(ext, "f" * 40, listing, allow_fallback=True)
    assert check.level == "per-file"
    assert check.unverified == ("version.py",)
    assert check.omitted == ("tests/t.py",)
    with pytest.raises(IntegrityError, match="forbidden by policy"):
        check_tree(ext, "f" * 40, listing, allow_fallback=False)
    # A file the commit does not have is never accepted, whatever .gitattributes says.
    with pytest.raises(IntegrityError, match="not in the commit's tree"):
        check_tree(ext, "f" * 40, [i for i in listing if i["path"] != "hubconf.py"],
                   allow_fallback=True)
    # hubconf.py altered, but no rule can explain it once .gitattributes is not the commit's.
    forged = [i if i["path"] != ".gitattributes" else {**i, "sha": "3" * 40} for i in listing]
    with pytest.raises(IntegrityError, match="no .gitattributes rule"):
        check_tree(ext, "f" * 40, forged, allow_fallback=True)


def test_resolve_link() -> None:
    links = {"a/up": "..", "b": "a", "c": "b/../.."}
    assert resolve_link("a/up", links) == ""
    assert resolve_link("b/up/a", links) == "a"
    assert resolve_link("c", links) is None


def test_exotic_zip_features_are_integrity_errors(tmp_path: Path) -> None:
    """Unknown compression methods and broken symlink entries never escape as raw errors."""
    z = make_zip(tmp_path / "a.zip", honest())
    data = bytearray(z.read_bytes())
    # Claim compression method 99 (AES) for every entry, in local and central headers.
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):
        i = data.find(sig)
        while i != -1:
            offset = 8 if sig == b"PK\x03\x04" else 10
            data[i + offset:i + offset + 2] = (99).to_bytes(2, "little")
            i = data.find(sig, i + 4)
    z.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="unsupported zip feature"):
        extract(z, tmp_path / "out", commit=SHA, limits=Limits())


def test_an_attribute_explains_only_the_paths_it_applies_to(tmp_path: Path) -> None:
    """'*.py eol=lf' (or a comment saying 'text') cannot excuse a swapped hubconf.py: the
    line-ending change is undone and must give back the committed blob exactly."""
    attrs = b"# text files are normalised\n*.py eol=lf\n"
    ext = extract(make_zip(tmp_path / "a.zip", honest([(TOP + ".gitattributes", attrs, None)])),
                  tmp_path / "o", commit=SHA, limits=Limits())
    blobs = {f.path: (f.mode, f.blob) for f in ext.files}
    listing = _listing([(p, m, b) for p, (m, b) in blobs.items()])
    swapped = [i if i["path"] != "hubconf.py" else {**i, "sha": "1" * 40} for i in listing]
    with pytest.raises(IntegrityError, match="'hubconf.py' differs"):
        check_tree(ext, "f" * 40, swapped, allow_fallback=True)
    # A real CRLF conversion is undone exactly and counts as verified.
    from safehub.digest import blob_id

    crlf = extract(make_zip(tmp_path / "b.zip", honest([
        (TOP + ".gitattributes", b"*.txt eol=crlf\n", None),
        (TOP + "notes.txt", b"one\r\ntwo\r\n", None)])), tmp_path / "o2", commit=SHA,
        limits=Limits())
    listing = _listing([(f.path, f.mode, f.blob) for f in crlf.files])
    listing = [i if i["path"] != "notes.txt" else {**i, "sha": blob_id(b"one\ntwo\n")}
               for i in listing]
    check = check_tree(crlf, "f" * 40, listing, allow_fallback=True)
    assert check.level == "per-file" and check.unverified == ()
