"""Attacks found by review after issue 9 landed, one section per class, each refused with a
clear error and the honest case beside it:

(the re-check of a warm cache's files as they are read moved to test_runtime_opened.py)

2. ``torch.hub`` calls made by a loaded repo's objects after ``load`` returned stay routed
   through safehub;
3. a cloned project's ``./safehub.toml`` only tightens mode, runtime and unknown repos;
4. weights URLs with dot segments cannot step out of the folder a rule names;
5. a lockfile entry whose ``repo`` names another repo is a move, not a free pass;
6. odd arguments and environment values end in a SafehubError, never a bare exception.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import PolicyDenied, RepoMovedError, SafehubError, SpecError
from tests.conftest import HUBCONF, HubRepo, runs
from tests.support import GitHubStandIn


def policy(isolated: Path, text: str, where: str = "config") -> Path:
    path = isolated / where / "safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cache_tree(isolated: Path) -> Path:
    return next(isolated.rglob("commits/*/tree"))


def edit(path: Path, text: str) -> None:
    """Edit a sealed cache file in place, leaving its folder untouched."""
    path.chmod(0o644)
    path.write_text(text)
    path.chmod(0o444)



# -- 2. torch.hub calls after load returned stay routed through safehub -----------------------

LATER = HUBCONF + '''
import threading


class Model:
    def forward(self, spec):
        import torch
        return torch.hub.load(spec, "echo", "later", trust_repo=True)


def lazy():
    return Model()


def threaded(spec, out):
    def later():
        import torch
        try:
            out.append(torch.hub.load(spec, "echo", "thread", trust_repo=True))
        except BaseException as e:
            out.append(e)
    t = threading.Thread(target=later)
    t.start()
    return t
'''


@pytest.fixture
def later(make_hub_repo, isolated: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
          tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # Were a call to escape safehub, torch would reach for github.com: a dead proxy keeps
    # it on this machine, and torch's own cache holds the other repo, as a plain session
    # would have left it.
    for var in ("https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", ",".join(f"127.0.0.{i}" for i in range(1, 8)))
    make_hub_repo("acme", "models", {"hubconf.py": LATER})
    other = make_hub_repo("other", "inner")
    hub_dir = tmp_path / "home/torch/hub/other_inner_v1.0"
    hub_dir.mkdir(parents=True)
    (hub_dir / "hubconf.py").write_text((other.path / "hubconf.py").read_text())
    monkeypatch.setenv("CI", "true")
    policy(isolated, "[[allow]]\nrepo = 'acme/models'\n")


@pytest.mark.usefixtures("later")
def test_a_load_made_by_a_model_after_load_returned_is_checked(canary: Path) -> None:
    model = safehub.load("acme/models:v1.0", "lazy", verbose=False)
    before = runs(canary)
    with pytest.raises(safehub.UntrustedRepoError, match="other/inner"):
        model.forward("other/inner:v1.0")
    assert runs(canary) == before  # other/inner's hubconf never ran


@pytest.mark.usefixtures("later")
def test_a_load_from_a_thread_the_repo_started_is_checked(canary: Path) -> None:
    out: list[object] = []
    thread = safehub.load("acme/models:v1.0", "threaded", "other/inner:v1.0", out,
                          verbose=False)
    assert isinstance(thread, threading.Thread)
    thread.join()
    assert isinstance(out[0], safehub.UntrustedRepoError)
    assert runs(canary) == 1  # acme/models only


@pytest.mark.usefixtures("later")
def test_a_later_load_of_an_allowed_repo_works(isolated: Path) -> None:
    policy(isolated, "[[allow]]\nrepo = 'acme/models'\n[[allow]]\nrepo = 'other/inner'\n")
    model = safehub.load("acme/models:v1.0", "lazy", verbose=False)
    assert model.forward("other/inner:v1.0") == (("later",), {})


# -- 3. a project's ./safehub.toml only tightens ----------------------------------------------

PHONE = HUBCONF + '''

def phone():
    import subprocess
    return subprocess.run(["true"]).returncode
'''


@pytest.fixture
def site(make_hub_repo, isolated: Path) -> Path:  # type: ignore[no-untyped-def]
    make_hub_repo("acme", "models", {"hubconf.py": PHONE})
    make_hub_repo("evil", "x")
    make_hub_repo("stranger", "y")
    return policy(isolated, "[safehub]\nunknown_repos = 'deny'\nruntime = 'observe'\n"
                            "[[allow]]\nrepo = 'acme/models'\nsubprocess = false\n"
                            "[[deny]]\nrepo = 'evil/*'\nreason = 'known malware'\n", "site")


@pytest.mark.parametrize("loosen", ["mode = 'warn'", "runtime = 'off'",
                                    "unknown_repos = 'prompt'"])
def test_a_project_file_cannot_loosen_the_strictest_keys(site: Path, loosen: str,
                                                         canary: Path) -> None:
    Path("safehub.toml").write_text(f"[safehub]\n{loosen}\n")
    with pytest.raises(PolicyDenied, match="known malware"):
        safehub.load("evil/x:v1.0", "echo", trust_repo=True, verbose=False)
    with pytest.raises(PolicyDenied, match="stranger/y"):  # unknown_repos = "deny" holds
        safehub.load("stranger/y:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0


def test_a_project_file_cannot_switch_the_runtime_guard_off(site: Path) -> None:
    pytest.importorskip("torch")
    Path("safehub.toml").write_text("[safehub]\nruntime = 'off'\nmode = 'warn'\n")
    with pytest.raises(safehub.RuntimeGuardError, match="subprocess"):
        safehub.load("acme/models:v1.0", "phone", verbose=False)


def test_a_project_file_can_tighten(site: Path) -> None:
    pytest.importorskip("torch")
    site.write_text(site.read_text().replace("subprocess = false\n", ""))
    assert safehub.load("acme/models:v1.0", "phone", verbose=False) == 0  # observed only
    Path("safehub.toml").write_text("[safehub]\nruntime = 'enforce'\n"
                                    "[[allow]]\nrepo = 'acme/models'\nsubprocess = false\n")
    with pytest.raises(safehub.RuntimeGuardError, match="subprocess"):
        safehub.load("acme/models:v1.0", "phone", verbose=False)


# -- 4. weights URLs cannot step out of the folder a rule names -------------------------------

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
    with pytest.raises(PolicyDenied, match="path segments, or an encoded '/'"):
        safehub.load("acme/models:v1.0", "fetch", f"{shared_host}/{path}", verbose=False)
    assert not any("mallory" in r.path for r in server.requests_log)


def test_a_weights_url_inside_the_folder_loads(shared_host: str) -> None:
    got = safehub.load("acme/models:v1.0", "fetch", f"{shared_host}/acme/good.pth",
                       verbose=False)
    assert got == b"good weights"


# -- 5. a lockfile entry naming another repo is a move ----------------------------------------

def test_a_lockfile_entry_naming_another_repo_is_refused_and_reported(
    make_hub_repo, isolated: Path, canary: Path, capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    make_hub_repo("acme", "models")
    make_hub_repo("evil", "x", {"hubconf.py": HUBCONF + "\nX = 'evil'\n"})
    policy(isolated, "[[allow]]\nrepo = 'acme/models'\npin = 'commit'\n"
                     "[[allow]]\nrepo = 'evil/x'\n")
    assert main(["lock", "evil/x:v1.0", "--lockfile", "evil.lock"]) == 0
    assert main(["lock", "acme/models:v1.0"]) == 0
    assert safehub.load("acme/models:v1.0", "echo", 1, verbose=False) == ((1,), {})
    honest = Path("safehub.lock").read_text()
    evil = Path("evil.lock").read_text()
    forged = honest
    for key in ("commit", "tree", "digest"):
        forged = forged.replace(_field(honest, key), _field(evil, key))
    forged = forged.replace('repo = "acme/models"', 'repo = "evil/x"')
    assert forged != honest
    Path("safehub.lock").write_text(forged)
    policy(isolated, "[[allow]]\nrepo = 'acme/models'\npin = 'commit'\n")
    before = runs(canary)
    with pytest.raises(RepoMovedError, match="evil/x"):
        safehub.load("acme/models:v1.0", "echo", verbose=False)
    assert runs(canary) == before
    capsys.readouterr()
    assert main(["lock", "--check"]) == 1
    assert "locked to code from evil/x" in capsys.readouterr().out


def _field(text: str, key: str) -> str:
    for line in text.splitlines():
        if line.startswith(f"{key} = "):
            return line.split('"')[1]
    raise AssertionError(key)


# -- 6. odd arguments and environment values end in a SafehubError ---------------------------

@pytest.mark.parametrize("model", [None, 5, "", "a.b", "../x", b"echo"])
def test_a_model_name_that_is_no_identifier_is_a_spec_error(hub_repo: HubRepo, model: object,
                                                              canary: Path) -> None:
    with pytest.raises(SpecError):
        safehub.load("acme/models:v1.0", model, trust_repo=True, verbose=False)  # type: ignore[arg-type]
    assert runs(canary) == 0


@pytest.mark.parametrize("value", [123, None, b"/tmp/x"])
def test_set_dir_with_no_path_is_a_safehub_error(value: object) -> None:
    with pytest.raises(SafehubError):
        safehub.set_dir(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["maybe", "2", "tru"])
def test_an_unknown_flag_value_is_a_spec_error_naming_it(
    hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SAFEHUB_OFFLINE", value)
    with pytest.raises(SpecError, match="SAFEHUB_OFFLINE"):
        safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False)


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "0", "false", "no", "off", ""])
def test_every_documented_flag_value_is_accepted(hub_repo: HubRepo,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  value: str) -> None:
    monkeypatch.setenv("SAFEHUB_NONINTERACTIVE", value)
    assert safehub.load("acme/models:v1.0", "echo", 3, trust_repo=True,
                        verbose=False) == ((3,), {})


def test_kwargs_cannot_smuggle_loader_options(hub_repo: HubRepo, canary: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "acme/models:v1.0", "echo", "--trust", "--kwargs",
                 '{"trust_repo": false}']) == 2
    assert "trust_repo" in capsys.readouterr().err
    assert runs(canary) == 0
