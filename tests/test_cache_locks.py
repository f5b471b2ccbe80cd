"""The cache's cross-process locks (safehub/_internal/locks.py, ``Cache.lock``): a holder in
another process or another thread is waited for, up to the timeout, then refused with the
fix; a killed holder leaves no lock behind; without ``flock`` the filelock package holds the
same lock. Holders signal through pipes and events, never sleeps."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from safehub._internal.locks import LockTimeout, exclusive
from safehub.errors import CacheError
from safehub.store.cache import Cache
from tests.conftest import child_pythonpath

#: A holder in another process: takes the lock, says so, keeps it until its stdin ends.
HOLDER = """
import sys
from pathlib import Path
from safehub.store.cache import Cache
with Cache(Path(sys.argv[1])).lock(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


def _holder(root: Path, name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), name], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": child_pythonpath()})
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_lock_another_process_holds_is_refused_after_the_timeout_then_taken(
        tmp_path: Path) -> None:
    root = tmp_path / "cache"
    holder = _holder(root, "acme--models")
    with pytest.raises(CacheError, match=r"waited 0s for the lock .*acme--models\.lock") as err, \
            Cache(root, lock_timeout=0).lock("acme--models"):
        pass
    hint = str(err.value.hint)
    assert "wait for it to end" in hint and f"lsof {root / 'v1/locks/acme--models.lock'}" in hint
    lsof = subprocess.run(["lsof", str(root / "v1/locks/acme--models.lock")],
                          capture_output=True, text=True) if shutil.which("lsof") else None
    assert lsof is None or str(holder.pid) in lsof.stdout  # the fix names the holder
    holder.communicate("")  # released as the holder ends
    assert holder.returncode == 0
    with Cache(root, lock_timeout=0).lock("acme--models"):
        assert (root / "v1/locks/acme--models.lock").is_file()


def test_a_killed_holder_leaves_no_lock(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    holder = _holder(root, "c" * 40)
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    with Cache(root, lock_timeout=0).lock("c" * 40):
        pass


def test_another_thread_of_the_process_waits_too(tmp_path: Path) -> None:
    path = str(tmp_path / "t.lock")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with exclusive(path, 0):
            held.set()
            release.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    with pytest.raises(LockTimeout), exclusive(path, 0):
        pass
    release.set()
    thread.join()
    with exclusive(path, 0):
        pass


def test_without_flock_the_filelock_package_holds_the_same_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where safehub cannot import ``fcntl`` (Windows), filelock takes the lock; on this
    platform filelock's lock is the same ``flock``, so a holder in another process wins."""
    import filelock

    made: list[str] = []

    class Spy(filelock.FileLock):
        def __init__(self, path: str, **kwargs: float) -> None:
            made.append(path)
            super().__init__(path, **kwargs)

    monkeypatch.setattr(filelock, "FileLock", Spy)
    root = tmp_path / "cache"
    holder = _holder(root, "b" * 40)
    monkeypatch.setitem(sys.modules, "fcntl", None)  # safehub's import fcntl: ImportError
    with pytest.raises(CacheError, match="waited 0s"), \
            Cache(root, lock_timeout=0).lock("b" * 40):
        pass
    holder.communicate("")
    with Cache(root, lock_timeout=0).lock("b" * 40):
        pass
    assert [Path(p).name for p in made] == [f"{'b' * 40}.lock"] * 2


def test_a_link_planted_where_the_lock_goes_is_refused_and_its_target_untouched(
        tmp_path: Path) -> None:
    """A lock is taken on the plain file safehub makes, never through a link (which
    would create or lock a file elsewhere); the fix works."""
    root = tmp_path / "cache"
    with Cache(root, lock_timeout=0).lock("first"):  # the locks folder exists
        pass
    target, lock = tmp_path / "elsewhere", root / "v1/locks/acme--models.lock"
    lock.symlink_to(target)
    with pytest.raises(CacheError, match="cannot take the lock") as err, \
            Cache(root, lock_timeout=0).lock("acme--models"):
        pass
    assert not target.exists()
    assert f"remove {lock}" in str(err.value.hint)
    lock.unlink()  # the fix
    with Cache(root, lock_timeout=0).lock("acme--models"):
        assert lock.is_file() and not lock.is_symlink()
