"""Repos made with plain git (the oracle), archived as GitHub does, and zips rewritten.

Many small trees are written in one ``git fast-import`` run (one commit each), so the
cost of a case is one ``git archive``. GitHub's zipballs are ``git archive --format=zip``
of the commit with a ``<owner>-<repo>-<short sha>/`` top folder and the commit id as the
zip comment, which ``git archive`` writes itself.
"""

from __future__ import annotations

import subprocess
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path

from safehub.digest import blob_id, parents
from safehub.verify.gitattributes.subst import CommitFacts, Person

FILE, EXEC, LINK, GITLINK = "100644", "100755", "120000", "160000"


def git_env(home: Path) -> dict[str, str]:
    """An environment where no user or system git configuration or attributes apply."""
    return {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(home),
            "GIT_ATTR_NOSYSTEM": "1", "XDG_CONFIG_HOME": str(home / ".config"),
            "GIT_AUTHOR_NAME": "A U Thor", "GIT_AUTHOR_EMAIL": "a@example.com",
            "GIT_COMMITTER_NAME": "A U Thor", "GIT_COMMITTER_EMAIL": "a@example.com",
            "GIT_AUTHOR_DATE": "1700000000 +0000", "GIT_COMMITTER_DATE": "1700000000 +0000",
            "PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C", "TZ": "UTC"}


@dataclass(frozen=True)
class Entry:
    """A tree entry: a blob's bytes (a link's target), or a gitlink's commit id."""

    mode: str
    data: bytes = b""
    sha: str = ""

    @property
    def oid(self) -> str:
        return self.sha if self.mode == GITLINK else blob_id(self.data)


@dataclass
class Case:
    """One commit's tree, and what git made of it."""

    entries: dict[str, Entry]
    commit: str = ""
    tree: str = ""
    zip: bytes = b""
    blobs: dict[str, bytes] = field(default_factory=dict)
    facts: CommitFacts | None = None
    """The commit as the API's ``git/commits`` describes it (dates in UTC, message without
    its final newline)."""

    def listing(self) -> list[dict[str, object]]:
        """The API's recursive listing of the tree (shape of GET .../git/trees?recursive=1)."""
        out: list[dict[str, object]] = []
        folders = sorted({d for p in self.entries for d in parents(p)})
        for d in folders:
            out.append({"path": d, "mode": "040000", "type": "tree", "sha": "0" * 40})
        for path, e in sorted(self.entries.items()):
            kind = "commit" if e.mode == GITLINK else "blob"
            out.append({"path": path, "mode": e.mode, "type": kind, "sha": e.oid})
        return out

    def fetch_blob(self, sha: str) -> bytes:
        return self.blobs[sha]

    def fetch_commit(self) -> CommitFacts:
        assert self.facts is not None
        return self.facts


class Repo:
    """A bare-ish scratch repository driven by git subprocesses."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.env = git_env(path.parent)
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "--bare")

    def git(self, *args: str, data: bytes | None = None) -> bytes:
        done = subprocess.run(["git", *args], cwd=self.path, env=self.env, input=data,
                              capture_output=True, check=False)
        if done.returncode:
            raise RuntimeError(f"git {args[0]} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def commit_all(self, cases: Sequence[Case]) -> None:
        """One commit per case (in one fast-import run), then their tree ids."""
        stream = bytearray()
        for n, case in enumerate(cases, start=1):
            stream += (f"commit refs/heads/c{n}\nmark :{n}\n"
                       "committer A U Thor <a@example.com> 1700000000 +0000\n"
                       f"data 8\ncase {n:03}\ndeleteall\n").encode()
            for path, e in sorted(case.entries.items()):
                quoted = _quote(path)
                if e.mode == GITLINK:
                    stream += f"M {e.mode} {e.sha} {quoted}\n".encode()
                else:
                    stream += f"M {e.mode} inline {quoted}\ndata {len(e.data)}\n".encode()
                    stream += e.data + b"\n"
                    case.blobs[blob_id(e.data)] = e.data
            stream += b"\n"
        marks = self.path / "marks"
        self.git("fast-import", "--quiet", "--force", f"--export-marks={marks}", data=bytes(stream))
        commits = dict(line.split() for line in marks.read_text().splitlines())
        for n, case in enumerate(cases, start=1):
            case.commit = commits[f":{n}"]
        query = "".join(f"{c.commit}^{{tree}}\n" for c in cases).encode()
        for case, line in zip(cases, self.git("cat-file", "--batch-check", data=query)
                              .decode().splitlines(), strict=True):
            case.tree = line.split()[0]
            case.facts = self.facts(case.commit)

    def facts(self, commit: str) -> CommitFacts:
        """What GitHub's ``git/commits`` says of ``commit`` (its dates in UTC, with ``Z``)."""
        form = "%T%x00%P%x00%an%x00%ae%x00%at%x00%cn%x00%ce%x00%ct%x00%B"
        f = self.git("show", "-s", f"--format={form}", commit).decode().split("\0")

        def utc(stamp: str) -> str:
            return datetime.fromtimestamp(int(stamp), tz=timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ")

        return CommitFacts(commit, f[0], tuple(f[1].split()),
                           Person.from_api(f[2], f[3], utc(f[4])),
                           Person.from_api(f[5], f[6], utc(f[7])), f[8].rstrip("\n"))

    def archive(self, case: Case, prefix: str = "") -> bytes:
        """``git archive --format=zip`` of the case's commit, as GitHub serves it."""
        top = prefix or f"o-r-{case.commit[:7]}/"
        case.zip = self.git("archive", "--format=zip", f"--prefix={top}", case.commit)
        return case.zip


def _quote(path: str) -> str:
    if not any(c in path for c in '"\\\n') and not path.startswith('"'):
        return path
    body = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{body}"'


@dataclass(frozen=True)
class ZipItem:
    """One entry of a zip, as :func:`read_zip` sees it and :func:`write_zip` writes it."""

    name: str
    data: bytes
    system: int
    external: int

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


def read_zip(data: bytes) -> tuple[list[ZipItem], bytes]:
    with zipfile.ZipFile(BytesIO(data)) as zf:
        items = [ZipItem(i.filename, zf.read(i), i.create_system, i.external_attr)
                 for i in zf.infolist()]
        return items, zf.comment


def write_zip(items: Iterable[ZipItem], comment: bytes) -> bytes:
    """A zip of ``items`` (deflated, with the given modes) and ``comment``."""
    out = BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for item in items:
            info = zipfile.ZipInfo(item.name, (2023, 11, 14, 22, 13, 20))
            info.create_system = item.system
            info.external_attr = item.external
            info.compress_type = zipfile.ZIP_STORED if item.is_dir else zipfile.ZIP_DEFLATED
            zf.writestr(info, item.data)
        zf.comment = comment
    return out.getvalue()


def rezip(data: bytes, change: Callable[[list[ZipItem]], list[ZipItem]]) -> bytes:
    items, comment = read_zip(data)
    return write_zip(change(items), comment)


def unix(mode: int) -> tuple[int, int]:
    """``(create_system, external_attr)`` of a unix-mode entry."""
    return 3, mode << 16


def attributes_of(entries: Mapping[str, Entry]) -> dict[str, bytes]:
    return {p: e.data for p, e in entries.items()
            if p.rpartition("/")[2] == ".gitattributes" and e.mode != GITLINK}


@dataclass(frozen=True)
class Layout:
    """Where the records of a zip are: its end record, each entry's central and local
    header (found with ``struct``, independently of safehub's reader)."""

    eocd: int
    central: list[int]
    local: list[int]


def layout(data: bytes) -> Layout:
    import struct

    eocd = data.rindex(b"PK\x05\x06")
    count, _, start = struct.unpack_from("<HLL", data, eocd + 10)
    central, local = [], []
    pos = start
    for _ in range(count):
        central.append(pos)
        local.append(struct.unpack_from("<L", data, pos + 42)[0])
        n, x, c = struct.unpack_from("<3H", data, pos + 28)
        pos += 46 + n + x + c
    return Layout(eocd, central, local)


def patch(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new):]
