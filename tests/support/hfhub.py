"""A loopback HTTPS stand-in for the Hugging Face Hub, enough for huggingface_hub's downloads.

Two hosts on one port: the Hub (``127.0.0.1``, set as ``HF_ENDPOINT``) and its LFS "CDN"
(``127.0.0.6``). Endpoints, as the Hub answers them (huggingface_hub's ``hf_hub_download``
and ``snapshot_download`` call these):

* ``GET /api/models/{repo}/revision/{rev}``: ``{"id", "sha", "siblings": [{"rfilename"}]}``;
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit``; a file kept in LFS
  (``.safetensors``, ``.bin``, ``.pth``) answers 302 to the CDN with ``X-Linked-Etag`` (its
  sha256) and ``X-Linked-Size``; a small file answers 200 with ``ETag`` (its git blob id);
* ``GET /api/models/{repo}/tree/{rev}``: the files, with their blob ids and LFS oids (the
  library's own ``snapshot_download`` lists them so);
* ``GET /lfs/{sha256}`` on the CDN host: the bytes.

No xet headers are sent, so clients download over plain HTTP(S). Knobs for attacks:
``tamper`` (the CDN serves other bytes for an oid), ``tamper_small`` (a small file's GET
serves other bytes than its ETag names), ``cut`` (the CDN stops after N bytes),
``extra`` (the CDN sends more than declared), ``redirect_to`` (LFS redirects elsewhere).
Repos are in memory: :meth:`HubStandIn.commit` adds a commit and moves a branch to it.
"""

from __future__ import annotations

import hashlib
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote

from .tls import TLSFiles
from .transport import Listener, Reply, RequestRecord

__all__ = ["HubStandIn"]

HUB, CDN = "127.0.0.1", "127.0.0.6"
_LFS = (".safetensors", ".bin", ".pth", ".pt")


@dataclass
class _Repo:
    refs: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)


class HubStandIn:
    """``with HubStandIn(tls) as hub: hub.commit("acme/tiny", {...})``."""

    def __init__(self, tls: TLSFiles) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.server_cert, tls.server_key)
        self.ca_cert = tls.ca_cert
        self.repos: dict[str, _Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.tamper: dict[str, bytes] = {}
        self.tamper_small: dict[str, bytes] = {}
        self.cut: int | None = None
        self.extra = b""
        self.redirect_to: str | None = None
        self.log: list[RequestRecord] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._listener = Listener({HUB: "hub", CDN: "cdn"}, context, self._answer,
                                  self.errors.append)
        self.endpoint = f"https://{HUB}:{self._listener.port}"
        self.cdn = f"https://{CDN}:{self._listener.port}"

    def __enter__(self) -> HubStandIn:
        self._listener.serve()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._listener.stop()

    def commit(self, repo: str, files: dict[str, bytes], branch: str = "main") -> str:
        """A new commit of ``repo`` with ``files`` (the whole tree); ``branch`` moves to it."""
        with self._lock:
            r = self.repos.setdefault(repo, _Repo())
            sha = hashlib.sha1(repr((repo, sorted(files.items()), len(r.commits))).encode()
                               ).hexdigest()
            r.commits[sha] = dict(files)
            r.refs[branch] = sha
            for data in files.values():
                self.blobs[hashlib.sha256(data).hexdigest()] = data
            return sha

    def forget(self, repo: str, commit: str) -> None:
        """The commit is gone from the Hub (a force-push, a squashed history)."""
        with self._lock:
            del self.repos[repo].commits[commit]

    def requests(self, host: str = HUB) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.log if r.host == host]

    # -- answers ------------------------------------------------------------------------------

    def _answer(self, record: RequestRecord) -> Reply:
        with self._lock:
            self.log.append(record)
        path = record.path.split("?", 1)[0]
        if record.role == "cdn":
            return self._cdn(path)
        if path.startswith("/api/models/") and "/tree/" in path:
            repo, _, rev = path.removeprefix("/api/models/").partition("/tree/")
            tree, sha = self._tree(unquote(repo), unquote(rev))
            if tree is None:
                return Reply.json({"error": "Revision Not Found"}, 404)
            return Reply.json([_entry(f, data) for f, data in sorted(tree.items())])
        if path.startswith("/api/models/"):
            repo, _, rev = path.removeprefix("/api/models/").partition("/revision/")
            tree, sha = self._tree(unquote(repo), unquote(rev))
            if tree is None:
                return Reply.json({"error": "Revision Not Found"}, 404)
            return Reply.json({"id": unquote(repo), "sha": sha,
                               "siblings": [{"rfilename": f} for f in sorted(tree)]})
        parts = path.lstrip("/").split("/", 4)
        if len(parts) < 5 or parts[2] != "resolve":
            return Reply.json({"error": "not found"}, 404)
        repo, rev, file = f"{parts[0]}/{parts[1]}", unquote(parts[3]), unquote(parts[4])
        tree, sha = self._tree(repo, rev)
        if tree is None or file not in tree:
            return Reply(404, b"", (("X-Error-Code", "EntryNotFound"),))
        data = tree[file]
        if file.endswith(_LFS):
            oid = hashlib.sha256(data).hexdigest()
            where = self.redirect_to or f"{self.cdn}/lfs/{oid}"
            return Reply(302, b"", (("Location", where), ("X-Repo-Commit", sha),
                                    ("X-Linked-Etag", f'"{oid}"'),
                                    ("X-Linked-Size", str(len(data))), ("ETag", f'"{oid}"')))
        body = self.tamper_small.get(file, data) if record.method == "GET" else data
        return Reply(200, body, (("X-Repo-Commit", sha), ("ETag", f'"{_blob_id(data)}"')))

    def _tree(self, repo: str, rev: str) -> tuple[dict[str, bytes] | None, str]:
        with self._lock:
            r = self.repos.get(repo)
            if r is None:
                return None, ""
            sha = r.refs.get(rev, rev)
            return r.commits.get(sha), sha

    def _cdn(self, path: str) -> Reply:
        oid = path.removeprefix("/lfs/")
        with self._lock:
            data = self.tamper.get(oid, self.blobs.get(oid))
            cut, extra = self.cut, self.extra
        if data is None:
            return Reply(404, b"")
        if cut is not None:
            return Reply(200, data, cut_after=cut)
        return Reply(200, data + extra)


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def _entry(path: str, data: bytes) -> dict[str, object]:
    """One file of a tree listing, as the Hub's API writes it."""
    entry: dict[str, object] = {"type": "file", "path": path, "size": len(data),
                                "oid": _blob_id(data)}
    if path.endswith(_LFS):
        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                        "pointerSize": 134}
    return entry


def hub_cache_files(root: Path) -> list[str]:
    """Every file and link under a Hub cache, relative (what a refusal must not leave)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() or p.is_symlink())
