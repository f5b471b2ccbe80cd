"""Fleet snapshots carry their weights (issue 31, item 6).

``safehub prefetch --oci`` pushes each file the lock entry pins as a layer whose digest is
the pin; a node with ``SAFEHUB_OCI`` loads the code and the weights from the registry
(CNCF Distribution as Debian ships it, tests/support/oci.py), with no request to the
loopback GitHub that also serves the weights. A registry that lies about a layer, lacks it
or serves it oversized is refused, nothing is left in torch's checkpoint folder, and the
fix it prints works. ``oci export``/``import`` carry the layers (and skopeo copies them).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import SafehubError
from safehub.sources.oci.artifact import WEIGHTS_TYPE, WEIGHTS_URL, parse_manifest
from safehub.store.lockfile import Lockfile
from tests.helpers_load import policy
from tests.support import GitHubStandIn, TLSFiles
from tests.support.oci import PASSWORD, USER, DockerRegistry, docker_config, missing_tools

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))

WEIGHTED = '''\
import torch

dependencies = ["torch"]


def weighted(url):
    """Load a state dict from url."""
    return torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")


def fetched(url):
    """Download url with download_url_to_file and return its bytes."""
    import os
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "f.bin")
    torch.hub.download_url_to_file(url, path, progress=False)
    with open(path, "rb") as f:
        return f.read()
'''
SPEC = "acme/weighted:v1.0"


@pytest.fixture(scope="module")
def registry(tls: TLSFiles, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[DockerRegistry]:
    with DockerRegistry(tmp_path_factory.mktemp("registry"), tls) as reg:
        yield reg


@pytest.fixture
def target(registry: DockerRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> str:
    """A repository of the registry, logged in (a DOCKER_CONFIG of the test's own)."""
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "docker",
                                                          {registry.host: (USER, PASSWORD)})))
    return f"{registry.host}/team/{tmp_path.name.lower().replace('_', '-')[-40:]}"


@pytest.fixture
def weights(server: GitHubStandIn, make_hub_repo, isolated: Path) -> str:  # type: ignore[no-untyped-def]
    """A repo whose entrypoint loads a state dict from a weights URL on the loopback host,
    the policy allowing that folder; the URL."""
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buf)
    server.add_static("/weights/good.pth", buf.getvalue())
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    base = server.api_url.rsplit("/api", 1)[0]
    policy(isolated, f"[[allow]]\nrepo = 'acme/weighted'\nweights = ['{base}/weights/*']\n")
    return f"{base}/weights/good.pth"


def _published(target: str, url: str, capsys: pytest.CaptureFixture[str]) -> Lockfile:
    """The weights loaded once (pinned), locked, and pushed with the snapshot."""
    safehub.load(SPEC, "weighted", url, trust_repo=True, verbose=False)
    assert main(["lock", SPEC]) == 0
    assert main(["prefetch", "--oci", target, SPEC]) == 0
    capsys.readouterr()
    return Lockfile.load(Path("safehub.lock"))


def _node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oci: str, name: str) -> Path:
    """A fresh node: its own cache, data and torch dir, SAFEHUB_OCI set; its checkpoints."""
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(tmp_path / name / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / name / "data"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / name / "torch"))
    monkeypatch.setenv("SAFEHUB_OCI", oci)
    return tmp_path / name / "torch" / "hub" / "checkpoints"


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_node_loads_code_and_weights_from_the_registry_and_nothing_else(
        weights: str, target: str, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lock = _published(target, weights, capsys)
    entry = lock.entries[SPEC]
    (pin,) = entry.weights
    assert pin.url == weights and entry.oci
    checkpoints = _node(tmp_path, monkeypatch, target, "node")
    server.clear_log()
    import safehub.run.weights as weights_module

    def read_back(path: Path) -> str:
        raise AssertionError(f"{path} was read back: a layer is hashed as it streams")

    monkeypatch.setattr(weights_module, "sha256_of", read_back)
    state = safehub.load(SPEC, "weighted", weights, trust_repo=True, verbose=False)
    assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert server.requests_log == []  # neither GitHub nor the weights host was asked
    import hashlib

    assert hashlib.sha256((checkpoints / "w.pth").read_bytes()).hexdigest() == pin.sha256
    # download_url_to_file is served from the snapshot too, for the same pinned URL.
    assert hashlib.sha256(safehub.load(SPEC, "fetched", weights, trust_repo=True,
                                       verbose=False)).hexdigest() == pin.sha256
    assert server.requests_log == []


def test_the_manifest_names_each_pinned_file_by_its_pin(
        weights: str, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.config import Settings
    from safehub.sources.oci import place

    entry = _published(target, weights, capsys).entries[SPEC]
    registry = place(target, Settings.from_env().transport())
    snap = parse_manifest(registry.manifest(entry.oci), entry.oci, target)  # type: ignore[attr-defined]
    (layer,) = snap.weights
    assert layer.media_type == WEIGHTS_TYPE
    assert layer.digest == f"sha256:{entry.weights[0].sha256}"
    assert (layer.annotations or {})[WEIGHTS_URL] == weights
    # The same entry pushed again is the same manifest (canonical, the pin decides).
    assert main(["prefetch", "--oci", target, SPEC]) == 0
    assert Lockfile.load(Path("safehub.lock")).entries[SPEC].oci == entry.oci


def _blob_data(registry: DockerRegistry, digest: str) -> Path:
    hexd = digest.removeprefix("sha256:")
    return registry.root / "data/docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


@pytest.mark.parametrize("lie", ["other-bytes", "oversized", "missing"])
def test_a_registry_that_lies_about_a_weights_layer_is_refused_and_leaves_nothing(
        lie: str, weights: str, target: str, registry: DockerRegistry, server: GitHubStandIn,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    entry = _published(target, weights, capsys).entries[SPEC]
    # Each test pushes to a repository of its own, but blobs are stored once per registry:
    # the lie is told for this test's bytes only (a state dict of its own).
    data = _blob_data(registry, f"sha256:{entry.weights[0].sha256}")
    honest = data.read_bytes()
    try:
        if lie == "other-bytes":
            data.write_bytes(honest[:-1] + bytes([honest[-1] ^ 1]))
        elif lie == "oversized":
            data.write_bytes(honest + b"\0" * 4096)
        else:
            data.unlink()
        checkpoints = _node(tmp_path, monkeypatch, target, f"node-{lie}")
        server.clear_log()
        with pytest.raises(SafehubError) as e:
            safehub.load(SPEC, "weighted", weights, trust_repo=True, verbose=False)
        assert e.value.fix is not None
        assert _leftovers(checkpoints) == []  # nothing, not even a partial file
        assert server.requests_log == []
        if lie != "missing":
            assert type(e.value).__name__ == "IntegrityError", e.value
            assert "Remove it from SAFEHUB_OCI" in str(e.value.hint)
            # The fix: without the lying registry the node loads from the pinned URL.
            monkeypatch.delenv("SAFEHUB_OCI")
            state = safehub.load(SPEC, "weighted", weights, trust_repo=True, verbose=False)
            assert list(state) == ["w"]
        else:
            # The fix: push the snapshot again; the missing blob is uploaded again.
            monkeypatch.delenv("SAFEHUB_OCI")
            assert main(["prefetch", "--oci", target, SPEC]) == 0
            _node(tmp_path, monkeypatch, target, "node-after")
            assert list(safehub.load(SPEC, "weighted", weights, trust_repo=True,
                                     verbose=False)) == ["w"]
    finally:
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_bytes(honest)


def test_a_layout_whose_weights_blob_was_swapped_is_refused_and_export_mends_it(
        weights: str, target: str, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    entry = _published(target, weights, capsys).entries[SPEC]
    layout = tmp_path / "layout"
    assert main(["oci", "export", str(layout)]) == 0
    blob = layout / "blobs" / "sha256" / entry.weights[0].sha256
    assert blob.is_file()
    good = blob.read_bytes()
    blob.write_bytes(b"x" * len(good))
    checkpoints = _node(tmp_path, monkeypatch, f"oci:{layout}", "gapped")
    server.clear_log()
    with pytest.raises(SafehubError) as e:
        safehub.load(SPEC, "weighted", weights, trust_repo=True, verbose=False)
    assert "holds other bytes" in e.value.message
    assert _leftovers(checkpoints) == []
    assert "safehub oci export --lockfile FILE DIR" in str(e.value.hint)
    # The fix, applied where the weights are reachable: the blob is written again.
    monkeypatch.delenv("SAFEHUB_OCI")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home" / "data"))
    assert main(["oci", "export", str(layout)]) == 0
    assert blob.read_bytes() == good
    _node(tmp_path, monkeypatch, f"oci:{layout}", "gapped2")
    server.clear_log()
    assert list(safehub.load(SPEC, "weighted", weights, trust_repo=True,
                             verbose=False)) == ["w"]
    assert server.requests_log == []


def test_export_import_and_skopeo_carry_the_weights_layers(
        weights: str, target: str, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    entry = _published(target, weights, capsys).entries[SPEC]
    layout = tmp_path / "layout"
    monkeypatch.setenv("SAFEHUB_OCI", target)  # exported from the registry alone
    server.clear_log()
    assert main(["oci", "export", str(layout)]) == 0
    assert server.requests_log == []
    assert (layout / "blobs" / "sha256" / entry.weights[0].sha256).is_file()
    monkeypatch.delenv("SAFEHUB_OCI")
    other = target + "-copy"
    capsys.readouterr()
    assert main(["oci", "import", "--json", str(layout), other]) == 0
    assert json.loads(capsys.readouterr().out)["entries"][0]["manifest"] == entry.oci
    checkpoints = _node(tmp_path, monkeypatch, other, "imported")
    server.clear_log()
    assert list(safehub.load(SPEC, "weighted", weights, trust_repo=True,
                             verbose=False)) == ["w"]
    assert server.requests_log == [] and (checkpoints / "w.pth").is_file()
    if shutil.which("skopeo") is None:
        return
    copied = tmp_path / "skopeo"
    from safehub.fleet import tag_for

    subprocess.run(["skopeo", "copy", "--all", f"oci:{layout}:{tag_for(entry.spec)}",
                    f"oci:{copied}:x"], check=True, capture_output=True)
    assert (copied / "blobs" / "sha256" / entry.weights[0].sha256).is_file()


def test_a_snapshot_without_the_file_falls_back_to_the_pinned_url(
        weights: str, target: str, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot pushed before the file was pinned does not carry it: the node downloads
    it from its URL, held to the pin as any load is."""
    assert main(["prefetch", "--oci", target, SPEC]) == 0  # locked with no weights yet
    safehub.load(SPEC, "weighted", weights, trust_repo=True, verbose=False)
    assert main(["lock", SPEC]) == 0  # keeps the oci digest, adds the pin
    entry = Lockfile.load(Path("safehub.lock")).entries[SPEC]
    assert entry.weights and entry.oci
    _node(tmp_path, monkeypatch, target, "older")
    server.clear_log()
    assert list(safehub.load(SPEC, "weighted", weights, trust_repo=True,
                             verbose=False)) == ["w"]
    assert [r.path for r in server.requests_log] == ["/weights/good.pth"]


def test_a_publisher_whose_file_changed_at_its_url_pushes_nothing(
        weights: str, target: str, server: GitHubStandIn, isolated: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without a local copy the publisher fetches each pinned file from its URL, and other
    bytes than the pin stop the push before anything reaches the registry."""
    safehub.load(SPEC, "weighted", weights, trust_repo=True, verbose=False)
    assert main(["lock", SPEC]) == 0
    for f in isolated.rglob("w.pth"):
        f.unlink()  # no local copy: the publisher asks the URL
    server.add_static("/weights/good.pth", b"not the pinned bytes")
    capsys.readouterr()
    assert main(["prefetch", "--oci", target, SPEC]) == 1
    err = capsys.readouterr().err
    assert "IntegrityError" in err and "nothing was pushed" in err
    assert not Lockfile.load(Path("safehub.lock")).entries[SPEC].oci
    # The publisher's file back at its URL: the push goes through, with the file as a layer.
    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buf)
    server.add_static("/weights/good.pth", buf.getvalue())
    assert main(["prefetch", "--oci", target, SPEC]) == 0
    assert Lockfile.load(Path("safehub.lock")).entries[SPEC].oci
