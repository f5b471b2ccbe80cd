"""The audit log: one JSON line per decision.

Each line has ``time``, ``user``, ``host``, ``pid``, ``repo``, ``ref``, ``commit``,
``digest``, ``entrypoint``, ``decision``, ``reasons`` and ``policy_files``. Decisions:

* ``allow`` -- a policy rule (or ``unknown_repos = "allow"``) allowed it;
* ``consent`` -- the user had trusted this exact content before;
* ``trust_repo`` -- the caller passed ``trust_repo=True`` (or ``None``) where users decide;
* ``prompt-yes`` / ``prompt-no`` -- the answer at the prompt;
* ``warn`` -- a policy violation in ``mode = "warn"``, loaded anyway;
* ``deny`` -- a policy rule refused it; ``refused`` -- nobody could be asked;
* ``error`` -- another check failed (integrity, pin, signature, network).

What a load's line says is built in one place, from what the load produced
(:func:`safehub.outcome.audit_line`); this module writes lines.

The log lives in the user log dir (``audit.jsonl``) unless a policy names ``audit_log``;
a log the policy names must be writable (fail closed), the default one is best effort.
Lines are appended with ``O_APPEND`` in one write, so concurrent processes do not
interleave.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.text import printable
from safehub.errors import PolicyError, SafehubError

__all__ = ["AuditLog"]


@functools.lru_cache(maxsize=1)
def _who() -> tuple[str, str]:
    """The account the process runs as (its effective uid's name: no variable of the
    environment can change it; the uid where the system names none) and the host."""
    try:
        import pwd
    except ImportError:  # no pwd (Windows): the login name
        import getpass

        return getpass.getuser(), socket.gethostname()
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid with no name (a container's)
        user = str(os.geteuid())
    return user, socket.gethostname()


class AuditLog:
    """Appends decision records to ``path``."""

    def __init__(self, path: Path, *, required: bool, policy_files: Sequence[str] = (),
                 around: Callable[[], AbstractContextManager[object]] = nullcontext,
                 sink: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.path = path
        self.sink = sink
        """Where records go instead of ``path`` (a confined job: its ``safehub run``)."""
        self.required = required
        self.policy_files = list(policy_files)
        self._around = around
        """Held while a line is written (the load passes the runtime guard's own-work
        marker: a nested load's line is safehub's, not the repo's)."""

    def write(self, decision: str, *, repo: str, reasons: Sequence[str] = (),
              ref: str | None = None, commit: str | None = None, digest: str | None = None,
              entrypoint: str | None = None, **extra: Any) -> None:
        user, host = _who()
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "user": user, "host": host, "pid": os.getpid(),
            "repo": repo, "ref": ref, "commit": commit, "digest": digest,
            "entrypoint": entrypoint, "decision": decision, "reasons": list(reasons),
            "policy_files": self.policy_files, **extra,
        }
        try:
            with self._around():
                if self.sink is not None:
                    self.sink(record)
                else:
                    self._append((json.dumps(record, sort_keys=True) + "\n").encode())
        except (OSError, SafehubError) as e:
            if self.required:
                raise PolicyError(
                    f"cannot write the audit log {str(self.path)!r} that the policy requires "
                    f"({getattr(e, 'strerror', None) or e})",
                    fix=fixes.say("make it writable, or change audit_log in the policy"),
                ) from e
            warnings.warn(printable(f"safehub could not write its audit log {self.path}: {e}"),
                          stacklevel=3)

    def append_record(self, record: dict[str, Any]) -> None:
        """Append a record made elsewhere (a confined job's), as it is."""
        self._append((json.dumps(record, sort_keys=True) + "\n").encode())

    def _append(self, line: bytes) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(str(self.path), flags, 0o600)
        except FileNotFoundError:  # the first line: its folder is made then
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(str(self.path), flags, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
