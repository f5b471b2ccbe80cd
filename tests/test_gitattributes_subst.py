"""export-subst: git is the oracle for what a placeholder may become; anything else is refused.

Each test makes a real commit whose ``_version.py`` is ``export-subst`` (versioneer's
``$Format:%d$``, ``%H``, ``%ci`` and most other placeholders), with tags and branches that
decorate it, archives it with ``git archive --format=zip`` as GitHub does, and checks that
safehub accepts what git wrote and refuses each expansion once altered.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from archive_helpers import FILE, Case, Entry, Repo, ZipItem, read_zip, write_zip

import safehub
from safehub.config import Limits
from safehub.errors import IntegrityError
from safehub.verify.archive import Reason, TreeCheck, check_tree, extract
from safehub.verify.gitattributes.subst import CommitFacts, Template
from tests.conftest import HUBCONF, HubRepo, runs
from tests.support import GitHubStandIn

FORMATS = ["%d", "%D", "%H", "%h", "%T", "%t", "%P", "%p", "%ci", "%cI", "%ct", "%cd",
           "%ad", "%aD", "%ai", "%aI", "%at", "%as", "%an", "%ae", "%al", "%cn", "%ce", "%s",
           "%b", "%B", "%ar", "v%h-%n-%%-%x41 (literal)", "%(describe)",
           "%(describe:tags=true,match=*[0-9]*)"]
EXACT = [f for f in FORMATS if f not in ("%d", "%D", "%ar", "%as") and "describe" not in f]
"""Bounded to one value (or an abbreviation): any changed character is refused."""
MESSAGE = "Release 1.0: the \"quoted\" subject\nspans two lines\n\nThe body.\n"
VERSIONEER = (b'git_refnames = "$Format:%d$"\ngit_full = "$Format:%H$"\n'
              b'git_date = "$Format:%ci$"\n')
INJECT = b'"; import os; os.system("touch /tmp/pwned"); x = "'


def _version_py() -> bytes:
    return b"".join(f'k{i} = "$Format:{f}$"\n'.encode() for i, f in enumerate(FORMATS))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return Repo(tmp_path_factory.mktemp("subst") / "repo.git")


def _commit(repo: Repo, files: dict[str, bytes], *, tags: tuple[str, ...] = ("v1.0",),
            branches: tuple[str, ...] = ("feature/x",)) -> Case:
    """A commit of ``files`` (with a parent, a zone offset and a two-paragraph message),
    tagged, branched and made HEAD, so that every placeholder has something to say."""
    case = Case({".gitattributes": Entry(FILE, b"_version.py export-subst\n"),
                 **{p: Entry(FILE, d) for p, d in files.items()}})
    repo.commit_all([case])
    env = dict(repo.env, GIT_AUTHOR_DATE="1700000000 +0530", GIT_AUTHOR_NAME="Ann Author",
               GIT_AUTHOR_EMAIL="ann@example.org", GIT_COMMITTER_DATE="1700003600 -0700")
    saved, repo.env = repo.env, env
    try:
        case.commit = repo.git("commit-tree", case.tree, "-p", case.commit,
                               data=MESSAGE.encode()).decode().strip()
    finally:
        repo.env = saved
    name = "head-" + case.commit[:8]
    repo.git("branch", "-f", name, case.commit)
    repo.git("symbolic-ref", "HEAD", f"refs/heads/{name}")
    for tag in tags:
        repo.git("tag", "-f", tag, case.commit)
    for branch in branches:
        repo.git("branch", "-f", branch, case.commit)
    case.facts = repo.facts(case.commit)
    return case


def _check(case: Case, zip_bytes: bytes, tmp: Path, *, details: bool = True) -> TreeCheck:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "a.zip").write_bytes(zip_bytes)
    ext = extract(tmp / "a.zip", tmp / "tree", commit=case.commit, limits=Limits())
    return check_tree(ext, case.tree, case.listing(), allow_fallback=True,
                      fetch_blob=case.fetch_blob,
                      fetch_commit=case.fetch_commit if details else None)


def _expansions(case: Case, zip_bytes: bytes) -> dict[str, bytes]:
    item = next(i for i in read_zip(zip_bytes)[0] if i.name.endswith("/_version.py"))
    filled = Template.of(case.entries["_version.py"].data).loose(item.data)
    assert filled is not None
    return {fmt: text for fmt, text in filled}


def _with_expansion(case: Case, zip_bytes: bytes, fmt: str, new: bytes) -> bytes:
    """The archive with the expansion of ``$Format:<fmt>$`` (on its own line) replaced."""
    items, comment = read_zip(zip_bytes)
    template = case.entries["_version.py"].data
    line = next(x for x in template.splitlines(keepends=True)
                if x.endswith(f'"$Format:{fmt}$"\n'.encode()))
    key = line.split(b" = ")[0] + b' = "'
    out = []
    for item in items:
        if item.name.endswith("/_version.py"):
            start = item.data.index(key) + len(key)
            old = _expansions(case, zip_bytes)[f"$Format:{fmt}$"]
            assert item.data[start:start + len(old)] == old
            item = ZipItem(item.name, item.data[:start] + new + item.data[start + len(old):],
                           item.system, item.external)
        out.append(item)
    return write_zip(out, comment)


@pytest.fixture(scope="module")
def every(repo: Repo) -> tuple[Case, bytes]:
    case = _commit(repo, {"_version.py": _version_py(), "hubconf.py": b"x = 1\n"})
    return case, repo.archive(case)


def test_what_git_writes_for_every_placeholder_is_accepted(
        repo: Repo, every: tuple[Case, bytes], tmp_path: Path) -> None:
    case, zip_bytes = every
    check = _check(case, zip_bytes, tmp_path)
    assert check.unverified == ("_version.py",)
    assert [d.reason for d in check.differences] == [Reason.EXPORT_SUBST]
    filled = _expansions(case, zip_bytes)
    for fmt in FORMATS:  # each as `git log -1 --format` writes it (the test is not vacuous)
        if fmt != "%ar":
            want = repo.git("log", "-1", f"--format={fmt}", case.commit).removesuffix(b"\n")
            # git archive expands only the first %(describe) of an archive
            later = "describe" in fmt and fmt != FORMATS[FORMATS.index("%(describe)")]
            assert filled[f"$Format:{fmt}$"] == (fmt.encode() if later else want), fmt
    assert filled["$Format:%d$"].startswith(b" (HEAD -> head-")
    assert b"tag: v1.0" in filled["$Format:%d$"] and b"feature/x" in filled["$Format:%d$"]


@pytest.mark.parametrize("tagged", ["the commit", "its parent", "nothing"])
def test_setuptools_scm_archival_file_is_accepted(repo: Repo, tmp_path: Path,
                                                  tagged: str) -> None:
    """setuptools-scm's .git_archival.txt, as git writes it: a describe of the commit
    (a tag, `tag-<count>-g<id>`, or nothing) bounded by the commit id."""
    archival = (b"node: $Format:%H$\nnode-date: $Format:%cI$\n"
                b"describe-name: $Format:%(describe:tags=true,match=*[0-9]*)$\n"
                b"ref-names: $Format:%D$\n")
    case = _commit(repo, {"_version.py": archival}, tags=(), branches=())
    for tag in repo.git("tag", "--list").decode().split():
        repo.git("tag", "-d", tag)
    if tagged == "the commit":
        repo.git("tag", "v3.1", case.commit)
    elif tagged == "its parent":
        repo.git("tag", "v3.0", case.commit + "~1")
    zip_bytes = repo.archive(case)
    filled = _expansions(case, zip_bytes)[
        "$Format:%(describe:tags=true,match=*[0-9]*)$"]
    assert filled == {"the commit": b"v3.1", "nothing": b""}.get(
        tagged, b"v3.0-1-g" + case.commit[:len(filled) - 8].encode())
    check = _check(case, zip_bytes, tmp_path)
    assert check.unverified == ("_version.py",)
    items, comment = read_zip(zip_bytes)
    for forged in (b'v3"; import os; x="', b"v3.0 -1-g" + case.commit[:7].encode()):
        out = [ZipItem(i.name, i.data.replace(b"describe-name: " + filled + b"\n",
                                              b"describe-name: " + forged + b"\n"),
                       i.system, i.external) for i in items]
        assert out != items
        with pytest.raises(IntegrityError, match="describe"):
            _check(case, write_zip(out, comment), tmp_path)


def test_an_expansion_that_declares_a_source_encoding_is_refused(repo: Repo,
                                                                tmp_path: Path) -> None:
    """A decoration is a list of names; `tag: coding=utf-7` in a comment on line 1 makes
    Python decode the whole file as UTF-7, where `+AAo...-` is a newline and code."""
    template = b"# refs: $Format:%D$\nVERSION = '1'\n"
    case = _commit(repo, {"_version.py": template})
    zip_bytes = repo.archive(case)
    check = _check(case, zip_bytes, tmp_path)  # what git wrote passes
    assert check.unverified == ("_version.py",)
    items, comment = read_zip(zip_bytes)
    filled = _expansions(case, zip_bytes)["$Format:%D$"]
    forged = b"tag: coding=utf-7, tag: v1.0"
    out = [ZipItem(i.name, i.data.replace(filled, forged, 1), i.system, i.external)
           for i in items]
    with pytest.raises(IntegrityError, match="PEP 263"):
        _check(case, write_zip(out, comment), tmp_path)


def test_versioneer_loads_without_the_commit_details(repo: Repo, tmp_path: Path) -> None:
    """%d, %H and %ci are bounded by the commit id and shapes alone."""
    case = _commit(repo, {"_version.py": VERSIONEER}, tags=("v2.0", "2.0.0+local.1"),
                   branches=("release/2.x",))
    check = _check(case, repo.archive(case), tmp_path, details=False)
    assert check.unverified == ("_version.py",)


def test_the_message_is_refused_without_the_commit_details(repo: Repo, tmp_path: Path) -> None:
    case = _commit(repo, {"_version.py": b'subject = "$Format:%s$"\n'})
    with pytest.raises(IntegrityError, match=r"_version.py.*%s \(the commit message\) cannot "
                       "be bounded"):
        _check(case, repo.archive(case), tmp_path, details=False)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("change", ["inject", "quote", "newline"])
def test_an_altered_expansion_is_refused(every: tuple[Case, bytes], tmp_path: Path, fmt: str,
                                         change: str) -> None:
    case, zip_bytes = every
    old = _expansions(case, zip_bytes)[f"$Format:{fmt}$"]
    new = {"inject": old + INJECT, "quote": b'"' + old, "newline": old + b"\n"}[change]
    with pytest.raises(IntegrityError, match=r"'_version.py'.*export-subst.*\$Format:"):
        _check(case, _with_expansion(case, zip_bytes, fmt, new), tmp_path)


@pytest.mark.parametrize("fmt", EXACT)
def test_an_expansion_bounded_to_one_value_refuses_any_other(
        every: tuple[Case, bytes], tmp_path: Path, fmt: str) -> None:
    case, zip_bytes = every
    old = _expansions(case, zip_bytes)[f"$Format:{fmt}$"]
    swap = {ord(c): ord(d) for c, d in zip("0123456789abcdefA", "1234567890bcdefaB",
                                             strict=True)}
    k = max(i for i, c in enumerate(old) if c in swap)
    new = old[:k] + bytes([swap[old[k]]]) + old[k + 1:]
    with pytest.raises(IntegrityError, match=re.escape(f"$Format:{fmt}$")):
        _check(case, _with_expansion(case, zip_bytes, fmt, new), tmp_path)


def test_another_commit_id_is_refused(every: tuple[Case, bytes], tmp_path: Path) -> None:
    case, zip_bytes = every
    assert case.facts is not None and case.facts.parents
    other = case.facts.parents[0].encode()
    for fmt, new in (("%H", other), ("%h", other[:7]), ("%T", b"0" * 40)):
        with pytest.raises(IntegrityError, match=r"\$Format:%[HhT]\$"):
            _check(case, _with_expansion(case, zip_bytes, fmt, new), tmp_path)


@pytest.mark.parametrize("new", [
    b" (HEAD -> main, tag: v1.0, x\"; import os; \")",
    b" (HEAD -> main, tag: v1.0)\"; import os; x = \"",
    b" (tag: v1.0, {__import__(chr(111))})",
    b" (tag: v1.0, a#b)",
    b" (tag: v1.0,  two)",
])
def test_a_longer_decoration_with_injected_text_is_refused(
        every: tuple[Case, bytes], tmp_path: Path, new: bytes) -> None:
    case, zip_bytes = every
    with pytest.raises(IntegrityError, match=r"\$Format:%d\$.*ref names"):
        _check(case, _with_expansion(case, zip_bytes, "%d", new), tmp_path)


def test_a_tag_name_with_a_quote_is_a_false_alarm_by_design(repo: Repo, tmp_path: Path) -> None:
    """git admits `"` in a tag name; safehub refuses it in a decoration rather than let a
    decoration end a string literal."""
    case = _commit(repo, {"_version.py": VERSIONEER}, tags=('v1"x',))
    with pytest.raises(IntegrityError, match=r"\$Format:%d\$"):
        _check(case, repo.archive(case), tmp_path)


@pytest.mark.parametrize("fmt", ["%N", "%e", "%ah", "%(describex)", "%w(10)%s", "%+s", "%Cred"])
def test_a_placeholder_safehub_cannot_bound_is_refused(repo: Repo, tmp_path: Path,
                                                       fmt: str) -> None:
    case = _commit(repo, {"_version.py": f'v = "$Format:{fmt}$"\n'.encode()})
    with pytest.raises(IntegrityError, match="not a placeholder safehub can bound"):
        _check(case, repo.archive(case), tmp_path)


def test_commit_details_for_another_commit_are_refused(every: tuple[Case, bytes],
                                                       tmp_path: Path) -> None:
    case, zip_bytes = every
    assert case.facts is not None
    wrong = CommitFacts("0" * 40, case.tree, message=case.facts.message)
    with pytest.raises(IntegrityError, match="another commit"):
        _check(Case(case.entries, case.commit, case.tree, b"", case.blobs, wrong), zip_bytes,
               tmp_path)


# -- the whole load --------------------------------------------------------------------

HUBCONF_VERSION = HUBCONF + "\nfrom _version import git_refnames, git_full, git_date\n"


def _rezip(data: bytes, path: str, change: bytes) -> bytes:
    items, comment = read_zip(data)
    return write_zip([ZipItem(i.name, change, i.system, i.external)
                      if i.name.endswith("/" + path) else i for i in items], comment)


def test_code_injected_in_an_expansion_does_not_run(
    make_hub_repo, server: GitHubStandIn, canary: Path  # type: ignore[no-untyped-def]
) -> None:
    repo: HubRepo = make_hub_repo(files={"hubconf.py": HUBCONF_VERSION,
                                         "_version.py": VERSIONEER.decode(),
                                         ".gitattributes": "_version.py export-subst\n"})
    evil = (b'git_refnames = ""; import os; open(os.environ["SAFEHUB_TEST_CANARY"], "a")'
            b'.write("injected\\n"); x = ""\ngit_full = "' + repo.sha.encode()
            + b'"\ngit_date = "2023-11-14 22:13:20 +0000"\n')
    server.tamper_archive(repo.sha, lambda z: _rezip(z, "_version.py", evil))
    with pytest.raises(safehub.IntegrityError,
                       match=r"'_version.py'.*\$Format:%d\$.*git cannot have written"):
        safehub.load(f"{repo.spec}:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 0


def test_an_honest_versioneer_file_loads(
    make_hub_repo, canary: Path  # type: ignore[no-untyped-def]
) -> None:
    """The commit's details come from the stand-in's ``git/commits`` (as GitHub's: dates in
    UTC, the message without its final newline)."""
    more = 'git_who = "$Format:%s by %an <%ae> at %aI, %ct; %P$"\n'
    repo: HubRepo = make_hub_repo(files={"hubconf.py": HUBCONF_VERSION,
                                         "_version.py": VERSIONEER.decode() + more,
                                         ".gitattributes": "_version.py export-subst\n"})
    pytest.importorskip("torch")
    with pytest.warns(UserWarning, match="export-subst"):
        safehub.load(f"{repo.spec}:v1.0", "tiny", trust_repo=True)
    assert runs(canary) == 1
