"""Locked mode (``SAFEHUB_LOCKED=1``, ``[safehub] locked = true``, ``--locked``): whatever a
load runs or fetches through a held path must be pinned in the lockfile, and is refused
with a ``PinError`` before a byte of it is fetched; nothing is pinned on first use. Each
case has the refusal and the locked load that works, on the loopback GitHub.
"""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import IntegrityError, PinError
from safehub.policy import Policy
from tests.helpers_load import policy
from tests.support import GitHubStandIn

WEIGHTED = '''\
import torch

dependencies = ["torch"]


def weighted(url):
    """Load a state dict from url."""
    return torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")


def fetch(url, path):
    """Download url to path."""
    torch.hub.download_url_to_file(url, path, progress=False)
    return path
'''

FALLBACK = '''\
import torch

dependencies = ["torch"]


def fallback(url, path):
    """Download url to path; if that fails, fetch it another way (as yolov5's
    safe_download falls back to curl)."""
    try:
        torch.hub.download_url_to_file(url, path, progress=False)
    except Exception:
        with open(path, "wb") as f:
            f.write(b"fetched another way")
    return open(path, "rb").read()
'''

OUTER = '''\
import torch

dependencies = ["torch"]


def outer(spec):
    """Load another hub repo."""
    return torch.hub.load(spec, "echo", "nested")
'''


@pytest.fixture
def weights(server: GitHubStandIn, make_hub_repo, isolated: Path,  # type: ignore[no-untyped-def]
            monkeypatch: pytest.MonkeyPatch) -> str:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    buf = io.BytesIO()
    torch.save({"w": torch.ones(1)}, buf)
    server.add_static("/weights/good.pth", buf.getvalue())
    server.add_static("/weights/new.pth", buf.getvalue())
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    base = server.api_url.rsplit("/api", 1)[0]
    policy(isolated, f"[[allow]]\nrepo = 'acme/weighted'\nweights = ['{base}/weights/*']\n")
    return f"{base}/weights/good.pth"


def _locked_with_weights(url: str) -> None:
    """The honest path: load once, lock (the user's pin goes into the lockfile entry)."""
    safehub.load("acme/weighted:v1.0", "weighted", url, verbose=False)
    assert main(["lock", "acme/weighted:v1.0"]) == 0
    assert url in Path("safehub.lock").read_text()


def test_the_locked_key_merges_as_any_true_and_reads_the_environment() -> None:
    on = Policy.from_text("[safehub]\nlocked = true\n", "/etc/xdg/safehub/policy.toml",
                          origin="site")
    assert on.setting("locked").value is True
    from safehub.policy.schema import parse_text

    site = parse_text("[safehub]\nlocked = true\n", "/site.toml", origin="site")
    user = parse_text("[safehub]\nlocked = false\n", "/user.toml", origin="user")
    assert Policy.from_files([site, user]).setting("locked").value is True  # cannot turn off
    from safehub.config import Settings

    assert Settings.from_env({"SAFEHUB_LOCKED": "1"}).locked
    assert not Settings.from_env({}).locked
    assert Settings.from_env({}, policy=on).locked
    assert Settings.from_env({"SAFEHUB_LOCKED": "0"}, policy=on).locked
    with pytest.warns(UserWarning, match="cannot turn it off"):
        held = safehub.Hub(policy=on, locked=False)
    assert held.settings.locked


def test_locked_mode_refuses_an_unlocked_spec_before_any_request(
        weights: str, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEHUB_LOCKED", "1")
    before = len(server.requests_log)
    with pytest.raises(PinError, match="not locked") as err:
        safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert "SAFEHUB_LOCKED=1" in err.value.message
    assert len(server.requests_log) == before  # not even the ref was asked
    command = err.value.fix.command  # type: ignore[union-attr]
    assert command == "safehub lock acme/weighted:v1.0"
    assert main(shlex.split(command)[1:]) == 0  # the fix works: then the code is admitted
    assert safehub.list("acme/weighted:v1.0", verbose=False) == ["fetch", "weighted"]


def test_locked_mode_refuses_a_weights_url_the_entry_does_not_pin(
        weights: str, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch,
        isolated: Path) -> None:
    assert main(["lock", "acme/weighted:v1.0"]) == 0  # the code only: no weights pinned
    monkeypatch.setenv("SAFEHUB_LOCKED", "1")
    with pytest.raises(PinError, match="does not pin it") as err:
        safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert not any(r.path.startswith("/weights/") for r in server.requests_log)
    assert not list(isolated.rglob("w.pth"))  # nothing in torch's checkpoint folder
    pins = isolated / "data" / "safehub" / "weights" / "pins.json"
    assert not pins.exists() or weights not in pins.read_text()  # no trust on first use
    assert err.value.fix.command == (  # type: ignore[union-attr]
        "safehub lock acme/weighted:v1.0 --entrypoint weighted")


def test_a_locked_load_of_pinned_weights_works_and_a_new_url_is_refused(
        weights: str, server: GitHubStandIn, monkeypatch: pytest.MonkeyPatch,
        isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _locked_with_weights(weights)
    for f in isolated.rglob("w.pth"):
        f.unlink()  # a fresh machine's checkpoint folder
    monkeypatch.setenv("SAFEHUB_LOCKED", "1")
    capsys.readouterr()
    state = safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert list(state) == ["w"]
    assert "pinned the weights" not in capsys.readouterr().err
    other = weights.replace("good.pth", "new.pth")
    target = isolated / "new.pth"
    with pytest.raises(PinError, match="new.pth"):
        safehub.load("acme/weighted:v1.0", "fetch", other, str(target), verbose=False)
    assert not target.exists()
    assert not any(r.path == "/weights/new.pth" for r in server.requests_log)


def test_the_cli_locked_flag_holds_load_list_and_help(
        weights: str, capsys: pytest.CaptureFixture[str]) -> None:
    for words in (["load", "acme/weighted:v1.0", "weighted", "--args", json.dumps([weights])],
                  ["list", "acme/weighted:v1.0"], ["help", "acme/weighted:v1.0", "weighted"]):
        capsys.readouterr()
        assert main([*words, "--locked"]) == 1, words
        err = capsys.readouterr().err
        assert "locked mode: --locked" in err and "safehub lock acme/weighted:v1.0" in err
    assert main(["lock", "acme/weighted:v1.0"]) == 0
    assert main(["list", "acme/weighted:v1.0", "--locked"]) == 0
    assert "weighted" in capsys.readouterr().out


def test_locked_mode_refuses_a_nested_repo_that_is_not_locked(
        make_hub_repo, isolated: Path, server: GitHubStandIn,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    make_hub_repo("acme", "outer", {"hubconf.py": OUTER})
    make_hub_repo("other", "inner")
    policy(isolated, "[[allow]]\nrepo = 'acme/outer'\n[[allow]]\nrepo = 'other/inner'\n")
    assert main(["lock", "acme/outer:v1.0"]) == 0
    monkeypatch.setenv("SAFEHUB_LOCKED", "1")
    asked = len(server.requests_log)
    with pytest.raises(PinError, match="other/inner:v1.0 is not locked") as err:
        safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    assert not any("inner" in r.path for r in server.requests_log[asked:])
    assert "safehub lock other/inner:v1.0" in str(err.value)
    assert main(["lock", "other/inner:v1.0"]) == 0
    result = safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    assert result == (("nested",), {})


def test_safehub_run_locked_passes_locked_mode_to_the_job(
        weights: str, isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    code = "import os, sys; sys.exit(0 if os.environ.get('SAFEHUB_LOCKED') == '1' else 3)"
    assert main(["run", "--locked", "--", sys.executable, "-c", code]) == 0
    assert main(["run", "--", sys.executable, "-c", code]) == 3


def test_check_says_what_a_locked_load_would_do(
        weights: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEHUB_LOCKED", "1")
    assert main(["check", "acme/weighted:v1.0", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["error"] == "PinError" and "not locked" in report["why"]
    monkeypatch.delenv("SAFEHUB_LOCKED")
    assert main(["lock", "acme/weighted:v1.0"]) == 0
    monkeypatch.setenv("SAFEHUB_LOCKED", "1")
    capsys.readouterr()
    assert main(["check", "acme/weighted:v1.0", "--json"]) == 0


def test_a_refusal_the_repo_catches_still_fails_the_load(
        weights: str, server: GitHubStandIn, make_hub_repo,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch, isolated: Path) -> None:
    """A repo that catches the refusal and fetches the file another way (yolov5's
    ``safe_download`` falls back to ``curl``) gets no model out of the load: an unpinned
    URL in locked mode (PinError) and bytes that are not the pinned ones (IntegrityError)
    are final."""
    make_hub_repo("acme", "fallback", {"hubconf.py": FALLBACK})
    target = isolated / "fetched.bin"
    # The honest case: the pinned file loads, the fallback never runs.
    assert safehub.load("acme/fallback:v1.0", "fallback", weights, str(target),
                        trust_repo=True, verbose=False).startswith(b"PK")
    assert main(["lock", "acme/fallback:v1.0"]) == 0
    monkeypatch.setenv("SAFEHUB_LOCKED", "1")
    other = weights.replace("good.pth", "new.pth")
    with pytest.raises(PinError, match="new.pth"):
        safehub.load("acme/fallback:v1.0", "fallback", other, str(isolated / "x.bin"),
                     trust_repo=True, verbose=False)
    assert (isolated / "x.bin").read_bytes() == b"fetched another way"  # it ran, and failed
    server.add_static("/weights/good.pth", b"other bytes at the pinned URL")
    target.unlink()
    with pytest.raises(IntegrityError, match="good.pth"):
        safehub.load("acme/fallback:v1.0", "fallback", weights, str(target),
                     trust_repo=True, verbose=False)
    assert target.read_bytes() == b"fetched another way"
    # The repo's own error after it caught the refusal: the refusal is what the load says.
    make_hub_repo("acme", "gives-up", {"hubconf.py": FALLBACK.replace(
        'f.write(b"fetched another way")', 'raise RuntimeError("the other way failed too")')})
    assert main(["lock", "acme/gives-up:v1.0"]) == 0
    with pytest.raises(PinError, match="new.pth") as err:
        safehub.load("acme/gives-up:v1.0", "fallback", other, str(isolated / "y.bin"),
                     trust_repo=True, verbose=False)
    assert "the other way failed too" in str(err.value.__cause__)
