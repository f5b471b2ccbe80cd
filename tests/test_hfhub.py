"""Hugging Face Hub files a repo's code downloads with huggingface_hub (``hf_hub_download``,
``snapshot_download``) are held like torch.hub's helpers: the policy's ``weights`` patterns,
the revision pinned to its commit, the bytes checked against the Hub's LFS oid and the pin,
every hop's host, offline, and nothing bad left in the Hub cache. The real huggingface_hub
client runs against a loopback Hub stand-in (tests/support/hfhub.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import safehub
from safehub.errors import FetchError, IntegrityError, NotFoundError, OfflineError, PolicyDenied
from tests.helpers_load import policy
from tests.support import TLSFiles
from tests.support.hfhub import HubStandIn, hub_cache_files

hf = pytest.importorskip("huggingface_hub")

HUBCONF = '''\
from huggingface_hub import hf_hub_download, snapshot_download

dependencies = ["torch"]


def tiny(repo="acme/tiny", revision="main", filename="model.safetensors"):
    """Load weights from the Hub, as timm's load_pretrained does."""
    from safetensors.torch import load_file

    return load_file(hf_hub_download(repo, filename, revision=revision))


def via_api(repo="acme/tiny"):
    """HfApi's method, which calls hf_hub_download (bound in hf_api at import time)."""
    from huggingface_hub import HfApi

    return open(HfApi().hf_hub_download(repo, "config.json")).read()


def snap(repo="acme/tiny"):
    """A whole snapshot: the file names in it."""
    import os

    folder = snapshot_download(repo)
    return sorted(os.listdir(folder))
'''


def _weights(value: float) -> bytes:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save

    return save({"w": torch.full((2,), value)})


@pytest.fixture
def hub(tls: TLSFiles, isolated: Path, monkeypatch: pytest.MonkeyPatch,
        make_hub_repo) -> Iterator[HubStandIn]:  # type: ignore[no-untyped-def]
    from huggingface_hub import constants

    with HubStandIn(tls) as standin:
        cache = isolated / "hf" / "hub"
        monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
        monkeypatch.setenv("HF_HOME", str(isolated / "hf"))
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        # huggingface_hub reads its environment once, when imported
        monkeypatch.setattr(constants, "ENDPOINT", standin.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            standin.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        for name in ("HF_TOKEN", "HF_OIDC_RESOURCE"):  # never the user's own token
            monkeypatch.delenv(name, raising=False)
        for name in ("HF_TOKEN_PATH", "HF_STORED_TOKENS_PATH"):
            monkeypatch.setattr(constants, name, str(isolated / "hf" / name.lower()))
        standin.commit("acme/tiny", {"model.safetensors": _weights(1.0),
                                     "config.json": b'{"n": 2}\n'})
        make_hub_repo("acme", "hubby", {"hubconf.py": HUBCONF})
        policy(isolated, _rule("hf://acme/tiny", standin))
        yield standin
        assert not standin.errors


def _rule(pattern: str, hub: HubStandIn) -> str:
    """The hubby repo may fetch ``pattern`` and the loopback CDN's LFS files (not a Hub
    CDN host: a weights pattern allows it)."""
    return (f"[[allow]]\nrepo = 'acme/hubby'\nweights = ['{pattern}', "
            f"'{hub.cdn}/lfs/*']\n")


def _cache(isolated: Path) -> Path:
    return isolated / "hf" / "hub"


def _load(entry: str = "tiny", **kwargs: object) -> object:
    return safehub.load("acme/hubby:v1.0", entry, verbose=False, **kwargs)


def test_an_allowed_hub_file_loads_pinned_to_its_commit(hub: HubStandIn, isolated: Path) -> None:
    state = _load()
    assert state["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    # only the file asked for, through safehub: no request of the library's own
    assert [r.path.split("/")[3] for r in hub.requests()] == ["resolve", "resolve"]
    pins = json.loads(next(isolated.rglob("weights/pins.json")).read_text())
    pin = pins["hf://acme/tiny@main/model.safetensors"]
    assert pin["commit"] == hub.repos["acme/tiny"].refs["main"]
    assert pin["sha256"] == next(iter(hub.blobs))
    # the Hub cache is huggingface_hub's own layout: its cache-only lookup finds the file
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache("acme/tiny", "model.safetensors")
    assert isinstance(found, str) and Path(found).is_file()


def test_a_warm_load_makes_no_request_to_the_hub(hub: HubStandIn) -> None:
    _load()
    before = len(hub.log)
    assert _load()["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    assert len(hub.log) == before


def test_a_repo_the_patterns_do_not_name_is_refused_before_any_request(
        hub: HubStandIn, isolated: Path) -> None:
    hub.commit("evil/other", {"model.safetensors": _weights(9.0)})
    with pytest.raises(PolicyDenied, match="hf://evil/other") as e:
        _load(repo="evil/other")
    assert "hf://evil/other" in str(e.value.fix)
    assert hub.log == []


@pytest.mark.parametrize("pattern", ["hf://acme/tiny/*", "hf://acme/*",
                                     "{endpoint}/acme/tiny/*"])
def test_each_written_form_of_a_hub_repo_allows_it(hub: HubStandIn, isolated: Path,
                                                   pattern: str) -> None:
    policy(isolated, _rule(pattern.format(endpoint=hub.endpoint), hub))
    assert _load()["w"].tolist() == [1.0, 1.0]  # type: ignore[index]


def test_a_hf_pattern_must_name_a_repo(hub: HubStandIn, isolated: Path) -> None:
    from safehub.errors import PolicyError

    policy(isolated, "[[allow]]\nrepo = 'acme/hubby'\nweights = ['hf://acme']\n")
    with pytest.raises(PolicyError, match="hf://org/name"):
        _load()


def test_a_moved_revision_keeps_the_pinned_commit(hub: HubStandIn, isolated: Path) -> None:
    _load()
    hub.commit("acme/tiny", {"model.safetensors": _weights(2.0)})  # main moves
    for p in _cache(isolated).rglob("*"):  # even cold: fetched by the pinned commit
        if p.is_symlink():
            p.unlink()
    assert _load()["w"].tolist() == [1.0, 1.0]  # type: ignore[index]


def test_a_pinned_commit_that_is_gone_is_a_clear_error(hub: HubStandIn, isolated: Path) -> None:
    _load()
    old = hub.repos["acme/tiny"].refs["main"]
    hub.commit("acme/tiny", {"model.safetensors": _weights(2.0)})
    hub.forget("acme/tiny", old)
    for p in _cache(isolated).rglob("*"):
        if p.is_symlink():
            p.unlink()
    with pytest.raises(NotFoundError, match=f"no longer has acme/tiny at the commit {old}"):
        _load()


def test_bytes_that_disagree_with_the_lfs_oid_are_refused_and_not_kept(
        hub: HubStandIn, isolated: Path) -> None:
    oid = next(iter(hub.blobs))
    hub.tamper[oid] = _weights(6.0)
    with pytest.raises(IntegrityError, match="LFS sha256") as e:
        _load()
    assert e.value.fix is not None
    assert [f for f in hub_cache_files(_cache(isolated)) if "blobs" in f
            or "snapshots" in f] == []


def test_a_file_that_differs_from_its_pin_is_refused_and_removed(
        hub: HubStandIn, isolated: Path) -> None:
    _load()
    link = next(p for p in _cache(isolated).rglob("model.safetensors"))
    blob = link.resolve()
    blob.chmod(0o644)
    blob.write_bytes(_weights(5.0))  # swapped in the Hub cache
    with pytest.raises(IntegrityError, match="pinned"):
        _load()
    assert not link.is_symlink() and not blob.exists()


def test_a_truncated_download_is_refused(hub: HubStandIn, isolated: Path) -> None:
    hub.cut = 10
    with pytest.raises(FetchError, match="cut short") as e:
        _load()
    assert e.value.fix is not None
    assert [f for f in hub_cache_files(_cache(isolated)) if "snapshots" in f
            or "blobs" in f] == []


def test_an_oversized_download_is_refused(hub: HubStandIn, isolated: Path) -> None:
    hub.extra = b"x" * 4096
    with pytest.raises(IntegrityError, match="larger than"):
        _load()
    assert [f for f in hub_cache_files(_cache(isolated)) if "blobs" in f] == []


def test_a_cdn_redirect_to_an_unallowed_host_is_refused(hub: HubStandIn, isolated: Path) -> None:
    hub.redirect_to = f"https://127.0.0.5:{hub.endpoint.rsplit(':', 1)[1]}/lfs/x"
    with pytest.raises(PolicyDenied, match="redirect"):
        _load()
    assert not any(r.host == "127.0.0.5" for r in hub.log)


def test_the_loopback_cdn_loads_when_a_weights_pattern_allows_it(
        hub: HubStandIn, isolated: Path) -> None:
    assert hub.requests() == []
    _load()
    assert any(r.path.startswith("/lfs/") for r in hub.requests("127.0.0.6"))


def test_offline_serves_the_cache_and_refuses_what_it_lacks(
        hub: HubStandIn, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    assert "tiny" in safehub.list("acme/hubby:v1.0")  # the code cached, no Hub file
    for offline in ("SAFEHUB_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(offline, "1")
        with pytest.raises(OfflineError, match="not in the Hub cache"):
            _load()
        monkeypatch.delenv(offline)
    assert constants.HF_HUB_OFFLINE is False  # as it was before the load
    assert hub.log == []
    _load()
    before = len(hub.log)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert _load()["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    assert len(hub.log) == before


def test_safehub_offline_is_the_librarys_offline_while_the_code_runs(
        hub: HubStandIn, make_hub_repo, isolated: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    make_hub_repo("acme", "asks", {"hubconf.py": "import os\ndependencies = []\n\n"
                                   "def asks():\n"
                                   "    from huggingface_hub import constants\n"
                                   "    return constants.HF_HUB_OFFLINE, "
                                   "os.environ.get('HF_HUB_OFFLINE')\n"})
    policy(isolated, _rule("hf://acme/tiny", hub).replace("acme/hubby", "acme/asks"))
    assert safehub.load("acme/asks:v1.0", "asks", verbose=False) == (False, None)
    monkeypatch.setenv("SAFEHUB_OFFLINE", "1")
    assert safehub.load("acme/asks:v1.0", "asks", verbose=False) == (True, "1")
    assert constants.HF_HUB_OFFLINE is False and "HF_HUB_OFFLINE" not in os.environ


def test_snapshot_download_is_held_file_by_file(hub: HubStandIn, isolated: Path) -> None:
    assert _load("snap") == ["config.json", "model.safetensors"]
    pins = json.loads(next(isolated.rglob("weights/pins.json")).read_text())
    assert {"hf://acme/tiny@main/", "hf://acme/tiny@main/config.json",
            "hf://acme/tiny@main/model.safetensors"} <= set(pins)  # the listing is pinned
    before = len(hub.log)
    assert _load("snap") == ["config.json", "model.safetensors"]
    assert len(hub.log) == before  # warm: the pinned listing and files, nothing asked


def test_a_snapshot_after_one_file_has_every_file(hub: HubStandIn) -> None:
    _load()
    assert _load("snap") == ["config.json", "model.safetensors"]


def test_a_kept_listing_that_changed_is_refused_and_removed(hub: HubStandIn,
                                                            isolated: Path) -> None:
    _load("snap")
    kept = next(_cache(isolated).rglob(".safehub/*.json"))
    kept.write_text('["config.json", "model.safetensors", "evil.bin"]\n')
    with pytest.raises(IntegrityError, match="pinned"):
        _load("snap")
    assert not kept.exists()


def test_outside_a_load_huggingface_hub_is_its_own(hub: HubStandIn, isolated: Path) -> None:
    """The routing stays after a load; outside one, the library's own client downloads
    (from the stand-in, which so speaks what that client expects)."""
    import inspect
    import ssl

    import httpx2  # huggingface_hub's own HTTP client
    from huggingface_hub import file_download, set_client_factory, snapshot_download
    from huggingface_hub.utils._http import default_client_factory

    _load()
    assert inspect.unwrap(file_download.hf_hub_download).__code__.co_filename.startswith(
        "<safehub routing of huggingface_hub.file_download.hf_hub_download")
    trusting = ssl.create_default_context(cafile=str(hub.ca_cert))
    set_client_factory(lambda: httpx2.Client(verify=trusting, follow_redirects=True))
    try:
        before = len(hub.log)
        elsewhere = isolated / "elsewhere"
        got = file_download.hf_hub_download("acme/tiny", "model.safetensors",
                                            cache_dir=str(elsewhere))
        assert Path(got).read_bytes() == next(iter(hub.blobs.values()))
        folder = snapshot_download("acme/tiny", cache_dir=str(elsewhere))
        assert sorted(p.name for p in Path(folder).iterdir()) == ["config.json",
                                                                   "model.safetensors"]
        assert len(hub.log) > before  # the library's own requests, not safehub's pins
        assert "hf://acme/tiny@main/config.json" not in next(
            isolated.rglob("weights/pins.json")).read_text()
    finally:
        set_client_factory(default_client_factory)


def test_the_hub_token_goes_to_the_hub_only(hub: HubStandIn,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_loopback_token")
    _load()
    assert {r.authorization for r in hub.requests()} == {"Bearer hf_loopback_token"}
    cdn = hub.requests("127.0.0.6")
    assert cdn and {r.authorization for r in cdn} == {None}


def test_a_load_without_huggingface_hub_imports_nothing_of_it() -> None:
    """A load's stand-ins are in place without the library, nor safehub's Hub files code
    (imported at the first held call: see the tests above, each a load whose code calls)."""
    import subprocess
    import sys

    code = ("import sys, safehub.run.hfroute as h; from safehub.run.weights import WeightsGuard; "
            "assert sorted(h.handlers(WeightsGuard(repo='a/b'))) == sorted(h.HELD); "
            "assert not [m for m in sys.modules if m.startswith('huggingface_hub')], 'imported'; "
            "assert 'safehub.run.hfhub' not in sys.modules, 'hfhub'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_fresh_process_imports_the_hub_files_code_at_the_first_held_call(
        hub: HubStandIn, isolated: Path) -> None:
    """The first held call of a process imports safehub's Hub files code as safehub's own
    work, in enforce mode too: the file is held and pinned as in the tests above."""
    import subprocess
    import sys

    from tests.conftest import child_pythonpath

    policy(isolated, "[safehub]\nruntime = 'enforce'\n\n" + _rule("hf://acme/tiny", hub))
    code = ("import sys, huggingface_hub.hf_api, safehub  # its import starts ldconfig\n"
            "assert 'tiny' in safehub.list('acme/hubby:v1.0', verbose=False)  # code ran\n"
            "assert 'safehub.run.hfhub' not in sys.modules, 'imported before a call'\n"
            "print(safehub.load('acme/hubby:v1.0', 'tiny', verbose=False)['w'].tolist())\n"
            "assert 'safehub.run.hfhub' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": child_pythonpath()})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[1.0, 1.0]"
    assert "hf://acme/tiny@main/model.safetensors" in next(
        isolated.rglob("weights/pins.json")).read_text()


def test_a_dataset_repo_and_a_subfolder_have_their_own_keys(hub: HubStandIn,
                                                            isolated: Path) -> None:
    from safehub.run.hfhub import pin_key, written_forms

    key = pin_key("acme/data", "v1", "sub/a.bin", "dataset")
    assert key == "hf://datasets/acme/data@v1/sub/a.bin"
    assert written_forms(key, "https://huggingface.co") == (
        "hf://datasets/acme/data", "hf://datasets/acme/data/sub/a.bin",
        "https://huggingface.co/datasets/acme/data",
        "https://huggingface.co/datasets/acme/data/sub/a.bin")


@pytest.mark.parametrize("name", ["../x.safetensors", "a//b", "/abs", "sub/./w", "a%2fb",
                                  "a\\b"])
def test_a_file_path_that_is_not_plain_is_refused_before_any_request(
        hub: HubStandIn, name: str) -> None:
    with pytest.raises(PolicyDenied, match="plain relative paths"):
        _load(filename=name)
    assert hub.log == []


def test_the_lockfiles_commit_pins_the_revision_on_a_fresh_machine(
        hub: HubStandIn, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.cli import main

    monkeypatch.chdir(isolated)
    _load()
    old = hub.repos["acme/tiny"].refs["main"]
    assert main(["lock", "acme/hubby:v1.0"]) == 0
    lock = isolated / "safehub.lock"
    key = "hf://acme/tiny@main/model.safetensors"
    text = lock.read_text()
    assert f'url = "{key}"' in text and f'commit = "{old}"' in text  # `lock` carries both
    assert "size = " in text
    next(isolated.rglob("weights/pins.json")).unlink()  # another machine: no records,
    for p in _cache(isolated).rglob("*"):  # no Hub cache
        if p.is_symlink():
            p.unlink()
    hub.commit("acme/tiny", {"model.safetensors": _weights(2.0)})  # and main moved
    assert _load()["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    assert not any("/resolve/main/" in r.path for r in hub.log[-2:])


def test_a_file_the_hub_lacks_is_the_librarys_own_error_too(hub: HubStandIn) -> None:
    """transformers' from_pretrained probes optional files and catches the library's error."""
    from huggingface_hub.errors import EntryNotFoundError

    with pytest.raises(NotFoundError) as e:
        _load(filename="adapter_config.json")
    assert isinstance(e.value, EntryNotFoundError) and e.value.fix is not None


def test_safehubs_own_hub_work_passes_the_runtime_guard_in_enforce_mode(
        hub: HubStandIn, isolated: Path) -> None:
    policy(isolated, "[safehub]\nruntime = 'enforce'\n\n" + _rule("hf://acme/tiny", hub))
    assert _load()["w"].tolist() == [1.0, 1.0]  # type: ignore[index]
    assert _load("snap") == ["config.json", "model.safetensors"]


def test_a_small_file_that_disagrees_with_its_git_blob_id_is_refused(
        hub: HubStandIn, isolated: Path) -> None:
    hub.tamper_small["config.json"] = b'{"n": 3}\n'
    with pytest.raises(IntegrityError, match="git blob id"):
        _load(filename="config.json")
    assert [f for f in hub_cache_files(_cache(isolated)) if "blobs" in f
            or "snapshots" in f] == []


def test_a_hub_whose_lfs_oid_disagrees_with_the_pin_is_refused_before_downloading(
        hub: HubStandIn, isolated: Path) -> None:
    _load()
    sha = hub.repos["acme/tiny"].refs["main"]
    other = _weights(7.0)
    hub.repos["acme/tiny"].commits[sha]["model.safetensors"] = other  # history rewritten
    hub.blobs[hashlib.sha256(other).hexdigest()] = other
    for p in _cache(isolated).rglob("*"):
        if p.is_symlink():
            p.unlink()
    cdn_before = len(hub.requests("127.0.0.6"))
    with pytest.raises(IntegrityError, match="LFS oid.*nothing was downloaded"):
        _load()
    assert len(hub.requests("127.0.0.6")) == cdn_before


@pytest.mark.parametrize(("call", "refused"), [
    ("hf_hub_download('acme/tiny', 'model.safetensors', endpoint='https://127.0.0.5')",
     "not the one configured"),
    ("hf_hub_download('acme/tiny', 'model.safetensors', dry_run=True)", "dry run"),
])
def test_a_call_safehub_cannot_hold_is_refused(hub: HubStandIn, make_hub_repo, isolated: Path,
                                                call: str, refused: str) -> None:
    make_hub_repo("acme", "odd", {"hubconf.py": "from huggingface_hub import hf_hub_download\n"
                                  f"dependencies = []\n\ndef odd():\n    return {call}\n"})
    policy(isolated, _rule("hf://acme/tiny", hub).replace("acme/hubby", "acme/odd"))
    with pytest.raises(PolicyDenied, match=refused):
        safehub.load("acme/odd:v1.0", "odd", verbose=False)
    assert hub.log == []


def test_hfapis_download_method_is_held_too(hub: HubStandIn, isolated: Path) -> None:
    assert _load("via_api") == '{"n": 2}\n'
    pins = json.loads(next(isolated.rglob("weights/pins.json")).read_text())
    assert "hf://acme/tiny@main/config.json" in pins


def test_a_module_imported_again_is_routed_again(hub: HubStandIn) -> None:
    import importlib
    import inspect
    import sys

    _load()
    fresh = sys.modules.pop("huggingface_hub._snapshot_download")
    try:
        again = importlib.import_module("huggingface_hub._snapshot_download")
        assert again is not fresh
        assert inspect.unwrap(again.snapshot_download).__code__.co_filename.startswith(
            "<safehub routing of huggingface_hub._snapshot_download")
    finally:
        sys.modules["huggingface_hub._snapshot_download"] = fresh


def test_lock_check_asks_the_hub_whether_a_pinned_listing_still_answers(
        hub: HubStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.cli import main

    _load("snap")
    assert main(["lock", "acme/hubby:v1.0"]) == 0
    capsys.readouterr()

    def listing_state() -> tuple[int, dict[str, object]]:
        code = main(["lock", "--check", "--json"])
        files = json.loads(capsys.readouterr().out)["weights"]
        return code, next(f for f in files if f["url"] == "hf://acme/tiny@main/")

    code, state = listing_state()
    assert code == 0 and (state["state"], state["how"]) == ("ok", "listing"), state
    moved = hub.commit("acme/tiny", {"model.safetensors": _weights(1.0),
                                     "config.json": b'{"n": 2}\n', "extra.bin": b"x"})
    code, state = listing_state()
    assert code == 1 and state["state"] == "moved" and state["now_commit"] == moved, state
