"""The fleet signature (issue 19, item 4): a Sigstore bundle over a snapshot's manifest
digest, attached as an OCI 1.1 referrer and under the ``sha256-<hex>`` fallback tag, and
required by a node's ``[oci]`` table on top of the lockfile's digest.

The registry is CNCF Distribution 2.8 as Debian ships it, which has no referrers API: the
fallback tag is what carries signatures there, and what a tag copy (skopeo) carries on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import safehub
from safehub.cli import main
from safehub.errors import PolicyError, SignatureError
from safehub.sources.oci import Registry, Target
from safehub.sources.oci.artifact import MANIFEST_TYPE, SIGNATURE_TYPE, Descriptor, sha256
from safehub.sources.oci.referrers import (
    INDEX_TYPE,
    build_referrer,
    candidates,
    fallback_tag,
    parse_referrer,
    with_referrer,
)
from safehub.sources.transport import Transport
from safehub.store.lockfile import Lockfile
from safehub.verify.signatures import snapshot
from safehub.verify.signatures.signers import KeySigner, Signer, SignerSet
from tests.conftest import HubRepo
from tests.support import GitHubStandIn, TLSFiles
from tests.support.oci import PASSWORD, USER, DockerRegistry, docker_config, missing_tools
from tests.test_signatures import FIXTURES, new_key

SPEC = "acme/models:v1.0"
needs_registry = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


# -- the formats, without a registry -------------------------------------------------------

def test_a_referrer_names_its_subject_and_carries_one_bundle() -> None:
    subject = Descriptor(MANIFEST_TYPE, "sha256:" + "a" * 64, 500)
    referrer = build_referrer(b'{"bundle": 1}', subject)
    layer = parse_referrer(referrer, sha256(referrer), subject.digest, "here")
    assert layer.media_type == SIGNATURE_TYPE and layer.digest == sha256(b'{"bundle": 1}')
    doc = json.loads(referrer)
    assert doc["artifactType"] == SIGNATURE_TYPE and doc["subject"]["digest"] == subject.digest
    # Another snapshot's signature is not this one's, whatever index lists it.
    with pytest.raises(safehub.IntegrityError, match="signs 'sha256:aaa"):
        parse_referrer(referrer, sha256(referrer), "sha256:" + "b" * 64, "here")
    with pytest.raises(safehub.IntegrityError, match="other bytes"):
        parse_referrer(referrer + b" ", sha256(referrer), subject.digest, "here")


def test_an_index_is_only_a_list_of_candidates() -> None:
    one = build_referrer(b"1", Descriptor(MANIFEST_TYPE, "sha256:" + "a" * 64, 1))
    two = build_referrer(b"2", Descriptor(MANIFEST_TYPE, "sha256:" + "a" * 64, 1))
    index = with_referrer(with_referrer(None, one), two)
    assert sorted(candidates(index, "here")) == sorted([sha256(one), sha256(two)])
    assert with_referrer(index, one) == index  # adding what is there changes nothing
    # Entries of another artifact type, junk and duplicates are not candidates.
    doc = json.loads(index)
    doc["manifests"] += [{"mediaType": MANIFEST_TYPE, "digest": sha256(b"x"),
                          "artifactType": "application/vnd.example.sbom"}, "junk",
                         {"mediaType": MANIFEST_TYPE, "digest": "sha256:../../etc"},
                         doc["manifests"][0]]
    assert sorted(candidates(json.dumps(doc).encode(), "here")) == sorted(
        [sha256(one), sha256(two)])
    assert fallback_tag("sha256:" + "c" * 64) == "sha256-" + "c" * 64


def _key_sets(tmp_path: Path, name: str = "fleet") -> tuple[Path, tuple[SignerSet, ...]]:
    key, pub = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    pub.write_bytes(new_key(key))
    return key, (SignerSet("[oci]", keys=(KeySigner(pub),)),)


def test_the_signed_statement_names_exactly_the_snapshot(tmp_path: Path) -> None:
    key, sets = _key_sets(tmp_path)
    digest, config = "sha256:" + "d" * 64, {"schema": 1, "repo": "acme/tiny", "commit": "c"}
    bundle = snapshot.sign_with_key(key, snapshot.statement(digest, config))
    assert snapshot.verify(sets, bundle, digest, config) == f"key {sets[0].keys[0].path}"
    with pytest.raises(SignatureError, match="not the snapshot"):
        snapshot.verify(sets, bundle, "sha256:" + "e" * 64, config)
    with pytest.raises(SignatureError, match="names another snapshot"):
        snapshot.verify(sets, bundle, digest, {**config, "commit": "other"})
    _, other = _key_sets(tmp_path, "other")
    with pytest.raises(SignatureError, match="matches no key"):
        snapshot.verify(other, bundle, digest, config)
    # A model-signing bundle (another predicate) made with the right key is not a fleet one.
    from safehub.verify.signatures.sign import sign_directory

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"w")
    model_sig = sign_directory(folder, key).read_bytes()
    with pytest.raises(SignatureError, match="not a safehub snapshot"):
        snapshot.verify(sets, model_sig, digest, config)


def test_a_real_keyless_bundle_of_something_else_is_refused_after_sigstore_verifies() -> None:
    """A keyless bundle from public Sigstore (sigstore-conformance) passes the identity check
    of a policy naming its signer, and is still refused: it signs another statement."""
    case = FIXTURES / "sigstore/cases/conf-happy-path-intoto-in-dsse-v3/bundle.sigstore.json"
    identity = ("https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon"
                "/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main")
    root = FIXTURES / "sigstore/trusted_root/production.sigstore-python-4.5.1.trusted_root.json"
    who = Signer("https://token.actions.githubusercontent.com", identity)
    sets = (SignerSet("[oci]", signers=(who,), trust_config=root),)
    with pytest.raises(SignatureError, match="not a safehub snapshot's"):
        snapshot.verify(sets, case.read_bytes(), "sha256:" + "a" * 64, {})
    wrong = (SignerSet("[oci]", signers=(Signer(who.issuer, "someone@else"),),
                       trust_config=root),)
    with pytest.raises(SignatureError, match="does not verify"):
        snapshot.verify(wrong, case.read_bytes(), "sha256:" + "a" * 64, {})


def test_keyless_signing_offline_says_what_it_needs() -> None:
    with pytest.raises(SignatureError, match="offline") as e:
        snapshot.sign_keyless(b"{}", offline=True)
    assert "--sign-key" in str(e.value.hint)


def test_the_oci_table_is_checked_and_only_adds_requirements(tmp_path: Path) -> None:
    from safehub.policy.files import validate_file
    from safehub.policy.model import Policy
    from safehub.policy.oci import fleet_signers
    from safehub.policy.schema import parse_text

    pub = tmp_path / "k.pub"
    new_key(tmp_path / "k.pem")
    pub.write_bytes(new_key(tmp_path / "k.pem"))
    bad = tmp_path / "bad.toml"
    bad.write_text('[oci]\nsignature = "required"\n')
    with pytest.raises(PolicyError, match="needs at least one entry in signers or keys"):
        validate_file(bad)
    bad.write_text(f'[oci]\nkeys = ["{pub}"]\n')
    with pytest.raises(PolicyError, match="signature = 'none'"):
        validate_file(bad)
    bad.write_text('[oci]\nsignature = "if-present"\nkeys = ["k.pub"]\n')
    with pytest.raises(PolicyError, match="oci.signature"):
        validate_file(bad)
    with pytest.raises(PolicyError, match="cannot be set in a project"):
        parse_text(f'[oci]\nsignature = "required"\nkeys = ["{pub}"]\n',
                   str(tmp_path / "safehub.toml"), origin="project")
    site = parse_text(f'[oci]\nsignature = "required"\nkeys = ["{pub}"]\n',
                      str(tmp_path / "site.toml"), origin="site")
    user = parse_text('[oci]\nsignature = "required"\n[[oci.signers]]\nissuer = "https://i"\n'
                      'identity = "ci@example.com"\n', str(tmp_path / "user.toml"))
    loosen = parse_text('[oci]\nsignature = "none"\n', str(tmp_path / "user.toml"))
    assert [s.policy_file for s in fleet_signers(Policy.from_files([site, user]))] == [
        site.source, user.source]
    assert fleet_signers(Policy.from_files([site, loosen])) == fleet_signers(
        Policy.from_files([site]))


# -- against the real registry ---------------------------------------------------------------

@pytest.fixture(scope="module")
def registry(tls: TLSFiles, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[DockerRegistry]:
    if missing_tools() is not None:
        pytest.skip(str(missing_tools()))
    with DockerRegistry(tmp_path_factory.mktemp("registry"), tls) as reg:
        yield reg


@pytest.fixture
def fleet(hub_repo: HubRepo, registry: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
          isolated: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "docker",
                                                          {registry.host: (USER, PASSWORD)})))
    return Fleet(registry, server, tmp_path, isolated, monkeypatch, hub_repo)


class Fleet:
    """A publisher with a signing key and nodes whose site policy requires its signature."""

    def __init__(self, registry: DockerRegistry, server: GitHubStandIn, tmp: Path,
                 home: Path, monkeypatch: pytest.MonkeyPatch, repo: HubRepo) -> None:
        self.registry, self.server, self.tmp, self.home = registry, server, tmp, home
        self.monkeypatch, self.repo = monkeypatch, repo
        self.key, self.pub = tmp / "fleet.pem", tmp / "fleet.pub"
        self.pub.write_bytes(new_key(self.key))
        self.repository = f"signed/{tmp.name.lower()}"  # the registry outlives one test
        self.target = f"{registry.host}/{self.repository}"

    def lock_entry_digest(self) -> str:
        return Lockfile.load(Path.cwd() / "safehub.lock").entries[SPEC].oci

    def require(self, *pubs: Path) -> None:
        """The node's site policy: the repo allowed, each key's [oci] signature required
        (one file per key: each file's table must accept it)."""
        site = self.home / "site/safehub/policy.toml"
        site.parent.mkdir(parents=True, exist_ok=True)
        site.write_text(f'[oci]\nsignature = "required"\nkeys = ["{pubs[0]}"]\n\n'
                        '[[allow]]\nrepo = "acme/*"\n')
        for i, pub in enumerate(pubs[1:]):
            extra = self.home / f"extra{i}.toml"
            extra.write_text(f'[oci]\nsignature = "required"\nkeys = ["{pub}"]\n')
            self.monkeypatch.setenv("SAFEHUB_POLICY", str(extra))

    def node(self, name: str, oci: str | None = None) -> None:
        self.monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(self.tmp / name / "cache"))
        self.monkeypatch.setenv("XDG_DATA_HOME", str(self.tmp / name / "data"))
        self.monkeypatch.setenv("SAFEHUB_OCI", oci or self.target)
        self.server.clear_log()

    def load(self) -> safehub.Prepared:
        return safehub.Hub().prepare(SPEC, trust_repo=True, verbose=False)

    def cached(self) -> bool:
        return safehub.Hub().cache.lookup(self.repo.sha) is not None

    def registry_client(self) -> Registry:
        hub = safehub.Hub()
        return Registry(Transport(hub.settings.transport_config()),
                        Target.parse(self.target), push=True)

    def get(self, path: str, accept: str) -> requests.Response:
        return requests.get(f"https://{self.registry.host}/v2/{path}", auth=(USER, PASSWORD),
                            verify=str(self.server.ca_cert), timeout=30,
                            headers={"Accept": accept})


@needs_registry
def test_a_signed_snapshot_loads_where_the_node_requires_the_signature(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key), "--json",
                 SPEC]) == 0
    out = json.loads(capsys.readouterr().out)
    digest = fleet.lock_entry_digest()
    published = out["published"][0]
    assert published["manifest"] == digest and published["signature"].startswith("sha256:")
    # Distribution 2.8 has no referrers API: the fallback tag lists the signature.
    index = fleet.get(f"{fleet.repository}/manifests/{fallback_tag(digest)}", INDEX_TYPE)
    assert index.status_code == 200
    assert candidates(index.content, "test") == [published["signature"]]

    fleet.require(fleet.pub)
    fleet.node("signed-node")
    # `check` cannot vouch for a signature it has not seen: conditional, with the fix.
    assert main(["check", SPEC]) == 1
    out = capsys.readouterr().out
    assert "CONDITIONAL" in out and "carries a fleet signature by key" in out, out
    assert f"safehub prefetch {SPEC}" in out
    prepared = fleet.load()
    assert (prepared.path / "hubconf.py").is_file()
    assert fleet.server.requests_log == []  # GitHub is not asked
    audit = (fleet.home / "state/safehub/log/audit.jsonl").read_text().splitlines()[-1]
    assert json.loads(audit)["fleet_signature"] == f"key {fleet.pub}"

    # Signing again (the same key) adds nothing; pushing the snapshot again keeps its digest.
    fleet.monkeypatch.delenv("SAFEHUB_OCI")
    fleet.monkeypatch.delenv("SAFEHUB_CACHE_DIR")
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key), SPEC]) == 0
    assert fleet.lock_entry_digest() == digest
    again = fleet.get(f"{fleet.repository}/manifests/{fallback_tag(digest)}", INDEX_TYPE)
    assert len(candidates(again.content, "test")) <= 2  # ECDSA: a new signature each time


@needs_registry
def test_an_unsigned_snapshot_is_refused_with_the_fix_and_nothing_installed(
        fleet: Fleet) -> None:
    assert main(["prefetch", "--oci", fleet.target, SPEC]) == 0
    fleet.require(fleet.pub)
    fleet.node("unsigned-node")
    with pytest.raises(SignatureError) as e:
        fleet.load()
    digest = fleet.lock_entry_digest()
    assert digest in e.value.message and fleet.target in e.value.message
    assert f"no fallback tag {fallback_tag(digest)}" in e.value.message
    assert "--sign-key KEY acme/models:v1.0" in str(e.value.hint)
    assert not fleet.cached() and fleet.server.requests_log == []
    # The fix: sign it where it is published; the next load works.
    fleet.monkeypatch.delenv("SAFEHUB_OCI")
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key), SPEC]) == 0
    fleet.node("unsigned-node")
    assert fleet.load()


@needs_registry
def test_a_signature_by_another_key_or_for_another_snapshot_counts_for_nothing(
        fleet: Fleet) -> None:
    other_key = fleet.tmp / "other.pem"
    other_pub = fleet.tmp / "other.pub"
    other_pub.write_bytes(new_key(other_key))
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(other_key), SPEC]) == 0
    digest = fleet.lock_entry_digest()
    fleet.require(fleet.pub)
    fleet.node("wrong-key-node")
    with pytest.raises(SignatureError, match="matches no key"):
        fleet.load()
    assert not fleet.cached()

    # A hostile registry lists, under this snapshot's fallback tag, a valid signature by the
    # right key of another manifest (its referrer's subject is another digest), and a
    # referrer that names this snapshot but carries a bundle signing another one.
    client = fleet.registry_client()
    elsewhere = "sha256:" + "f" * 64
    stolen = snapshot.sign_with_key(fleet.key, snapshot.statement(elsewhere, {}))
    foreign = build_referrer(stolen, Descriptor(MANIFEST_TYPE, elsewhere, 100))
    lying = build_referrer(stolen, Descriptor(MANIFEST_TYPE, digest, 100))
    for referrer in (foreign, lying):
        client.push_blob(stolen, sha256(stolen), len(stolen))
        client.push_manifest(referrer, sha256(referrer))
    client.push_blob(b"{}", sha256(b"{}"), 2)
    index = with_referrer(with_referrer(None, foreign), lying)
    client.push_manifest(index, fallback_tag(digest), media_type=INDEX_TYPE)
    fleet.node("hostile-node")
    with pytest.raises(SignatureError) as e:
        fleet.load()
    assert f"signs '{elsewhere}', not the snapshot {digest}" in e.value.message
    assert f"the signature is for {elsewhere}, not the snapshot {digest}" in e.value.message
    assert not fleet.cached()


@needs_registry
def test_every_oci_table_must_accept_one_of_the_signatures(fleet: Fleet) -> None:
    """A second file's [oci] table adds a signer set: a snapshot signed by the first key
    only is refused, naming that file, until the second key signs it too (a snapshot may
    carry several signatures, one referrer each)."""
    second_key, second_pub = fleet.tmp / "second.pem", fleet.tmp / "second.pub"
    second_pub.write_bytes(new_key(second_key))
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key), SPEC]) == 0
    fleet.require(fleet.pub, second_pub)
    fleet.node("two-key-node")
    with pytest.raises(SignatureError, match="that \\[oci\\] in .*extra0.toml accepts"):
        fleet.load()
    assert not fleet.cached()
    fleet.monkeypatch.delenv("SAFEHUB_OCI")
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(second_key), SPEC]) == 0
    fleet.node("two-key-node")
    assert fleet.load()


@needs_registry
def test_the_signature_survives_a_copy_an_air_gap_and_an_import(
        fleet: Fleet, tmp_path: Path) -> None:
    """skopeo copies the snapshot and its fallback tag to another repository (a tag copy,
    as a mirror makes); an exported layout carries it across a gap; `oci import` pushes the
    layout's signatures with the snapshots. Each node loads with the signature required."""
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed")
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key), SPEC]) == 0
    digest = fleet.lock_entry_digest()
    auth = f"{USER}:{PASSWORD}"
    certs = tmp_path / "certs"
    certs.mkdir()
    shutil.copy(fleet.server.ca_cert, certs / "ca.crt")
    src = f"docker://{fleet.target}"
    dst = f"docker://{fleet.registry.host}/mirror/signed"
    # skopeo keeps the snapshot's digest, and rewrites the fallback tag's index (it drops
    # each entry's artifactType, so the index is not the one pushed): only a list.
    for source, dest, keep in ((f"@{digest}", ":snapshot", ["--preserve-digests"]),
                               (f":{fallback_tag(digest)}", f":{fallback_tag(digest)}", [])):
        subprocess.run(["skopeo", "copy", "--all", *keep, "--src-creds", auth, "--dest-creds",
                        auth, "--src-cert-dir", str(certs), "--dest-cert-dir", str(certs),
                        src + source, dst + dest], check=True, capture_output=True, timeout=300)
    tag = f"manifests/{fallback_tag(digest)}"
    assert fleet.get(f"mirror/signed/{tag}", INDEX_TYPE).content != fleet.get(
        f"{fleet.repository}/{tag}", INDEX_TYPE).content
    fleet.require(fleet.pub)
    fleet.node("mirror-node", f"{fleet.registry.host}/mirror/signed")
    assert fleet.load()

    # skopeo into a layout (its own index.json, without artifactType): a node loads from
    # it, and `oci import` carries its signature on.
    copied = tmp_path / "skopeo-layout"
    for source, tag in ((f"@{digest}", "snapshot"), (f":{fallback_tag(digest)}",
                                                     fallback_tag(digest))):
        subprocess.run(["skopeo", "copy", "--all", "--src-creds", auth, "--src-cert-dir",
                        str(certs), src + source, f"oci:{copied}:{tag}"], check=True,
                       capture_output=True, timeout=300)
    fleet.node("skopeo-layout-node", f"oci:{copied}")
    assert fleet.load()
    fleet.monkeypatch.delenv("SAFEHUB_OCI")
    assert main(["oci", "import", str(copied), f"{fleet.registry.host}/from-skopeo/signed"]) == 0
    fleet.node("from-skopeo-node", f"{fleet.registry.host}/from-skopeo/signed")
    assert fleet.load()

    layout = tmp_path / "layout"
    fleet.monkeypatch.delenv("SAFEHUB_OCI")
    assert main(["oci", "export", "--sign-key", str(fleet.key), str(layout)]) == 0
    fleet.node("gap-node", f"oci:{layout}")
    assert fleet.load()
    fleet.monkeypatch.delenv("SAFEHUB_OCI")
    assert main(["oci", "import", str(layout), f"{fleet.registry.host}/imported/signed"]) == 0
    fleet.node("import-node", f"{fleet.registry.host}/imported/signed")
    assert fleet.load()
    assert fleet.server.requests_log == []


@needs_registry
def test_signing_flags_need_oci_and_keyless_offline_is_refused(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prefetch", "--sign-key", str(fleet.key), SPEC]) == 2
    assert "need --oci" in capsys.readouterr().err
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key),
                 "--sign-keyless", SPEC]) == 2
    capsys.readouterr()
    fleet.monkeypatch.setenv("SIGSTORE_IDENTITY_TOKEN", "")
    # Without an OIDC identity (no CI credential here), keyless signing says what it needs.
    assert main(["prefetch", "--oci", fleet.target, "--sign-keyless", SPEC]) == 1
    err = capsys.readouterr().err
    assert "keyless" in err and "--sign-key" in err


@needs_registry
def test_a_registry_with_the_referrers_api_is_read_and_a_hostile_one_is_passed_over(
        fleet: Fleet) -> None:
    """A registry that speaks the referrers API (the stand-in, serving the real registry's
    bytes): its list is read like the fallback tag's. Where it lists only another
    snapshot's signature, it is refused and the next registry in SAFEHUB_OCI serves."""
    from tests.support.transport import Reply, RequestRecord

    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key), SPEC]) == 0
    digest = fleet.lock_entry_digest()
    honest = candidates(fleet.get(f"{fleet.repository}/manifests/{fallback_tag(digest)}",
                                  INDEX_TYPE).content, "test")
    manifest = fleet.get(f"{fleet.repository}/manifests/{digest}", MANIFEST_TYPE).content
    stored = {digest: manifest, honest[0]: fleet.get(
        f"{fleet.repository}/manifests/{honest[0]}", MANIFEST_TYPE).content}
    for doc in map(json.loads, list(stored.values())):
        for d in (doc["config"], *doc["layers"]):
            stored[d["digest"]] = fleet.get(f"{fleet.repository}/blobs/{d['digest']}",
                                            "*/*").content
    elsewhere = "sha256:" + "f" * 64
    foreign = build_referrer(b"{}", Descriptor(MANIFEST_TYPE, elsewhere, 10))
    stored[sha256(foreign)] = foreign
    huge = "sha256:" + "9" * 64  # a candidate whose manifest is over the 64 KiB cap
    stored[huge] = b" " * (65 * 1024)
    listed = {"honest": [huge, honest[0]], "hostile": [sha256(foreign)], "junk": []}

    def answer(record: RequestRecord) -> Reply:
        kind, rest = record.path.split("/v2/api/", 1)[1].split("/", 1)
        if rest.startswith(f"referrers/{digest}") and kind == "junk":
            return Reply(200, b"<html>not a list</html>", (("Content-Type", INDEX_TYPE),))
        if rest.startswith(f"referrers/{digest}"):
            return Reply(200, json.dumps({"schemaVersion": 2, "mediaType": INDEX_TYPE,
                                          "manifests": [{"mediaType": MANIFEST_TYPE,
                                                         "digest": d, "size": 1} for d in
                                                        listed[kind]]}).encode(),
                         (("Content-Type", INDEX_TYPE),))
        name = rest.rsplit("/", 1)[-1]
        if name in stored:
            return Reply(200, stored[name], (("Content-Type", "application/octet-stream"),))
        return Reply.json({"errors": [{"code": "NOT_FOUND"}]}, 404)

    fleet.server.intercept(lambda r: r.path.startswith("/v2/api/"), answer)
    stand_in = f"{fleet.server.host('foreign')}:{fleet.server.port}/api"
    fleet.require(fleet.pub)
    fleet.node("api-node", f"{stand_in}/honest")
    assert fleet.load()
    fleet.node("hostile-api-node", f"{stand_in}/hostile")
    with pytest.raises(SignatureError, match=f"signs '{elsewhere}', not the snapshot"):
        fleet.load()
    assert not fleet.cached()
    fleet.node("fallback-node", f"{stand_in}/hostile,{fleet.target}")
    assert fleet.load()
    # A referrers API that answers junk names no signature; the next registry serves.
    fleet.node("junk-api-node", f"{stand_in}/junk")
    with pytest.raises(SignatureError, match="it has none"):
        fleet.load()
    fleet.node("junk-then-real-node", f"{stand_in}/junk,{fleet.target}")
    assert fleet.load()


@needs_registry
def test_the_signature_comes_through_a_pull_through_cache(
        hub_repo: HubRepo, tls: TLSFiles, server: GitHubStandIn, tmp_path: Path,
        isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second docker-registry in proxy mode in front of an anonymous origin: the fallback
    tag and the referrer come through it like any tag and manifest."""
    import os

    env = {**os.environ, "SSL_CERT_FILE": str(tls.ca_cert)}  # the proxy trusts the origin
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-login"))
    with DockerRegistry(tmp_path / "origin", tls, auth=False) as origin:
        fleet = Fleet(origin, server, tmp_path, isolated, monkeypatch, hub_repo)
        assert main(["prefetch", "--oci", f"{origin.host}/team/hub", "--sign-key",
                     str(fleet.key), SPEC]) == 0
        proxy = DockerRegistry(tmp_path / "proxy", tls, auth=False, proxy_of=origin)
        proxy.start(env)
        try:
            fleet.require(fleet.pub)
            fleet.node("proxied-node", f"{proxy.host}/team/hub")
            assert fleet.load()
            assert server.requests_log == []
            # Through the cache, another key's requirement still refuses.
            other = tmp_path / "other.pub"
            other.write_bytes(new_key(tmp_path / "other.pem"))
            fleet.require(other)
            fleet.node("proxied-node-2", f"{proxy.host}/team/hub")
            with pytest.raises(SignatureError, match="matches no key"):
                fleet.load()
        finally:
            proxy.stop()


@needs_registry
def test_a_registry_without_the_referrers_api_is_asked_for_it_once(fleet: Fleet) -> None:
    """Distribution 2.8 answers 404 to the referrers API (one with the API answers 200,
    an empty list, for any subject): later snapshots' signatures are looked up by their
    fallback tags only, and still found; nothing is taken without its own check."""
    assert main(["prefetch", "--oci", fleet.target, "--sign-key", str(fleet.key), SPEC]) == 0
    digest = fleet.lock_entry_digest()
    from safehub.sources.connections import Pools

    pools, sent = Pools(connect_timeout=10, read_timeout=30), []

    def opener(method: str, hop: Any, headers: Any, body: Any) -> Any:
        sent.append(hop.path)
        return pools.open(method, hop, headers, body)

    config = safehub.Hub().settings.transport_config()
    client = Registry(Transport(config, opener=opener), Target.parse(fleet.target))
    first = client.referrers(digest)  # logs in (a 401 first), asks the API and the tag
    asked = sum("/referrers/" in path for path in sent)
    assert asked and len(first) >= 1
    assert client.referrers(digest) == first
    assert client.referrers("sha256:" + "e" * 64) == []
    assert sum("/referrers/" in path for path in sent) == asked  # not again
    assert sent[-1].endswith("/manifests/sha256-" + "e" * 64)  # the tag only
