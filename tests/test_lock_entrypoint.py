"""``safehub lock SPEC --entrypoint NAME`` pins what the entrypoint fetches; ``lock --check``
asks each pinned file whether it still answers with its pin (issue 31, item 2).

The entrypoint runs once in a child ``safehub load`` against the loopback GitHub, whose
static files play the weights host; the Hugging Face Hub's answers (``X-Linked-Etag``,
``X-Linked-Size``, ``X-Repo-Commit`` on a ``resolve`` URL) are the stand-in's, through
``HF_ENDPOINT``.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import warnings
from pathlib import Path

import pytest

from safehub.cli import main
from safehub.run.confine import _landlock
from safehub.store.lockfile import Lockfile, WeightPin
from tests.helpers_load import policy
from tests.support import GitHubStandIn, Reply

WEIGHTED = '''\
import torch

dependencies = ["torch"]


def weighted(url, twice=False):
    """Load a state dict from url (and a second file beside it, with twice)."""
    state = torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")
    if twice:
        state.update(torch.hub.load_state_dict_from_url(url.replace("good", "more"),
                                                        progress=False, file_name="m.pth"))
    return state


def _tried(action):
    try:
        action()
    except OSError as e:
        return f"refused: {type(e).__name__}"
    return "done"


def sneaky(url, lockfile, pins):
    """The honest download, then writes straight into the lockfile and the user's pins."""
    state = weighted(url)
    forged = "\\n[[repo.weights]]\\nurl = 'https://evil.example/w.pth'\\n"
    return {"state": list(state), "lockfile": _tried(lambda: open(lockfile, "a").write(forged)),
            "pins": _tried(lambda: open(pins, "w").write("{}"))}


def forger(url, sha256, size, told=None):
    """The honest download, then a word of its own to safehub lock about what it fetched."""
    from safehub._internal import broker
    state = weighted(url)
    broker.ask({"op": "pinned", "url": told or url, "sha256": sha256, "size": size,
                "commit": ""})
    return state
'''
SPEC = "acme/weighted:v1.0"
needs_landlock = pytest.mark.skipif(
    _landlock.abi() < 4, reason=f"the kernel offers Landlock ABI {_landlock.abi()}; "
    "confinement needs 4 (Linux 6.7)")


@pytest.fixture
def weights(server: GitHubStandIn, make_hub_repo, isolated: Path) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    """URL -> bytes of two weights files on the loopback host, allowed by the policy."""
    torch = pytest.importorskip("torch")
    files = {}
    for name, value in (("good", 1.0), ("more", 2.0)):
        buf = io.BytesIO()
        torch.save({name: torch.full((3,), value)}, buf)
        server.add_static(f"/weights/{name}.pth", buf.getvalue())
        files[f"{server.api_url.rsplit('/api', 1)[0]}/weights/{name}.pth"] = buf.getvalue()
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    base = server.api_url.rsplit("/api", 1)[0]
    # The child runs confined (its [confine] rules): the loopback host's port is granted.
    policy(isolated, f"[confine]\nconnect_ports = [{server.port}]\n[[allow]]\n"
           f"repo = 'acme/weighted'\nweights = ['{base}/weights/*']\n")
    return files


def _lock(capsys: pytest.CaptureFixture[str], url: str, *more: str, entrypoint: str = "weighted",
          **kwargs: object) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = main(["lock", SPEC, "--entrypoint", entrypoint, "--json", "--trust", "--kwargs",
                 json.dumps({"url": url, **kwargs}), *more])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _pins() -> dict[str, WeightPin]:
    return {w.url: w for w in Lockfile.load(Path("safehub.lock")).entries[SPEC].weights}


def test_lock_runs_the_entrypoint_and_pins_url_size_and_digest_of_each_file(
        weights: dict[str, bytes], capsys: pytest.CaptureFixture[str]) -> None:
    good, more = list(weights)
    code, out = _lock(capsys, good, twice=True)
    assert code == 0, out
    pins = _pins()
    assert set(pins) == {good, more}
    for url, data in weights.items():
        assert pins[url].sha256 == hashlib.sha256(data).hexdigest()
        assert pins[url].size == len(data)
    fetched = out["fetched"]
    assert isinstance(fetched, dict) and fetched["entrypoint"] == "weighted"
    assert {w["url"] for w in fetched["weights"]} == {good, more}
    text = Path("safehub.lock").read_text()
    assert f"size = {len(weights[good])}" in text
    # The user's checkpoint folder was not used: the child had a torch dir of its own.
    assert not list(Path.cwd().rglob("w.pth"))


def test_a_file_that_changed_since_it_was_locked_is_refused_and_the_lockfile_kept(
        weights: dict[str, bytes], server: GitHubStandIn,
        capsys: pytest.CaptureFixture[str]) -> None:
    good = next(iter(weights))
    assert _lock(capsys, good)[0] == 0
    before = Path("safehub.lock").read_bytes()
    server.add_static("/weights/good.pth", weights[good] + b"swapped")
    code, out = _lock(capsys, good)
    assert code == 1
    assert out["error"] == "IntegrityError" and "nothing was pinned" in str(out["message"])
    assert Path("safehub.lock").read_bytes() == before
    # The honest case again: the publisher's file back, the lock runs through.
    server.add_static("/weights/good.pth", weights[good])
    assert _lock(capsys, good)[0] == 0


def test_a_download_the_policy_does_not_allow_is_refused_and_nothing_pinned(
        weights: dict[str, bytes], server: GitHubStandIn,
        capsys: pytest.CaptureFixture[str]) -> None:
    outside = f"{server.api_url.rsplit('/api', 1)[0]}/other/good.pth"
    server.add_static("/other/good.pth", next(iter(weights.values())))
    code, out = _lock(capsys, outside)
    assert code == 1 and out["error"] == "PolicyDenied", out
    assert "weights = [" in str(out["hint"])
    assert not _pins()


def test_kwargs_must_be_a_json_object(weights: dict[str, bytes],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", SPEC, "--entrypoint", "weighted", "--kwargs", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


# -- the child runs confined where the kernel allows -----------------------------------------


def _audit(isolated: Path) -> list[dict[str, object]]:
    log = isolated / "state" / "safehub" / "log" / "audit.jsonl"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@needs_landlock
def test_the_honest_entrypoint_is_locked_under_confinement(
        weights: dict[str, bytes], isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = next(iter(weights))
    code, out = _lock(capsys, good)
    assert code == 0, out
    assert _pins()[good].sha256 == hashlib.sha256(weights[good]).hexdigest()
    ran = [x for x in _audit(isolated) if x.get("decision") == "confine"]
    assert ran and ran[-1]["command"][1:4] == ["-m", "safehub", "load"], ran
    assert ran[-1]["confine"]["abi"] >= 4
    # Nothing the confined load checked reached the user's records: the parent pinned it.
    assert not (isolated / "data" / "safehub" / "weights" / "pins.json").exists()


@needs_landlock
def test_an_entrypoint_that_writes_the_lockfile_or_the_pins_itself_is_refused_by_the_kernel(
        weights: dict[str, bytes], isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = next(iter(weights))
    assert _lock(capsys, good)[0] == 0  # an entry to write into; the user's pins exist
    pins = isolated / "data" / "safehub" / "weights" / "pins.json"
    pins.parent.mkdir(parents=True, exist_ok=True)
    pins.write_text("{}")
    before, lockfile = pins.read_bytes(), Path("safehub.lock").resolve()
    capsys.readouterr()
    code = main(["lock", SPEC, "--entrypoint", "sneaky", "--json", "--trust", "--kwargs",
                 json.dumps({"url": good, "lockfile": str(lockfile), "pins": str(pins)})])
    assert code == 0, capsys.readouterr()
    assert "evil.example" not in lockfile.read_text()
    assert set(_pins()) == {good} and pins.read_bytes() == before
    loads = [x for x in _audit(isolated) if x.get("entrypoint") == "sneaky" and "runtime" in x]
    kernel = [k for x in loads for k in x["runtime"]["kernel"]]
    assert any(str(lockfile) in k for k in kernel) and any(str(pins) in k for k in kernel)


@needs_landlock
@pytest.mark.parametrize("lie", ["digest", "size"])
def test_what_the_child_says_it_fetched_is_asked_again_by_the_parent(
        lie: str, weights: dict[str, bytes], capsys: pytest.CaptureFixture[str]) -> None:
    good = next(iter(weights))
    data = weights[good]
    sha, size = hashlib.sha256(data).hexdigest(), len(data)
    told = {"sha256": "0" * 64, "size": size} if lie == "digest" else {"sha256": sha,
                                                                         "size": size + 1}
    code, out = _lock(capsys, good, entrypoint="forger", **told)
    assert code == 1 and out["error"] == "IntegrityError", out
    assert "asked again here" in str(out["message"]) and "nothing was pinned" in str(
        out["message"])
    assert not _pins()
    # The honest word is the pin the parent finds too.
    code, out = _lock(capsys, good, entrypoint="forger", sha256=sha, size=size)
    assert code == 0 and _pins()[good].sha256 == sha, out


@needs_landlock
def test_a_file_the_policy_does_not_allow_is_not_pinned_on_the_childs_word(
        weights: dict[str, bytes], server: GitHubStandIn,
        capsys: pytest.CaptureFixture[str]) -> None:
    good, data = next(iter(weights.items()))
    outside = f"{server.api_url.rsplit('/api', 1)[0]}/other/x.pth"
    server.add_static("/other/x.pth", data)  # true bytes, at a URL the policy does not allow
    code, out = _lock(capsys, good, entrypoint="forger", told=outside,
                      sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    assert code == 1 and out["error"] == "PolicyDenied", out
    assert not _pins()


@pytest.mark.parametrize("required", [False, True])
def test_where_the_kernel_cannot_confine_it_says_so_and_runs_as_a_load_would(
        required: bool, weights: dict[str, bytes], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from safehub.run.confine import _landlock

    monkeypatch.setattr(_landlock, "abi", lambda: 0)
    if required:
        monkeypatch.setenv("SAFEHUB_CONFINE", "1")
    good = next(iter(weights))
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        code = main(["lock", SPEC, "--entrypoint", "weighted", "--trust", "--kwargs",
                     json.dumps({"url": good})])
    err = capsys.readouterr().err
    if required:  # as safehub run refuses it: never silently unconfined
        assert code == 1 and "ConfineError" in err and "has no Landlock" in err, err
        assert not _pins()
    else:
        assert code == 0, err
        assert any("has no Landlock" in str(w.message) and "runs unconfined" in
                   str(w.message) for w in said), [str(w.message) for w in said]
        assert _pins()[good].sha256 == hashlib.sha256(weights[good]).hexdigest()


# -- lock --check asks each pinned file -------------------------------------------------------


def _check(capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, object]]]:
    capsys.readouterr()
    code = main(["lock", "--check", "--json"])
    return code, json.loads(capsys.readouterr().out)["weights"]


def test_check_by_download_where_the_server_gives_no_digest(
        weights: dict[str, bytes], server: GitHubStandIn,
        capsys: pytest.CaptureFixture[str]) -> None:
    good = next(iter(weights))
    assert _lock(capsys, good)[0] == 0
    code, files = _check(capsys)
    assert code == 0 and [(f["state"], f["how"]) for f in files] == [("ok", "download")]
    server.add_static("/weights/good.pth", b"other bytes")
    code, files = _check(capsys)
    assert code == 1 and files[0]["state"] == "changed"
    assert files[0]["now_sha256"] == hashlib.sha256(b"other bytes").hexdigest()
    assert "safehub lock --upgrade" in str(files[0]["fix"])


@pytest.mark.parametrize("header", ["Repr-Digest", "Digest", "x-amz-checksum-sha256"])
def test_check_by_header_where_the_server_gives_a_digest(
        header: str, weights: dict[str, bytes], server: GitHubStandIn,
        capsys: pytest.CaptureFixture[str]) -> None:
    import base64

    good = next(iter(weights))
    assert _lock(capsys, good)[0] == 0

    def said(data: bytes) -> str:
        b64 = base64.b64encode(hashlib.sha256(data).digest()).decode()
        return {"Repr-Digest": f"sha-256=:{b64}:", "Digest": f"SHA-256={b64}",
                "x-amz-checksum-sha256": b64}[header]

    def head(digest_of: bytes) -> Reply:
        return Reply(200, weights[good], ((header, said(digest_of)),))  # HEAD: no body

    with server.intercept(lambda r: r.method == "HEAD" and r.path == "/weights/good.pth",
                          head(weights[good])):
        server.clear_log()
        code, files = _check(capsys)
        assert code == 0 and [(f["state"], f["how"]) for f in files] == [("ok", "header")]
        assert not [r for r in server.requests_log if r.method == "GET" and
                    r.path == "/weights/good.pth"]  # nothing downloaded
    with server.intercept(lambda r: r.method == "HEAD" and r.path == "/weights/good.pth",
                          head(b"something else")):
        code, files = _check(capsys)
        assert code == 1 and files[0]["state"] == "changed" and files[0]["how"] == "header"


def _hub_pin(commit: str) -> WeightPin:
    data = b"safetensors bytes"
    return WeightPin("hf://acme/tiny@main/model.safetensors", hashlib.sha256(data).hexdigest(),
                     len(data), commit)


def test_check_asks_the_hub_for_its_lfs_digest_and_whether_the_revision_moved(
        weights: dict[str, bytes], server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from safehub._internal.frozen import replace

    good = next(iter(weights))
    assert _lock(capsys, good)[0] == 0
    commit = "c" * 40
    pin = _hub_pin(commit)
    lock = Lockfile.load(Path("safehub.lock"))
    entry = lock.entries[SPEC]
    lock.put(replace(entry, weights=(pin,)))
    lock.save()
    endpoint = server.api_url.rsplit("/api", 1)[0] + "/hf"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported by an earlier test: it read its endpoint then
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    resolve = "/hf/acme/tiny/resolve/main/model.safetensors"

    def hub(etag: str, at: str) -> Reply:
        return Reply(302, b"", (("Location", f"{endpoint}/cdn/x"), ("X-Repo-Commit", at),
                                ("X-Linked-Etag", f'"{etag}"'),
                                ("X-Linked-Size", str(pin.size))))

    with server.intercept(resolve, hub(pin.sha256, commit)):
        code, files = _check(capsys)
    assert code == 0 and [(f["state"], f["how"]) for f in files] == [("ok", "header")]
    with server.intercept(resolve, hub(pin.sha256, "d" * 40)):
        code, files = _check(capsys)
    assert code == 1 and files[0]["state"] == "moved" and files[0]["now_commit"] == "d" * 40
    with server.intercept(resolve, hub("e" * 64, commit)):
        code, files = _check(capsys)
    assert code == 1 and files[0]["state"] == "changed"
    capsys.readouterr()
    with server.intercept(resolve, hub("e" * 64, commit)):
        assert main(["lock", "--check"]) == 1
    assert "CHANGED hf://acme/tiny@main/model.safetensors" in capsys.readouterr().out


def test_a_program_under_safehub_run_that_imports_safehub_before_torch_loads(
        weights: dict[str, bytes], capfd: pytest.CaptureFixture[str]) -> None:
    """torch.hub's first import happens inside safehub's routing, where ``safehub run``'s
    import hook routes it too: the copy kept of torch's own ``load`` is torch's code, not a
    trampoline that dispatches back to safehub for ever (a RecursionError before)."""
    good = next(iter(weights))
    program = (f"import safehub; state = safehub.load({SPEC!r}, 'weighted', url={good!r}, "
               "trust_repo=True, verbose=False); print(sorted(state))")
    capfd.readouterr()
    assert main(["run", "--", sys.executable, "-c", program]) == 0, capfd.readouterr().err
    assert "['good']" in capfd.readouterr().out
