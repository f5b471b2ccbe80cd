"""Kernel confinement: ``safehub run --confine -- CMD`` holds a job to its policy with the
kernel's Landlock, whatever code runs in it (native code, threads, ctypes, child
processes: the ruleset is inherited by every thread and child and cannot be undone).

* :mod:`~safehub.run.confine.plan` -- the ruleset for a command, from the ``[confine]`` table;
* :mod:`~safehub.run.confine.ruleset` -- the ruleset as a value (dry run, audit line, record);
* :func:`prepare`, :func:`enter` -- build the kernel's ruleset, and enter it in the child
  that becomes the command (between fork and exec); :func:`apply` -- both, in-process;
* :mod:`~safehub.run.confine._landlock` -- the system calls.

A kernel without Landlock, or without the ABI the ruleset needs, is a
:class:`~safehub.errors.ConfineError`: never silently unconfined.
"""

from __future__ import annotations

from safehub.errors import ConfineError
from safehub.run.confine import _landlock
from safehub.run.confine.ruleset import ENV, Grant, Ruleset, current

__all__ = ["ENV", "MIN_ABI", "Grant", "Ruleset", "apply", "available", "current", "enter",
           "prepare"]

MIN_ABI = 4
"""TCP rules (ABI 4, Linux 6.7) and truncation (ABI 3): below it a job could connect
anywhere or truncate any file, so confinement refuses to start."""

_WRITE = (_landlock.FS.WRITE_FILE | _landlock.FS.REMOVE_DIR | _landlock.FS.REMOVE_FILE
          | _landlock.FS.MAKE_CHAR | _landlock.FS.MAKE_DIR | _landlock.FS.MAKE_REG
          | _landlock.FS.MAKE_SOCK | _landlock.FS.MAKE_FIFO | _landlock.FS.MAKE_BLOCK
          | _landlock.FS.MAKE_SYM | _landlock.FS.REFER | _landlock.FS.TRUNCATE)


def available() -> int:
    """The Landlock ABI this kernel offers; :class:`ConfineError` if it is below
    :data:`MIN_ABI` (naming what is missing)."""
    import platform

    try:
        abi = _landlock.abi()
    except OSError as e:
        raise ConfineError(f"cannot ask the kernel for Landlock ({e.strerror})",
                           hint="run without --confine on this machine, or on a Linux "
                                "kernel with Landlock") from e
    if abi == 0:
        raise ConfineError(
            f"the kernel ({platform.system()} {platform.release()}) has no Landlock: it is "
            "not built in, or not in the lsm= boot parameter", hint="boot a kernel with "
            "Landlock (Linux 6.7 or newer, CONFIG_SECURITY_LANDLOCK, lsm=...,landlock), or "
            "drop --confine, SAFEHUB_CONFINE and [safehub] confine = true")
    if abi < MIN_ABI:
        raise ConfineError(
            f"the kernel's Landlock ABI is {abi}; confinement needs ABI {MIN_ABI} (Linux 6.7) "
            f"for its TCP connect_ports rule and ABI 3 for truncation",
            hint="upgrade the kernel to Linux 6.7 or newer")
    return abi


def prepare(ruleset: Ruleset) -> int:
    """The kernel's ruleset for ``ruleset`` (a descriptor, close-on-exec), ready to be
    entered with :func:`enter` (in the child, between fork and exec). Folders it grants
    that do not exist yet are created first."""
    import os

    paths: list[tuple[str, int]] = []
    for grant in ruleset.writes:
        if not os.path.exists(grant.path):
            try:
                os.makedirs(grant.path, exist_ok=True)
            except OSError as e:
                raise ConfineError(f"cannot create {grant.path} ({grant.why}): {e.strerror}",
                                   hint="create it, or remove it from [confine] writes") from e
        rights = _WRITE if os.path.isdir(grant.path) else _WRITE & _landlock.FS.FILE_ONLY
        paths.append((grant.path, rights))
    paths += [(grant.path, _landlock.FS.EXECUTE) for grant in ruleset.exec]
    scoped = (_landlock.SCOPE.ABSTRACT_UNIX_SOCKET | _landlock.SCOPE.SIGNAL
              if ruleset.scoped else 0)
    try:
        return _landlock.create(handled_fs=_WRITE | _landlock.FS.EXECUTE, paths=paths,
                                handled_net=_landlock.NET.CONNECT_TCP,
                                ports=ruleset.connect_ports, scoped=scoped)
    except OSError as e:
        raise ConfineError(f"the kernel refused the Landlock ruleset ({e.strerror}); "
                           "nothing was started", hint="run `safehub run --confine --dry-run "
                           "-- CMD` to see the ruleset, and report it if it looks right") from e


def enter(prepared: int) -> None:
    r"""Restrict this thread, and every process it starts, to a :func:`prepare`\ d ruleset."""
    _landlock.enforce(prepared)


def apply(ruleset: Ruleset) -> None:
    """Restrict this process (the calling thread, and every process it starts from now
    on) to ``ruleset``, for good."""
    import os

    prepared = prepare(ruleset)
    try:
        enter(prepared)
    except OSError as e:
        raise ConfineError(f"the kernel refused to enter the Landlock ruleset ({e.strerror})",
                           hint="report this as a safehub bug") from e
    finally:
        os.close(prepared)
