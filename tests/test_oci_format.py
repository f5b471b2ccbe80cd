"""The OCI snapshot's bytes, the places it is read from, and docker's credentials (issue 19),
without a registry: canonical bytes, strict reading, settings, lockfile field, layouts."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

import safehub
from safehub.config import Settings
from safehub.errors import FetchError, IntegrityError, OfflineError, PinError, SpecError
from safehub.sources.oci.artifact import (
    MAX_CONFIG,
    SnapshotConfig,
    build,
    parse_config,
    parse_manifest,
    sha256,
)
from safehub.sources.oci.auth import challenge, credential
from safehub.sources.oci.layout import Layout
from safehub.sources.oci.registry import Target
from safehub.store.lockfile import LockEntry, Lockfile

CONFIG = SnapshotConfig("Acme/Tiny", "a" * 40, "b" * 40, "sha256:" + "c" * 64)
ARCHIVE = b"PK\x05\x06" + b"\0" * 18


def test_two_admins_get_the_same_digest() -> None:
    one = build(CONFIG, ARCHIVE, (b"{}", "https://example.com/sig"))
    two = build(SnapshotConfig(**vars(CONFIG)), bytes(ARCHIVE), (b"{}", "https://example.com/sig"))
    assert one == two
    manifest = json.loads(one[0])
    assert manifest["artifactType"] == "application/vnd.safehub.snapshot.v1"
    assert b" " not in one[0] and b"created" not in one[0]  # canonical, no timestamps
    assert manifest["layers"][0]["digest"] == sha256(ARCHIVE)


def _tamper(change: object) -> tuple[bytes, str]:
    manifest, _ = build(CONFIG, ARCHIVE)
    doc = json.loads(manifest)
    change(doc)  # type: ignore[operator]
    data = json.dumps(doc).encode()
    return data, sha256(data)


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: d.update(extra=1), "unexpected fields extra"),
    (lambda d: d.update(artifactType="application/x"), "artifactType"),
    (lambda d: d.update(mediaType="application/vnd.docker.distribution.manifest.v2+json"),
     "mediaType"),
    (lambda d: d["config"].update(size=MAX_CONFIG + 1), f"over the {MAX_CONFIG:,}-byte cap"),
    (lambda d: d["layers"].extend([d["layers"][0]] * 2), "one archive layer"),
    (lambda d: d["layers"][0].update(digest="sha256:XYZ"), "not sha256:<64 hex>"),
    (lambda d: d["layers"][0].update(size=-1), "not a whole number"),
    (lambda d: d["layers"].append({**d["layers"][0], "mediaType":
                                   "application/vnd.dev.sigstore.bundle.v0.3+json",
                                   "annotations": {}}), "no dev.safehub.signature.url"),
])
def test_anything_but_a_snapshots_exact_shape_is_refused(change: object, said: str) -> None:
    data, digest = _tamper(change)
    with pytest.raises(IntegrityError) as e:
        parse_manifest(data, digest, "reg.example/x")
    assert said in e.value.message and digest in e.value.message
    assert "reg.example/x" in e.value.message


def test_a_manifest_whose_bytes_are_not_its_digest() -> None:
    manifest, _ = build(CONFIG, ARCHIVE)
    with pytest.raises(IntegrityError, match="with other bytes"):
        parse_manifest(manifest + b" ", sha256(manifest), "reg.example/x")
    assert parse_manifest(manifest, sha256(manifest), "r").archive.size == len(ARCHIVE)


def test_the_config_must_equal_the_lock_entry() -> None:
    _, config = build(CONFIG, ARCHIVE)
    parse_config(config, SnapshotConfig("acme/tiny", *list(vars(CONFIG).values())[1:]), "r",
                 "sha256:" + "0" * 64)  # the repo's case folds
    with pytest.raises(IntegrityError, match="the lockfile decides"):
        parse_config(config, SnapshotConfig("Acme/Tiny", "d" * 40, "b" * 40, CONFIG.digest),
                     "r", "sha256:" + "0" * 64)


@pytest.mark.parametrize("text", ["https://reg.example/x", "reg.example", "reg.example/UPPER",
                                  "reg example/x", "oci:", "http://reg.example/x"])
def test_places_are_written_registry_slash_repository_or_oci_dir(text: str) -> None:
    with pytest.raises(SpecError):
        Settings.from_env({"SAFEHUB_OCI": text})
    with pytest.raises(SpecError):
        Target.parse(text)


def test_plain_http_is_for_loopback_and_only_from_a_policy() -> None:
    assert Target.parse("http://127.0.0.1:5000/x").plain
    with pytest.raises(SpecError, match="only a policy file"):
        Settings.from_env({"SAFEHUB_OCI": "http://127.0.0.1:5000/x"})


def test_settings_read_safehub_oci_in_order() -> None:
    s = Settings.from_env({"SAFEHUB_OCI": "reg.example:5000/ml/hub, oci:/srv/layout"})
    assert s.oci == ("reg.example:5000/ml/hub", "oci:/srv/layout")
    assert Target.parse("Reg.Example:5000/ml/hub").registry == "reg.example:5000"


def test_a_policy_names_registries_and_only_as_places(tmp_path: Path) -> None:
    policy = safehub.policy.Policy.from_text('[safehub]\noci = ["reg.example/ml/hub"]\n', "p.toml")
    assert Settings.from_env({}, policy=policy).oci == ("reg.example/ml/hub",)
    with pytest.raises(safehub.PolicyError, match="REGISTRY/REPOSITORY"):
        safehub.policy.Policy.from_text('[safehub]\noci = ["https://reg.example/x"]\n', "p.toml")


def test_the_lockfile_keeps_the_oci_digest(tmp_path: Path) -> None:
    path = tmp_path / "safehub.lock"
    lock = Lockfile(path, [LockEntry("acme/tiny:v1", "a" * 40, "b" * 40, CONFIG.digest,
                                     oci="sha256:" + "d" * 64)])
    lock.save()
    assert 'oci = "sha256:' + "d" * 64 in path.read_text()
    assert Lockfile.load(path).entries["acme/tiny:v1"].oci == "sha256:" + "d" * 64
    path.write_text(path.read_text().replace("d" * 64, "latest"))
    with pytest.raises(PinError, match="oci: must be 'sha256:' and 64 hex digits"):
        Lockfile.load(path)


def test_offline_opens_no_socket_even_with_a_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.sources.oci import Registry
    from safehub.sources.transport import Transport, TransportConfig

    reg = Registry(Transport(TransportConfig(offline=True)), Target.parse("127.0.0.1:9/x/y"))
    with pytest.raises(OfflineError):
        reg.manifest("sha256:" + "0" * 64)


def test_a_layout_is_as_untrusted_as_a_registry(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "layout")
    manifest, _ = build(CONFIG, ARCHIVE)
    snap = parse_manifest(manifest, sha256(manifest), "x")
    layout.write_blob(ARCHIVE, snap.archive.digest)
    digest = layout.write_manifest(manifest, "acme-tiny-v1")
    assert layout.manifest(digest) == manifest
    assert layout.blob_bytes(snap.archive) == ARCHIVE
    blob = tmp_path / "layout/blobs/sha256" / snap.archive.digest.removeprefix("sha256:")
    os.chmod(blob, 0o644)
    blob.write_bytes(ARCHIVE[:-1] + b"\1")
    with pytest.raises(IntegrityError, match="holds other bytes"):
        layout.blob_bytes(snap.archive)
    blob.write_bytes(ARCHIVE + b"more")
    with pytest.raises(IntegrityError, match="larger than its"):
        layout.blob_bytes(snap.archive)


def test_challenges_are_read_as_sent() -> None:
    assert challenge('Basic realm="registry"') == ("basic", {"realm": "registry"})
    assert challenge("") == ("", {})


def _config(tmp_path: Path, doc: object) -> dict[str, str]:
    (tmp_path / "config.json").write_text(json.dumps(doc))
    return {"DOCKER_CONFIG": str(tmp_path)}


def test_credentials_as_docker_login_leaves_them(tmp_path: Path) -> None:
    auth = base64.b64encode(b"robot$ml:s3cret").decode()
    env = _config(tmp_path, {"auths": {"https://reg.example": {"auth": auth},
                                       "tok.example": {"identitytoken": "refresh"}}})
    cred = credential("reg.example", env)
    assert cred is not None and (cred.username, cred.secret) == ("robot$ml", "s3cret")
    assert "s3cret" not in repr(cred)
    tok = credential("tok.example", env)
    assert tok is not None and tok.identity_token
    assert credential("other.example", env) is None
    assert credential("x", {"DOCKER_CONFIG": str(tmp_path / "none")}) is None
    bad = _config(tmp_path, {"auths": {"reg.example": {"auth": "!!"}}})
    with pytest.raises(FetchError, match="not base64"):
        credential("reg.example", bad)


def test_credential_helpers_are_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-fake"
    helper.write_text('#!/bin/sh\nread reg\necho "{\\"Username\\":\\"u-$reg\\",'
                      '\\"Secret\\":\\"pw\\"}"\n')
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env = _config(tmp_path, {"credHelpers": {"reg.example": "fake"}, "credsStore": "absent"})
    cred = credential("reg.example", env)
    assert cred is not None and (cred.username, cred.secret) == ("u-reg.example", "pw")
    assert credential("other.example", env) is None  # credsStore not installed: none
    with pytest.raises(FetchError, match="not installed"):
        credential("reg.example", _config(tmp_path, {"credHelpers": {"reg.example": "gone"}}))


# -- pinned files travel as layers whose digest is their pin (issue 31) -----------------------


def _weighted(*layers: object) -> tuple[bytes, str]:
    from safehub.sources.oci.artifact import weights_layer

    manifest, _ = build(CONFIG, ARCHIVE, None, (weights_layer("https://w.example/a.pth",
                                                              "d" * 64, 10),))
    doc = json.loads(manifest)
    doc["layers"] += list(layers)
    data = json.dumps(doc).encode()
    return data, sha256(data)


def test_a_pinned_files_layer_is_read_with_its_url_and_pin() -> None:
    data, digest = _weighted()
    snap = parse_manifest(data, digest, "reg.example/x")
    (layer,) = snap.weights
    assert layer.digest == "sha256:" + "d" * 64 and layer.size == 10
    assert snap.weight("https://w.example/a.pth") == layer
    assert snap.weight("https://w.example/other.pth") is None
    # No pinned file, no weights layer: the manifest of a snapshot without weights is as it was.
    assert build(CONFIG, ARCHIVE) == build(CONFIG, ARCHIVE, None, ())


@pytest.mark.parametrize(("layer", "said"), [
    ({"mediaType": "application/vnd.safehub.weights.v1", "digest": "sha256:" + "e" * 64,
      "size": 1}, "no dev.safehub.weights.url annotation"),
    ({"mediaType": "application/vnd.safehub.weights.v1", "digest": "sha256:" + "e" * 64,
      "size": 1, "annotations": {"dev.safehub.weights.url": "https://w.example/a.pth"}},
     "a second time"),
    ({"mediaType": "application/vnd.safehub.archive.v1.zip", "digest": "sha256:" + "e" * 64,
      "size": 1}, "one archive layer"),
    ({"mediaType": "application/octet-stream", "digest": "sha256:" + "e" * 64, "size": 1},
     "expected application/vnd.safehub.weights.v1"),
])
def test_a_weights_layer_of_another_shape_is_refused(layer: object, said: str) -> None:
    data, digest = _weighted(layer)
    with pytest.raises(IntegrityError) as e:
        parse_manifest(data, digest, "reg.example/x")
    assert said in e.value.message
