"""The runtime guard in the load pipeline: the policy's runtime keys as a load merges them,
the audit line, ``load --report``.

The rule that admits a repo sets its runtime keys (``network``, ``subprocess``, ``writes``,
the weights hosts its code may connect to); rules that cannot admit it (those after a
``final`` file, a project's) only narrow them, never widen them.

Real sockets on loopback, real processes and files; a canary proves what ran.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import safehub
from safehub.cli import main
from safehub.errors import RuntimeGuardError
from tests.conftest import HUBCONF, runs
from tests.helpers_load import policy

pytest.importorskip("torch")

ACTIONS = '''\
import os, socket, subprocess, sys, threading

dependencies = []


def connect(port):
    """Open a connection to localhost:port."""
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    return "connected"


def connect_swallowed(port):
    """Try to connect, and hide any error."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except:  # noqa: E722 - a repo that swallows refusals
        pass
    return "done"


def run_program():
    """Start a Python process."""
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return "ran"


def write_from_thread(path):
    """Write a file outside the tree from a thread."""
    errors = []
    def work():
        try:
            with open(path, "w") as f:
                f.write("x")
        except BaseException as e:
            errors.append(e)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    return errors
'''


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP server that accepts and closes connections."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def actions(make_hub_repo):  # type: ignore[no-untyped-def]
    return make_hub_repo("acme", "actions", {"hubconf.py": ACTIONS})


def audit_lines(isolated: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in
            next(isolated.rglob("audit.jsonl")).read_text().splitlines()]


def load(entrypoint: str, *args: object) -> object:
    return safehub.load("acme/actions:v1.0", entrypoint, *args, trust_repo=True, verbose=False)


def test_observe_records_what_no_key_forbids(actions, isolated: Path,  # type: ignore[no-untyped-def]
                                             listener: int) -> None:
    assert load("connect", listener) == "connected"
    runtime = audit_lines(isolated)[-1]["runtime"]
    assert isinstance(runtime, dict) and runtime["mode"] == "observe"
    assert f"127.0.0.1:{listener}" in runtime["hosts"]


def test_a_network_key_refuses_other_hosts_even_when_the_repo_swallows_it(
    actions, isolated: Path, listener: int,  # type: ignore[no-untyped-def]
) -> None:
    policy(isolated, "[[allow]]\nrepo = 'acme/actions'\nnetwork = ['models.example']\n")
    with pytest.raises(RuntimeGuardError, match=f"127.0.0.1:{listener}") as err:
        load("connect_swallowed", listener)
    assert err.value.hint is not None and "network = " in err.value.hint
    line = audit_lines(isolated)[-1]
    assert line["decision"] == "error" and "RuntimeGuardError" in str(line["reasons"])
    policy(isolated, "[[allow]]\nrepo = 'acme/actions'\nnetwork = ['127.0.0.1']\n")
    assert load("connect", listener) == "connected"  # the honest case


def test_enforce_refuses_a_process_observe_records_it(actions, isolated: Path) -> None:  # type: ignore[no-untyped-def]
    assert load("run_program") == "ran"
    assert any(sys.executable in p or "python" in p
               for p in audit_lines(isolated)[-1]["runtime"]["programs"])  # type: ignore[index]
    policy(isolated, "[safehub]\nruntime = 'enforce'\n[[allow]]\nrepo = 'acme/actions'\n")
    with pytest.raises(RuntimeGuardError, match="start"):
        load("run_program")
    policy(isolated, "[safehub]\nruntime = 'enforce'\n[[allow]]\nrepo = 'acme/actions'\n"
           "subprocess = ['python']\n")
    assert load("run_program") == "ran"


def test_a_write_from_a_thread_the_repo_started_is_held_to_writes(
    actions, isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    import tempfile

    (tmp_path / "tmpdir").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmpdir"))  # tests live in /tmp
    outside = tmp_path / "outside" / "file.txt"
    outside.parent.mkdir()
    policy(isolated, f"[[allow]]\nrepo = 'acme/actions'\nwrites = ['{tmp_path / 'other'}']\n")
    with pytest.raises(RuntimeGuardError, match="write"):
        load("write_from_thread", str(outside))
    assert not outside.exists()
    policy(isolated, f"[[allow]]\nrepo = 'acme/actions'\nwrites = ['{outside.parent}']\n")
    assert load("write_from_thread", str(outside)) == [] and outside.exists()


def test_a_module_that_shadows_the_standard_library_is_refused_before_it_runs(
    make_hub_repo, isolated: Path, canary: Path,  # type: ignore[no-untyped-def]
) -> None:
    make_hub_repo("acme", "shadow", {"wave.py": "import os\nopen(os.environ["
                                     "'SAFEHUB_TEST_CANARY'], 'a').write('wave\\n')\n"})
    with pytest.raises(RuntimeGuardError, match="module wave"):
        safehub.load("acme/shadow:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 0  # not even hubconf ran
    policy(isolated, "[[allow]]\nrepo = 'acme/shadow'\nshadowing = 'warn'\n")
    with pytest.warns(UserWarning, match="shadows stdlib"):
        safehub.load("acme/shadow:v1.0", "echo", trust_repo=True, verbose=False)
    assert runs(canary) == 1


def test_load_report_prints_what_the_code_did(actions, listener: int,  # type: ignore[no-untyped-def]
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["load", "acme/actions:v1.0", "connect", "--kwargs",
                 json.dumps({"port": listener}), "--trust", "--report", "-q"]) == 0
    out = capsys.readouterr().out
    assert "runtime guard (observe)" in out and f"127.0.0.1:{listener}" in out
    assert main(["load", "acme/actions:v1.0", "connect", "--kwargs",
                 json.dumps({"port": listener}), "--trust", "--report", "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert f"127.0.0.1:{listener}" in data["runtime"]["hosts"]


# -- rules that cannot admit the repo only narrow its runtime keys --------------------------

SPAWNS_AND_CONNECTS = HUBCONF + '''

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

FINAL_SITE = """[safehub]
final = true
runtime = "enforce"
unknown_repos = "deny"
[[allow]]
repo = "acme/models"
"""


@pytest.fixture
def final_site(make_hub_repo, isolated: Path) -> Path:  # type: ignore[no-untyped-def]
    """acme/models, admitted by a final site policy under ``enforce``: the site policy."""
    make_hub_repo("acme", "models", {"hubconf.py": SPAWNS_AND_CONNECTS})
    return policy(isolated, FINAL_SITE, "site")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("where", ["project", "user"])
def test_a_later_file_cannot_widen_what_enforce_leaves_unset(final_site: Path, isolated: Path,
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


def test_the_admitting_rule_widens_and_a_later_file_narrows(final_site: Path,
                                                            isolated: Path) -> None:
    port = _free_port()
    final_site.write_text(FINAL_SITE + f'subprocess = ["true"]\nnetwork = ["127.0.0.1:{port}"]\n')
    assert safehub.load("acme/models:v1.0", "spawn", verbose=False) == 0
    assert safehub.load("acme/models:v1.0", "connect", port,
                        verbose=False) == "refused by the peer"
    Path("safehub.toml").write_text('[[allow]]\nrepo = "acme/models"\nsubprocess = false\n')
    with pytest.raises(safehub.RuntimeGuardError, match="start true"):
        safehub.load("acme/models:v1.0", "spawn", verbose=False)


def test_a_later_files_weights_do_not_open_the_network(final_site: Path) -> None:
    port = _free_port()
    final_site.write_text(FINAL_SITE + 'network = ["download.pytorch.org"]\n'
                          'weights = ["https://download.pytorch.org/models/*"]\n')
    Path("safehub.toml").write_text(
        f'[[allow]]\nrepo = "acme/*"\nweights = ["https://127.0.0.1:{port}/*"]\n')
    with pytest.raises(safehub.RuntimeGuardError, match=f"127.0.0.1:{port}"):
        safehub.load("acme/models:v1.0", "connect", port, verbose=False)


def test_weights_hosts_open_the_network_only_where_every_rule_allows_them(
    final_site: Path, isolated: Path
) -> None:
    port = _free_port()
    final_site.write_text(FINAL_SITE.replace("final = true\n", "") +
                          f'weights = ["https://127.0.0.1:{port}/models/*"]\n')
    assert safehub.load("acme/models:v1.0", "connect", port,
                        verbose=False) == "refused by the peer"
    policy(isolated, '[[allow]]\nrepo = "acme/*"\n'
           'weights = ["https://download.pytorch.org/*"]\n', "config")
    with pytest.raises(safehub.RuntimeGuardError, match=f"127.0.0.1:{port}"):
        safehub.load("acme/models:v1.0", "connect", port, verbose=False)
