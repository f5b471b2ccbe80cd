"""Hostile registries (issue 19, item 7): each refused with a SafehubError naming the registry
and the digest, nothing installed, and the next registry tried where one is listed.

The honest snapshot is pushed to the real registry (tests/support/oci.py); a hostile
registry is the stand-in's ``foreign`` host answering ``/v2/evil/hub/...`` with that
snapshot's bytes, one of them altered the way the real registry never would.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

import safehub
from safehub.cli import main
from safehub.errors import FetchError, IntegrityError, NotFoundError, SafehubError
from safehub.sources.oci.artifact import sha256
from safehub.sources.oci.registry import Registry, Target
from safehub.sources.transport import Transport, TransportConfig
from safehub.store.lockfile import Lockfile
from tests.conftest import HubRepo
from tests.support import GitHubStandIn, TLSFiles
from tests.support.oci import PASSWORD, USER, DockerRegistry, docker_config, missing_tools
from tests.support.transport import Drip, Reply, RequestRecord

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))

SPEC = "acme/models:v1.0"


@pytest.fixture(scope="module")
def registry(tls: TLSFiles, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[DockerRegistry]:
    with DockerRegistry(tmp_path_factory.mktemp("registry"), tls) as reg:
        yield reg


@dataclass
class Evil:
    """The hostile registry: the honest snapshot's bytes, with ``answers`` overriding."""

    server: GitHubStandIn
    manifest: str
    blobs: dict[str, bytes]
    commit: str
    config: str = ""
    archive: str = ""
    answers: dict[str, Reply | Callable[[RequestRecord], Reply]] = field(default_factory=dict)
    gate: Callable[[RequestRecord], Reply | None] | None = None

    @property
    def target(self) -> str:
        return f"{self.server.host('foreign')}:{self.server.port}/evil/hub"

    def answer(self, record: RequestRecord) -> Reply:
        name = record.path.rsplit("/", 1)[-1]
        said = self.gate(record) if self.gate is not None else None
        if said is not None:
            return said
        for key, reply in self.answers.items():
            if key in record.path:
                return reply(record) if callable(reply) else reply
        if name in self.blobs:
            return Reply(200, self.blobs[name], (("Content-Type", "application/octet-stream"),))
        return Reply.json({"errors": [{"code": "NOT_FOUND"}]}, 404)

    def cached(self) -> bool:
        return safehub.Hub().cache.lookup(self.commit) is not None


@pytest.fixture
def evil(hub_repo: HubRepo, registry: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Evil:
    return _evil(hub_repo, registry, server, tmp_path, monkeypatch)


@pytest.fixture
def big_evil(make_hub_repo, registry: DockerRegistry, server: GitHubStandIn,  # type: ignore[no-untyped-def]
             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Evil:
    """As ``evil``, for a repo whose archive spans several of the transport's 1 MiB reads
    (an incompressible 4 MiB file), so a cut answer leaves whole reads behind."""
    import random

    repo = make_hub_repo("acme", "models", {"weights.bin": random.Random(0).randbytes(4 << 20)})
    return _evil(repo, registry, server, tmp_path, monkeypatch)


def _evil(hub_repo: HubRepo, registry: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Evil:
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "docker",
                                                          {registry.host: (USER, PASSWORD)})))
    assert main(["prefetch", "--oci", f"{registry.host}/team/hub", SPEC]) == 0
    digest = Lockfile.load(Path.cwd() / "safehub.lock").entries[SPEC].oci

    def get(kind: str, ref: str) -> bytes:
        r = requests.get(f"https://{registry.host}/v2/team/hub/{kind}/{ref}",
                         auth=(USER, PASSWORD), verify=str(server.ca_cert), timeout=30,
                         headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        r.raise_for_status()
        return r.content

    manifest = get("manifests", digest)
    doc = json.loads(manifest)
    blobs = {digest: manifest}
    for d in (doc["config"], *doc["layers"]):
        blobs[d["digest"]] = get("blobs", d["digest"])
    bad = Evil(server, digest, blobs, hub_repo.sha, doc["config"]["digest"],
               doc["layers"][0]["digest"])
    server.intercept(lambda r: r.path.startswith("/v2/evil/"), bad.answer)
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / "node-cache"))
    monkeypatch.setenv("SAFEHUB_OCI", bad.target)
    return bad


def refused(evil: Evil, kind: type[SafehubError] = SafehubError) -> SafehubError:
    with pytest.raises(kind) as e:
        safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    assert evil.target in e.value.message
    assert not evil.cached()  # nothing installed
    assert e.value.hint
    return e.value


def test_the_honest_bytes_from_the_stand_in_load(evil: Evil) -> None:
    assert safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)


def test_a_blob_whose_bytes_differ_from_its_digest(evil: Evil) -> None:
    data = bytearray(evil.blobs[evil.archive])
    data[100] ^= 1
    evil.answers[evil.archive] = Reply(200, bytes(data))
    e = refused(evil, IntegrityError)
    assert evil.archive in e.message and "other bytes" in e.message


def test_a_manifest_that_is_not_the_lockfiles_digest(evil: Evil) -> None:
    other = evil.blobs[evil.manifest].replace(b'"schemaVersion":2', b'"schemaVersion":2 ')
    evil.answers["/manifests/"] = Reply(200, other)
    e = refused(evil, IntegrityError)
    assert evil.manifest in e.message


def test_a_wrong_media_type_even_under_the_pinned_digest(evil: Evil, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(evil.blobs[evil.manifest])
    doc["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
    data = json.dumps(doc).encode()
    lock = Lockfile.load(Path.cwd() / "safehub.lock")  # a lockfile that pins the bad one
    from safehub._internal.frozen import replace

    lock.put(replace(lock.entries[SPEC], oci=sha256(data)))
    lock.save()
    evil.answers["/manifests/"] = Reply(200, data)
    e = refused(evil, IntegrityError)
    assert "not a safehub snapshot" in e.message and "media type" in e.message


def _repinned_config(evil: Evil, config: bytes) -> None:
    """The snapshot again with ``config`` as its config blob, its manifest pinned by the
    lockfile (as an edited lockfile or a foreign pusher would leave it)."""
    doc = json.loads(evil.blobs[evil.manifest])
    doc["config"].update(digest=sha256(config), size=len(config))
    manifest = json.dumps(doc).encode()
    evil.blobs[sha256(config)] = config
    lock = Lockfile.load(Path.cwd() / "safehub.lock")
    from safehub._internal.frozen import replace

    lock.put(replace(lock.entries[SPEC], oci=sha256(manifest)))
    lock.save()
    evil.answers["/manifests/"] = Reply(200, manifest)


def test_the_lockfiles_own_config_is_known_by_its_digest_in_the_pinned_manifest(
        evil: Evil) -> None:
    """The config prefetch pushes is the lockfile entry's, in one byte form: the pinned
    manifest names its digest, so it is not fetched; a config in another form that says
    the same loads (read and compared), one that says another commit is refused."""
    evil.server.clear_log()
    assert safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    asked = [r.path for r in evil.server.requests_log if r.path.startswith("/v2/evil/")]
    assert any(evil.archive in p for p in asked) and not any(evil.config in p for p in asked)

    safehub.Hub().cache.remove(evil.commit)
    spaced = json.dumps(json.loads(evil.blobs[evil.config]), indent=1).encode()
    _repinned_config(evil, spaced)
    evil.server.clear_log()
    assert safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    assert any(sha256(spaced) in r.path for r in evil.server.requests_log)

    safehub.Hub().cache.remove(evil.commit)
    other = json.loads(evil.blobs[evil.config])
    other["commit"] = "0" * 40
    _repinned_config(evil, json.dumps(other).encode())
    e = refused(evil, IntegrityError)
    assert "is for commit" in e.message and "the lockfile entry says" in e.message


def test_a_manifest_over_its_cap_is_refused_before_it_is_read(evil: Evil) -> None:
    sent = [0]

    def endless(record: RequestRecord) -> Reply:
        def body() -> Iterator[bytes]:
            for chunk in itertools.repeat(b" " * 65536):
                sent[0] += len(chunk)
                yield chunk
        return Reply(200, body())

    evil.answers["/manifests/"] = endless
    e = refused(evil, IntegrityError)
    assert "4,194,304-byte cap" in e.message and evil.manifest in e.message
    evil.answers["/manifests/"] = Reply(200, b" " * (5 << 20))  # announced: not read at all
    e = refused(evil, IntegrityError)
    assert "cap of a manifest" in e.message


def test_a_blob_longer_than_its_descriptor(evil: Evil) -> None:
    evil.answers[evil.archive] = Reply(200, evil.blobs[evil.archive] + b"more")
    e = refused(evil, IntegrityError)
    assert "sent more than" in e.message and evil.archive in e.message


def test_a_redirect_to_a_host_not_allowed_and_one_allowed(evil: Evil, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    storage = f"https://{evil.server.host('mirror')}:{evil.server.port}/storage/archive"
    evil.server.add_static("/storage/archive", evil.blobs[evil.archive])
    evil.answers[evil.archive] = Reply.redirect(storage, 307)
    e = refused(evil, FetchError)
    assert "a host not allowed" in e.message and "SAFEHUB_ALLOWED_HOSTS" in str(e.hint)
    monkeypatch.setenv("SAFEHUB_ALLOWED_HOSTS", evil.server.host("mirror"))  # the fix
    evil.server.clear_log()
    assert safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    to_storage = [r for r in evil.server.requests_log if r.path == "/storage/archive"]
    assert to_storage and all(r.authorization is None for r in to_storage)


def test_bearer_tokens_only_from_the_registrys_own_host(evil: Evil, tmp_path: Path,
                                                      monkeypatch) -> None:  # type: ignore[no-untyped-def]
    host = f"{evil.server.host('foreign')}:{evil.server.port}"
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "d2",
                                                          {host: ("robot", "pw")})))

    def gate(realm: str) -> Callable[[RequestRecord], Reply | None]:
        def answer(record: RequestRecord) -> Reply | None:
            if record.authorization == "Bearer good-token":
                return None
            return Reply(401, b"", (("WWW-Authenticate", f'Bearer realm="{realm}",'
                                     f'service="evil",scope="repository:evil/hub:pull"'),))
        return answer

    elsewhere = f"https://{evil.server.host('mirror')}:{evil.server.port}/token"
    evil.gate = gate(elsewhere)
    e = refused(evil, FetchError)
    assert "not the registry's host" in e.message
    own = f"https://{host}/token"
    evil.server.add_static("/token", json.dumps({"token": "good-token"}).encode())
    evil.gate = gate(own)
    evil.server.clear_log()
    assert safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    asked = [r for r in evil.server.requests_log if r.path.startswith("/token")]
    assert asked and "scope=repository%3Aevil%2Fhub%3Apull" in asked[0].path
    assert asked[0].authorization and asked[0].authorization.startswith("Basic ")


def test_a_registry_that_drips(evil: Evil, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SAFEHUB_TIMEOUT", "1")
    evil.answers["/manifests/"] = Reply(200, evil.blobs[evil.manifest],
                                        drip=Drip(chunk_size=1, delay=0.5))
    e = refused(evil, FetchError)
    assert "took longer than 1 s" in e.message


@pytest.mark.parametrize(("status", "said"), [
    (401, "docker login"), (403, "ask the registry's admins for access"),
    (429, "retry later"), (503, "retry later")])
def test_error_statuses_each_with_a_fix(evil: Evil, status: int, said: str) -> None:
    evil.answers["/manifests/"] = Reply.json({"errors": []}, status)
    e = refused(evil, FetchError)
    assert said in str(e.hint)
    assert str(status) in e.message


def test_404_says_where_to_push(evil: Evil) -> None:
    evil.answers["/manifests/"] = Reply.json({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, 404)
    e = refused(evil, NotFoundError)
    assert evil.manifest in e.message and "safehub prefetch --oci" in str(e.hint)


def test_the_next_registry_is_tried(evil: Evil, registry: DockerRegistry,
                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    evil.answers[evil.archive] = Reply(200, b"x" * len(evil.blobs[evil.archive]))
    monkeypatch.setenv("SAFEHUB_OCI", f"{evil.target},{registry.host}/team/hub")
    prepared = safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    assert (prepared.path / "hubconf.py").is_file()


@pytest.mark.parametrize("server_does", ["honours the range", "ignores the range",
                                         "answers another range"])
def test_a_blob_cut_short_is_resumed_with_range_or_fetched_again(
        big_evil: Evil, server_does: str) -> None:
    """Item 3's resumable pulls: the archive's first answer is cut halfway; the retry asks
    for the rest (``Range: bytes=N-``, N every byte that arrived before the cut) and appends a
    206 that continues it. A server that answers the range with the whole blob, or with a
    range starting elsewhere, is read from the first byte again; the digest decides."""
    evil = big_evil
    body = evil.blobs[evil.archive]
    cut = len(body) // 2
    asked: list[str | None] = []

    def answer(record: RequestRecord) -> Reply:
        asked.append(record.header("Range"))
        if len(asked) == 1:
            return Reply(200, body, cut_after=cut)
        wanted = record.header("Range")
        start = int(wanted.removeprefix("bytes=").rstrip("-")) if wanted else 0
        if wanted and server_does == "honours the range":
            return Reply(206, body[start:], (("Content-Range", f"bytes {start}-"
                                              f"{len(body) - 1}/{len(body)}"),))
        if wanted and server_does == "answers another range":
            return Reply(206, body[10:], (("Content-Range", f"bytes 10-{len(body) - 1}/"
                                           f"{len(body)}"),))
        return Reply(200, body)

    evil.answers[f"/blobs/{evil.archive}"] = answer
    assert safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    # Resumed after every byte that arrived before the cut (kept as it was read).
    assert asked[0] is None and asked[1] == f"bytes={cut}-"
    assert asked[2:] == ([None] if server_does == "answers another range" else [])


# -- one reading of every URL (issue 29, item 5) --------------------------------------------

def _basic_gate(evil: Evil, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The hostile registry wants the credential `docker login` left for it (Basic)."""
    registry = f"{evil.server.host('foreign')}:{evil.server.port}"
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "d3",
                                                          {registry: ("robot", "pw-1")})))
    basic = "Basic " + base64.b64encode(b"robot:pw-1").decode()

    def gate(record: RequestRecord) -> Reply | None:
        if record.role != "foreign" or record.authorization == basic:
            return None
        return Reply(401, b"", (("WWW-Authenticate", 'Basic realm="evil"'),))

    evil.gate = gate
    return basic


def _credentials_elsewhere(evil: Evil) -> list[RequestRecord]:
    return [r for r in evil.server.requests_log if r.role != "foreign" and r.authorization]


@pytest.mark.parametrize("spelling", [
    "https://{storage}\\@{registry}{path}", "//{storage}\\@{registry}{path}",
    "https:\\\\{storage}\\@{registry}{path}", "https://{storage}\t@{registry}{path}",
    "https://{storage}%5C@{registry}{path}", "https://{registry}@{storage}{path}",
    "https://{storage}#@{registry}{path}", "https://{storage}\\\\@{registry}{path}"])
@pytest.mark.parametrize("via_storage", [False, True])
def test_a_redirect_two_parsers_read_as_two_hosts_is_refused_and_the_credential_stays(
        evil: Evil, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str,
        via_storage: bool) -> None:
    """The blob's answer (or, ``via_storage``, the answer of the storage host the policy
    allows, as in issue 29) is a 307 to ``https://STORAGE\\@REGISTRY/...``: Python's
    parser reads the registry, requests connects to the storage host. Refused before any
    byte is sent; the registry's credential never leaves it."""
    basic = _basic_gate(evil, tmp_path, monkeypatch)
    monkeypatch.setenv("SAFEHUB_ALLOWED_HOSTS", evil.server.host("mirror"))
    storage = f"{evil.server.host('mirror')}:{evil.server.port}"
    registry = f"{evil.server.host('foreign')}:{evil.server.port}"
    location = spelling.format(storage=storage, registry=registry,
                               path=f"/v2/evil/hub/blobs/{evil.archive}")
    if via_storage:
        evil.server.intercept("/storage/", Reply.redirect(location, 307))
        evil.answers[evil.archive] = Reply.redirect(f"https://{storage}/storage/b", 307)
    else:
        evil.answers[evil.archive] = Reply.redirect(location, 307)
    e = refused(evil, FetchError)
    assert _credentials_elsewhere(evil) == []
    assert [r.path for r in evil.server.requests_log if r.role == "mirror"] == (
        ["/storage/b"] if via_storage else [])
    assert any(r.authorization == basic for r in evil.server.requests_log)  # it was used
    assert "does not follow" in e.message and "nothing was sent there" in e.message
    assert location.replace("\t", "\\t") in e.message  # the URL, printable
    assert e.hint and "https://host[:port]/path" in e.hint


def test_an_honest_redirect_to_the_allowed_storage_host_loads_without_the_credential(
        evil: Evil, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    basic = _basic_gate(evil, tmp_path, monkeypatch)
    monkeypatch.setenv("SAFEHUB_ALLOWED_HOSTS", evil.server.host("mirror"))
    storage = f"https://{evil.server.host('mirror')}:{evil.server.port}/storage/blob"
    evil.server.add_static("/storage/blob", evil.blobs[evil.archive])
    evil.answers[evil.archive] = Reply.redirect(storage, 307)
    assert safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)
    assert [r.path for r in evil.server.requests_log if r.role == "mirror"] == [
        "/storage/blob"]
    assert _credentials_elsewhere(evil) == []
    assert any(r.authorization == basic for r in evil.server.requests_log
               if r.role == "foreign")


def test_the_credential_is_bound_to_the_registrys_scheme_host_and_port() -> None:
    registry = Registry(Transport(TransportConfig()), Target.parse("Reg.Example:5000/team/hub"),
                        hosts=frozenset({"reg.example"}))
    assert registry.places.credited("https://reg.example:5000/v2/team/hub/blobs/x")
    assert registry.places.credited("https://REG.example.:5000/v2/other")
    registry.places.hop("https://reg.example:9000/storage/x")  # listed storage: a hop ...
    assert not registry.places.credited("https://reg.example:9000/storage/x")  # no secret
    assert not registry.places.credited("https://reg.example/v2/team/hub/blobs/x")
    with pytest.raises(FetchError, match="uses http://"):
        registry.places.credited("http://reg.example:5000/v2/team/hub/blobs/x")
    with pytest.raises(FetchError, match="backslash"):
        registry.places.credited("https://reg.example:9000\\@reg.example:5000/v2/x")
