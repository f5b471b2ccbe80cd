"""A confinement ruleset as a value: what ``safehub run --confine`` lets its command do.

Built by :mod:`safehub.run.confine.plan`, applied by :func:`safehub.run.confine.apply`, printed by
``--dry-run``, written to the audit line, and handed to the confined command in
``SAFEHUB_CONFINED`` so that the in-process runtime guard can say which of the actions
it records the kernel refuses.

>>> r = Ruleset(7, (Grant("/data", "[confine] writes"),), (Grant("/usr/bin/git", "git"),),
...             (443,))
>>> r.refuses("write", "/data/x"), r.refuses("write", "/etc/passwd")
('', 'outside [confine] writes')
>>> Ruleset.from_json(r.to_json()) == r
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from safehub._internal.frozen import Frozen, field
from safehub._internal.fsutil import within

__all__ = ["ENV", "Grant", "Ruleset", "current"]

ENV = "SAFEHUB_CONFINED"
"""The variable a confined command finds its ruleset in (JSON; for records only)."""


class Grant(Frozen):
    """One path the ruleset allows something beneath (a real path), and why."""

    path: str
    why: str


class Ruleset(Frozen):
    """``writes``: hierarchies the command may change; ``exec``: programs it may run;
    ``connect_ports``: TCP ports it may connect to; ``scoped``: abstract Unix sockets and
    signals stay inside the domain (ABI 6); ``notes``: what the plan could not grant."""

    abi: int
    writes: tuple[Grant, ...] = ()
    exec: tuple[Grant, ...] = ()
    connect_ports: tuple[int, ...] = (443,)
    scoped: bool = False
    notes: tuple[str, ...] = field(default=(), compare=False)
    job: str = ""
    """The job's own temp dir (its ``TMPDIR``), made at start and removed at the end."""
    protected: tuple[Grant, ...] = ()
    """What a later safehub run trusts (cache, records, policy files, lockfile, torch's
    checkpoints, the audit log): never writable by the job, for ``--dry-run`` and records."""

    def refuses(self, kind: str, target: str | int) -> str:
        """Why the kernel refuses an action of ``kind`` (``write``: a real path;
        ``exec``: a program's real path; ``connect``: a TCP port), or ``""``."""
        if kind == "write":
            path = str(target)
            if any(within(path, g.path) for g in self.writes):
                return ""
            return "outside [confine] writes"
        if kind == "exec":
            return "" if any(str(target) == g.path for g in self.exec) else \
                "not in [confine] exec"
        if kind == "connect":
            return "" if target in self.connect_ports else "port not in [confine] connect_ports"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {"abi": self.abi, "scoped": self.scoped,
                "writes": [{"path": g.path, "why": g.why} for g in self.writes],
                "exec": [{"path": g.path, "why": g.why} for g in self.exec],
                "connect_ports": list(self.connect_ports), "notes": list(self.notes),
                "job": self.job,
                "protected": [{"path": g.path, "why": g.why} for g in self.protected]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ruleset:
        return cls(int(data["abi"]),
                   tuple(Grant(str(g["path"]), str(g["why"])) for g in data["writes"]),
                   tuple(Grant(str(g["path"]), str(g["why"])) for g in data["exec"]),
                   tuple(int(p) for p in data["connect_ports"]), bool(data["scoped"]),
                   tuple(str(n) for n in data.get("notes", ())), str(data.get("job", "")),
                   tuple(Grant(str(g["path"]), str(g["why"]))
                         for g in data.get("protected", ())))

    def text(self) -> str:
        """The ruleset as ``--dry-run`` prints it."""
        lines = [f"Landlock ABI {self.abi}; reads are not restricted",
                 "may change (create, write, truncate, remove, rename into), and below:"]
        lines += [f"  {g.path}  ({g.why})" for g in self.writes]
        lines.append("read-only to the job (a later safehub run trusts them):")
        lines += [f"  {g.path}  ({g.why})" for g in self.protected]
        lines.append("may run:")
        lines += [f"  {g.path}  ({g.why})" for g in self.exec]
        lines.append("may connect to TCP ports: " + (", ".join(map(str, self.connect_ports))
                                                    or "none"))
        lines.append("abstract Unix sockets and signals: "
                     + ("inside the job only" if self.scoped else "not restricted (ABI < 6)"))
        from safehub.run.confine._seccomp import REFUSED
        lines.append(f"seccomp refuses (EPERM): {REFUSED}")
        lines += [f"note: {n}" for n in self.notes]
        from safehub._internal.text import printable

        return "\n".join(printable(line) for line in lines)


_CURRENT: list[Ruleset | None] = []


def current(environ: Mapping[str, str] | None = None) -> Ruleset | None:
    """The ruleset this process was confined with by ``safehub run --confine`` (read once
    from ``SAFEHUB_CONFINED``), or None. A record, not a control: the kernel holds it."""
    if environ is not None or not _CURRENT:
        raw = (os.environ if environ is None else environ).get(ENV)
        try:
            found = Ruleset.from_json(json.loads(raw)) if raw else None
        except (ValueError, KeyError, TypeError):
            found = None
        if environ is not None:
            return found
        _CURRENT.append(found)
    return _CURRENT[0]
