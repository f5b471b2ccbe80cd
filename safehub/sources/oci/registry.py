"""The OCI distribution protocol, spoken carefully, over safehub's own transport.

A :class:`Registry` is one ``REGISTRY/REPOSITORY``. Everything goes through
:class:`~safehub.sources.transport.Transport` (HTTPS, deadlines, caps, offline): every hop
is checked here (the registry's own host, or a host the policy lists for blob redirects);
credentials go only to the registry itself (its exact scheme, host and port) or a token
realm on it or listed. Every URL, a ``Location`` or a realm too, is read by
:func:`safehub._internal.urls.read_url`, the transport's own reading. Anonymous, Basic
and Bearer-token auth, the token asked for the scope needed. Manifests are read up to 4
MiB, blobs up to their descriptor's size, and every blob's sha256 is checked before it is
handed on. Uploads: a blob already in the repository is not sent again (HEAD), one from
another repository of the same registry is mounted, the rest go in one PUT or in chunks
(PATCH).

The :class:`~safehub.errors.SafehubError` each failure raises names the registry and the
digest, and a fix that works: a FetchError for "could not download" (401, 403, 404, 429,
5xx, stalls, hosts), an IntegrityError for "downloaded, but not what was asked for".
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urlencode

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, replace
from safehub._internal.ocirefs import split_place
from safehub._internal.urls import Url, UrlError, read_url
from safehub.errors import FetchError, IntegrityError, NotFoundError, SpecError
from safehub.sources.oci.artifact import MANIFEST_TYPE, MAX_MANIFEST, Descriptor, sha256
from safehub.sources.oci.auth import Credential, challenge, credential
from safehub.sources.oci.referrers import (
    EMPTY,
    INDEX_TYPE,
    candidates,
    fallback_tag,
    with_referrer,
)
from safehub.sources.transport import HTTPError, Transport

__all__ = ["Registry", "Target"]

_T = TypeVar("_T")
CHUNK = 32 * 1024 * 1024
"""Blobs larger than this are uploaded in chunks of this size."""


class Target(Frozen):
    """``REGISTRY/REPOSITORY`` as written in ``SAFEHUB_OCI`` or ``--oci``.

    >>> Target.parse("registry.example:5000/team/hub")
    Target(registry='registry.example:5000', repository='team/hub', plain=False)
    """

    registry: str
    repository: str
    plain: bool = False
    """A loopback registry without TLS that a policy names as ``http://HOST:PORT/REPO``."""

    @classmethod
    def parse(cls, text: str) -> Target:
        try:
            registry, repository = split_place(text)
            if registry == "oci:":
                raise ValueError("an OCI layout folder, not a registry")
        except ValueError as e:
            raise SpecError(f"{text!r} is {e}", fix=fixes.say("write REGISTRY/REPOSITORY, such as "
                            "registry.example.com:5000/team/hub")) from None
        if registry.startswith("http://"):
            return cls(registry.removeprefix("http://"), repository, plain=True)
        return cls(registry, repository)

    def __str__(self) -> str:
        return f"{'http://' if self.plain else ''}{self.registry}/{self.repository}"

    @property
    def base(self) -> str:
        return f"{'http' if self.plain else 'https'}://{self.registry}/v2/{self.repository}"


@functools.lru_cache(maxsize=64)
def _read(url: str, plain: bool) -> Url:
    """:func:`read_url` of ``url``, remembered: a request's URL is read again for its hop
    check and its credentials (the reading is a function of the text alone)."""
    return read_url(url, http=plain)


def _header(headers: Mapping[str, str], name: str) -> str:
    """A header's value whatever its case as the server spelled it ("" if absent)."""
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), "")


class _Places(Frozen):
    """Where one registry's requests and credentials may go. Every URL (a hop, an upload
    ``Location``, a token realm) is read by :func:`~safehub._internal.urls.read_url`, the
    transport's own reading; credentials go to the registry's exact (scheme, host, port)."""

    target: Target
    base: Url
    hosts: frozenset[str]
    """Hosts besides the registry's that blob redirects and token realms may use (https)."""

    @classmethod
    def of(cls, target: Target, hosts: frozenset[str]) -> _Places:
        try:
            return cls(target, read_url(target.base, http=target.plain), hosts)
        except UrlError as e:
            raise SpecError(f"{target} is not a registry safehub can reach: {e}",
                            fix=fixes.say(f"write REGISTRY/REPOSITORY with a plain host[:port]; "
                                          f"{e.advice}")) from None

    def read(self, url: str) -> Url:
        try:
            return _read(url, self.target.plain)
        except UrlError as e:
            raise FetchError(f"{self.target} sent safehub to a URL it does not follow: {e}",
                             fix=_HOSTILE) from None

    def hop(self, url: str) -> None:
        """Refuse a hop to anywhere but the registry itself or a listed https host."""
        hop = self.read(url)
        if hop.origin != self.base.origin and not (
                hop.scheme == "https" and hop.host in self.hosts):
            raise FetchError(
                f"{self.target} redirected to {hop.scheme}://{hop.authority}, a host not "
                "allowed for it; refused",
                fix=fixes.say(f"if {hop.host} is the registry's storage, add it to "
                "SAFEHUB_ALLOWED_HOSTS (or the policy's allowed_hosts); credentials are never "
                              "sent there"))

    def credited(self, url: str) -> bool:
        """Whether the registry's credential may go with a request to ``url``."""
        return self.read(url).origin == self.base.origin

    def upload(self, base: str, location: str, what: str) -> str:
        """An upload's next URL: ``location`` joined to ``base``, on the registry only."""
        try:
            url = self.read(base).join(location, http=self.target.plain)
        except UrlError as e:
            raise FetchError(f"{self.target} sent the {what} to a URL safehub does not "
                             f"follow: {e}", fix=_HOSTILE) from None
        if url.origin != self.base.origin:
            raise FetchError(f"{self.target} sent the {what} to another host ({url})",
                             fix=fixes.say("uploads go only to the registry itself"))
        return str(url)

    def realm(self, text: str) -> Url:
        """A token realm the registry names: https, on the registry or a listed host."""
        try:
            realm = read_url(text)
        except UrlError as e:
            raise FetchError(f"{self.target} sends safehub for a token to a URL it does not "
                             f"follow: {e}; refused (credentials stay with the registry)",
                             fix=_HOSTILE) from None
        if realm.origin != self.base.origin and realm.host not in self.hosts:
            raise FetchError(
                f"{self.target} sends safehub for a token to '{realm}', which is not "
                "the registry's host nor one the policy lists; refused (credentials stay "
                "with the registry)",
                fix=fixes.say(f"if {realm.host} is the registry's own token service, add it "
                              "to SAFEHUB_ALLOWED_HOSTS"))
        return realm

    def realm_hop(self, realm: Url) -> Callable[[str], None]:
        """A hop check for the token request: its redirects stay on the realm's origin."""
        def check(url: str) -> None:
            hop = read_url(url)
            if hop.origin != realm.origin:
                raise FetchError(f"the token service of {self.target} redirected to "
                                 f"{hop.scheme}://{hop.authority}; refused",
                                 fix=_login(self.target))
        return check


class Registry:
    """One repository of one registry (see the module docstring)."""

    def __init__(self, transport: Transport, target: Target, *,
                 hosts: frozenset[str] = frozenset(), push: bool = False,
                 environ: Mapping[str, str] | None = None) -> None:
        if target.plain:  # the one host this client may speak plain HTTP to
            transport = Transport(replace(transport.config, plain_http=frozenset(
                {*transport.config.plain_http, target.registry})))
        self.transport = transport
        self.target = target
        self.places = _Places.of(target, hosts)
        self._scope = f"repository:{target.repository}:{'pull,push' if push else 'pull'}"
        self._environ = environ
        self._cred: Credential | bool | None = False  # False: not read yet
        self._auth: str | None = None
        self._no_referrers_api = False  # it said so: only its fallback tags are read

    def __str__(self) -> str:
        return str(self.target)

    # -- reading ----------------------------------------------------------------------

    def manifest(self, digest: str, *, accept: str = MANIFEST_TYPE, path: str = "manifests",
                 max_bytes: int = MAX_MANIFEST) -> bytes:
        """The manifest ``digest`` (at most ``max_bytes``, 4 MiB by default; the caller
        checks its bytes)."""
        url = f"{self.target.base}/{path}/{digest}"
        what = f"{'manifest' if path == 'manifests' else path} {digest} from {self.target}"
        return self._authorized(what, lambda: self.transport.get(
            url, what=what, accept=accept, headers=self._headers, allow=self.places.hop,
            max_bytes=max_bytes, too_big=lambda: IntegrityError(
                f"{self.target} sent more than the {max_bytes:,}-byte cap of a manifest "
                f"for {digest}; stopped reading", fix=_HOSTILE))).body

    def referrers(self, digest: str) -> list[str]:
        """The manifests listed as signatures of ``digest``: the referrers API's answer (once
        it said it has none, not asked again) and the fallback tag's index (candidates)."""
        found: list[str] = []
        asked = (("referrers", digest),) if not self._no_referrers_api else ()
        for path, reference in (*asked, ("manifests", fallback_tag(digest))):
            try:
                listed = self.manifest(reference, accept=INDEX_TYPE, path=path)
            except NotFoundError:  # one with the API answers 200 (maybe empty) for any
                self._no_referrers_api |= path == "referrers"  # subject (OCI 1.1)
                continue
            except FetchError as e:  # a registry without the API may say 400 or 405
                if path != "referrers" or getattr(e.__cause__, "status", 0) not in (400, 405):
                    raise
                self._no_referrers_api = True
                continue
            try:
                found += [d for d in candidates(listed, str(self.target)) if d not in found]
            except IntegrityError:
                continue  # a broken list: the other one may still name the signature
        return found

    def blob(self, desc: Descriptor, out: IO[bytes]) -> None:
        """Stream the blob into ``out``: at most its size, its sha256 checked as it is
        written (nothing is read back)."""
        from safehub._internal.hashing import Hashing

        url = f"{self.target.base}/blobs/{desc.digest}"
        what = f"blob {desc.digest} from {self.target}"
        hashed = Hashing(out)
        try:
            self._authorized(what, lambda: self.transport.download(
                url, hashed, what=what, max_bytes=desc.size,  # type: ignore[arg-type]
                headers=self._headers, allow=self.places.hop,
                accept="application/octet-stream", resume=True))
        except IntegrityError as e:  # the transport's cap: longer than the descriptor
            raise IntegrityError(
                f"{self.target} sent more than the {desc.size:,} bytes the manifest gives "
                f"the blob {desc.digest}; download stopped", fix=_HOSTILE) from e
        got, size = "sha256:" + hashed.hexdigest(), hashed.size
        if got != desc.digest or size != desc.size:
            raise IntegrityError(
                f"{self.target} answered the blob {desc.digest} with other bytes ({size:,} "
                f"bytes, {got})", fix=_HOSTILE)
        out.flush()
        out.seek(0)

    def blob_bytes(self, desc: Descriptor) -> bytes:  # small: each caller caps its size
        self.blob(desc, buffer := io.BytesIO())
        return buffer.getvalue()

    # -- writing ----------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        what = f"blob {digest} in {self.target}"
        try:
            self._authorized(what, lambda: self.transport.send(
                "HEAD", f"{self.target.base}/blobs/{digest}", what=what,
                headers=self._headers, allow=self.places.hop))
        except NotFoundError:
            return False
        return True

    def push_blob(self, data: bytes | Path, digest: str, size: int, *,
                  mount_from: str | None = None) -> str:
        """Upload a blob unless the repository has it; return how (present, mounted,
        uploaded, chunked)."""
        if self.has_blob(digest):
            return "present"
        what = f"upload of blob {digest} to {self.target}"
        start = f"{self.target.base}/blobs/uploads/"
        if mount_from and mount_from != self.target.repository:
            reply = self._send("POST", start + "?" + urlencode(
                {"mount": digest, "from": mount_from}), what, b"")
            if reply.status == 201:
                return "mounted"
            location = self._location(reply, start, what)
        else:
            location = self._location(self._send("POST", start, what, b""), start, what)
        if size > CHUNK:
            location = self._chunks(data, size, location, what)
            how = "chunked"
        else:
            how = "uploaded"
        body: bytes | Path = b"" if how == "chunked" else data
        sep = "&" if "?" in location else "?"
        reply = self._send("PUT", f"{location}{sep}{urlencode({'digest': digest})}", what,
                           body, {"Content-Type": "application/octet-stream"})
        if reply.status != 201:
            raise FetchError(f"{self.target} answered {reply.status} to the {what}",
                             fix=fixes.say("the registry did not take the blob; "
                                           "retry, or check it"))
        return how

    def _chunks(self, data: bytes | Path, size: int, location: str, what: str) -> str:
        with (open(data, "rb") if isinstance(data, Path) else io.BytesIO(data)) as f:
            offset = 0
            while offset < size:
                chunk = f.read(CHUNK)
                reply = self._send("PATCH", location, what, chunk, {
                    "Content-Type": "application/octet-stream",
                    "Content-Range": f"{offset}-{offset + len(chunk) - 1}",
                    "Content-Length": str(len(chunk))})
                offset += len(chunk)
                location = self._location(reply, location, what)
        return location

    def push_manifest(self, data: bytes, reference: str, *, media_type: str = MANIFEST_TYPE
                      ) -> str:
        """PUT the manifest under ``reference`` (its digest, or a tag); its digest."""
        return self._put_manifest(data, reference, media_type)[0]

    def _put_manifest(self, data: bytes, reference: str, media_type: str
                      ) -> tuple[str, Mapping[str, str]]:
        digest = sha256(data)
        what = f"manifest {digest} to {self.target} as {reference}"
        reply = self._send("PUT", f"{self.target.base}/manifests/{reference}", what, data,
                           {"Content-Type": media_type})
        said = _header(reply.headers, "Docker-Content-Digest")
        if said and said != digest:
            raise IntegrityError(f"{self.target} stored the manifest {digest} as {said}",
                                 fix=fixes.say("the registry rewrote the manifest; "
                                               "use another one"))
        return digest, reply.headers

    def push_referrer(self, referrer: bytes, bundle: bytes, subject: str) -> str:
        """Attach a signature manifest to ``subject``: its blobs, the manifest by digest,
        and, where the registry does not say it indexed it (no ``OCI-Subject`` header), the
        fallback tag's index updated; how it went (``referrers API`` or the tag)."""
        self.push_blob(EMPTY, sha256(EMPTY), len(EMPTY))
        self.push_blob(bundle, sha256(bundle), len(bundle))
        _, headers = self._put_manifest(referrer, sha256(referrer), MANIFEST_TYPE)
        if _header(headers, "OCI-Subject") == subject:
            return "referrers API"
        tag = fallback_tag(subject)
        try:
            index: bytes | None = self.manifest(tag, accept=INDEX_TYPE)
        except NotFoundError:
            index = None
        self._put_manifest(with_referrer(index, referrer), tag, INDEX_TYPE)
        return f"tag {tag}"

    # -- plumbing ---------------------------------------------------------------------

    def _send(self, method: str, url: str, what: str, body: bytes | Path,
              extra: Mapping[str, str] | None = None) -> Any:
        def headers(hop: str) -> Mapping[str, str]:
            return {**self._headers(hop), **(extra or {})}

        return self._authorized(what, lambda: self.transport.send(
            method, url, what=what, body=body, headers=headers, allow=self.places.hop))

    def _location(self, reply: Any, base: str, what: str) -> str:
        location = _header(reply.headers, "Location")
        if reply.status not in (202, 204) or not location:
            raise FetchError(f"{self.target} answered {reply.status} without an upload "
                             f"location to the {what}",
                             fix=fixes.say("the registry is broken; retry"))
        return self.places.upload(base, str(location), what)

    def _headers(self, url: str) -> Mapping[str, str]:
        return {"Authorization": self._auth} if self._auth and self.places.credited(url) \
            else {}

    def _credential(self) -> Credential | None:
        if self._cred is False:
            self._cred = credential(self.target.registry, self._environ)
        return self._cred if isinstance(self._cred, Credential) else None

    def _authorized(self, what: str, call: Callable[[], _T]) -> _T:
        """``call``, then once more with credentials if the registry asks for them."""
        for attempt in range(2):
            try:
                return call()
            except HTTPError as e:
                if e.status == 401 and attempt == 0:
                    self._login(e, what)
                    continue
                raise self._refused(e, what) from e
            except FetchError as e:
                if (plain := self._speaks_plain_http(e)) is not None:
                    raise plain from e
                if not isinstance(e, NotFoundError):
                    raise
                raise NotFoundError(
                    f"{self.target} has no {what.split(' from ')[0]} (404)",
                    fix=fixes.either(
                        fixes.run(f"safehub prefetch --oci {self.target} SPEC",
                                  "on a machine where GitHub is reachable, to push it"),
                        fixes.say("list a registry that has it in SAFEHUB_OCI"))) from e
        raise AssertionError("unreachable")

    def _speaks_plain_http(self, e: FetchError) -> FetchError | None:
        """A TLS failure with a registry on this machine: most likely one without TLS,
        which safehub speaks to only when a policy file names it ``http://...``."""
        from safehub.sources.network import is_loopback, tls_cause

        if self.target.plain or e.__cause__ is None or tls_cause(e.__cause__) is None \
                or not is_loopback(self.places.base.host):
            return None
        plain = f"http://{self.target.registry}/{self.target.repository}"
        return FetchError(
            f"{e.message} ({self.target.registry} is on this machine: if that registry has "
            "no TLS, safehub speaks plain HTTP to it only where a policy file names it "
            "http://...)",
            fix=fixes.say(f'add oci = ["{plain}"] to [safehub] in your policy file '
            f"(~/.config/safehub/policy.toml), then name it {plain} (`safehub prefetch "
            f"--oci {plain} ...`; loads read the policy's oci list once SAFEHUB_OCI is "
            "unset); for a registry with a private CA, set REQUESTS_CA_BUNDLE instead"))

    def _login(self, e: HTTPError, what: str) -> None:
        scheme, params = challenge(_header(e.headers, "WWW-Authenticate"))
        cred = self._credential()
        if scheme == "basic":
            if cred is None:
                raise self._refused(e, what)
            self._auth = "Basic " + base64.b64encode(
                f"{cred.username}:{cred.secret}".encode()).decode()
        elif scheme == "bearer":
            self._auth = "Bearer " + self._token(params, cred, what)
        elif not scheme:
            raise self._refused(e, what)
        else:
            raise FetchError(f"{self.target} asks for {scheme or 'no'} auth for {what}; "
                             "safehub speaks Basic and Bearer",
                             fix=_login(self.target))

    def _token(self, params: Mapping[str, str], cred: Credential | None, what: str) -> str:
        realm = self.places.realm(params.get("realm", ""))
        query = {"scope": self._scope, **({"service": params["service"]}
                                          if "service" in params else {})}
        auth = {} if cred is None else {"Authorization": "Basic " + base64.b64encode(
            f"{cred.username}:{cred.secret}".encode()).decode()}
        sep = "&" if "?" in realm.target else "?"
        try:
            reply = self.transport.get(f"{realm}{sep}{urlencode(query)}",
                                       what=f"a token from {realm.host} for {what}",
                                       headers=lambda hop: auth if read_url(
                                           hop).origin == realm.origin else {},
                                       allow=self.places.realm_hop(realm))
        except HTTPError as e:
            raise self._refused(e, what) from e
        answer = reply.json(f"the token for {self.target}")
        token = answer.get("token") or answer.get("access_token") if type(answer) is dict \
            else None
        if not isinstance(token, str) or not token:
            raise FetchError(f"the token service of {self.target} answered no token",
                             fix=_login(self.target))
        return token

    def _refused(self, e: HTTPError, what: str) -> FetchError:
        found = {401: _login(self.target),
                 403: fixes.say(f"the credential for {self.target.registry} may not read (or "
                                f"push) {self.target.repository}: ask the registry's admins for "
                                f"access, or log in as another user (`docker login "
                                f"{self.target.registry}`)"),
                 429: fixes.say(f"{self.target.registry} limits requests: retry later, or log "
                                f"in (`docker login {self.target.registry}`) for a higher "
                                "limit, or list a mirror of it first in SAFEHUB_OCI")}
        name = {401: "unauthorized", 403: "denied", 429: "too many requests"}.get(e.status, "")
        return FetchError(f"{self.target} answered {e.status} {name} for {what}".rstrip()
                          + (f": {e.server_message}" if e.server_message else ""),
                          fix=found.get(e.status) or fixes.say(
                              "retry later; if it persists, ask the registry's admins"))


_HOSTILE = fixes.say("the registry (or something between) is broken or hostile; nothing was "
                     "installed. Remove it from SAFEHUB_OCI, or push the snapshot to it again")


def _login(target: Target) -> fixes.Fix:
    return fixes.run(f"docker login {target.registry}", "to log in to it (safehub reads "
                     "$DOCKER_CONFIG/config.json or ~/.docker/config.json and credential helpers)")
