"""The weights guard on the URL: a download the repo's code asks for (torch.hub's
``load_state_dict_from_url`` and ``download_url_to_file``) goes only where the policy's
``weights`` key allows. Every redirect hop is matched against the policy and never drops to
plain http; dot segments and encoded separators cannot step out of the folder a rule
names. Each case has the attack refused and the allowed URL loading, on the loopback GitHub.

Pinned weight digests, swapped weight files and pickles: tests/test_signed_load.py.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import safehub
from safehub.errors import FetchError, PolicyDenied, SafehubError
from tests.helpers_load import policy
from tests.support import GitHubStandIn, Reply

# -- every redirect hop is matched against the policy, never http ----------------------------

WEIGHTED = '''\
import torch

dependencies = ["torch"]


def weighted(url):
    """Load a state dict from url."""
    return torch.hub.load_state_dict_from_url(url, progress=False, file_name="w.pth")
'''


@pytest.fixture
def weights(server: GitHubStandIn, make_hub_repo, isolated: Path):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"w": torch.ones(1)}, buf)
    server.add_static("/weights/good.pth", buf.getvalue())
    server.add_static("/other/good.pth", buf.getvalue())
    make_hub_repo("acme", "weighted", {"hubconf.py": WEIGHTED})
    policy(isolated, "[[allow]]\nrepo = 'acme/weighted'\n"
           f"weights = ['{server.api_url.rsplit('/api', 1)[0]}/weights/*']\n")
    return f"{server.api_url.rsplit('/api', 1)[0]}/weights/good.pth"


def test_an_allowed_weights_url_loads(weights: str) -> None:
    state = safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert list(state) == ["w"]


def test_the_weights_safehub_fetched_for_the_repo_are_in_its_report(
        weights: str, server: GitHubStandIn, isolated: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from safehub.cli import main

    hub = safehub.Hub()
    hub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    report = hub.last_report
    assert report is not None and report.fetched == [weights]
    host = weights.split("/")[2]
    assert f"{host}:443" in report.hosts or host in report.hosts
    audit = [json.loads(line) for line in
             next(isolated.rglob("audit.jsonl")).read_text().splitlines()]
    assert weights in audit[-1]["runtime"]["fetched"] and audit[-1]["runtime"]["hosts"]
    Path(hub.settings.data_dir, "weights", "pins.json").unlink()  # a fresh download
    for f in Path(isolated).rglob("w.pth"):
        f.unlink()
    capsys.readouterr()
    assert main(["load", "acme/weighted:v1.0", "weighted", "--args", json.dumps([weights]),
                 "--report"]) == 0
    out = capsys.readouterr().out
    import re

    assert re.search(r"safehub fetched +" + re.escape(weights), out), out
    assert "connected to           -" not in out


def test_a_new_weight_pin_goes_to_the_users_records_and_says_how_to_lock_it(
        weights: str, isolated: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.cli import main

    monkeypatch.setenv("CI", "true")
    assert main(["lock", "acme/weighted:v1.0"]) == 0
    lockfile = Path("safehub.lock")
    before = lockfile.read_bytes()
    capsys.readouterr()
    safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    err = capsys.readouterr().err
    assert lockfile.read_bytes() == before  # a load never changes the tracked lockfile
    pins = Path(safehub.Hub().settings.data_dir, "weights", "pins.json")
    assert f"pinned the weights {weights}" in err and str(pins) in err
    command = err.split("`")[1]
    assert command == "safehub lock acme/weighted:v1.0"
    assert main(command.split()[1:]) == 0  # the printed command, as printed
    assert "[[repo.weights]]" in lockfile.read_text() and weights in lockfile.read_text()
    safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert "pinned the weights" not in capsys.readouterr().err  # said once, when new


@pytest.mark.parametrize("target", ["foreign", "path", "http"])
def test_a_weights_redirect_outside_the_policy_is_refused(
    weights: str, server: GitHubStandIn, target: str
) -> None:
    location = {
        "foreign": f"{server.foreign_url}/weights/good.pth",
        "path": weights.replace("/weights/", "/other/"),
        "http": weights.replace("https://", "http://"),
    }[target]
    server.intercept("/weights/good.pth", Reply.redirect(location))
    with pytest.raises(SafehubError) as err:
        safehub.load("acme/weighted:v1.0", "weighted", weights, verbose=False)
    assert isinstance(err.value, PolicyDenied | FetchError)
    assert not any(r.path == "/other/good.pth" or r.host == server.host("foreign")
                   for r in server.requests_log)


# -- a weights URL cannot step out of the folder a rule names ---------------------------------

FETCHES = '''\
import os
import tempfile

import torch

dependencies = ["torch"]


def fetch(url):
    """Download url and return its bytes."""
    path = os.path.join(tempfile.mkdtemp(), "w.pth")
    torch.hub.download_url_to_file(url, path, progress=False)
    with open(path, "rb") as f:
        return f.read()
'''


@pytest.fixture
def shared_host(server: GitHubStandIn, make_hub_repo, isolated: Path) -> str:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    server.add_static("/acme/good.pth", b"good weights")
    server.add_static("/mallory/evil.pth", b"evil weights")
    make_hub_repo("acme", "models", {"hubconf.py": FETCHES})
    host = server.foreign_url
    policy(isolated, f"[[allow]]\nrepo = 'acme/models'\nweights = ['{host}/acme/**']\n")
    return host


@pytest.mark.parametrize("path", ["acme/../mallory/evil.pth", "acme/%2e%2e/mallory/evil.pth",
                                  "acme/%2E%2e/mallory/evil.pth", "acme/./../mallory/evil.pth",
                                  "acme/.%2E/mallory/evil.pth",
                                  "acme/x%2F..%2F..%2Fmallory/evil.pth",
                                  "acme/x%5c..%5cmallory/evil.pth"])
def test_a_dot_segment_in_a_weights_url_is_refused(shared_host: str, server: GitHubStandIn,
                                                   path: str) -> None:
    with pytest.raises(PolicyDenied, match="path segments"):  # the URL reader or the guard
        safehub.load("acme/models:v1.0", "fetch", f"{shared_host}/{path}", verbose=False)
    assert not any("mallory" in r.path for r in server.requests_log)


def test_a_weights_url_inside_the_folder_loads(shared_host: str) -> None:
    got = safehub.load("acme/models:v1.0", "fetch", f"{shared_host}/acme/good.pth",
                       verbose=False)
    assert got == b"good weights"


def test_a_warm_code_cold_weights_load_in_a_fresh_process(
        weights: str, server: GitHubStandIn, isolated: Path) -> None:
    """The code is cached, the checkpoint is not, and a weights host of the rule does not
    resolve here: the weights download imports what it needs (requests) as safehub's own
    work, never as an import the runtime guard must decide on (issue 33)."""
    import os
    import subprocess
    import sys

    base = server.api_url.rsplit("/api", 1)[0]
    policy(isolated, "[[allow]]\nrepo = 'acme/weighted'\n"
           f"weights = ['https://weights.invalid/*', '{base}/weights/*']\n")
    env = {**os.environ, "CI": "true"}
    subprocess.run([sys.executable, "-m", "safehub", "prefetch", "acme/weighted:v1.0"],
                   env=env, check=True, capture_output=True, timeout=600)
    code = ("import safehub; s = safehub.load('acme/weighted:v1.0', 'weighted', "
            f"{weights!r}, verbose=False); print(sorted(s))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "['w']", done.stderr
