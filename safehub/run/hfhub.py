"""Hugging Face Hub files, held like torch.hub's helpers while a repo's code runs.

Where ``huggingface_hub`` is installed, its ``hf_hub_download`` and ``snapshot_download``
(and what timm's ``load_pretrained``, transformers' ``from_pretrained`` or
``HfApi.hf_hub_download`` call through them) are routed to :class:`HubFiles` while a hub
repo's code runs inside ``safehub.load`` (:mod:`safehub.run.hfroute`: also where libraries
bound them at import time; safehub never imports the library).

For each file (``REPO_ID``, ``REVISION``, ``PATH``) the pin key is
``hf://REPO_ID@REVISION/PATH`` (``datasets/`` or ``spaces/`` before the repo id for those
kinds, the revision as the code asked for it, percent-encoded):

* the key goes through :meth:`WeightsGuard.check_url` before any request: the repo must
  match the policy's ``weights`` patterns (``hf://org/name``, ``hf://org/name/*``,
  ``https://huggingface.co/org/name/*``, see :func:`written_forms`);
* the revision is resolved once to a commit (the Hub's ``X-Repo-Commit``) and kept with the
  pin; later loads fetch by the pinned commit (a revision that moved on the Hub does not
  move the pin), and a warm load whose file is in the Hub cache makes no request at all;
* the bytes are hashed in full and compared with the Hub's own LFS oid (``X-Linked-Etag``)
  or, for a small file kept in git, its git blob id, with the size the Hub declared, and
  with the pin; on any mismatch nothing is left in the Hub cache;
* every request goes through safehub's transport: the Hub's endpoint (``HF_ENDPOINT``), and
  on a redirect each hop's host read by :func:`safehub._internal.urls.read_url`: the
  endpoint's own origin, the Hub's CDN hosts (``*.huggingface.co``, ``*.hf.co``, when the
  endpoint is ``https://huggingface.co``), or a URL a ``weights`` pattern allows;
* on a fleet node (``SAFEHUB_OCI``) a file the lockfile pins with its commit comes from
  the snapshot's layer, and so does a pinned ``snapshot_download`` listing, with no request
  to the Hub (:mod:`safehub.run.hfsnapshot`);
* ``SAFEHUB_OFFLINE=1`` and ``HF_HUB_OFFLINE=1`` mean the same: files come from the Hub
  cache (a pinned commit, or the cache's own ref for the revision) or the load is refused.

Not held (docs/policy.md, "Hugging Face Hub files", says why): ``HfFileSystem``,
``hf_hub_url`` with another HTTP client, ``HfApi`` calls that are not downloads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, Mutable
from safehub.errors import (
    FetchError,
    IntegrityError,
    NotFoundError,
    OfflineError,
    PolicyDenied,
    SafehubError,
)
from safehub.run.hfcache import (
    KINDS,
    Where,
    check_hub_file,
    link,
    listing_path,
    new_file,
    pinned_commit,
    pinned_sha256,
    place,
    read_listing,
    write_listing,
    write_ref,
)
from safehub.run.hfplaces import HUB, hub_endpoint
from safehub.run.hfsnapshot import from_snapshot, listing_from_snapshot

if TYPE_CHECKING:
    from safehub.run.weights import WeightsGuard

__all__ = ["HubFiles", "pin_key", "written_forms"]

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")

_HUB_CDN = re.compile(r"(?:[a-z0-9-]+\.)*(?:huggingface\.co|hf\.co)")


# -- names ------------------------------------------------------------------------------------

def pin_key(repo_id: str, revision: str, path: str, repo_type: str = "model") -> str:
    """The pin key of one Hub file.

    >>> pin_key("org/name", "refs/pr/1", "model.safetensors", "dataset")
    'hf://datasets/org/name@refs%2Fpr%2F1/model.safetensors'
    """
    return f"hf://{KINDS[repo_type]}{repo_id}@{quote(revision, safe='')}/{path}"


def written_forms(key: str, endpoint: str | None = None) -> tuple[str, ...]:
    """The strings a ``weights`` pattern is matched against for a Hub file: the repo and
    the file, as ``hf://`` and as a URL of the endpoint's web pages.

    >>> written_forms("hf://org/name@main/sub/w.safetensors")
    ('hf://org/name', 'hf://org/name/sub/w.safetensors', 'https://huggingface.co/org/name', \
'https://huggingface.co/org/name/sub/w.safetensors')
    """
    repo, _, rest = key.removeprefix("hf://").partition("@")
    path = rest.partition("/")[2]
    web = (endpoint or hub_endpoint()).rstrip("/")
    return (f"hf://{repo}", f"hf://{repo}/{path}", f"{web}/{repo}", f"{web}/{repo}/{path}")


def _check_path(repo: str, path: str) -> None:
    """A file path the Hub and the cache read alike: plain segments only."""
    parts = path.split("/")
    if (not path or not path.isascii() or "\\" in path or "%" in path
            or any(p in ("", ".", "..") or not p.isprintable() for p in parts)):
        raise PolicyDenied(f"a Hub file of {repo} was asked for with the path {path!r}; "
                           "safehub holds only plain relative paths",
                           fix=fixes.say("name the file by its plain path in the repo"))


def _etag(value: str | None) -> str:
    return (value or "").removeprefix("W/").strip('"').lower()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


class _Meta(Frozen):
    """What the Hub says of one file at one commit."""

    commit: str
    etag: str
    size: int | None
    lfs: bool


# -- the load's Hub files -------------------------------------------------------------------

class HubFiles(Mutable):
    """``hf_hub_download`` and ``snapshot_download`` for one load's weights guard."""

    guard: WeightsGuard

    def hf_hub_download(self, repo_id: str, filename: str, *, subfolder: str | None = None,
                        repo_type: str | None = None, revision: str | None = None,
                        cache_dir: str | os.PathLike[str] | None = None,
                        local_dir: str | os.PathLike[str] | None = None,
                        local_files_only: bool = False, endpoint: str | None = None,
                        token: bool | str | None = None,
                        headers: dict[str, str] | None = None, dry_run: bool = False,
                        **_: Any) -> str:
        """huggingface_hub's ``hf_hub_download``, held (see the module docstring)."""
        path = f"{subfolder}/{filename}" if subfolder else filename
        kind, revision = self._kind(repo_type, dry_run), revision or "main"
        from safehub.run.runtime import own_work

        where = Where(self._endpoint(repo_id, endpoint), cache_dir, local_files_only, token,
                      headers)
        with own_work():  # safehub's requests and Hub cache writes, not the repo's
            return str(place(self.fetch(repo_id, kind, revision, path, where), local_dir,
                             path))

    def snapshot_download(self, repo_id: str, *, repo_type: str | None = None,
                          revision: str | None = None,
                          cache_dir: str | os.PathLike[str] | None = None,
                          local_dir: str | os.PathLike[str] | None = None,
                          local_files_only: bool = False,
                          allow_patterns: list[str] | str | None = None,
                          ignore_patterns: list[str] | str | None = None,
                          endpoint: str | None = None, token: bool | str | None = None,
                          headers: dict[str, str] | None = None, dry_run: bool = False,
                          **_: Any) -> str:
        """huggingface_hub's ``snapshot_download``, held: the repo's listing at the
        revision, pinned like a file (:meth:`_listed`), then each file as one held file."""
        from huggingface_hub.utils._paths import filter_repo_objects

        kind, revision = self._kind(repo_type, dry_run), revision or "main"
        where = Where(self._endpoint(repo_id, endpoint), cache_dir, local_files_only,
                       token, headers)
        from safehub.run.runtime import own_work

        with own_work():  # safehub's requests and Hub cache writes, not the repo's
            commit, listed = self._listed(repo_id, kind, revision, where)
            paths = list(filter_repo_objects(listed, allow_patterns=allow_patterns,
                                             ignore_patterns=ignore_patterns))
            files = [self.fetch(repo_id, kind, revision, p, where, commit) for p in paths]
            if local_dir is not None:
                for file, path in zip(files, paths, strict=True):
                    place(file, local_dir, path)
                return str(Path(local_dir).expanduser().resolve())
        return str(where.storage(repo_id, kind) / "snapshots" / commit)

    def _kind(self, repo_type: str | None, dry_run: bool) -> str:
        kind = repo_type or "model"
        if kind not in KINDS or dry_run:
            raise PolicyDenied(
                f"hubconf.py of {self.guard.repo} asked the Hugging Face Hub for "
                f"{'a dry run' if dry_run else f'a {kind} repo'}, which safehub does not hold",
                fix=fixes.say("download model, dataset or space files (not a dry run)"))
        return kind

    def _endpoint(self, repo_id: str, endpoint: str | None) -> str:
        configured = hub_endpoint()
        if endpoint is not None and endpoint.rstrip("/") != configured:
            raise PolicyDenied(
                f"hubconf.py of {self.guard.repo} asked for {repo_id} from the Hub at "
                f"{endpoint}, not the one configured ({configured})",
                fix=fixes.say("if that Hub is yours, set HF_ENDPOINT to it before the load"))
        return configured

    def _offline(self, where: Where) -> str | None:
        """Why no request may be made (None: they may)."""
        from huggingface_hub import constants

        if where.local_files_only:
            return "local_files_only=True"
        if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in (
                "1", "ON", "YES", "TRUE"):
            return "HF_HUB_OFFLINE=1"
        transport = self.guard.transport
        if transport is not None and transport().config.offline:
            return transport().config.offline_source
        return None

    # -- one file ---------------------------------------------------------------------------

    def fetch(self, repo_id: str, kind: str, revision: str, path: str, where: Where,
              commit: str | None = None) -> Path:
        """The checked file in the Hub cache (downloaded if it is not there)."""
        _check_path(repo_id, path)
        key = pin_key(repo_id, revision, path, kind)
        self.guard.check_url(key)
        storage = where.storage(repo_id, kind)
        pinned = pinned_commit(self.guard, key)
        commit = pinned or commit or (revision if _HEX40.fullmatch(revision) else None)
        offline = self._offline(where)
        if commit is None and offline is not None:
            with contextlib.suppress(OSError):
                commit = (storage / "refs" / revision).read_text().strip()
        if commit is not None and _HEX40.fullmatch(commit):
            snapshot = storage / "snapshots" / commit / path
            if snapshot.is_file():  # a warm load: the verdict is kept by stat identity
                self._checked(key, snapshot, commit)
                return snapshot
        if served := from_snapshot(self.guard, key, storage, revision, path, self._checked):
            return served  # a fleet node's snapshot (SAFEHUB_OCI): no request to the Hub
        if offline is not None:
            raise _as_library(OfflineError(
                f"offline mode ({offline}) and the Hub file {key} is not in the Hub cache"
                f"{f' at its pinned commit {commit}' if pinned else ''}",
                fix=fixes.say("load the model once with the network on (safehub pins and "
                              "caches the file), or copy that Hub cache (HF_HOME) here")),
                              "LocalEntryNotFoundError")
        meta = self._ask(repo_id, kind, commit or revision, path, where, key, pinned)
        snapshot = self._download(repo_id, kind, path, where, key, meta)
        if not _HEX40.fullmatch(revision) and revision != meta.commit:
            write_ref(storage, revision, meta.commit)
        self._checked(key, snapshot, meta.commit, meta.size)
        return snapshot

    def _checked(self, key: str, snapshot: Path, commit: str, size: int | None = None) -> None:
        """The guard's check and pin; a refused file leaves the Hub cache, blob and link."""
        blob = snapshot.resolve()
        try:
            check_hub_file(self.guard, key, snapshot, commit, size)
        except IntegrityError:
            for p in (snapshot, blob):
                with contextlib.suppress(OSError):
                    p.unlink()
            raise

    def _ask(self, repo_id: str, kind: str, at: str, path: str, where: Where, key: str,
             pinned: str | None) -> _Meta:
        """The Hub's metadata of the file at ``at`` (HEAD, redirects not followed)."""
        url = where.resolve_url(repo_id, kind, at, path)
        try:
            reply = self._transport().send("HEAD", url, what=f"the Hub file {key}",
                                           headers=where.auth, allow=self._hop(where))
        except NotFoundError as e:
            if pinned:
                raise NotFoundError(
                    f"the Hub no longer has {repo_id} at the commit {pinned} pinned for {key} "
                    "(the revision was rewritten or the repo deleted)",
                    fix=fixes.say("if the publisher really replaced it, remove that pin "
                                  "(the lockfile's [[repo.weights]] entry) and load again")
                ) from e
            raise _as_library(e, "EntryNotFoundError") from e
        headers = reply.headers
        commit = (_header(headers, "X-Repo-Commit") or "").lower()
        etag = _etag(_header(headers, "X-Linked-Etag") or _header(headers, "ETag"))
        size_text = _header(headers, "X-Linked-Size") or _header(headers, "Content-Length")
        if not _HEX40.fullmatch(commit) or not (_HEX64.fullmatch(etag)
                                                or _HEX40.fullmatch(etag)):
            raise FetchError(f"the Hub answered for {key} without a commit or a content id "
                             "(X-Repo-Commit, X-Linked-Etag/ETag)",
                             fix=fixes.say("check HF_ENDPOINT; if it is the Hub, retry later"))
        if pinned and commit != pinned:
            raise IntegrityError(f"the Hub answered {key} at commit {pinned} with the commit "
                                 f"{commit}", fix=fixes.say("check HF_ENDPOINT; the Hub (or "
                                                            "something between) is broken"))
        return _Meta(commit, etag, int(size_text) if size_text and size_text.isdigit()
                     and len(size_text) < 19 else None, bool(_HEX64.fullmatch(etag)))

    def _download(self, repo_id: str, kind: str, path: str, where: Where, key: str,
                  meta: _Meta) -> Path:
        """The file at ``meta.commit`` into the Hub cache, checked before it is linked."""
        from safehub.run.runtime import own_work

        pinned = pinned_sha256(self.guard, key)
        if meta.lfs and pinned and pinned != meta.etag:
            raise IntegrityError(f"the Hub says {key} has sha256 {meta.etag} (its LFS oid), "
                                 f"but {pinned} is pinned; nothing was downloaded",
                                 fix=_REPIN)
        blobs = where.storage(repo_id, kind) / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        fd, tmp = new_file(blobs, f".{meta.etag}.", ".incomplete")  # as the library's blobs
        url = where.resolve_url(repo_id, kind, meta.commit, path)
        cap = meta.size if meta.size is not None else self.guard.max_bytes
        try:
            with os.fdopen(fd, "w+b") as out, own_work():
                try:
                    got = self._transport().download(
                        url, out, what=f"the Hub file {key}", max_bytes=cap, accept="*/*",
                        headers=where.auth, allow=self._hop(where))
                except IntegrityError as e:
                    raise IntegrityError(f"the download of {key} was larger than the "
                                         f"{cap:,} bytes the Hub declared; stopped",
                                         fix=_RETRY) from e
                self._verify(key, out, got, meta, pinned)
            blob = blobs / meta.etag
            os.replace(tmp, blob)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        snapshot = where.storage(repo_id, kind) / "snapshots" / meta.commit / path
        link(snapshot, blob)
        return snapshot

    def _verify(self, key: str, out: Any, got: int, meta: _Meta, pinned: str | None) -> None:
        if meta.size is not None and got != meta.size:
            raise IntegrityError(f"the download of {key} was cut short: {got:,} of the "
                                 f"{meta.size:,} bytes the Hub declared; nothing was kept",
                                 fix=_RETRY)
        sha256, blob_id = hashlib.sha256(), hashlib.sha1(f"blob {got}\0".encode())
        out.seek(0)
        while chunk := out.read(1 << 20):
            sha256.update(chunk)
            blob_id.update(chunk)
        digest = sha256.hexdigest()
        said = digest if meta.lfs else blob_id.hexdigest()
        if said != meta.etag:
            raise IntegrityError(
                f"the bytes of {key} do not match what the Hub says of them ("
                f"{'LFS sha256' if meta.lfs else 'git blob id'} {meta.etag}, got {said}); "
                "nothing was kept in the Hub cache", fix=_RETRY)
        if pinned and digest != pinned:
            raise IntegrityError(f"the Hub file {key} has sha256 {digest}, but {pinned} is "
                                 "pinned; nothing was kept in the Hub cache", fix=_REPIN)

    def _hop(self, where: Where) -> Callable[[str], None]:
        """Each hop: the endpoint's origin, the Hub's CDN, or a URL ``weights`` allows."""
        from safehub._internal.urls import read_url

        endpoint = read_url(where.endpoint, http=True)

        def allow(url: str) -> None:
            hop = read_url(url, http=True)
            if hop.origin == endpoint.origin or (
                    where.endpoint == HUB and hop.scheme == "https"
                    and _HUB_CDN.fullmatch(hop.host)):
                self.guard._tell(url)
                return
            self.guard._hop(url)  # held to the weights patterns, as torch.hub's hops are

        return allow

    def _transport(self) -> Any:
        if self.guard.transport is None:
            raise FetchError("safehub has no transport for Hub files in this load",
                             fix=fixes.say("load the repo through safehub.load"))
        return self.guard.transport()

    def _listed(self, repo_id: str, kind: str, revision: str,
                where: Where) -> tuple[str, list[str]]:
        """The commit ``revision`` is at and the repo's files there. The listing is kept in
        the Hub cache and pinned like a file (key ``hf://REPO@REVISION/``), so a warm
        snapshot asks nothing and serves the same files as the first."""
        key = pin_key(repo_id, revision, "", kind)
        self.guard.check_url(key)  # the repo, before its listing is asked for
        storage = where.storage(repo_id, kind)
        commit = pinned_commit(self.guard, key) or (
            revision if _HEX40.fullmatch(revision) else None)
        offline = self._offline(where)
        if commit is None and offline is not None:
            with contextlib.suppress(OSError):
                commit = (storage / "refs" / revision).read_text().strip()
        if commit is not None and _HEX40.fullmatch(commit):
            kept = listing_path(storage, commit)
            if kept.is_file():
                self._checked(key, kept, commit)
                return commit, read_listing(kept, key)
        served = listing_from_snapshot(self.guard, key, storage, revision, self._checked)
        if served is not None:  # a fleet node's snapshot (SAFEHUB_OCI): no request to the Hub
            return self.guard.commits[key], read_listing(served, key)
        if offline is not None:
            raise _as_library(OfflineError(
                f"offline mode ({offline}) and the listing of {key} is not in the Hub cache",
                fix=fixes.say("load the model once with the network on")),
                              "LocalEntryNotFoundError")
        sha, paths = self._listing(repo_id, kind, commit or revision, where)
        if commit is not None and sha != commit:
            raise IntegrityError(f"the Hub listed {repo_id} at commit {commit} with the "
                                 f"commit {sha}", fix=_RETRY)
        kept = write_listing(storage, sha, paths)
        if not _HEX40.fullmatch(revision):
            write_ref(storage, revision, sha)
        self._checked(key, kept, sha)
        return sha, paths

    def _listing(self, repo_id: str, kind: str, revision: str,
                 where: Where) -> tuple[str, list[str]]:
        """The commit ``revision`` is at and the repo's files there (the Hub's API)."""
        url = (f"{where.endpoint}/api/{kind}s/{repo_id}/revision/"
               f"{quote(revision, safe='')}")
        answer = self._transport().get(url, what=f"the Hub's listing of {repo_id}",
                                       headers=where.auth, allow=self._hop(where)
                                       ).json(f"the Hub's listing of {repo_id}")
        sha = answer.get("sha") if isinstance(answer, dict) else None
        siblings = answer.get("siblings") if isinstance(answer, dict) else None
        if not isinstance(sha, str) or not _HEX40.fullmatch(sha) or not isinstance(
                siblings, list):
            raise FetchError(f"the Hub's listing of {repo_id} at {revision} has no commit "
                             "or file list", fix=_RETRY)
        return sha, [s["rfilename"] for s in siblings
                     if isinstance(s, dict) and isinstance(s.get("rfilename"), str)]


def _as_library(error: SafehubError, name: str) -> SafehubError:
    """``error``, also an instance of huggingface_hub's own exception ``name``: code such as
    transformers' ``from_pretrained`` catches those to probe for optional files."""
    import huggingface_hub.errors

    kind = type(type(error).__name__, (type(error), getattr(huggingface_hub.errors, name)), {})
    made: SafehubError = kind(error.message, fix=error.fix or fixes.say(
        "check the repo id, revision and file name the repo's code asks the Hub for"))
    return made


_RETRY = fixes.say("retry later; if it persists, the Hub (or something between, a proxy or "
                   "HF_ENDPOINT) is broken or hostile")
_REPIN = fixes.say("if the publisher really replaced the file, remove the pin (the lockfile's "
                   "[[repo.weights]] entry, or `safehub cache` records) and load again")
