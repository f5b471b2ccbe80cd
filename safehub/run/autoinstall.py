"""Install safehub into torch.hub the moment torch.hub is imported (``safehub run``), and
start the command it runs."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, TYPE_CHECKING, Any

from safehub._internal import fixes
from safehub._internal.fsutil import within
from safehub.errors import ConfineError, SpecError

if TYPE_CHECKING:
    from safehub._internal.broker import Broker
    from safehub.run.confine import Ruleset

__all__ = ["SITE_DIR", "arm", "launch"]

SITE_DIR = Path(__file__).resolve().parents[1] / "_data" / "autoinstall"


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        import safehub

        safehub.install()


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for ``torch.hub`` and wraps its loader; then steps aside."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch.hub":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


_PACKAGE = str(Path(__file__).resolve().parents[1])


def _excepthook(kind: type[BaseException], error: BaseException, tb: TracebackType | None,
                previous: Callable[..., Any] = sys.__excepthook__) -> None:
    """A refusal the program did not catch: its own frames down to the call it made, then
    safehub's message and fix; no frames of safehub's (they say nothing the user can act
    on). Any other error goes to the hook that was there before.

    What came from outside (a rule's reason, a path, a server's words) is made printable,
    field by field (``str(error)``: :func:`safehub._internal.text.error`); the frames too,
    their line breaks kept."""
    from safehub._internal.text import printable
    from safehub.errors import SafehubError

    if not isinstance(error, SafehubError):
        previous(kind, error, tb)
        return
    import traceback

    frames = []
    for frame in traceback.extract_tb(tb):
        if frame.filename.startswith("<safehub") or within(os.path.realpath(frame.filename),
                                                            _PACKAGE):
            break  # safehub's frames, and whatever ran below them
        frames.append(frame)
    shown = printable("".join(["Traceback (most recent call last):\n",
                               *traceback.format_list(frames)]), lines=True) if frames else ""
    sys.stderr.write(f"{shown}safehub: {printable(type(error).__name__)}: {error}\n")
    sys.stderr.flush()


def _hook_refusals() -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException,
             tb: TracebackType | None) -> None:
        _excepthook(kind, error, tb, previous)

    sys.excepthook = hook


def arm() -> None:
    """Route torch.hub through safehub now, or as soon as it is imported; a refusal the
    program does not catch is shown as the message and its fix."""
    _hook_refusals()
    if "torch.hub" in sys.modules:
        import safehub

        safehub.install()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def launch(command: Sequence[str], ruleset: Ruleset | None = None,
           broker: Broker | None = None, environment: Mapping[str, str] | None = None,
           stdout: IO[Any] | None = None, routed: bool = True) -> int:
    """Run ``command`` with torch.hub routed through safehub in every Python process it
    starts (held to ``ruleset`` by the kernel, if given, from before its first
    instruction); wait for it and return its exit code (128 + N if signal N ended it).

    A confined job runs in a session of its own, without the controlling terminal (no
    ``TIOCSTI`` into the user's shell, no ``/dev/tty``): the terminal's signals reach
    only this process, which passes them on to the job's process group. Its requests (a
    cache miss, its audit lines) are served by ``broker`` (:mod:`safehub.operations.job`);
    its own temp dir (``TMPDIR``) is removed when it ends. ``environment``: variables
    set for the job (``--locked``: ``SAFEHUB_LOCKED=1``); ``stdout``: where its output goes
    (this process's own, unless given); ``routed=False``: torch.hub is not routed in it
    (a ``safehub`` command of its own)."""
    import subprocess

    env = {**os.environ, **(environment or {})}
    if routed:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE_DIR),
                                                        env.get("PYTHONPATH", "")) if p)
    program, prepared, served = command[0], None, broker
    if ruleset is not None:
        from safehub.run import confine

        env[confine.ENV] = json.dumps(ruleset.to_json(), separators=(",", ":"))
        program = ruleset.exec[0].path  # the command's program, as the ruleset resolved it
        if ruleset.job:
            env["TMPDIR"] = ruleset.job
        prepared = confine.prepare(ruleset)
    if served is not None:
        env.update(served.environment())
    try:
        with _Forward(prepared is not None) as forward:
            job = subprocess.Popen(list(command), executable=program, env=env, stdout=stdout,
                                   start_new_session=prepared is not None, preexec_fn=(
                None if prepared is None else lambda: confine.enter(prepared)),
                pass_fds=() if served is None else (served.child_fd,))
            if served is not None:
                served.start()
            code = forward.wait(job)
    except OSError as e:
        raise SpecError(f"cannot run {command[0]!r}: {e.strerror}",
                        fix=fixes.say("check the command and its path")) from e
    except subprocess.SubprocessError as e:  # entering the ruleset failed in the child
        raise ConfineError(f"the kernel refused to hold {command[0]!r} to the ruleset; "
                           "nothing ran", fix=fixes.say("report this as a safehub bug")) from e
    finally:
        if prepared is not None:
            prepared.close()
        if served is not None:
            served.stop()
        if ruleset is not None and ruleset.job:
            import shutil  # descriptor-based: never follows a link the job left there

            shutil.rmtree(ruleset.job, ignore_errors=True)
    return 128 - code if code < 0 else code


class _Forward:
    """While a job in a session of its own runs: the signals this process gets from the
    terminal or from ``kill`` (interrupt, quit, hangup, terminate, window size) go to
    the job's process group instead. A signal ignored here stays ignored, and the job
    inherits that (``SIGINT`` in a background job of a shell). Signals that come before
    the job has started are passed on once it has. Ctrl-Z stops this process only (the
    job, in another session, runs on; ``fg`` continues this process)."""

    SIGNALS = ("SIGINT", "SIGQUIT", "SIGHUP", "SIGTERM", "SIGWINCH")

    def __init__(self, enabled: bool) -> None:
        import signal
        import threading

        self.group = 0
        self.pending: list[int] = []
        self.previous: dict[int, Any] = {}
        if enabled and threading.current_thread() is threading.main_thread():
            self.signals = [getattr(signal, name) for name in self.SIGNALS]
        else:  # not confined (the job shares the terminal), or no handlers in this thread
            self.signals = []

    def __enter__(self) -> _Forward:
        import signal

        for number in self.signals:
            if signal.getsignal(number) not in (signal.SIG_IGN, None):
                self.previous[number] = signal.signal(number, self._received)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def _received(self, number: int, frame: object) -> None:

        if not self.group:
            self.pending.append(number)
        else:
            self._send(number)

    def _send(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group has gone
            os.killpg(self.group, number)

    def wait(self, job: Any) -> int:
        """Pass signals on to ``job`` (a ``subprocess.Popen``) until it ends; its code."""
        if self.previous:
            self.group = job.pid  # its own session: its process group has its number
            while self.pending:
                self._received(self.pending.pop(0), None)
        try:
            return int(job.wait())
        except BaseException:  # as subprocess.call: no job left behind
            job.kill()
            job.wait()
            raise
