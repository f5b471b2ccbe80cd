"""The files a lock entry pins (``[[repo.weights]]``): fetched for a fleet snapshot, checked
by ``safehub lock --check``.

A pin names what the repo's code fetched: an HTTPS URL as torch.hub's helpers were given
it, or a Hugging Face Hub file (``hf://REPO@REVISION/PATH`` with the commit the revision
resolved to). Its bytes are fetched from the commit (a Hub file) or the URL, every hop held
to the policy's ``weights`` patterns as in a load, and must hash to the pin.

``lock --check`` asks each pinned file whether it still answers with the pinned bytes:
where the server says a digest (the Hub's ``X-Linked-Etag``, the LFS sha256, with
``X-Linked-Size``; ``Repr-Digest``/``Digest`` ``sha-256=``; ``x-amz-checksum-sha256``) a
``HEAD`` is enough; elsewhere the file is downloaded, hashed as it streams and discarded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import quote, unquote

from safehub._internal import fixes
from safehub.errors import IntegrityError, SafehubError
from safehub.operations.common import Report
from safehub.spec import RepoSpec
from safehub.store.lockfile import LockEntry, WeightPin

if TYPE_CHECKING:
    from safehub.hub import Hub
    from safehub.run.weights import WeightsGuard

__all__ = ["PinState", "PinStatus", "check_pins", "confirm", "fetch_pinned", "hub_file",
           "hub_listing", "is_file_pin", "listing", "source_url"]

_REPO_AT = r"hf://(?:(?P<kind>datasets|spaces)/)?(?P<repo>[^@/]+(?:/[^@/]+)?)@(?P<revision>[^/]+)/"
_HF = re.compile(_REPO_AT + r"(?P<path>.+)")  # a file
_LISTING = re.compile(_REPO_AT)  # a snapshot's listing
_HEX64 = re.compile(r"[0-9a-f]{64}")


def is_file_pin(pin: WeightPin) -> bool:
    """Whether ``pin`` names one file (a Hub snapshot's listing, ``hf://REPO@REV/``, is
    pinned too: its bytes are the canonical text of the list, asked of the Hub's API).

    >>> is_file_pin(WeightPin("hf://acme/tiny@main/", "0" * 64))
    False
    """
    return not pin.url.startswith("hf://") or hub_file(pin.url) is not None


def hub_listing(url: str) -> tuple[str, str, str] | None:
    """(kind, repo id, revision) of a Hub snapshot's listing pin (``hf://REPO@REV/``).

    >>> hub_listing("hf://datasets/acme/tiny@main/")
    ('datasets', 'acme/tiny', 'main')
    >>> hub_listing("hf://acme/tiny@main/model.safetensors") is None
    True
    """
    m = _LISTING.fullmatch(url)
    return None if m is None else (m["kind"] or "", m["repo"], unquote(m["revision"]))


def listing(hub: Hub, pin: WeightPin, *, at: str = "") -> bytes:
    """The canonical bytes of a Hub snapshot's listing pin, asked of the Hub's API at
    ``at`` (the pinned commit unless given: the revision, to see whether it moved); the
    Hub must answer at the pinned commit and the bytes must hash to the pin, else an
    :class:`IntegrityError`."""
    sha, data = _asked_listing(hub, pin, at)
    digest = hashlib.sha256(data).hexdigest()
    if (pin.commit and sha != pin.commit) or digest != pin.sha256:
        raise IntegrityError(
            f"the Hub lists {pin.url} at commit {sha[:40]} with files of sha256 {digest}, "
            f"but the pin is commit {pin.commit or '(none)'} and sha256 {pin.sha256}",
            fix=fixes.say("the listing changed on the Hub: check why, then lock the "
                          "entrypoint again (safehub lock SPEC --entrypoint NAME)"))
    return data


def _asked_listing(hub: Hub, pin: WeightPin, at: str) -> tuple[str, bytes]:
    """(the commit the Hub names, the listing's canonical bytes) of ``pin``'s repo at
    ``at`` (else its commit, else its revision). Only the endpoint's own origin is asked."""
    from safehub._internal.urls import read_url
    from safehub.errors import FetchError, PolicyDenied
    from safehub.run.hfcache import listing_bytes
    from safehub.run.hfplaces import hub_endpoint

    found = hub_listing(pin.url)
    assert found is not None
    kind, repo, revision = found
    endpoint = hub_endpoint()
    origin = read_url(endpoint, http=True).origin

    def allow(hop: str) -> None:
        if read_url(hop, http=True).origin != origin:
            raise PolicyDenied(f"the Hub's listing of {repo} was redirected to {hop}",
                               fix=fixes.say("check HF_ENDPOINT"))

    where = at or pin.commit or revision
    url = f"{endpoint}/api/{kind or 'models'}/{repo}/revision/{quote(where, safe='')}"
    what = f"the Hub's listing of {repo}"
    answer = hub.context.weights_transport().get(url, what=what, allow=allow).json(what)
    sha = answer.get("sha") if isinstance(answer, dict) else None
    siblings = answer.get("siblings") if isinstance(answer, dict) else None
    if not isinstance(sha, str) or not isinstance(siblings, list):
        raise FetchError(f"{what} at {where} has no commit or file list",
                         fix=fixes.say("check HF_ENDPOINT; if it is the Hub, retry later"))
    return sha.lower(), listing_bytes([s["rfilename"] for s in siblings if isinstance(s, dict)
                                       and isinstance(s.get("rfilename"), str)])


def confirm(hub: Hub, entry: LockEntry, pin: WeightPin) -> None:
    """``pin`` (what a child of ``safehub lock --entrypoint`` said it checked) asked again
    here: the policy's ``weights`` patterns must allow it for ``entry``'s repo, and it must
    answer with its size and digest (a Hub listing: at its commit, at its revision still).
    A refusal, or an :class:`IntegrityError` naming what answered instead."""
    guard = _guard(hub, entry)
    guard.check_url(pin.url)
    found = hub_listing(pin.url)
    if found is not None:
        listing(hub, pin, at=found[2])
        return
    if hub_file(pin.url) is not None and not pin.commit:
        raise IntegrityError(f"{pin.url} was told without the commit its revision is at",
                             fix=fixes.say("lock the entrypoint again"))
    status = _check(hub, entry, pin, guard)
    if not status.ok:
        raise IntegrityError(
            f"{pin.url} answers {status.state.value} (sha256 {status.now_sha256}, "
            f"{status.now_size} bytes, commit {status.now_commit}) where "
            f"{pin.sha256} ({pin.size} bytes) was fetched",
            fix=fixes.say("the file is not the same to every asker: check the host, then "
                          "lock the entrypoint again"))


def hub_file(url: str) -> tuple[str, str, str, str] | None:
    """(kind, repo id, revision, path) of an ``hf://`` pin, else None.

    >>> hub_file("hf://acme/tiny@main/model.safetensors")
    ('', 'acme/tiny', 'main', 'model.safetensors')
    >>> hub_file("https://example.org/w.pth") is None
    True
    """
    m = _HF.fullmatch(url)
    if m is None:
        return None
    return m["kind"] or "", m["repo"], unquote(m["revision"]), m["path"]


def source_url(pin: WeightPin, *, revision: bool = False) -> str:
    """Where a pinned file's bytes are asked for: the URL itself, or for a Hub file its
    ``resolve`` URL at the pinned commit (at the revision, with ``revision``: whether it
    moved), below ``HF_ENDPOINT`` where that is set."""
    found = hub_file(pin.url)
    if found is None:
        return pin.url
    kind, repo, rev, path = found
    from safehub.run.hfplaces import hub_endpoint

    at = quote(rev if revision or not pin.commit else pin.commit, safe="")
    return f"{hub_endpoint()}/{kind + '/' if kind else ''}{repo}/resolve/{at}/{path}"


def _guard(hub: Hub, entry: LockEntry) -> WeightsGuard:
    """The weights guard a load of ``entry`` would hold its downloads to (its patterns)."""
    from safehub.run import guards

    spec = RepoSpec.parse(entry.spec)
    return guards.weights_guard(spec, hub.policy.decide(spec), entry,
                                data_dir=hub.settings.data_dir,
                                transport=hub.context.weights_transport)


def _allow(guard: WeightsGuard, pin: WeightPin) -> Callable[[str], None]:
    """Each hop of a pinned file's download: a URL pin's hops held to the patterns (as a
    load holds them); a Hub file's may go to its CDN (its bytes are checked by digest)."""
    return (lambda hop: None) if hub_file(pin.url) else guard.check_url


def fetch_pinned(hub: Hub, entry: LockEntry, pin: WeightPin, out: IO[bytes], *,
                 max_bytes: int = 64 * 1024**3) -> int:
    """The pinned bytes of ``pin`` into ``out`` (a file the user's records hold with that
    digest, else downloaded; a Hub listing asked of the Hub at its commit); their size.
    Other bytes are an :class:`IntegrityError`."""
    from safehub.store.records import WeightPins

    seen = WeightPins(hub.settings.data_dir).get(pin.url)
    local = Path(str(seen.get("file"))) if seen and seen.get("sha256") == pin.sha256 else None
    if local is not None and local.is_file():
        h = _copy(local, out)
        if h.hexdigest() == pin.sha256:
            out.flush()
            return out.tell()
        out.seek(0)
        out.truncate()
    if hub_listing(pin.url) is not None:  # checked against the pin as it is asked
        data = listing(hub, pin)
        out.write(data)
        out.flush()
        return len(data)
    guard = _guard(hub, entry)
    url = source_url(pin)
    size = hub.context.weights_transport().download(
        url, out, what=f"the pinned file {pin.url}", max_bytes=pin.size if pin.size is not None
        else max_bytes, allow=_allow(guard, pin), accept="*/*")
    out.seek(0)
    h = hashlib.sha256()
    for chunk in iter(lambda: out.read(1 << 20), b""):
        h.update(chunk)
    if h.hexdigest() != pin.sha256 or (pin.size is not None and size != pin.size):
        raise IntegrityError(
            f"{url} answered {size:,} bytes with sha256 {h.hexdigest()}, but {entry.spec} pins "
            f"{pin.sha256}" + (f" ({pin.size:,} bytes)" if pin.size is not None else "")
            + "; nothing was pushed",
            fix=fixes.say("the file changed where it is published: check why, then run "
                          f"`safehub lock --check` and lock it again with `safehub lock "
                          f"{entry.spec} --entrypoint NAME`"))
    return size


def _copy(path: Path, out: IO[bytes]) -> hashlib._Hash:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            out.write(chunk)
    return h


class PinState(str, Enum):
    """What a pinned file answers now."""

    OK = "ok"
    """The pinned size and digest."""
    CHANGED = "changed"
    """Other bytes (or another size) under the same URL."""
    MOVED = "moved"
    """A Hub file whose revision resolves to another commit now."""
    UNREACHABLE = "unreachable"
    """Could not be asked (not found, refused, offline)."""


class PinStatus(Report):
    """One pinned file, checked: ``how`` it was asked (``header``: a digest the server
    gave; ``download``: streamed, hashed, discarded)."""

    spec: str
    url: str
    state: PinState
    how: str
    sha256: str
    size: int | None
    now_sha256: str | None = None
    now_size: int | None = None
    now_commit: str | None = None
    error: str | None = None
    fix: fixes.Fix | None = None

    @property
    def ok(self) -> bool:
        return self.state is PinState.OK

    def to_json(self) -> dict[str, Any]:  # the fix as text, as for `check`
        return {**super().to_json(), "fix": fixes.render(self.fix) if self.fix else None}


def check_pins(hub: Hub, entry: LockEntry) -> list[PinStatus]:
    """Every file ``entry`` pins, asked whether it still answers with its pin."""
    guard = _guard(hub, entry) if entry.weights else None
    results = []
    for pin in entry.weights:
        assert guard is not None
        try:
            results.append(_check(hub, entry, pin, guard) if is_file_pin(pin)
                           else _check_listing(hub, entry, pin))
        except SafehubError as e:
            results.append(PinStatus(entry.spec, pin.url, PinState.UNREACHABLE, "", pin.sha256,
                                     pin.size, error=f"{type(e).__name__}: {e.message}",
                                     fix=e.fix))
    return results


def _check(hub: Hub, entry: LockEntry, pin: WeightPin, guard: WeightsGuard) -> PinStatus:
    transport = hub.context.weights_transport()
    url = source_url(pin, revision=True)
    allow = _allow(guard, pin)
    head = transport.send("HEAD", url, what=f"the pinned file {pin.url}", allow=allow)
    commit = _header(head.headers, "X-Repo-Commit").lower() or None
    if hub_file(pin.url) and pin.commit and commit and commit != pin.commit:
        return PinStatus(entry.spec, pin.url, PinState.MOVED, "header", pin.sha256, pin.size,
                         now_commit=commit, fix=_relock(entry))
    digest, size = _said_digest(head.headers)
    how = "header"
    if digest is None:
        counter = _Hashing()
        size = transport.download(source_url(pin), cast("IO[bytes]", counter),
                                  what=f"the pinned file {pin.url}", max_bytes=64 * 1024**3,
                                  allow=allow, accept="*/*")
        digest, how = counter.h.hexdigest(), "download"
    same = digest == pin.sha256 and (pin.size is None or size is None or size == pin.size)
    return PinStatus(entry.spec, pin.url, PinState.OK if same else PinState.CHANGED, how,
                     pin.sha256, pin.size, digest, size, commit,
                     fix=None if same else _relock(entry))


def _check_listing(hub: Hub, entry: LockEntry, pin: WeightPin) -> PinStatus:
    """A Hub listing pin, asked of the Hub's API at its revision (``how``: ``listing``)."""
    found = hub_listing(pin.url)
    assert found is not None
    sha, data = _asked_listing(hub, pin, found[2])
    digest = hashlib.sha256(data).hexdigest()
    state = (PinState.MOVED if pin.commit and sha != pin.commit else
             PinState.OK if digest == pin.sha256 else PinState.CHANGED)
    return PinStatus(entry.spec, pin.url, state, "listing", pin.sha256, pin.size, digest,
                     len(data), sha, fix=None if state is PinState.OK else _relock(entry))


def _relock(entry: LockEntry) -> fixes.Fix:
    import shlex

    return fixes.run(f"safehub lock --upgrade {shlex.quote(entry.spec)} --entrypoint NAME",
                     "to pin what it serves now, once you know why the file changed")


def _header(headers: Mapping[str, str], name: str) -> str:
    low = name.lower()
    return next((v.strip() for k, v in headers.items() if k.lower() == low), "")


def _said_digest(headers: Mapping[str, str]) -> tuple[str | None, int | None]:
    """(sha256 hex, size) a server's headers give for its file; None where it gives none."""
    length = _header(headers, "X-Linked-Size") or _header(headers, "Content-Length")
    size = int(length) if length.isdigit() else None
    etag = _header(headers, "X-Linked-Etag").removeprefix("W/").strip('"').lower()
    if _HEX64.fullmatch(etag):
        return etag, size
    for name in ("Repr-Digest", "Digest"):
        for part in _header(headers, name).split(","):
            algo, _, value = part.strip().partition("=")
            if algo.strip().lower() == "sha-256":
                return _b64(value.strip().strip(":")), size
    amz = _header(headers, "x-amz-checksum-sha256")
    return (_b64(amz), size) if amz else (None, size)


def _b64(value: str) -> str | None:
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


class _Hashing:
    """A file-like sink that hashes what is written and keeps nothing (``lock --check``)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self._n = 0

    def write(self, data: bytes) -> int:
        self.h.update(data)
        self._n += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        if offset == 0 and whence == 0 and self._n:
            self.h, self._n = hashlib.sha256(), 0  # a retry starts over
        return self._n

    def truncate(self, size: int | None = None) -> int:
        return self._n

    def tell(self) -> int:
        return self._n

    def flush(self) -> None:
        return None
