"""Loads under the runtime guard: nested loads, loads made after ``load`` returned, and
safehub's own work during a load.

Real hubconf.py files run by torch's own local loader under the guard, as safehub will run
them: a well-behaved repo loads under ``enforce``; a repo that installs packages, writes
outside its folder or phones home from a thread fails, even when it swallows the refusals; a
nested ``torch.hub.load`` gets its own repo's rules.

End to end on the loopback GitHub: a nested load goes through safehub with the user's
policy (the outer repo's ``trust_repo=True`` grants nothing, and its own nested load is never
prompted for), and so do the loads a loaded repo's objects or threads make later. Under
``enforce``, safehub's own work for the repo (a nested load, a weights download) is not
counted as the repo's, and the repo's code cannot borrow it: whatever the repo hooks into
that work (its ``sys.stderr``, a monkeypatched library, a library's logging handler) acts
under the guard.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

import safehub
from safehub.errors import PolicyDenied, RuntimeGuardError
from safehub.run.runtime import RuntimeGuard, RuntimeReport, RuntimeRules
from tests.conftest import HUBCONF, runs
from tests.helpers_load import policy

torch = pytest.importorskip("torch")

WELL_BEHAVED = '''\
import os
from mypkg.layers import make  # the repo's own package, found through sys.path

dependencies = ["torch"]
with open(os.path.join(os.path.dirname(__file__), "cache.txt"), "w") as f:
    f.write("written inside the tree")


def model(n=2):
    """A tiny model."""
    return make(n)
'''

LAYERS = '''\
import torch


def make(n):
    return torch.nn.Linear(n, n)
'''

GREEDY = '''\
import os
import subprocess
import sys
import threading

dependencies = []
OUTSIDE = {outside!r}
PORT = {port}

try:  # like yolov5's check_requirements (here a harmless stand-in for pip)
    subprocess.check_output(f"{{sys.executable}} -c pass pip install ultralytics", shell=True)
except:  # noqa: E722
    pass
try:
    with open(os.path.join(OUTSIDE, "bashrc"), "a") as f:
        f.write("export PATH=/tmp/evil:$PATH\\n")
except:  # noqa: E722
    pass


def model():
    """Phones home from a thread."""
    import socket

    def phone():
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
        except:  # noqa: E722
            pass

    t = threading.Thread(target=phone)
    t.start()
    t.join()
    return "model"
'''



@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path


def repo(root: Path, name: str, files: dict[str, str]) -> Path:
    tree = root / name
    for path, text in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    return tree


def load(tree: Path, model: str, rules: RuntimeRules,
         repo_name: str = "acme/models") -> tuple[RuntimeReport, Any, RuntimeGuardError | None]:
    guard = RuntimeGuard(rules, repo=repo_name, tree=tree)
    try:
        with guard.active():
            result = torch.hub.load(str(tree), model, source="local", trust_repo=True)
    except RuntimeGuardError as e:
        return guard.report, None, e
    return guard.report, result, None


@pytest.mark.usefixtures("clean_modules")
def test_a_well_behaved_repo_loads_under_enforce(place: Path) -> None:
    tree = repo(place, "good", {"hubconf.py": WELL_BEHAVED, "mypkg/__init__.py": "",
                                "mypkg/layers.py": LAYERS})
    report, model, error = load(tree, "model", RuntimeRules(mode="enforce"))
    assert error is None and isinstance(model, torch.nn.Linear)
    assert (tree / "cache.txt").exists()
    assert report.refused == [] and report.writes == [] and report.programs == []
    assert report.shadowing == [] and report.leftovers == ["mypkg", "mypkg.layers"]


@pytest.mark.usefixtures("clean_modules")
def test_a_greedy_repo_fails_although_it_swallows_every_refusal(place: Path) -> None:
    outside = place / "victim"
    outside.mkdir()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        tree = repo(place, "greedy", {"hubconf.py": GREEDY.format(
            outside=str(outside), port=server.getsockname()[1])})
        report, model, error = load(tree, "model", RuntimeRules(mode="enforce"))
    assert model is None and error is not None
    assert error.action == "process" and "pip install" in error.message
    assert [e.action for e in report.refused] == ["process", "write", "network"]
    assert not (outside / "bashrc").exists()
    assert report.programs and "pip install" in report.programs[0]
    # observe without keys: everything is recorded, nothing refused
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        tree2 = repo(place, "greedy2", {"hubconf.py": GREEDY.format(
            outside=str(outside), port=server.getsockname()[1])})
        report2, model2, error2 = load(tree2, "model", RuntimeRules(mode="observe"))
        port = server.getsockname()[1]
    assert error2 is None and model2 == "model"
    assert (outside / "bashrc").exists()
    assert report2.writes == [str((outside / "bashrc").resolve())]
    assert report2.hosts == [f"127.0.0.1:{port}"]


@pytest.mark.usefixtures("clean_modules")
def test_a_nested_load_gets_its_own_rules(place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = place / "outside"
    outside.mkdir()
    inner = repo(place, "inner", {"hubconf.py": (
        "dependencies = []\n"
        f"def model():\n    open({str(outside / 'inner.txt')!r}, 'w').close()\n"
        "    return 'inner'\n")})
    outer = repo(place, "outer", {"hubconf.py": (
        "import torch\n"
        "dependencies = []\n"
        "def model():\n"
        f"    inner = torch.hub.load({str(inner)!r}, 'model', source='local', trust_repo=True)\n"
        f"    open({str(outside / 'outer.txt')!r}, 'w').close()\n"
        "    return ('outer', inner)\n")})
    plain_load = torch.hub.load
    rules = {str(inner): RuntimeRules(mode="enforce", writes=(str(outside),)),
             str(outer): RuntimeRules(mode="enforce")}
    reports: dict[str, RuntimeReport] = {}

    def routed(repo_or_dir: str, model: str, *args: Any, **kwargs: Any) -> Any:
        """What safehub.install() does: every torch.hub.load goes through a guard."""
        guard = RuntimeGuard(rules[repo_or_dir], repo=Path(repo_or_dir).name,
                             tree=Path(repo_or_dir))
        reports[guard.repo] = guard.report
        with guard.active():
            return plain_load(repo_or_dir, model, *args, **kwargs)

    monkeypatch.setattr(torch.hub, "load", routed)
    with pytest.raises(RuntimeGuardError) as info:
        torch.hub.load(str(outer), "model", source="local", trust_repo=True)
    assert (outside / "inner.txt").exists()       # the inner repo's writes key allows it
    assert not (outside / "outer.txt").exists()   # the outer repo has none
    assert info.value.repo == "outer"
    assert reports["inner"].refused == []
    assert str((outside / "inner.txt").resolve()) in reports["outer"].writes


# -- a nested load goes through safehub, with the same policy; the repo grants nothing -------

OUTER = '''\
import torch

dependencies = ["torch"]


def outer(spec):
    """Load another hub repo, trusting it on the user's behalf."""
    return torch.hub.load(spec, "echo", "nested", trust_repo=True)
'''


def test_a_nested_load_goes_through_safehub_and_its_trust_repo_grants_nothing(
    make_hub_repo, isolated: Path, canary: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("CI", "true")
    make_hub_repo("acme", "outer", {"hubconf.py": OUTER})
    make_hub_repo("other", "inner")
    policy(isolated, "[[allow]]\nrepo = 'acme/outer'\n")
    with pytest.raises(safehub.UntrustedRepoError, match="other/inner"):
        safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    assert runs(canary) == 0  # the inner repo's hubconf never ran
    policy(isolated, "[[allow]]\nrepo = 'acme/outer'\n[[deny]]\nrepo = 'other/*'\n")
    with pytest.raises(PolicyDenied, match="other/inner"):
        safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    policy(isolated, "[[allow]]\nrepo = 'acme/outer'\n[[allow]]\nrepo = 'other/inner'\n")
    result = safehub.load("acme/outer:v1.0", "outer", "other/inner:v1.0", verbose=False)
    assert result == (("nested",), {}) and runs(canary) == 1
    audit = next(isolated.rglob("audit.jsonl")).read_text().splitlines()
    assert any(json.loads(line)["repo"] == "other/inner" and
               json.loads(line)["decision"] == "allow" for line in audit)


# -- torch.hub calls made after load returned stay routed through safehub -------------------

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


# -- under enforce: safehub's pause is not the repo's, safehub's own writes are not the repo's

NESTING = HUBCONF + '''

def own_local():
    import os, torch
    return torch.hub.load(os.path.dirname(os.path.abspath(__file__)), "echo", 5, source="local")


def nested(spec):
    import torch
    return torch.hub.load(spec, "echo", 7)


def launder(spec):
    """Answer the prompt of its own nested load."""
    import io, sys, torch
    old = sys.stdin
    sys.stdin = io.StringIO("y\\n")
    try:
        return torch.hub.load(spec, "echo", "B ran")
    finally:
        sys.stdin = old


def fetch(url):
    import os, torch
    dst = os.path.join(torch.hub.get_dir(), "checkpoints", "w.pth")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    torch.hub.download_url_to_file(url, dst, progress=False)
    with open(dst, "rb") as f:
        return f.read()


def loud_stderr(url, path):
    """Replace sys.stderr with an object of its own, then download with progress: the
    download's progress lines must not call it while safehub's work is unguarded."""
    import os, sys, tempfile, torch

    class Loud:
        def write(self, text):
            with open(path, "a") as f:
                f.write(text)
            return len(text)

        def flush(self):
            pass

        def isatty(self):
            return True

    old, sys.stderr = sys.stderr, Loud()
    try:
        torch.hub.download_url_to_file(url, os.path.join(tempfile.gettempdir(), "w2"))
    finally:
        sys.stderr = old


def patched_send(url, path):
    """Monkeypatch the HTTP library safehub's paused download uses, to act meanwhile."""
    import os, tempfile, torch, urllib3.connectionpool
    pool = urllib3.connectionpool.HTTPConnectionPool
    real = pool.urlopen

    def send(self, *a, **k):
        with open(path, "w") as f:
            f.write("acted while safehub's work was paused")
        return real(self, *a, **k)

    pool.urlopen = send
    try:
        torch.hub.download_url_to_file(url, os.path.join(tempfile.gettempdir(), "w3"),
                                       progress=False)
    finally:
        pool.urlopen = real


def logging_hook(url, path):
    """Hook a library's logger with a library's handler (no frame of the repo's acts)."""
    import logging, os, tempfile, torch
    handler = logging.FileHandler(path, delay=True)
    logger = logging.getLogger("urllib3")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        torch.hub.download_url_to_file(url, os.path.join(tempfile.gettempdir(), "w4"),
                                       progress=False)
    finally:
        logger.removeHandler(handler)
        handler.close()
'''

STRICT = """[safehub]
runtime = "enforce"
[[allow]]
repo = "acme/models"
network = []
writes = ["{canary}"]
{extra}
[[allow]]
repo = "acme/other"
writes = ["{canary}"]
"""


@pytest.fixture
def nesting(make_hub_repo, isolated: Path, server, tmp_path: Path,  # type: ignore[no-untyped-def]
            monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "tmpdir").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmpdir"))  # tests live in /tmp
    make_hub_repo("acme", "models", {"hubconf.py": NESTING})
    make_hub_repo("acme", "other")
    make_hub_repo("evil", "b")
    server.add_static("/acme/w.pth", b"weights")
    return policy(isolated, STRICT.format(
        canary=tmp_path / "canary", extra=f'weights = ["{server.foreign_url}/acme/*"]'),
        "config")


def refused_outside(tmp_path: Path, entrypoint: str, name: str, *before: object,
                    match: str | None = None) -> None:
    """The entrypoint's write to ``outside/name`` (by whatever route, its arguments
    ``before`` that path) is refused and never happens."""
    out = tmp_path / "outside" / name
    out.parent.mkdir()
    with pytest.raises(safehub.RuntimeGuardError, match=match or name):
        safehub.load("acme/models:v1.0", entrypoint, *before, str(out), verbose=False)
    assert not out.exists()


def test_nested_and_own_folder_loads_pass_under_enforce(nesting: Path) -> None:
    assert safehub.load("acme/models:v1.0", "own_local", verbose=False) == ((5,), {})
    assert safehub.load("acme/models:v1.0", "nested", "acme/other:v1.0",
                        verbose=False) == ((7,), {})


def test_weights_the_policy_allows_download_under_enforce(nesting: Path, server,  # type: ignore[no-untyped-def]
                                                          isolated: Path) -> None:
    url = f"{server.foreign_url}/acme/w.pth"
    assert safehub.load("acme/models:v1.0", "fetch", url, verbose=False) == b"weights"


def test_a_nested_load_is_never_prompted_for(nesting: Path, isolated: Path,
                                             canary: Path) -> None:
    hub = safehub.Hub(noninteractive=False)  # a user at a terminal
    with pytest.raises(safehub.UntrustedRepoError, match="never prompted") as refused:
        hub.load("acme/models:v1.0", "launder", "evil/b:v1.0", verbose=False)
    assert "trust_repo=True" not in (refused.value.hint or "")
    assert hub.consents.list("evil/b") == []
    assert runs(canary) == 1  # acme/models ran; evil/b did not


def test_the_repos_stderr_acts_under_the_guard_during_safehubs_work(
    nesting: Path, server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    refused_outside(tmp_path, "loud_stderr", "stderr.txt", f"{server.foreign_url}/acme/w.pth")


def test_a_monkeypatched_library_acts_under_the_guard_during_safehubs_work(
    nesting: Path, server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    refused_outside(tmp_path, "patched_send", "sent.txt", f"{server.foreign_url}/acme/w.pth")


def test_a_library_handler_the_repo_installs_acts_under_the_guard(
    nesting: Path, server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    refused_outside(tmp_path, "logging_hook", "urllib3.log", f"{server.foreign_url}/acme/w.pth")
