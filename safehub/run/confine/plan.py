"""The ruleset for one ``safehub run --confine`` command, from the policy and settings.

* **writes**: the ``[confine] writes`` folders, the job's own temp dir (its ``TMPDIR``),
  ``/dev/shm`` (torch's shared memory between DataLoader workers) and ``/dev/null``; never
  what a later run trusts (:func:`protected`: the cache, records, policy files, lockfile,
  torch's checkpoints, the audit log): a write grant that holds one is refused;
* **exec**: the command's own program (and, for a script, its interpreter), the Python
  running safehub, the ``[confine] exec`` programs (names looked up on ``PATH`` once, or
  absolute paths), and the dynamic loader each of them names;
* **connect_ports**: ``[confine] connect_ports`` (default 443).

``[confine]`` merges as every policy key (``Policy.confine``, docs/policy.md): the
default is the bound until a site or user file sets a key, and every later file only
narrows it (a project's or ``SAFEHUB_POLICY`` file, and every file after a ``final`` one,
never widens even the default): a folder is kept where it lies inside the bound, a program
or a port where the bound lists it too. Folders are opened without following a link at any
component, so a link replaced between runs moves no grant.
"""

from __future__ import annotations

import functools
import os
import struct
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.fsutil import within
from safehub._internal.programs import find_program
from safehub._internal.torchdir import torch_hub_dir
from safehub._internal.warn import warn
from safehub.errors import ConfineError, SpecError
from safehub.policy import Policy
from safehub.run.confine.ruleset import Grant, Ruleset

__all__ = ["confinement", "plan"]

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})


def _program(entry: str, environ: Mapping[str, str]) -> str:
    """An exec entry's real path ("" if a name is not on ``PATH``)."""
    if os.path.isabs(entry):
        return os.path.realpath(entry)
    return find_program(entry, environ)[1]


def elf_interpreter(path: str) -> str | None:
    """The dynamic loader an ELF program names (``PT_INTERP``), or None.

    >>> elf_interpreter(os.path.realpath(sys.executable)) is None or True
    True
    """
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or len(head) < 64:
                return None
            wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
            if wide:
                phoff, = struct.unpack_from(order + "Q", head, 32)
                size, count = struct.unpack_from(order + "HH", head, 54)
            else:
                phoff, = struct.unpack_from(order + "I", head, 28)
                size, count = struct.unpack_from(order + "HH", head, 42)
            for i in range(min(count, 64)):
                f.seek(phoff + i * size)
                entry = f.read(size)
                if struct.unpack_from(order + "I", entry, 0)[0] != 3:  # PT_INTERP
                    continue
                offset, length = (struct.unpack_from(order + "QxxxxxxxxxxxxxxxxQ", entry, 8)
                                  if wide else struct.unpack_from(order + "IxxxxxxxxI", entry, 4))
                f.seek(offset)
                return f.read(min(length, 4096)).split(b"\0", 1)[0].decode() or None
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _shebang(path: str) -> list[str]:
    """The interpreter line of a script (``#!/usr/bin/env python3`` -> its words)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return []
    return first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []


def _command_programs(program: str, environ: Mapping[str, str]) -> tuple[list[Grant], list[str]]:
    """What running ``program`` executes: itself and, for a script, its interpreter."""
    grants, notes = [Grant(program, "the command")], []
    words = _shebang(program)
    if words:
        interpreter = os.path.realpath(words[0])
        grants.append(Grant(interpreter, "the command's interpreter"))
        if os.path.basename(interpreter) == "env" and len(words) > 1:
            found = find_program(words[1], environ)[1]
            if found:
                grants.append(Grant(found, "the command's interpreter"))
                interpreter = found
        if os.path.basename(interpreter) in _SHELLS:
            notes.append(f"{program} is a shell script: the programs it starts need [confine] "
                         "exec entries (for a pyenv shim, give the interpreter's own path: "
                         "`pyenv which python`)")
    return grants, notes


def _job_folders(job: str) -> list[Grant]:
    """What every job may change: its own temp dir, shared memory, the null device."""
    grants = [Grant(job, "the job's own temp dir (its TMPDIR; removed when it ends)")]
    grants += [Grant(p, why) for p, why in (("/dev/shm", "shared memory (DataLoader workers)"),
                                            (os.devnull, "the null device"))
               if os.path.exists(p)]
    return grants


_MOVE = {"the lockfile in force": "SAFEHUB_LOCKFILE, or run the job from another folder",
         "torch's checkpoint folder": "TORCH_HOME"}


def _how_to_move(why: str, settings: Any) -> str:
    """How the user moves a protected path out of a write grant."""
    own = {p.what.split(":")[0]: p.moved_by for p in settings.own_places()}
    for what, how in {**own, **_MOVE}.items():
        if why.startswith(what):
            return f"move {what} elsewhere ({how})"
    if "project policy file" in why:
        return "run the job from another folder"
    return "move the policy file (or the folder) out of the grant"


def protected(settings: Any, lockfile: Path | None = None) -> list[Grant]:
    """What a later safehub run trusts, so the job may never change it: the cache, every
    record (consent, verified trees, signature verdicts, weight pins), each place a policy
    file is read from, the lockfile in force (``./safehub.lock`` where none is named),
    torch's checkpoint folder (safehub pins what it finds there) and the audit log."""
    from safehub.policy.files import searched

    items: list[tuple[Any, str]] = [(p.path, p.what) for p in settings.own_places()]
    items += [(lockfile or settings.lockfile_path, "the lockfile in force"),
              (os.path.join(torch_hub_dir().path, "checkpoints"), "torch's checkpoint folder")]
    items += [(c.path, f"a {c.origin} policy file" if c.exists else
               f"where a {c.origin} policy file would be read") for c in searched()]
    grants: list[Grant] = []
    for path, why in items:
        written = os.path.abspath(os.path.expanduser(str(path)))
        grants += [Grant(p, why) for p in dict.fromkeys((written, os.path.realpath(written)))]
    return _unique(grants)


def _check_writes(writes: Sequence[Grant], programs: Sequence[Grant],
                  guarded: Sequence[Grant], settings: Any) -> None:
    """Refuse a ruleset in which the job could change what a later run trusts, or what a
    later run's grants are made of."""
    from safehub.run.confine import _landlock

    for grant in writes:
        for kept in guarded:
            if within(kept.path, grant.path) or within(grant.path, kept.path):
                where = "holds" if within(kept.path, grant.path) else "lies inside"
                raise ConfineError(
                    f"the write grant {grant.path} ({grant.why}) {where} {kept.path} "
                    f"({kept.why}): a confined job could change what the next safehub run "
                    "trusts", fix=fixes.say(
                        ("grant a folder that does not hold it (a subfolder for the job's "
                         "output, such as checkpoints/), or " if where == "holds"
                         else "grant a folder outside it, or ")
                        + _how_to_move(kept.why, settings)))
        if not os.path.lexists(grant.path):
            continue  # made when the command starts, then opened the same way
        try:
            os.close(_landlock.open_path(grant.path))
        except OSError as e:
            raise ConfineError(
                f"the write grant {grant.path} ({grant.why}) cannot be opened without "
                f"following a symbolic link ({e.strerror}): a link can be replaced between "
                "runs and would move the grant", fix=fixes.say("name the real folder in [confine] "
                f"writes: {os.path.realpath(grant.path)}")) from e
    for program in programs:
        holder = next((g for g in writes if within(program.path, g.path)), None)
        if holder is not None and "[confine] exec" in program.why:
            raise ConfineError(
                f"the program {program.path} ({program.why}) lies in the write grant "
                f"{holder.path} ({holder.why}): the job could replace what a later run is "
                "allowed to start", fix=fixes.say("install the program outside the folders the job "
                                                  "may write, or drop it from [confine] exec"))


def plan(policy: Policy, settings: Any, command: Sequence[str], *, abi: int,
         environ: Mapping[str, str] | None = None, job: str = "",
         lockfile: Path | None = None) -> Ruleset:
    """The ruleset for ``command`` (its first word is looked up on ``PATH``); ``job`` is
    the job's own temp dir (a fresh one beneath the temp dir when it runs)."""
    env = os.environ if environ is None else environ
    real = find_program(command[0], env)[1]
    if not real or not os.path.isfile(real):
        raise SpecError(f"cannot run {command[0]!r}: not found",
                        fix=fixes.say("check the command and its path")
                        ) from FileNotFoundError(command[0])
    # [confine] merges as every policy key (Policy.confine); entries compare as resolved
    # here. Folders are never resolved through links: a grant is opened without following
    # one (a link in a granted path is refused when the ruleset is checked).
    folder = functools.cache(lambda p: os.path.abspath(os.path.expanduser(p)))
    program = functools.cache(lambda e: _program(e, env))
    merged = {name: policy.confine(name, resolve) for name, resolve in (
        ("writes", folder), ("exec", lambda e: program(e) or e), ("connect_ports", None))}
    writes = list(dict.fromkeys(map(folder, merged["writes"].value)))
    grants = [Grant(p, f"[confine] writes in {merged['writes'].source}") for p in writes]
    job = job or os.path.join(tempfile.gettempdir(), "safehub-job-XXXXXXXX")
    grants += [g for g in _job_folders(job) if g.path not in writes]
    programs, notes = _command_programs(real, env)
    notes += [note for m in merged.values() for note in m.notes]
    programs.append(Grant(os.path.realpath(sys.executable), "the Python running safehub"))
    where = merged["exec"].source
    for entry in merged["exec"].value:
        if program(entry):
            programs.append(Grant(program(entry), f"{entry}: [confine] exec in {where}"))
        else:
            notes.append(f"[confine] exec entry {entry!r} ({where}) is not on PATH: not granted")
    programs += [Grant(os.path.realpath(loader), "the dynamic loader")
                 for loader in dict.fromkeys(filter(None, map(elf_interpreter,
                                                              (g.path for g in programs))))]
    ports = tuple(dict.fromkeys(merged["connect_ports"].value))
    grants = _outermost(_unique(grants))
    guarded = protected(settings, lockfile)
    _check_writes(grants, programs, guarded, settings)
    return Ruleset(abi, tuple(grants), tuple(_unique(programs)), ports,
                   scoped=abi >= 6, notes=tuple(notes), job=job, protected=tuple(guarded))


def _outermost(grants: list[Grant]) -> list[Grant]:
    """Grants that lie inside another write grant add nothing and are dropped: the outer
    one is opened once, whatever the inner path is replaced with between runs."""
    return [g for g in grants
            if not any(o is not g and o.path != g.path and within(g.path, o.path)
                       for o in grants)]


def _unique(grants: Iterable[Grant]) -> list[Grant]:
    seen: dict[str, Grant] = {}
    for g in grants:
        seen.setdefault(g.path, g)
    return list(seen.values())


def confinement(hub: Any, command: Sequence[str], *, dry_run: bool = False) -> Ruleset:
    """The ruleset for ``command`` under ``hub``'s policy and settings; unless
    ``dry_run``, the kernel must offer what it needs (else :class:`ConfineError`), the
    job's own temp dir is made, and the audit line records it (decision ``confine``)."""
    from safehub.run import confine

    lockfile = hub.lockfile_path
    if dry_run:
        try:
            abi = confine.available()
        except ConfineError as e:
            ruleset = plan(hub.policy, hub.settings, command, abi=0, lockfile=lockfile)
            return Ruleset(0, ruleset.writes, ruleset.exec, ruleset.connect_ports,
                           notes=(*ruleset.notes, f"not applied here: {e.message}"),
                           job=ruleset.job, protected=ruleset.protected)
        return plan(hub.policy, hub.settings, command, abi=abi, lockfile=lockfile)
    abi = confine.available()
    job = tempfile.mkdtemp(prefix="safehub-job-")
    try:
        ruleset = plan(hub.policy, hub.settings, command, abi=abi, job=job, lockfile=lockfile)
        for note in ruleset.notes:
            warn(f"safehub run --confine: {note}")
        hub.audit.write("confine", repo="", reasons=[f"safehub run --confine, Landlock ABI {abi}"],
                        command=list(command), confine=ruleset.to_json())
    except BaseException:
        os.rmdir(job)
        raise
    return ruleset
