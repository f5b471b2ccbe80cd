"""Fleets through a real OCI registry (issue 19): publish, load by digest, air gaps.

The registry is CNCF Distribution as Debian ships it (``docker-registry serve``), with TLS
from the tests' throwaway CA and htpasswd auth, started once for the module
(tests/support/oci.py). Pushes go through ``safehub prefetch --oci``; loads through
``SAFEHUB_OCI`` reach no GitHub at all (the stand-in's request log stays empty).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import PinError
from safehub.store.lockfile import Lockfile
from tests.conftest import HubRepo, needs_torch
from tests.support import GitHubStandIn, TLSFiles
from tests.support.oci import PASSWORD, USER, DockerRegistry, docker_config, missing_tools

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture(scope="module")
def registry(tls: TLSFiles, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[DockerRegistry]:
    with DockerRegistry(tmp_path_factory.mktemp("registry"), tls) as reg:
        yield reg


@pytest.fixture
def logged_in(registry: DockerRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> DockerRegistry:
    """``docker login`` done for the registry (a DOCKER_CONFIG folder of the test's)."""
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "docker",
                                                          {registry.host: (USER, PASSWORD)})))
    return registry


def lockfile() -> Lockfile:
    return Lockfile.load(Path.cwd() / "safehub.lock")


def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oci: str, name: str = "node"
         ) -> Path:
    """Switch to a fresh node: its own empty cache and data, SAFEHUB_OCI set."""
    cache = tmp_path / name / "cache"
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(cache))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / name / "data"))
    monkeypatch.setenv("SAFEHUB_OCI", oci)
    return cache


def test_publish_then_load_by_digest_asks_github_nothing(
        hub_repo: HubRepo, logged_in: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    target = f"{logged_in.host}/team/hub"
    assert main(["prefetch", "--oci", target, "acme/models:v1.0"]) == 0
    entry = lockfile().entries["acme/models:v1.0"]
    assert entry.oci.startswith("sha256:") and entry.commit == hub_repo.sha
    assert entry.oci in capsys.readouterr().out

    node(tmp_path, monkeypatch, target)
    server.clear_log()
    prepared = safehub.Hub().prepare("acme/models:v1.0", trust_repo=True, verbose=False)
    assert (prepared.path / "hubconf.py").is_file()
    assert prepared.tree.digest == entry.digest
    assert server.requests_log == []  # zero requests to GitHub

    # `safehub lock` keeps the oci field; pushing the same snapshot again is the same digest.
    monkeypatch.delenv("SAFEHUB_OCI")
    assert main(["lock", "acme/models:v1.0"]) == 0
    assert lockfile().entries["acme/models:v1.0"].oci == entry.oci
    assert main(["lock", "--upgrade", "acme/models:v1.0"]) == 0
    assert lockfile().entries["acme/models:v1.0"].oci == entry.oci
    assert main(["prefetch", "--oci", target, "--json", "acme/models:v1.0"]) == 0
    assert lockfile().entries["acme/models:v1.0"].oci == entry.oci
    assert '"present"' in capsys.readouterr().out  # blobs already there are not sent again


def test_a_spec_not_in_the_lockfile_is_refused_with_the_fix(
        hub_repo: HubRepo, logged_in: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    target = f"{logged_in.host}/team/hub"
    node(tmp_path, monkeypatch, target)
    server.clear_log()
    with pytest.raises(PinError) as e:
        safehub.Hub().prepare("acme/models:v1.0", trust_repo=True, verbose=False)
    assert "not in the lockfile" in e.value.message
    assert "safehub prefetch --oci REGISTRY/REPOSITORY acme/models:v1.0" in str(e.value.hint)
    assert server.requests_log == []
    # The fix, applied literally where GitHub is reachable, makes the load work.
    monkeypatch.delenv("SAFEHUB_OCI")
    assert main(["prefetch", "--oci", target, "acme/models:v1.0"]) == 0
    node(tmp_path, monkeypatch, target, "node2")
    server.clear_log()
    assert safehub.Hub().prepare("acme/models:v1.0", trust_repo=True, verbose=False)
    assert server.requests_log == []


def test_without_credentials_the_registry_refuses_with_the_login_fix(
        hub_repo: HubRepo, registry: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty-docker"))
    assert main(["prefetch", "--oci", f"{registry.host}/team/hub", "acme/models:v1.0"]) == 1
    err = capsys.readouterr().err
    assert f"{registry.host}/team/hub answered 401" in err
    assert f"docker login {registry.host}" in err


def test_air_gap_layout_export_skopeo_copy_import_and_load(
        hub_repo: HubRepo, logged_in: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed (apt-get install skopeo)")
    target = f"{logged_in.host}/team/hub"
    assert main(["prefetch", "--oci", target, "acme/models:v1.0"]) == 0
    digest = lockfile().entries["acme/models:v1.0"].oci
    layout = tmp_path / "layout"
    # Exported from the registry (SAFEHUB_OCI), checked against the lockfile's digest.
    monkeypatch.setenv("SAFEHUB_OCI", target)
    server.clear_log()
    assert main(["oci", "export", "--lockfile", "safehub.lock", str(layout)]) == 0
    assert server.requests_log == []
    assert (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).is_file()

    # A node loads straight from the folder...
    node(tmp_path, monkeypatch, f"oci:{layout}", "gapped")
    server.clear_log()
    assert safehub.Hub().prepare("acme/models:v1.0", trust_repo=True, verbose=False)
    assert server.requests_log == []

    # ... skopeo carries it into another repository by digest (what admins do) ...
    certs = tmp_path / "certs"
    certs.mkdir()
    shutil.copy(logged_in.tls.ca_cert, certs / "ca.crt")
    copied = f"{logged_in.host}/gapped/hub"
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-cert-dir", str(certs),
                    "--dest-creds", f"{USER}:{PASSWORD}", f"oci:{layout}:acme-models-v1.0",
                    f"docker://{copied}:acme-models-v1.0"], check=True, capture_output=True,
                   env={**os.environ, "HOME": str(tmp_path)})
    node(tmp_path, monkeypatch, copied, "skopeo-node")
    assert safehub.Hub().prepare("acme/models:v1.0", trust_repo=True, verbose=False)

    # ... and `safehub oci import` pushes a layout to a registry as well.
    imported = f"{logged_in.host}/imported/hub"
    assert main(["oci", "import", str(layout), imported]) == 0
    node(tmp_path, monkeypatch, imported, "import-node")
    assert safehub.Hub().prepare("acme/models:v1.0", trust_repo=True, verbose=False)
    assert server.requests_log == []


def stored(registry: DockerRegistry, count: int) -> None:
    """Wait (bounded) until ``registry`` has committed ``count`` blobs to its storage: a
    proxy stores what it served in the background."""
    import threading
    import time

    blobs = registry.root / "data/docker/registry/v2/blobs"
    deadline = time.monotonic() + 60
    while len(list(blobs.rglob("data"))) < count:
        assert time.monotonic() < deadline, "the cache never stored the blobs"
        threading.Event().wait(0.05)


def test_through_a_pull_through_cache_each_blob_leaves_the_origin_once(
        hub_repo: HubRepo, tls: TLSFiles, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An anonymous origin (pushed to without credentials) and a second docker-registry in
    proxy mode in front of it: nodes load through the cache, and the origin serves each
    blob once. (Distribution 2.8's proxy did not pass htpasswd credentials upstream here:
    "unauthorized: authentication required" although its challenge was Basic.)"""
    env = {**os.environ, "SSL_CERT_FILE": str(tls.ca_cert)}  # the proxy trusts the origin
    with DockerRegistry(tmp_path / "origin", tls, auth=False) as origin:
        target = f"{origin.host}/team/hub"
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-login"))
        assert main(["prefetch", "--oci", target, "acme/models:v1.0"]) == 0
        proxy = DockerRegistry(tmp_path / "proxy", tls, auth=False, proxy_of=origin)
        proxy.start(env)
        try:
            server.clear_log()
            pulled = []
            for i in range(3):
                before = origin.blob_gets()
                node(tmp_path, monkeypatch, f"{proxy.host}/team/hub", f"cached-node{i}")
                prepared = safehub.Hub().prepare("acme/models:v1.0", trust_repo=True,
                                                 verbose=False)
                assert (prepared.path / "hubconf.py").is_file()
                pulled.append(origin.blob_gets() - before)
                if i == 0:
                    stored(proxy, 2)  # the manifest, the archive (the config is known
                    # by its digest in the pinned manifest: never fetched)
            assert server.requests_log == []
            # The first node's pull fills the cache (Distribution 2.8 may ask the origin for
            # a blob twice then: once to serve, once to store); once the cache has stored
            # it, later nodes reach the origin for no blob at all.
            assert 1 <= pulled[0] <= 2 and pulled[1:] == [0, 0]
        finally:
            proxy.stop()


def test_chunked_uploads_and_mounts_from_another_repository(
        hub_repo: HubRepo, logged_in: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A blob over the chunk size goes up in PATCH chunks; one already in another repository
    of the registry is mounted, not sent again; loads read both."""
    from safehub.sources.oci import Registry, Target
    from safehub.sources.oci import registry as client
    from safehub.sources.oci.artifact import Descriptor, sha256
    from safehub.sources.transport import Transport

    monkeypatch.setattr(client, "CHUNK", 1000)
    blob = os.urandom(2500)
    digest = sha256(blob)
    hub = safehub.Hub()
    chunked = Registry(Transport(hub.settings.transport_config()),
                       Target.parse(f"{logged_in.host}/chunks/a"), push=True)
    assert chunked.push_blob(blob, digest, len(blob)) == "chunked"
    assert chunked.push_blob(blob, digest, len(blob)) == "present"
    other = Registry(Transport(hub.settings.transport_config()),
                     Target.parse(f"{logged_in.host}/chunks/b"), push=True)
    assert other.push_blob(blob, digest, len(blob), mount_from="chunks/a") == "mounted"
    assert other.blob_bytes(Descriptor("application/octet-stream", digest, len(blob))) == blob


def test_a_release_asset_signature_travels_in_the_snapshot(
        logged_in: DockerRegistry, server: GitHubStandIn, tmp_path: Path, isolated: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy requires a key signature found as a release asset: it is pushed as its own
    layer, and a node verifies it from the snapshot, asking GitHub nothing."""
    import json

    import requests

    from tests.test_release_assets import Released
    from tests.test_signed_load import policy

    released = Released(tmp_path, server)
    policy(isolated, released.rule())
    target = f"{logged_in.host}/team/signed"
    assert main(["prefetch", "--oci", target, "acme/released:v2.0"]) == 0
    digest = lockfile().entries["acme/released:v2.0"].oci
    manifest = requests.get(f"https://{logged_in.host}/v2/team/signed/manifests/{digest}",
                            auth=(USER, PASSWORD), verify=str(server.ca_cert), timeout=30,
                            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    layers = json.loads(manifest.content)["layers"]
    assert [la["mediaType"] for la in layers] == [
        "application/vnd.safehub.archive.v1.zip", "application/vnd.dev.sigstore.bundle.v0.3+json"]

    node(tmp_path, monkeypatch, target, "signed-node")
    server.clear_log()
    prepared = safehub.Hub().prepare("acme/released:v2.0", trust_repo=True, verbose=False)
    assert prepared.signature.startswith("verified (key ")
    assert server.requests_log == []


def test_plain_http_only_for_a_loopback_registry_a_policy_names(
        hub_repo: HubRepo, tls: TLSFiles, server: GitHubStandIn, tmp_path: Path,
        isolated: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_signed_load import policy

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-login"))
    with DockerRegistry(tmp_path / "plain", tls, plain=True) as plain:
        target = f"http://{plain.host}/team/hub"
        # Named without http://: the TLS failure says what works (issue 33, 7), which the
        # rest of this test applies.
        assert main(["prefetch", "--oci", f"{plain.host}/team/hub", "acme/models:v1.0"]) == 1
        err = capsys.readouterr().err
        assert f'add oci = ["{target}"] to [safehub] in your policy file' in err, err
        assert f"--oci {target}" in err
        # Not named by a policy: refused, with the fix.
        assert main(["prefetch", "--oci", target, "acme/models:v1.0"]) == 2
        assert "add oci = " in capsys.readouterr().err
        monkeypatch.setenv("SAFEHUB_OCI", target)
        with pytest.raises(safehub.SpecError, match="only a policy file"):
            safehub.Hub()
        monkeypatch.delenv("SAFEHUB_OCI")
        # Named by the policy: pushed, and nodes with that policy load over plain HTTP.
        policy(isolated, f'[safehub]\noci = ["{target}"]\n\n[[allow]]\nrepo = "acme/*"\n')
        monkeypatch.setenv("SAFEHUB_OCI", "")  # the policy's list
        assert main(["prefetch", "--oci", target, "acme/models:v1.0"]) == 0
        node(tmp_path, monkeypatch, "", "plain-node")
        monkeypatch.delenv("SAFEHUB_OCI")
        server.clear_log()
        prepared = safehub.Hub().prepare("acme/models:v1.0", trust_repo=True, verbose=False)
        assert (prepared.path / "hubconf.py").is_file()
        assert server.requests_log == []


NODE = """
import sys, safehub
safehub.load("acme/models:v1.0", "tiny", trust_repo=True, verbose=False)
print(sorted(m for m in ("requests", "urllib3", "cryptography.x509", "safehub.sources.oci",
                         "safehub.verify.gitattributes", "safehub.run.hfhub",
                         "safehub.verify.signatures.snapshot") if m in sys.modules))
"""


@needs_torch  # the node's load hands the verified tree to torch's own loader
def test_a_fleet_node_and_its_warm_load_import_no_requests(
        hub_repo: HubRepo, logged_in: DockerRegistry, server: GitHubStandIn, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """safehub's transport speaks urllib3 itself: a node's cold load from the registry,
    its fleet signature required and checked with the key, then a warm load, each in a
    fresh process, never import requests (a dependency for sigstore's keyless checks), nor
    cryptography's x509 (a key needs none), nor the ``.gitattributes`` checks (the
    snapshot's tree is the commit's), nor the Hub files code (its code downloads nothing
    from the Hub); the warm load makes no OCI source. A node whose policy asks for no
    fleet signature imports no signature check."""
    import sys

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.conftest import child_pythonpath

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "fleet.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tmp_path / "fleet.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    target = f"{logged_in.host}/team/fleet"
    assert main(["prefetch", "--oci", target, "--sign-key", str(tmp_path / "fleet.pem"),
                 "acme/models:v1.0"]) == 0
    (tmp_path / "require.toml").write_text(
        f'[oci]\nsignature = "required"\nkeys = ["{tmp_path / "fleet.pub"}"]\n')
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())
    server.clear_log()

    def imported() -> str:
        done = subprocess.run([sys.executable, "-c", NODE], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[-1]

    node(tmp_path, monkeypatch, target, "unsigned-node")  # no policy asks for a signature
    assert imported() == "['safehub.sources.oci', 'urllib3']"
    node(tmp_path, monkeypatch, target)
    monkeypatch.setenv("SAFEHUB_POLICY", str(tmp_path / "require.toml"))
    # Cold, from the registry, the signature checked; the archive is the commit's tree
    # exactly: no attribute checks.
    assert imported() == "['safehub.sources.oci', 'safehub.verify.signatures.snapshot', 'urllib3']"
    assert imported() == "[]"  # warm: no request, no source made at all
    assert server.requests_log == []
