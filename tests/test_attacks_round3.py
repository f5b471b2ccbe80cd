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
