"""The cyclic garbage collector paused during safehub's own checks
(safehub/_internal/gcpause.py), on again while an archive downloads, and always as the
program set it when the repo's code runs and after the load, whatever happened."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

import safehub
from safehub._internal import gcpause
from safehub.sources.transport import Transport
from tests.conftest import HUBCONF, HubRepo

GC_HUBCONF = HUBCONF + '''

def collector():
    import gc
    return gc.isenabled()
'''


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_blocks_nest_and_the_last_one_out_turns_it_back_on() -> None:
    with gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():
            assert not gc.isenabled()
            with gcpause.running():
                assert gc.isenabled()
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_program_turned_off_stays_off() -> None:
    gc.disable()
    with gcpause.paused(), gcpause.running():  # it was off: running() does not turn it on
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_still_turns_it_back_on() -> None:
    with pytest.raises(ValueError), gcpause.paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_pause_that_leaves_many_objects_promotes_them_unscanned() -> None:
    """A pause that made many lasting objects (a first load's imports) leaves them in the
    oldest generation, scanned by no younger pass; a pause that made a few (a warm load)
    promotes nothing."""
    class Node:  # a tracked object, as a module's classes and functions are
        pass

    gc.collect()
    with gcpause.paused():
        many = [Node() for _ in range(gcpause._MANY + 100)]
    assert gc.isenabled()
    assert any(o is many[0] for o in gc.get_objects(generation=2))
    with gcpause.paused():
        few = Node()
    assert not any(o is few for o in gc.get_objects(generation=2))


def test_two_threads_pausing_at_once_leave_it_on() -> None:
    inside, release = threading.Barrier(3), threading.Event()

    def work() -> None:
        with gcpause.paused():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert not gc.isenabled()
    release.set()
    for t in threads:
        t.join()
    assert gc.isenabled()


def _spy_downloads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    seen: list[tuple[str, bool]] = []
    download, get = Transport.download, Transport.get

    def spied_download(self: Transport, url: str, *args: object, **kwargs: object) -> int:
        def watched(attempt):  # type: ignore[no-untyped-def]
            seen.append(("download", gc.isenabled()))
            return attempt

        real = self._retrying
        monkeypatch.setattr(self, "_retrying", lambda what, a: real(what, watched(a)))
        return download(self, url, *args, **kwargs)  # type: ignore[arg-type]

    def spied_get(self: Transport, url: str, **kwargs: object) -> object:
        seen.append(("get", gc.isenabled()))
        return get(self, url, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Transport, "download", spied_download)
    monkeypatch.setattr(Transport, "get", spied_get)
    return seen


def test_a_load_pauses_it_for_the_checks_only(make_hub_repo,  # type: ignore[no-untyped-def]
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    repo: HubRepo = make_hub_repo(files={"hubconf.py": GC_HUBCONF})
    seen = _spy_downloads(monkeypatch)
    # The repo's code runs with the collector on, cold and warm; it is on after the load.
    assert safehub.load(f"{repo.spec}:v1.0", "collector", trust_repo=True) is True
    assert gc.isenabled()
    assert ("get", False) in seen  # the API's answers: paused
    assert ("download", True) in seen  # the archive: running
    assert safehub.load(f"{repo.spec}:v1.0", "collector", trust_repo=True) is True
    assert gc.isenabled()


def test_a_program_without_the_collector_keeps_it_off(make_hub_repo  # type: ignore[no-untyped-def]
                                                      ) -> None:
    repo: HubRepo = make_hub_repo(files={"hubconf.py": GC_HUBCONF})
    gc.disable()
    assert safehub.load(f"{repo.spec}:v1.0", "collector", trust_repo=True) is False
    assert not gc.isenabled()


def test_a_refused_load_turns_it_back_on(hub_repo: HubRepo) -> None:
    with pytest.raises(safehub.UntrustedRepoError):
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny")  # no terminal: refused
    assert gc.isenabled()
