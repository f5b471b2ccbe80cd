"""A fleet node serves a pinned Hugging Face Hub file from its snapshot (issue 31, item 6).

``safehub prefetch --oci`` pushes each ``hf://`` file the lock entry pins as a layer; a node
with ``SAFEHUB_OCI`` and an empty Hub cache loads it from the registry (CNCF Distribution,
tests/support/oci.py) with zero requests to the loopback Hub stand-in, laid out in the Hub
cache as a download leaves it. A registry that lies about the layer is refused and nothing
is left in the Hub cache.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import SafehubError
from safehub.store.lockfile import Lockfile
from tests.support import GitHubStandIn
from tests.support.hfhub import HubStandIn, hub_cache_files
from tests.support.oci import missing_tools
from tests.test_hfhub import hub  # noqa: F401  (the fixture: the Hub stand-in, hubby's policy)
from tests.test_oci_weights import _blob_data, _node, registry, target  # noqa: F401

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))

SPEC = "acme/hubby:v1.0"
KEY = "hf://acme/tiny@main/model.safetensors"


def _published(target: str, capsys: pytest.CaptureFixture[str]) -> Lockfile:  # noqa: F811
    """The Hub file loaded once (pinned with its commit), locked, pushed with the snapshot."""
    safehub.load(SPEC, "tiny", verbose=False)
    assert main(["lock", SPEC]) == 0
    assert main(["prefetch", "--oci", target, SPEC]) == 0
    capsys.readouterr()
    return Lockfile.load(Path("safehub.lock"))


def _hub_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oci: str, name: str) -> Path:
    """A fresh node (tests/test_oci_weights.py's) with an empty Hub cache of its own."""
    from huggingface_hub import constants

    _node(tmp_path, monkeypatch, oci, name)
    cache = tmp_path / name / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(cache.parent))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_the_publisher_pushes_each_pinned_hub_file_as_a_layer(
        hub: HubStandIn, target: str, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    from safehub.config import Settings
    from safehub.sources.oci import place
    from safehub.sources.oci.artifact import WEIGHTS_URL, parse_manifest

    entry = _published(target, capsys).entries[SPEC]
    (pin,) = entry.weights
    assert pin.url == KEY and pin.commit == hub.repos["acme/tiny"].refs["main"]
    registry_ = place(target, Settings.from_env().transport())
    snap = parse_manifest(registry_.manifest(entry.oci), entry.oci, target)  # type: ignore[attr-defined]
    (layer,) = snap.weights
    assert layer.digest == f"sha256:{pin.sha256}"
    assert (layer.annotations or {})[WEIGHTS_URL] == KEY


def test_a_node_serves_a_pinned_hub_file_from_the_snapshot_with_no_hub_request(
        hub: HubStandIn, target: str, server: GitHubStandIn, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    entry = _published(target, capsys).entries[SPEC]
    (pin,) = entry.weights
    cache = _hub_node(tmp_path, monkeypatch, target, "node")
    server.clear_log()
    before = len(hub.log)
    state = safehub.load(SPEC, "tiny", verbose=False)
    assert state["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    assert len(hub.log) == before  # the Hub was not asked, nor its CDN
    assert server.requests_log == []  # nor GitHub: the code came from the registry too
    # The Hub cache as a download leaves it: the blob by its LFS oid, the link, the ref.
    storage = cache / "models--acme--tiny"
    assert pin.commit is not None
    snapshot = storage / "snapshots" / pin.commit / "model.safetensors"
    assert snapshot.is_symlink() and snapshot.resolve() == storage / "blobs" / pin.sha256
    assert hashlib.sha256(snapshot.read_bytes()).hexdigest() == pin.sha256
    assert (storage / "refs" / "main").read_text() == pin.commit
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache("acme/tiny", "model.safetensors") == str(snapshot)
    # A warm load reads the Hub cache: no request to the registry's layer or the Hub.
    assert safehub.load(SPEC, "tiny", verbose=False)["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    assert len(hub.log) == before


@pytest.mark.parametrize("lie", ["other-bytes", "oversized"])
def test_a_registry_that_lies_about_a_hub_file_layer_leaves_nothing_in_the_hub_cache(
        lie: str, hub: HubStandIn, target: str, registry, tmp_path: Path,  # type: ignore[no-untyped-def]  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    entry = _published(target, capsys).entries[SPEC]
    data = _blob_data(registry, f"sha256:{entry.weights[0].sha256}")
    honest = data.read_bytes()
    try:
        data.write_bytes(honest[:-1] + bytes([honest[-1] ^ 1]) if lie == "other-bytes"
                         else honest + b"\0" * 4096)
        cache = _hub_node(tmp_path, monkeypatch, target, f"node-{lie}")
        before = len(hub.log)
        with pytest.raises(SafehubError) as e:
            safehub.load(SPEC, "tiny", verbose=False)
        assert type(e.value).__name__ == "IntegrityError", e.value
        assert "Remove it from SAFEHUB_OCI" in str(e.value.hint)
        assert hub_cache_files(cache) == []  # no blob, no link, no ref, no partial file
        assert len(hub.log) == before
        # The fix: without the lying registry the node asks the Hub, held to the pin.
        monkeypatch.delenv("SAFEHUB_OCI")
        assert safehub.load(SPEC, "tiny", verbose=False)["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    finally:
        data.write_bytes(honest)


def test_a_node_whose_lockfile_has_no_commit_for_the_file_asks_the_hub(
        hub: HubStandIn, target: str, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A pin without its commit cannot name the snapshot folder the file belongs in: the
    node downloads it from the Hub, held to the pin, as before."""
    _published(target, capsys)
    lockfile = Path("safehub.lock")
    text = lockfile.read_text()
    commit = hub.repos["acme/tiny"].refs["main"]
    lines = [line for line in text.splitlines() if commit not in line or "weights" in line]
    assert len(lines) == len(text.splitlines()) - 1, text
    lockfile.write_text("\n".join(lines) + "\n")
    _hub_node(tmp_path, monkeypatch, target, "nocommit")
    before = len(hub.log)
    assert safehub.load(SPEC, "tiny", verbose=False)["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    assert len(hub.log) > before


# -- snapshot_download on a node, and its files locked by a confined child --------------------


def _locked_snapshot(hub: HubStandIn, isolated: Path, target: str,  # noqa: F811
                     capsys: pytest.CaptureFixture[str]) -> Lockfile:
    """``snap`` (a snapshot_download) locked by ``lock --entrypoint`` (its child confined
    where the kernel allows: the Hub stand-in's port granted) and pushed with the snapshot."""
    from tests.helpers_load import policy
    from tests.test_hfhub import _rule

    port = hub.endpoint.rsplit(":", 1)[1]
    policy(isolated, f"[confine]\nconnect_ports = [{port}]\n" + _rule("hf://acme/tiny", hub))
    capsys.readouterr()
    assert main(["lock", SPEC, "--entrypoint", "snap", "--trust"]) == 0, capsys.readouterr()
    assert main(["prefetch", "--oci", target, SPEC]) == 0, capsys.readouterr()
    capsys.readouterr()
    return Lockfile.load(Path("safehub.lock"))


LISTING = "hf://acme/tiny@main/"


def test_a_node_serves_snapshot_download_from_the_snapshot_with_no_hub_request(
        hub: HubStandIn, isolated: Path, target: str, server: GitHubStandIn,  # noqa: F811
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.config import Settings
    from safehub.run.hfcache import listing_bytes
    from safehub.sources.oci import place
    from safehub.sources.oci.artifact import WEIGHTS_URL, parse_manifest

    entry = _locked_snapshot(hub, isolated, target, capsys).entries[SPEC]
    commit = hub.repos["acme/tiny"].refs["main"]
    pins = {w.url: w for w in entry.weights}
    assert set(pins) == {LISTING, "hf://acme/tiny@main/config.json", KEY}
    assert all(w.commit == commit for w in pins.values())
    listed = listing_bytes(["config.json", "model.safetensors"])
    assert pins[LISTING].sha256 == hashlib.sha256(listed).hexdigest()
    registry_ = place(target, Settings.from_env().transport())
    snap = parse_manifest(registry_.manifest(entry.oci), entry.oci, target)  # type: ignore[attr-defined]
    layers = {(d.annotations or {})[WEIGHTS_URL]: d for d in snap.weights}
    assert layers[LISTING].digest == f"sha256:{pins[LISTING].sha256}"  # the listing's layer
    cache = _hub_node(tmp_path, monkeypatch, target, "snapnode")
    server.clear_log()
    before = len(hub.log)
    assert safehub.load(SPEC, "snap", verbose=False) == ["config.json", "model.safetensors"]
    assert len(hub.log) == before  # not the listing, not a file: the Hub was not asked
    assert server.requests_log == []
    storage = cache / "models--acme--tiny"
    assert (storage / ".safehub" / f"{commit}.json").read_bytes() == listed
    assert (storage / "refs" / "main").read_text() == commit
    assert safehub.load(SPEC, "snap", verbose=False) == ["config.json", "model.safetensors"]
    assert len(hub.log) == before  # warm


def test_a_registry_that_lies_about_the_listing_leaves_nothing_in_the_hub_cache(
        hub: HubStandIn, isolated: Path, target: str, registry,  # type: ignore[no-untyped-def]  # noqa: F811
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    entry = _locked_snapshot(hub, isolated, target, capsys).entries[SPEC]
    pin = next(w for w in entry.weights if w.url == LISTING)
    data = _blob_data(registry, f"sha256:{pin.sha256}")
    honest = data.read_bytes()
    try:
        data.write_bytes(b'["config.json", "evil.bin", "model.safetensors"]\n')
        cache = _hub_node(tmp_path, monkeypatch, target, "liar")
        before = len(hub.log)
        with pytest.raises(SafehubError) as e:
            safehub.load(SPEC, "snap", verbose=False)
        assert type(e.value).__name__ == "IntegrityError", e.value
        assert hub_cache_files(cache) == [] and len(hub.log) == before
    finally:
        data.write_bytes(honest)
