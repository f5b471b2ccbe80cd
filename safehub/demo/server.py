"""A small loopback HTTPS GitHub for ``safehub demo`` only (the library never imports it).

It answers from git repos on disk: ``commits`` (JSON or the sha media type), ``compare``,
``branches``, ``tags``, ``git/{ref,matching-refs,tags,commits,trees,blobs}``, the zipball
redirects (web and REST) and codeload's ``git archive`` zips. Names resolve among a repo's
own branches and tags, shas across its fork network, as on GitHub. API and web live on
``localhost``, codeload on ``127.0.0.1``, under a throwaway CA made with ``cryptography``.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import re
import ssl
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["DemoGitHub", "git"]

_SAFE_REF = re.compile(r"[A-Za-z0-9._/-]+")


def git(cwd: Path | None, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git with a fixed identity and date, ignoring the user's git config."""
    return _run(cwd, args, env).decode(errors="replace").strip()


def _run(cwd: Path | None, args: tuple[str, ...], env: dict[str, str] | None) -> bytes:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    base.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C",
                GIT_AUTHOR_NAME="safehub demo", GIT_AUTHOR_EMAIL="demo@safehub.invalid",
                GIT_COMMITTER_NAME="safehub demo", GIT_COMMITTER_EMAIL="demo@safehub.invalid",
                GIT_AUTHOR_DATE="1704067200 +0000", GIT_COMMITTER_DATE="1704067200 +0000")
    done = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false",
                           *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True,
                          check=True)
    return done.stdout


def _make_tls(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate for localhost and 127.0.0.1: (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "safehub demo CA")])

    def build(subject: str, issuer: x509.Name, public: Any, ca: bool) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().issuer_name(issuer).public_key(public)
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))

    ca = build("safehub demo CA", ca_name, ca_key.public_key(), True).sign(ca_key, hashes.SHA256())
    sans = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (build("localhost", ca_name, key.public_key(), False)
            .add_extension(sans, critical=False).sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    contents = (ca.public_bytes(pem), cert.public_bytes(pem), key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    for path, data in zip(paths, contents, strict=True):
        path.write_bytes(data)
    return paths


class _Repo:
    def __init__(self, owner: str, name: str, path: Path, network: list[_Repo]) -> None:
        self.owner, self.name, self.network = owner, name, network
        self.git_dir = Path(git(path, "rev-parse", "--absolute-git-dir"))

    def run(self, *args: str) -> bytes:
        """git in this repo, seeing the objects of its whole fork network."""
        others = [str(r.git_dir / "objects") for r in self.network if r is not self]
        return _run(None, args, {"GIT_DIR": str(self.git_dir),
                                 "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.pathsep.join(others)})

    def git(self, *args: str) -> str:
        return self.run(*args).decode(errors="replace").strip()

    def refs(self) -> dict[str, tuple[str, str, str]]:
        """refname -> (object, its type, peeled commit) for branches and tags."""
        fmt = "%(refname) %(objectname) %(objecttype) %(*objectname)"
        lines = self.git("for-each-ref", f"--format={fmt}", "refs/heads", "refs/tags")
        return {p[0]: (p[1], p[2], p[3] if len(p) > 3 else p[1])
                for p in (line.split() for line in lines.splitlines())}

    def resolve(self, ref: str) -> str | None:
        """A name of the repo's own (tags first, as git), else a hex prefix in the network."""
        if not _SAFE_REF.fullmatch(ref) or ".." in ref or ref.startswith("-"):
            return None
        refs = self.refs()
        for name in (ref, f"refs/{ref}", f"refs/tags/{ref}", f"refs/heads/{ref}"):
            if name in refs:
                return refs[name][2]
        if re.fullmatch(r"[0-9a-f]{4,40}", ref):
            try:
                return self.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
            except subprocess.CalledProcessError:
                return None
        return None


class DemoGitHub:
    """Serve repos on loopback HTTPS: ``with DemoGitHub(tmp) as gh: gh.add_repo(...)``."""

    def __init__(self, folder: Path, port: int = 0) -> None:
        self.ca_cert, cert, key = _make_tls(folder / "tls")
        self.repos: dict[str, _Repo] = {}
        self.log: list[str] = []
        self.archive_filter: Callable[[bytes], bytes] | None = None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._server.demo = self  # type: ignore[attr-defined]
        self.port = port = self._server.server_address[1]
        self.api_url = f"https://localhost:{port}/api/v3"
        self.web_url = f"https://localhost:{port}/web"
        self.codeload_url = f"https://127.0.0.1:{port}/codeload"

    def __enter__(self) -> DemoGitHub:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_repo(self, owner: str, name: str, path: Path, fork_of: str | None = None) -> None:
        network = self.repos[fork_of.lower()].network if fork_of else []
        network.append(_Repo(owner, name, path, network))
        self.repos[f"{owner}/{name}".lower()] = network[-1]

    def answer(self, path: str, accept: str) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for a GET of ``path`` (with its query)."""
        self.log.append(path)
        url = urlsplit(path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        query = parse_qs(url.query)
        try:
            if parts[:2] == ["api", "v3"] and len(parts) >= 5 and parts[2] == "repos":
                return self._api(self.repos[f"{parts[3]}/{parts[4]}".lower()], parts[5:],
                                 query, accept)
            if parts[0] == "web" and len(parts) >= 5 and parts[3] == "zipball":  # as REST's
                return self._api(self.repos[f"{parts[1]}/{parts[2]}".lower()], parts[3:],
                                 query, accept)
            if parts[0] == "codeload" and len(parts) >= 5 and parts[3] == "legacy.zip":
                repo = self.repos[f"{parts[1]}/{parts[2]}".lower()]
                sha = repo.resolve(parts[4])
                if sha:
                    data = repo.run("archive", "--format=zip",
                                    f"--prefix={repo.owner}-{repo.name}-{sha[:7]}/", sha)
                    filtered = self.archive_filter(data) if self.archive_filter else data
                    return 200, {"Content-Type": "application/zip"}, filtered
        except (KeyError, IndexError, ValueError, subprocess.CalledProcessError):
            pass
        return _json({"message": "Not Found"}, 404)

    def _api(self, repo: _Repo, tail: list[str], query: dict[str, list[str]],
             accept: str) -> tuple[int, dict[str, str], bytes]:
        api = f"{self.api_url}/repos/{repo.owner}/{repo.name}"
        kind, rest = (tail[0], "/".join(tail[1:])) if tail else ("", "")
        if not tail:
            return _json({"full_name": f"{repo.owner}/{repo.name}", "name": repo.name,
                          "owner": {"login": repo.owner}, "default_branch": "main",
                          "fork": repo is not repo.network[0], "url": api})
        sha = repo.resolve(rest) if kind in ("commits", "zipball") and rest else None
        if kind == "zipball" and sha:
            where = f"{self.codeload_url}/{repo.owner}/{repo.name}/legacy.zip/{sha}"
            return 302, {"Location": where}, b""
        if kind == "commits" and rest:
            if sha is None:
                return _json({"message": f"No commit found for SHA: {rest}"}, 422)
            if "vnd.github.sha" in accept or "vnd.github.v3.sha" in accept:
                return 200, {"Content-Type": "application/vnd.github.sha"}, sha.encode()
            commit = _commit(repo, sha, api)
            parent = commit["parents"][0]["sha"] if commit["parents"] else None
            return _json({**commit, **_files(repo, parent, sha)})
        if kind == "compare" and "..." in rest:
            base, head = (repo.resolve(r) for r in rest.split("...", 1))
            if base is None or head is None:
                return _json({"message": "Not Found"}, 404)
            merge_base = repo.git("merge-base", base, head)
            behind, ahead = map(int, repo.git("rev-list", "--left-right", "--count",
                                              f"{base}...{head}").split())
            status = ("identical" if not (ahead or behind) else "ahead" if not behind
                      else "behind" if not ahead else "diverged")
            new = repo.git("rev-list", "--reverse", f"{base}..{head}").split()[:250]
            return _json({"status": status, "ahead_by": ahead, "behind_by": behind,
                          "total_commits": ahead, "base_commit": _commit(repo, base, api),
                          "merge_base_commit": _commit(repo, merge_base, api),
                          "commits": [_commit(repo, c, api) for c in new],
                          **_files(repo, merge_base, head)})
        if kind in ("branches", "tags") and not rest:
            space = "refs/heads/" if kind == "branches" else "refs/tags/"
            return _json([{"name": n[len(space):], "commit": {"sha": v[2]}}
                          for n, v in sorted(repo.refs().items()) if n.startswith(space)])
        if kind == "git" and len(tail) >= 3:
            return _git_data(repo, tail[1], "/".join(tail[2:]), query, api)
        return _json({"message": "Not Found"}, 404)


def _json(payload: object, status: int = 200) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(payload).encode()


def _commit(repo: _Repo, sha: str, api: str) -> dict[str, Any]:
    form = "%T%n%P%n%an%n%ae%n%aI%n%cn%n%ce%n%cI%n%B"
    f = repo.git("show", "-s", f"--format={form}", sha).split("\n", 8)
    return {"sha": sha, "url": f"{api}/commits/{sha}",
            "commit": {"tree": {"sha": f[0]}, "message": f[8].rstrip("\n"),
                       "author": {"name": f[2], "email": f[3], "date": f[4]},
                       "committer": {"name": f[5], "email": f[6], "date": f[7]}},
            "parents": [{"sha": p, "url": f"{api}/commits/{p}"} for p in f[1].split()]}


def _files(repo: _Repo, old: str | None, new: str) -> dict[str, Any]:
    """GitHub's ``files`` (the diff, up to 300, without patches here) and ``stats``."""
    args = ["diff-tree", "-r", "--no-commit-id", old or "--root", new]
    counts = [line.split("\t") for line in repo.git(*args, "--numstat").splitlines()]
    kinds = [line[:1] for line in repo.git(*args, "--name-status").splitlines()]
    adds, dels = ([int(c[i]) if c[i].isdigit() else 0 for c in counts] for i in (0, 1))
    files = [{"filename": c[2], "additions": a, "deletions": d, "changes": a + d,
              "status": {"A": "added", "D": "removed", "M": "modified"}.get(k, "changed")}
             for c, k, a, d in zip(counts, kinds, adds, dels, strict=True)]
    total = {"additions": sum(adds), "deletions": sum(dels), "total": sum(adds) + sum(dels)}
    return {"files": files[:300], "stats": total}


def _git_data(repo: _Repo, kind: str, rest: str, query: dict[str, list[str]],
              api: str) -> tuple[int, dict[str, str], bytes]:
    refs = repo.refs()

    def ref_json(name: str) -> dict[str, Any]:
        sha, typ, _ = refs[name]
        return {"ref": name, "url": f"{api}/git/{name}",
                "object": {"type": typ, "sha": sha, "url": f"{api}/git/{typ}s/{sha}"}}

    if kind == "ref" and f"refs/{rest}" in refs:
        return _json(ref_json(f"refs/{rest}"))
    if kind == "matching-refs":
        return _json([ref_json(n) for n in sorted(refs) if n.startswith(f"refs/{rest}")])
    kinds = {"tags": "tag", "commits": "commit", "trees": "tree", "blobs": "blob"}
    full = re.fullmatch(r"[0-9a-f]{40}", rest)
    if not full or kinds.get(kind) != repo.git("cat-file", "-t", rest):
        return _json({"message": "Not Found"}, 404)
    if kind == "commits":
        data = _commit(repo, rest, api)
        return _json({"sha": rest, "parents": data["parents"], **data["commit"]})
    if kind == "tags":
        head, _, message = repo.git("cat-file", "tag", rest).partition("\n\n")
        fields = dict(line.split(" ", 1) for line in head.splitlines())
        return _json({"sha": rest, "tag": fields["tag"], "message": message,
                      "object": {"sha": fields["object"], "type": fields["type"]}})
    if kind == "blobs":
        blob = repo.run("cat-file", "blob", rest)
        return _json({"sha": rest, "size": len(blob), "encoding": "base64",
                      "content": base64.b64encode(blob).decode()})
    recursive = ["-r", "-t"] if query.get("recursive") else []
    entries = []
    for line in repo.git("ls-tree", "--long", *recursive, rest).splitlines():
        meta, path = line.split("\t", 1)
        mode, typ, sha, size = meta.split()
        entries.append({"path": path, "mode": mode, "type": typ, "sha": sha,
                        **({"size": int(size)} if typ == "blob" else {})})
    return _json({"sha": rest, "tree": entries, "truncated": False})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        demo: DemoGitHub = self.server.demo  # type: ignore[attr-defined]
        status, headers, body = demo.answer(self.path, self.headers.get("Accept") or "")
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
