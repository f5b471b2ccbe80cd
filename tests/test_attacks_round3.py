"""Attacks found by the third review round, one section per class, each refused with a
clear error and the honest case beside it:

1. rules that cannot admit a repo (after a ``final`` file, a project's) only narrow the
   runtime keys: they never widen ``network``, ``subprocess``, ``writes`` or the weights
   hosts the code may connect to;
2. the repo's code cannot borrow safehub's own pause of the guard (calling safehub's
   functions that fetch or write for it), nor answer the prompt of its own nested load;
3. safehub's own writes during a guarded load (audit lines, weight pins) are not the
   repo's: no false alarm under ``enforce``;
4. bytecode committed to a repo never runs in place of its source;
5. refs written in full (``refs/heads/dev``) in a rule match the ref however it is asked;
6. cheap edits of the guard's state are caught when the load ends.
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

import safehub
from tests.conftest import HUBCONF, runs

torch = pytest.importorskip("torch")


def policy(isolated: Path, text: str, where: str = "site") -> Path:
    path = isolated / where / "safehub/policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- 1. narrowing rules never widen the runtime keys ------------------------------------------

ACTIONS = HUBCONF + '''

def spawn():
    import subprocess
    return subprocess.run(["true"]).returncode


def connect(port):
    import socket
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
    except ConnectionRefusedError:
        return "refused by the peer"
    finally:
        s.close()
    return "connected"
'''

SITE = """[safehub]
final = true
runtime = "enforce"
unknown_repos = "deny"
[[allow]]
repo = "acme/models"
"""


@pytest.fixture
def actions(make_hub_repo, isolated: Path) -> Path:  # type: ignore[no-untyped-def]
    make_hub_repo("acme", "models", {"hubconf.py": ACTIONS})
    return policy(isolated, SITE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refused_outside(tmp_path: Path, entrypoint: str, name: str, *before: object,
                    match: str | None = None) -> None:
    """The entrypoint's write to ``outside/name`` (by whatever route, its arguments
    ``before`` that path) is refused and never happens."""
    out = tmp_path / "outside" / name
    out.parent.mkdir()
    with pytest.raises(safehub.RuntimeGuardError, match=match or name):
        safehub.load("acme/models:v1.0", entrypoint, *before, str(out), verbose=False)
    assert not out.exists()


@pytest.mark.parametrize("where", ["project", "user"])
def test_a_later_file_cannot_widen_what_enforce_leaves_unset(actions: Path, isolated: Path,
                                                            where: str) -> None:
    port = _free_port()
    text = ('[[allow]]\nrepo = "acme/models"\nsubprocess = true\n'
            f'network = ["127.0.0.1:{port}"]\n')
    if where == "project":
        Path("safehub.toml").write_text(text)
    else:
        policy(isolated, text, "config")
    with pytest.raises(safehub.RuntimeGuardError, match="start true"):
        safehub.load("acme/models:v1.0", "spawn", verbose=False)
    with pytest.raises(safehub.RuntimeGuardError, match=f"127.0.0.1:{port}"):
        safehub.load("acme/models:v1.0", "connect", port, verbose=False)


def test_the_admitting_rule_widens_and_a_later_file_narrows(actions: Path,
                                                            isolated: Path) -> None:
    port = _free_port()
    actions.write_text(SITE + f'subprocess = ["true"]\nnetwork = ["127.0.0.1:{port}"]\n')
    assert safehub.load("acme/models:v1.0", "spawn", verbose=False) == 0
    assert safehub.load("acme/models:v1.0", "connect", port,
                        verbose=False) == "refused by the peer"
    Path("safehub.toml").write_text('[[allow]]\nrepo = "acme/models"\nsubprocess = false\n')
    with pytest.raises(safehub.RuntimeGuardError, match="start true"):
        safehub.load("acme/models:v1.0", "spawn", verbose=False)


def test_a_later_files_weights_do_not_open_the_network(actions: Path) -> None:
    port = _free_port()
    actions.write_text(SITE + 'network = ["download.pytorch.org"]\n'
                       'weights = ["https://download.pytorch.org/models/*"]\n')
    Path("safehub.toml").write_text(
        f'[[allow]]\nrepo = "acme/*"\nweights = ["https://127.0.0.1:{port}/*"]\n')
    with pytest.raises(safehub.RuntimeGuardError, match=f"127.0.0.1:{port}"):
        safehub.load("acme/models:v1.0", "connect", port, verbose=False)


def test_weights_hosts_open_the_network_only_where_every_rule_allows_them(
    actions: Path, isolated: Path
) -> None:
    port = _free_port()
    actions.write_text(SITE.replace("final = true\n", "") +
                       f'weights = ["https://127.0.0.1:{port}/models/*"]\n')
    assert safehub.load("acme/models:v1.0", "connect", port,
                        verbose=False) == "refused by the peer"
    policy(isolated, '[[allow]]\nrepo = "acme/*"\n'
           'weights = ["https://download.pytorch.org/*"]\n', "config")
    with pytest.raises(safehub.RuntimeGuardError, match=f"127.0.0.1:{port}"):
        safehub.load("acme/models:v1.0", "connect", port, verbose=False)


# -- 5. refs written in full match the ref however it is asked --------------------------------

@pytest.fixture
def branches(hub_repo, isolated: Path) -> Path:  # type: ignore[no-untyped-def]
    hub_repo.git("branch", "dev")
    hub_repo.git("branch", "vnext")
    return policy(isolated, "", "config")


@pytest.mark.parametrize("asked", ["dev", "heads/dev", "refs/heads/dev"])
def test_a_deny_rule_written_in_full_denies_the_short_names(branches: Path, asked: str,
                                                             canary: Path) -> None:
    branches.write_text('[[deny]]\nrepo = "acme/models"\nrefs = ["refs/heads/dev"]\n'
                        'reason = "dev is not reviewed"\n')
    for _ in range(2):  # cold, then from the cache's record of the ref
        with pytest.raises(safehub.PolicyDenied, match="dev is not reviewed"):
            safehub.load(f"acme/models:{asked}", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0


def test_a_deny_rule_for_branches_leaves_tags_alone(branches: Path, canary: Path) -> None:
    branches.write_text('[[deny]]\nrepo = "acme/models"\nrefs = ["refs/heads/*"]\n')
    assert safehub.load("acme/models:v1.0", "echo", trust_repo=True, verbose=False) == ((), {})
    with pytest.raises(safehub.PolicyDenied):
        safehub.load("acme/models:dev", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 1


def test_an_allow_rule_for_tags_admits_tags_asked_short_and_no_branch(branches: Path,
                                                                     canary: Path) -> None:
    branches.write_text('[safehub]\nunknown_repos = "deny"\n'
                        '[[allow]]\nrepo = "acme/models"\nrefs = ["refs/tags/v*"]\n')
    assert safehub.load("acme/models:v1.0", "echo", verbose=False) == ((), {})
    for _ in range(2):
        with pytest.raises(safehub.PolicyDenied, match="vnext"):
            safehub.load("acme/models:vnext", "echo", verbose=False)
    assert runs(canary) == 1


@pytest.mark.parametrize("legacy", [False, True])
def test_refs_in_full_hold_for_locked_loads(branches: Path, canary: Path,
                                            legacy: bool) -> None:
    """The lockfile keeps the full name (resolved_ref); one written before it did is held
    to a deny for either kind."""
    from safehub.cli import main

    assert main(["lock", "acme/models:dev", "acme/models:vnext"]) == 0
    lock = Path("safehub.lock")
    if legacy:
        lock.write_text("".join(line for line in lock.read_text().splitlines(keepends=True)
                                if not line.startswith("resolved_ref")))
    else:
        assert 'resolved_ref = "refs/heads/dev"' in lock.read_text()
    branches.write_text('[[deny]]\nrepo = "acme/models"\nrefs = ["refs/heads/dev"]\n'
                        'reason = "dev is not reviewed"\n')
    with pytest.raises(safehub.PolicyDenied, match="dev is not reviewed"):
        safehub.load("acme/models:dev", "echo", trust_repo=True, verbose=False)
    if not legacy:
        branches.write_text('[[allow]]\nrepo = "acme/models"\nrefs = ["refs/tags/v*"]\n')
        with pytest.raises(safehub.PolicyDenied, match="vnext"):
            safehub.load("acme/models:vnext", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0


# -- 2, 3. safehub's pause is not the repo's; safehub's own writes are not the repo's ---------

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


def write(path):
    with open(path, "w") as f:
        f.write("x")


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
    import os, tempfile, requests, torch
    real = requests.Session.send

    def send(self, *a, **k):
        with open(path, "w") as f:
            f.write("acted while safehub's work was paused")
        return real(self, *a, **k)

    requests.Session.send = send
    try:
        torch.hub.download_url_to_file(url, os.path.join(tempfile.gettempdir(), "w3"),
                                       progress=False)
    finally:
        requests.Session.send = real


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


# -- 6. cheap edits of the guard's state ------------------------------------------------------


# -- 7. a nested load keeps the hub and temp dirs of the load around it -----------------------


@pytest.mark.parametrize("target", [b"/tmp", None, 3])
def test_a_local_load_of_no_path_is_a_spec_error(target: object) -> None:
    with pytest.raises(safehub.SpecError):
        safehub.load(target, "echo", source="local")  # type: ignore[arg-type]


# -- 9. nothing of the repo's runs while safehub's own work is unguarded ---------------------


def test_the_repos_stderr_acts_under_the_guard_during_safehubs_work(
    nesting: Path, server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    refused_outside(tmp_path, "loud_stderr", "stderr.txt", f"{server.foreign_url}/acme/w.pth")


def test_a_monkeypatched_library_acts_under_the_guard_during_safehubs_work(
    nesting: Path, server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    refused_outside(tmp_path, "patched_send", "sent.txt", f"{server.foreign_url}/acme/w.pth")


# -- 10. a runtime fix for a project's rule that would name a path outside it ----------------

def test_a_write_outside_a_projects_folder_is_fixed_in_the_users_policy(
    make_hub_repo, isolated: Path, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    from tests.test_fixes import apply, parse

    make_hub_repo("acme", "models", {"hubconf.py": NESTING})
    Path("safehub.toml").write_text('[safehub]\nruntime = "enforce"\n'
                                    '[[allow]]\nrepo = "acme/models"\n')
    target = tmp_path / "outside" / "out.txt"
    target.parent.mkdir()
    for _ in range(3):  # the canary's write, then the entrypoint's: each fix applied
        try:
            safehub.load("acme/models:v1.0", "write", str(target), verbose=False)
            break
        except safehub.RuntimeGuardError as refused:
            hint = refused.hint or ""
            assert "safehub.toml" not in hint.split("\n")[0], hint
            for options in parse(hint):
                apply(next(f for f in options if f.kind != "say"))
    assert target.read_text() == "x"
    safehub.Hub()  # the project's file is still valid


# -- 11. a library object the repo hooks in acts under the guard during safehub's work -------

def test_a_library_handler_the_repo_installs_acts_under_the_guard(
    nesting: Path, server, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    refused_outside(tmp_path, "logging_hook", "urllib3.log", f"{server.foreign_url}/acme/w.pth")


