"""Consent covers the weights: a consent record binds (repo, commit, content digest) and
the weights pinned for the repo when it was given. A pinned file whose pin changed (the
lockfile's, or the user's own records re-pinned) asks again on a terminal, naming the file
and both digests, and is refused where nobody can be asked, with a fix that works. Records
written before weights were bound stay valid. Real torch, a loopback HTTPS weights host,
a real pseudo-terminal.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
from pathlib import Path

import pexpect
import pytest

import safehub
from safehub.cli import main
from safehub.errors import UntrustedRepoError
from tests.conftest import child_pythonpath
from tests.support import GitHubStandIn

WEIGHTED = '''\
import torch

dependencies = ["torch"]


def weighted(url):
    """Load a state dict from url."""
    return torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")
'''

SPEC = "acme/weighted:v1.0"


def _checkpoint(value: float) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.full((1,), value)}, buf)
    return buf.getvalue()


@pytest.fixture
def setup(server: GitHubStandIn, make_hub_repo, isolated: Path,  # type: ignore[no-untyped-def]
          monkeypatch: pytest.MonkeyPatch) -> tuple[str, bytes, bytes]:
    """A repo trusted by consent (no policy rule admits it), its weights pinned in the
    lockfile and bound to the consent; then its publisher's new file, pinned anew in the
    lockfile (a reviewed change)."""
    pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    old, new = _checkpoint(1.0), _checkpoint(2.0)
    server.add_static("/weights/w.pth", old)
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    url = f"{server.api_url.rsplit('/api', 1)[0]}/weights/w.pth"
    assert main(["trust", SPEC]) == 0
    safehub.load(SPEC, "weighted", url, verbose=False)  # pinned on first use
    assert main(["lock", SPEC]) == 0
    safehub.load(SPEC, "weighted", url, verbose=False)  # the pin joins the consent
    consent = _consent_file(isolated)
    assert json.loads(consent.read_text())["consents"][0]["weights"] == {
        url: hashlib.sha256(old).hexdigest()}
    server.add_static("/weights/w.pth", new)
    lockfile = Path("safehub.lock")
    lockfile.write_text(lockfile.read_text().replace(hashlib.sha256(old).hexdigest(),
                                                     hashlib.sha256(new).hexdigest()))
    for f in isolated.rglob("w.pth"):
        f.unlink()
    return url, old, new


def _consent_file(isolated: Path) -> Path:
    return next((isolated / "data").rglob("trust/acme/weighted.json"))


def test_a_changed_weights_pin_is_refused_in_ci_with_a_fix_that_works(
        setup: tuple[str, bytes, bytes], server: GitHubStandIn) -> None:
    url, old, new = setup
    asked = len(server.requests_log)
    with pytest.raises(UntrustedRepoError) as err:
        safehub.load(SPEC, "weighted", url, verbose=False)
    message = err.value.message
    assert url in message and hashlib.sha256(old).hexdigest() in message
    assert hashlib.sha256(new).hexdigest() in message
    assert not any(r.path == "/weights/w.pth" for r in server.requests_log[asked:])
    command = str(err.value).split("safehub trust ", 1)[1].split()[0]
    assert main(["trust", command]) == 0  # the fix, as printed
    state = safehub.load(SPEC, "weighted", url, verbose=False)
    assert state["w"].item() == 2.0


def test_the_same_pin_loads_without_asking_and_old_records_stay_valid(
        server: GitHubStandIn, make_hub_repo, isolated: Path,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    repo = make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    server.add_static("/weights/w.pth", _checkpoint(1.0))
    url = f"{server.api_url.rsplit('/api', 1)[0]}/weights/w.pth"
    assert main(["trust", SPEC]) == 0
    consent = _consent_file(isolated)
    data = json.loads(consent.read_text())
    for item in data["consents"]:
        item.pop("weights", None)  # as safehub wrote it before weights were bound
    consent.write_text(json.dumps(data))
    assert safehub.load(SPEC, "weighted", url, verbose=False)["w"].item() == 1.0
    assert safehub.load(SPEC, "weighted", url, verbose=False)["w"].item() == 1.0
    assert json.loads(consent.read_text())["consents"][0]["commit"] == repo.sha


CHILD = """
import sys, safehub
try:
    state = safehub.load(sys.argv[1], "weighted", sys.argv[2], verbose=False)
except safehub.UntrustedRepoError as e:
    print("REFUSED", e.message)
    sys.exit(1)
print("LOADED", float(state["w"][0]))
"""


@pytest.mark.parametrize("reply", ["y", "n"])
def test_a_changed_weights_pin_asks_again_on_a_terminal(
        setup: tuple[str, bytes, bytes], reply: str) -> None:
    url, old, new = setup
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    env.pop("CI", None)
    child = pexpect.spawn(sys.executable, ["-c", CHILD, SPEC, url], cwd=str(Path.cwd()),
                          env=env, encoding="utf-8", timeout=120)
    child.expect(r"\[y/N\] ")
    shown = re.sub(r"\s+", " ", child.before)
    assert f"weights {url} changed" in shown
    assert f"before sha256 {hashlib.sha256(old).hexdigest()}" in shown
    assert f"now sha256 {hashlib.sha256(new).hexdigest()}" in shown
    child.sendline(reply)
    child.expect(pexpect.EOF)
    child.close()
    out = str(child.before)
    assert ("LOADED 2.0" in out) if reply == "y" else ("REFUSED" in out)


def test_a_file_whose_removed_pin_the_consent_still_binds_must_be_that_file(
        server: GitHubStandIn, make_hub_repo, isolated: Path,  # type: ignore[no-untyped-def]
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The user removes their own pin (to take the publisher's new file): the consent still
    names the old digest, so the new file is refused before torch loads it, and the fix
    (trust again) lets the next load pin and bind the new one."""
    pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    old, new = _checkpoint(1.0), _checkpoint(2.0)
    server.add_static("/weights/w.pth", old)
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    url = f"{server.api_url.rsplit('/api', 1)[0]}/weights/w.pth"
    assert main(["trust", SPEC]) == 0
    safehub.load(SPEC, "weighted", url, verbose=False)
    safehub.load(SPEC, "weighted", url, verbose=False)  # the pin joins the consent
    pins = next((isolated / "data").rglob("weights/pins.json"))
    pins.write_text("{}")  # the user's own pin removed
    for f in isolated.rglob("w.pth"):
        f.unlink()
    server.add_static("/weights/w.pth", new)
    with pytest.raises(UntrustedRepoError, match=hashlib.sha256(old).hexdigest()) as err:
        safehub.load(SPEC, "weighted", url, verbose=False)
    assert not list(isolated.rglob("w.pth"))
    command = err.value.fix.command  # type: ignore[union-attr]
    assert command == f"safehub trust {SPEC}"
    assert main(command.split()[1:]) == 0
    assert safehub.load(SPEC, "weighted", url, verbose=False)["w"].item() == 2.0
    assert safehub.load(SPEC, "weighted", url, verbose=False)["w"].item() == 2.0
    assert json.loads(_consent_file(isolated).read_text())["consents"][0]["weights"] == {
        url: hashlib.sha256(new).hexdigest()}
