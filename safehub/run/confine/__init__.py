"""Kernel confinement: ``safehub run --confine -- CMD`` holds a job to its policy with the
kernel's Landlock and a seccomp filter for what Landlock cannot hold, whatever code runs
in it (native code, threads, ctypes, child processes: both are inherited by every thread
and child and cannot be undone).

* :mod:`~safehub.run.confine.plan` -- the ruleset for a command, from the ``[confine]`` table;
* :mod:`~safehub.run.confine.ruleset` -- the ruleset as a value (dry run, audit line, record);
* :func:`prepare`, :func:`enter` -- build the kernel's ruleset and the filter, and enter
  both in the child that becomes the command (between fork and exec); :func:`apply` --
  both, in-process;
* :mod:`~safehub.run.confine._landlock` -- the system calls;
* :mod:`~safehub.run.confine._seccomp` -- the filter (sockets, terminal ioctls, memfds
  that could run, io_uring, metadata changes), through libseccomp.

A kernel without Landlock, or without the ABI the ruleset needs, or a machine without
libseccomp, is a :class:`~safehub.errors.ConfineError`: never silently unconfined.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import ConfineError
from safehub.run.confine.ruleset import ENV, Grant, Ruleset, current

if TYPE_CHECKING:
    from safehub.run.confine import _seccomp

# _landlock and _seccomp (ctypes, libseccomp) are imported where they are used: a load in
# a confined job imports this package (the context reads ``current()``), few confine.

__all__ = ["ENV", "MIN_ABI", "Grant", "Prepared", "Ruleset", "apply", "available", "current",
           "enter", "prepare"]

MIN_ABI = 4
"""TCP rules (ABI 4, Linux 6.7) and truncation (ABI 3): below it a job could connect
anywhere or truncate any file, so confinement refuses to start."""

def _write_rights() -> int:
    """Every Landlock right a grant of ``writes`` gives (and what the ruleset handles)."""
    from safehub.run.confine import _landlock

    fs = _landlock.FS
    return (fs.WRITE_FILE | fs.REMOVE_DIR | fs.REMOVE_FILE | fs.MAKE_CHAR | fs.MAKE_DIR
            | fs.MAKE_REG | fs.MAKE_SOCK | fs.MAKE_FIFO | fs.MAKE_BLOCK | fs.MAKE_SYM
            | fs.REFER | fs.TRUNCATE)


def available() -> int:
    """The Landlock ABI this kernel offers; :class:`ConfineError` if it is below
    :data:`MIN_ABI` (naming what is missing)."""
    from safehub.run.confine import _landlock

    try:
        abi = _landlock.abi()
    except OSError as e:
        raise ConfineError(f"cannot ask the kernel for Landlock ({e.strerror})",
                           fix=fixes.say("run without --confine on this machine, or on a Linux "
                                         "kernel with Landlock")) from e
    if abi == 0:
        kernel = os.uname()
        raise ConfineError(
            f"the kernel ({kernel.sysname} {kernel.release}) has no Landlock: it is "
            "not built in, or not in the lsm= boot parameter", fix=fixes.say("boot a kernel with "
            "Landlock (Linux 6.7 or newer, CONFIG_SECURITY_LANDLOCK, lsm=...,landlock), or "
            "drop --confine, SAFEHUB_CONFINE and [safehub] confine = true"))
    if abi < MIN_ABI:
        raise ConfineError(
            f"the kernel's Landlock ABI is {abi}; confinement needs ABI {MIN_ABI} (Linux 6.7) "
            f"for its TCP connect_ports rule and ABI 3 for truncation",
            fix=fixes.say("upgrade the kernel to Linux 6.7 or newer"))
    _with_seccomp(lambda: None)
    return abi


_T = TypeVar("_T")
_SECCOMP_FIX = fixes.say("install libseccomp (Debian, Ubuntu: `apt-get install libseccomp2`; "
                         "Fedora: `dnf install libseccomp`), or drop --confine on this machine")


def _with_seccomp(step: Callable[[], _T]) -> _T:
    """``step``, once libseccomp and the kernel's seccomp filters are there;
    :class:`ConfineError` where they are not, or ``step`` fails."""
    from safehub.run.confine import _seccomp

    try:
        _seccomp.available()
        return step()
    except _seccomp.SeccompError as e:
        raise ConfineError(f"cannot build the seccomp filter: {e.strerror}",
                           fix=_SECCOMP_FIX) from e
    except OSError as e:  # the library itself
        raise ConfineError(f"cannot load libseccomp ({e}); confinement needs it for what "
                           "Landlock cannot hold (socket kinds, terminal ioctls, memfds)",
                           fix=_SECCOMP_FIX) from e


class Prepared(Frozen):
    """What :func:`prepare` built in the parent: the Landlock ruleset (a descriptor,
    close-on-exec) and the seccomp filter (BPF in memory)."""

    landlock: int
    seccomp: _seccomp.Program
    enforce: Callable[[int], None]
    """Landlock's ``restrict_self`` on :attr:`landlock` (bound here: :func:`enter` runs
    between fork and exec, where nothing is imported)."""

    def close(self) -> None:
        os.close(self.landlock)


def prepare(ruleset: Ruleset) -> Prepared:
    """The kernel's ruleset for ``ruleset`` and the seccomp filter, ready to be entered
    with :func:`enter` (in the child, between fork and exec); :meth:`Prepared.close` when
    done. Folders it grants that do not exist yet are created first."""
    from safehub.run.confine import _landlock, _seccomp

    write = _write_rights()
    seccomp = _with_seccomp(lambda: _seccomp.Program(_seccomp.build(_seccomp.rules())))
    paths: list[tuple[str, int]] = []
    for grant in ruleset.writes:
        if not os.path.exists(grant.path):
            try:
                os.makedirs(grant.path, exist_ok=True)
            except OSError as e:
                raise ConfineError(f"cannot create {grant.path} ({grant.why}): {e.strerror}",
                                   fix=fixes.say("create it, or remove it from "
                                                 "[confine] writes")) from e
        rights = write if os.path.isdir(grant.path) else write & _landlock.FS.FILE_ONLY
        paths.append((grant.path, rights))
    paths += [(grant.path, _landlock.FS.EXECUTE) for grant in ruleset.exec]
    scoped = (_landlock.SCOPE.ABSTRACT_UNIX_SOCKET | _landlock.SCOPE.SIGNAL
              if ruleset.scoped else 0)
    try:
        return Prepared(_landlock.create(handled_fs=write | _landlock.FS.EXECUTE, paths=paths,
                                         handled_net=_landlock.NET.CONNECT_TCP,
                                         ports=ruleset.connect_ports, scoped=scoped), seccomp,
                        _landlock.enforce)
    except OSError as e:
        raise ConfineError(f"the kernel refused the Landlock ruleset ({e.strerror}); "
                           "nothing was started",
                           fix=fixes.run("safehub run --confine --dry-run -- CMD", "to see "
                                         "the ruleset (report it if it looks right)")) from e


def enter(prepared: Prepared) -> None:
    r"""Restrict this thread, and every process it starts, to a :func:`prepare`\ d ruleset:
    Landlock first (it sets ``no_new_privs``, which the filter needs), then the filter
    (last, so that it need not allow the Landlock calls). Allocates nothing in C."""
    prepared.enforce(prepared.landlock)
    prepared.seccomp.load()


def apply(ruleset: Ruleset) -> None:
    """Restrict this process (the calling thread, and every process it starts from now
    on) to ``ruleset``, for good."""
    prepared = prepare(ruleset)
    try:
        enter(prepared)
    except OSError as e:
        raise ConfineError(f"the kernel refused to enter the Landlock ruleset or the seccomp "
                           f"filter ({e.strerror})",
                           fix=fixes.say("report this as a safehub bug")) from e
    finally:
        prepared.close()
