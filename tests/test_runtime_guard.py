"""The runtime guard on real parts: loopback sockets, real processes, real files.

Each rule has the attack (refused, where it happens and again at the end of the load) and
the legitimate case (allowed). The code under the guard stands for a repo's hubconf and
entrypoint; it swallows every exception, as careless or hostile code may.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from runtime_helpers import (
    REPO,
    Place,
    attempt,
    connect,
    guarded,
    place,
    port,
    python,
    raw_connect,
)

from safehub.errors import PolicyError, RuntimeGuardError, SafehubError
from safehub.run.runtime import OwnWork, RuntimeGuard, RuntimeRules, _hook, own_work

__all__ = ["place", "port"]  # fixtures


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


# -- processes ---------------------------------------------------------------------------

def test_observe_without_subprocess_key_records_programs(place: Place) -> None:
    report, error = guarded(place, lambda: python("print('hi')"))
    assert error is None
    assert report.programs == [f"{sys.executable} -c 'print('\"'\"'hi'\"'\"')'"]


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


# -- safehub's own work during a load ------------------------------------------------------

def _own(place: Place) -> OwnWork:
    cache = place.outside / "cache"
    (cache / "trust").mkdir(parents=True)
    return OwnWork(hosts=("localhost",), roots=(str(cache.resolve()),),
                   denied=(str((cache / "trust").resolve()),))


def test_own_work_on_its_list_is_neither_recorded_nor_refused(place: Place, port: int) -> None:
    own = _own(place)
    guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo=REPO, tree=place.tree, own=own)
    with pytest.raises(RuntimeGuardError) as info, guard.active():
        with own_work():  # safehub's nested fetch, its records, its audit line
            (place.outside / "cache" / "tree.zip").write_text("x")
            connect("localhost", port)
        attempt(lambda: (place.outside / "cache" / "planted").write_text("x"))
    # the same write by the repo's own code is refused, and is all the record holds
    assert guard.report.hosts == [] and guard.report.lookups == []
    assert guard.report.writes == [str((place.outside / "cache" / "planted").resolve())]
    assert guard.report.refused == [info.value]
    assert (place.outside / "cache" / "tree.zip").exists()


@pytest.mark.parametrize("what", ["consent", "outside", "process", "other host"])
def test_own_work_off_its_list_is_decided_by_the_guard(place: Place, port: int,
                                                      what: str) -> None:
    """What is not on the list (consent records, other folders, any process, other hosts)
    is the guard's to decide, marker or not: refused under enforce, and recorded."""
    def code() -> None:
        with own_work():
            if what == "consent":
                (place.outside / "cache" / "trust" / "evil.json").write_text("{}")
            elif what == "outside":
                (place.outside / "elsewhere").write_text("x")
            elif what == "process":
                python()
            else:
                raw_connect("127.0.0.2", port)

    guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo=REPO, tree=place.tree,
                         own=_own(place))
    with pytest.raises(RuntimeGuardError) as info, guard.active():
        attempt(code)
    assert guard.report.refused == [info.value]
    assert not (place.outside / "cache" / "trust" / "evil.json").exists()
    assert not (place.outside / "elsewhere").exists()


def test_own_work_outside_any_guard_changes_nothing(place: Place) -> None:
    with own_work():
        (place.outside / "x").write_text("x")
    assert _hook._STATE.own == 0 and _hook._STATE.stack == ()


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


def test_bad_rules_are_policy_errors() -> None:
    for keys in ({"network": ("http://x/",)}, {"writes": ("relative/path",)},
                 {"subprocess": ("rm -rf",)}, {"mode": "audit"}):
        with pytest.raises(PolicyError):
            RuntimeRules(source="/etc/safehub/policy.toml", **keys)


