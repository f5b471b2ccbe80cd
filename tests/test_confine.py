"""``safehub run --confine``: the kernel's Landlock holds a job to the ``[confine]`` table,
whatever code runs in it. On real parts: the machine's kernel, a hub repo served by the
loopback stand-in, a program that loads it through torch.hub, real sockets and processes.

Each evasion that gets past the in-process guard (a thread started from the wrapper's
closure, ctypes, torch.save's C++ writer) is shown succeeding without confinement and
refused by the kernel with it; the honest job works unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from safehub.cli import main
from safehub.config import Settings
from safehub.errors import ConfineError, PolicyError
from safehub.policy import Policy
from safehub.run.confine import _landlock
from safehub.run.confine.plan import plan
from tests.conftest import HUBCONF, needs_torch

needs_landlock = pytest.mark.skipif(
    _landlock.abi() < 4, reason=f"the kernel offers Landlock ABI {_landlock.abi()}; "
    "confinement needs 4 (Linux 6.7)")

ATTACKS = HUBCONF + '''

def _outcome(action):
    try:
        result = action()
    except BaseException as e:
        return f"refused: {type(e).__name__}: {e}"
    return f"done: {result}"


def plain(path):
    return _outcome(lambda: open(path, "w").write("x"))


def closure_thread(path):
    """The original thread start, taken out of the guard's wrapper: no guard in it."""
    import threading
    start = threading._start_new_thread
    original = start.__closure__[0].cell_contents if start.__closure__ else start
    done, outcome = threading.Event(), []

    def run():
        outcome.append(_outcome(lambda: open(path, "w").write("x")))
        done.set()

    original(run, ())
    done.wait(60)
    return outcome[0] if outcome else "no thread"


def ctypes_open(path):
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(path.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
    if fd < 0:
        return f"refused: errno {ctypes.get_errno()}"
    libc.close(fd)
    return "done"


def ctypes_popen(path):
    import ctypes
    libc = ctypes.CDLL(None)
    libc._IO_popen.restype = ctypes.c_void_p
    stream = libc._IO_popen(f"echo x > {path}".encode(), b"r")
    return "done: " + str(libc.pclose(ctypes.c_void_p(stream)) if stream else "no stream")


def torch_save(path):
    import torch
    return _outcome(lambda: torch.save(torch.zeros(2), path))


def child_isolated(path):
    import subprocess, sys
    code = f"open({path!r}, 'w').write('x')"
    return _outcome(lambda: subprocess.run([sys.executable, "-I", "-c", code]).returncode)


def spawn_shell(path):
    import os
    def go():
        pid = os.posix_spawn("/bin/sh", ["sh", "-c", f"echo x > {path}"], dict(os.environ))
        return os.waitpid(pid, 0)[1]
    return _outcome(go)


def program():
    import subprocess
    return _outcome(lambda: subprocess.run(["id", "-u"], capture_output=True).returncode)


def connect(port):
    import socket
    def go():
        with socket.create_connection(("127.0.0.1", int(port)), timeout=10):
            return "connected"
    return _outcome(go)


def chmod(path):
    import os
    return _outcome(lambda: os.chmod(path, 0o777))


def train(folder, port):
    """The honest job: checkpoints under its folder, its port, its program."""
    import os, socket, subprocess, torch
    model = torch.nn.Linear(2, 2)
    torch.save(model.state_dict(), os.path.join(folder, "epoch-1.pt"))
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10):
        pass
    version = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True)
    return version.stdout.split()[0]
'''

PROGRAM = '''import json, sys, torch
results = {}
for case, args in json.loads(sys.argv[1]):
    try:
        results[case] = torch.hub.load("acme/models:v1.0", case, *args, verbose=False)
    except Exception as e:  # the load's own verdict (a refusal the repo swallowed)
        results[case] = f"load refused: {type(e).__name__}"
print("RESULTS " + json.dumps(results))
'''


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.fixture
def job(make_hub_repo, server, isolated: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
        listener: int) -> dict[str, Any]:
    """A repo, a program that loads it, a policy with a [confine] table, an environment."""
    make_hub_repo("acme", "models", {"hubconf.py": ATTACKS})
    (tmp_path / "tmpdir").mkdir()
    (tmp_path / "outside").mkdir()
    checkpoints = tmp_path / "checkpoints"
    policy = isolated / "config" / "safehub" / "policy.toml"
    policy.parent.mkdir(parents=True)
    canaries = tmp_path / "canaries"  # the test hubconf's canary is written on import
    canaries.mkdir()
    policy.write_text(f'[[allow]]\nrepo = "acme/models"\n[confine]\n'
                      f'writes = ["{checkpoints}", "{canaries}"]\n'
                      f'exec = ["git"]\nconnect_ports = [{server.port}, {listener}]\n')
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmpdir"), "CI": "true",
           "SAFEHUB_TEST_CANARY": str(canaries / "canary")}
    # Not in the cache before the job: safehub run fetches it for the job (the broker).
    return {"env": env, "program": program, "outside": tmp_path / "outside",
            "checkpoints": checkpoints, "listener": listener, "policy": policy,
            "canaries": canaries}


def run(job: dict[str, Any], cases: list[tuple[str, list[Any]]], *flags: str
        ) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "safehub", "run", *flags, "--", sys.executable,
         str(job["program"]), json.dumps(cases)],
        env=job["env"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert line is not None, (done.stdout, done.stderr)
    return json.loads(line[len("RESULTS "):]), done


def _attacks(job: dict[str, Any], free_port: int) -> list[tuple[str, list[Any]]]:
    out = job["outside"]
    return [("plain", [str(out / "plain")]), ("closure_thread", [str(out / "thread")]),
            ("ctypes_open", [str(out / "ctypes")]), ("ctypes_popen", [str(out / "popen")]),
            ("torch_save", [str(out / "saved.pt")]), ("child_isolated", [str(out / "child")]),
            ("spawn_shell", [str(out / "shell")]), ("program", []), ("connect", [free_port])]


@pytest.fixture
def free_port() -> Iterator[int]:
    """A port some server listens on that [confine] does not list."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.mark.slow
@needs_landlock
@needs_torch
def test_every_evasion_is_refused_by_the_kernel_and_nothing_is_written(
    job: dict[str, Any], free_port: int, isolated: Path
) -> None:
    results, done = run(job, _attacks(job, free_port), "--confine")
    assert done.returncode == 0, done.stderr
    assert list(job["outside"].iterdir()) == [], results  # not one byte written outside
    for case in ("plain", "closure_thread", "program", "connect", "spawn_shell"):  # EACCES
        assert results[case].startswith("refused: PermissionError: [Errno 13]"), results
    assert results["ctypes_open"] == "refused: errno 13"
    assert "Permission denied" in results["torch_save"]  # torch's C++ writer
    assert results["child_isolated"] == "done: 1"  # python -I ran, and its write failed
    assert results["ctypes_popen"] != "done: 0"  # sh may not run at all
    # The audit line of the run names the ruleset and the ABI; the load's line records what
    # the in-process guard saw that the kernel refused.
    lines = [json.loads(x) for x in (isolated / "state" / "safehub" / "log" / "audit.jsonl")
             .read_text().splitlines()]
    run_line = next(x for x in lines if x["decision"] == "confine")
    assert run_line["confine"]["abi"] >= 4 and run_line["command"][0] == sys.executable
    kernel = [k for x in lines if "runtime" in x for k in x["runtime"]["kernel"]]
    assert any(str(job["outside"] / "plain") in k for k in kernel), kernel
    assert any("id -u" in k and "not in [confine] exec" in k for k in kernel), kernel


@pytest.mark.slow
@needs_torch
def test_the_same_evasions_get_past_the_in_process_guard(job: dict[str, Any], free_port: int
                                                         ) -> None:
    """The documented limit: under runtime = "enforce" the in-process guard refuses what it
    sees (the plain write, the child process), and code that goes around it succeeds."""
    job["policy"].write_text('[safehub]\nruntime = "enforce"\n[[allow]]\nrepo = "acme/models"\n'
                             f'writes = ["{job["canaries"]}"]\n')
    results, _ = run(job, _attacks(job, free_port)[:5])
    assert results["plain"] == "load refused: RuntimeGuardError"
    for case, name in (("closure_thread", "thread"), ("ctypes_open", "ctypes"),
                       ("ctypes_popen", "popen"), ("torch_save", "saved.pt")):
        assert (job["outside"] / name).exists(), (case, results[case])


@needs_landlock
@needs_torch
def test_the_honest_job_works_unchanged_under_confinement(job: dict[str, Any]) -> None:
    job["checkpoints"].mkdir()
    results, done = run(job, [("train", [str(job["checkpoints"]), job["listener"]])],
                        "--confine")
    assert results == {"train": "git"}, done.stderr
    assert (job["checkpoints"] / "epoch-1.pt").stat().st_size > 0


@pytest.mark.slow
@needs_landlock
@needs_torch
def test_a_listed_folder_that_does_not_exist_yet_is_made(job: dict[str, Any]) -> None:
    results, _ = run(job, [("train", [str(job["checkpoints"]), job["listener"]])], "--confine")
    assert results == {"train": "git"} and (job["checkpoints"] / "epoch-1.pt").exists()


@pytest.mark.slow
@needs_landlock
@needs_torch
@pytest.mark.parametrize("how", ["environment", "site policy"])
def test_confinement_required_by_the_site_or_the_environment(job: dict[str, Any],
                                                             isolated: Path, how: str) -> None:
    if how == "environment":
        job["env"]["SAFEHUB_CONFINE"] = "1"
    else:
        site = isolated / "etc-xdg" / "safehub" / "policy.toml"
        site.parent.mkdir(parents=True)
        site.write_text("[safehub]\nconfine = true\n")
    results, _ = run(job, [("plain", [str(job["outside"] / "plain")])])  # no --confine
    assert "Permission denied" in results["plain"]
    assert list(job["outside"].iterdir()) == []


@pytest.mark.parametrize(("abi", "missing"), [(0, "has no Landlock"), (3, "needs ABI 4")])
def test_a_kernel_without_what_confinement_needs_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    abi: int, missing: str, isolated: Path
) -> None:
    monkeypatch.setattr(_landlock, "abi", lambda: abi)
    marker = tmp_path / "ran"
    command = ["run", "--confine", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "ConfineError" in err or missing in err
    assert missing in err and not marker.exists()
    site = isolated / "etc-xdg" / "safehub" / "policy.toml"  # required by the site: the same
    site.parent.mkdir(parents=True)
    site.write_text("[safehub]\nconfine = true\n")
    assert main(command[:1] + command[2:]) == 1 and not marker.exists()


def test_dry_run_prints_the_ruleset_and_runs_nothing(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path, isolated: Path) -> None:
    marker = tmp_path / "ran"
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    assert main(["run", "--confine", "--dry-run", *command]) == 0
    shown = capsys.readouterr().out
    assert "may change" in shown and "may run:" in shown and "TCP ports: 443" in shown
    assert str(isolated / "cache" / "safehub") in shown and "(the command)" in shown
    assert main(["run", "--confine", "--dry-run", "--json", *command]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["confine"]["connect_ports"] == [443]
    assert os.path.realpath(sys.executable) in [g["path"] for g in data["confine"]["exec"]]
    assert not marker.exists()


# -- the [confine] table: validated, and narrowed by later files ------------------------------

@pytest.mark.parametrize(("line", "fault"), [
    ('writes = ["relative/dir"]', "not an absolute path"),
    ("connect_ports = [0]", "port number"),
    ("connect_ports = [70000]", "port number"),
    ('connect_ports = ["443"]', "port number"),
    ("connect_ports = [true]", "port number"),
    ('exec = ["rm -rf"]', "not a program name"),
    ("bind_ports = [80]", "unknown key"),
])
def test_a_bad_confine_table_is_an_error_naming_the_file_and_key(line: str, fault: str) -> None:
    with pytest.raises(PolicyError, match=fault) as info:
        Policy.from_text(f"[confine]\n{line}\n", "/etc/xdg/safehub/policy.toml")
    assert "/etc/xdg/safehub/policy.toml" in info.value.message
    assert "confine." in info.value.message


def _plan(*texts: str, command: str = sys.executable) -> Any:
    from safehub.policy.schema import parse_text

    policy = Policy.from_files([parse_text(t, f"/f{i}.toml") for i, t in enumerate(texts)])
    return plan(policy, Settings.from_env(policy=policy), [command], abi=7)


def test_a_later_file_only_narrows_confine(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "a" / "b", tmp_path / "c"
    ruleset = _plan(f'[confine]\nwrites = ["{a}"]\nexec = ["git"]\nconnect_ports = [443, 8443]\n',
                    f'[confine]\nwrites = ["{b}", "{c}"]\nexec = ["git", "curl"]\n'
                    "connect_ports = [8443, 22]\n")
    listed = [g.path for g in ruleset.writes if "[confine]" in g.why]
    assert listed == [str(b)]  # inside the first file's folder: kept; elsewhere: dropped
    assert [g.why.split(":")[0] for g in ruleset.exec if "[confine]" in g.why] == ["git"]
    assert ruleset.connect_ports == (8443,)


def test_a_link_out_of_the_bound_does_not_widen_it(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "data" / "link").symlink_to(tmp_path / "etc")
    with pytest.raises(ConfineError, match="without following a symbolic link"):
        _plan(f'[confine]\nwrites = ["{tmp_path / "data"}"]\n',
              f'[confine]\nwrites = ["{tmp_path / "data" / "link"}"]\n')


def test_the_first_file_that_sets_a_key_bounds_it() -> None:
    ruleset = _plan("[safehub]\nmode = 'enforce'\n", "[confine]\nconnect_ports = [8443]\n")
    assert ruleset.connect_ports == (8443,)
    assert _plan("").connect_ports == (443,)


# -- [confine] merges as every policy key: a final file is a floor, a project only narrows ------

def _in_force() -> Any:
    """The ruleset of the policy files discovery finds (site, user, ./safehub.toml,
    SAFEHUB_POLICY) for a command running this Python."""
    from safehub.policy import load_policy

    policy = load_policy()
    return plan(policy, Settings.from_env(policy=policy), [sys.executable], abi=7)


def _granted(ruleset: Any) -> tuple[list[str], list[str], tuple[int, ...]]:
    """([confine] folders, [confine] programs by entry, ports) a ruleset grants."""
    return ([g.path for g in ruleset.writes if "[confine]" in g.why],
            [g.why.split(":")[0] for g in ruleset.exec if "[confine]" in g.why],
            ruleset.connect_ports)


def _file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _widening(folder: Path) -> str:
    return (f'[confine]\nwrites = ["{folder / "out"}"]\nexec = ["sh"]\n'
            "connect_ports = [443, 22]\n")


@pytest.mark.parametrize("site", ["final, confine = true, no [confine]", "none"])
@pytest.mark.parametrize("later", ["project", "SAFEHUB_POLICY"])
def test_a_project_or_safehub_policy_file_cannot_widen_confine(
    isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], site: str, later: str
) -> None:
    """The reported attack: the site says `final = true` and `confine = true` and has no
    [confine] table; a cloned project's ./safehub.toml (or a SAFEHUB_POLICY file) lists
    `sh`, port 22 and a folder. The defaults hold: none of it is granted, and the dry run
    says so."""
    if site != "none":
        _file(isolated / "etc-xdg/safehub/policy.toml",
              "[safehub]\nfinal = true\nconfine = true\n")
    if later == "project":
        _file(Path.cwd() / "safehub.toml", _widening(Path.cwd()))
    else:
        monkeypatch.setenv("SAFEHUB_POLICY", str(_file(tmp_path / "extra.toml",
                                                        _widening(tmp_path))))
    ruleset = _in_force()
    assert _granted(ruleset) == ([], [], (443,))
    said = "\n".join(ruleset.notes)
    assert "exec 'sh' is not granted" in said and "connect_ports 22 is not granted" in said
    assert "writes" in said and "the default" in said
    asked = [] if site != "none" else ["--confine"]  # the site's confine = true asks for it
    assert main(["run", *asked, "--dry-run", "--json", "--", sys.executable, "-c", "pass"]) == 0
    shown = json.loads(capsys.readouterr().out)["confine"]
    assert shown["connect_ports"] == [443] and "sh" not in {
        g["why"].split(":")[0] for g in shown["exec"]}
    assert any("exec 'sh' is not granted" in n for n in shown["notes"])


def test_after_a_final_file_no_later_file_widens_confine(isolated: Path) -> None:
    """Whatever its role: the user's own file after a final site file only narrows the
    site's values, and the defaults for the keys the site leaves unset."""
    _file(isolated / "etc-xdg/safehub/policy.toml",
          "[safehub]\nfinal = true\n[confine]\nconnect_ports = [443, 8443]\n")
    _file(isolated / "config/safehub/policy.toml",
          '[confine]\nexec = ["git"]\nconnect_ports = [8443, 22]\n')
    ruleset = _in_force()
    assert _granted(ruleset) == ([], [], (8443,))
    assert any("exec 'git' is not granted" in n and "final = true" in n for n in ruleset.notes)


def test_a_project_file_narrows_what_the_site_grants(isolated: Path) -> None:
    """The honest cases: the site grants git and a folder; the project narrows to no
    program, or states git again (granted), and a folder inside the site's."""
    data = Path.cwd() / "data"
    _file(isolated / "etc-xdg/safehub/policy.toml",
          f'[confine]\nexec = ["git"]\nwrites = ["{data}"]\n')
    project = _file(Path.cwd() / "safehub.toml", "[confine]\nexec = []\n")
    assert _granted(_in_force()) == ([str(data)], [], (443,))
    project.write_text(f'[confine]\nexec = ["git"]\nwrites = ["{data / "run"}"]\n')
    ruleset = _in_force()
    assert _granted(ruleset) == ([str(data / "run")], ["git"], (443,))
    assert ruleset.notes == ()


def test_the_users_own_file_may_widen_the_defaults(isolated: Path) -> None:
    """With no site file (or one that is not final and sets no [confine] key), the user's
    own config file adds a program and a port."""
    user = _file(isolated / "config/safehub/policy.toml",
                 '[confine]\nexec = ["git"]\nconnect_ports = [443, 8443]\n')
    assert _granted(_in_force()) == ([], ["git"], (443, 8443))
    _file(isolated / "etc-xdg/safehub/policy.toml", "[safehub]\nconfine = true\n")
    assert _granted(_in_force()) == ([], ["git"], (443, 8443))
    # A project's entry is compared by the program it finds: git's own path is git.
    git = os.path.realpath(shutil.which("git") or "git")
    _file(Path.cwd() / "safehub.toml", f'[confine]\nexec = ["{git}", "curl"]\n')
    ruleset = _in_force()
    assert [g.path for g in ruleset.exec if "[confine]" in g.why] == [git]
    assert [n.split(": ", 1)[1] for n in ruleset.notes] == [
        "[confine] exec 'curl' is not granted (a later file only narrows [confine] exec: "
        f"the bound is ['git'] from {user})"]


def test_a_load_reads_the_ruleset_without_loading_the_kernel_bindings() -> None:
    """Every load imports the confine package (the guard reads ``current()``); the
    Landlock and libseccomp bindings (ctypes) are imported only by what confines."""
    code = ("import sys\nfrom safehub.run.confine import current\ncurrent()\n"
            "print(sorted(m for m in sys.modules if m.startswith('safehub.run.confine._')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"
