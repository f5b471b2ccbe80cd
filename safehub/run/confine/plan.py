"""The ruleset for one ``safehub run --confine`` command, from the policy and settings.

* **writes**: the ``[confine] writes`` folders, plus safehub's own folders (the cache, the
  data folders but never the consent records, the log folder), torch's hub dir, the temp
  dir, ``/dev/shm`` (torch's shared memory between DataLoader workers) and ``/dev/null``;
* **exec**: the command's own program (and, for a script, its interpreter), the Python
  running safehub, the ``[confine] exec`` programs (names looked up on ``PATH`` once, or
  absolute paths), and the dynamic loader each of them names;
* **connect_ports**: ``[confine] connect_ports`` (default 443).

``[confine]`` merges as every policy key (``Policy.confine``, docs/policy.md): the
default is the bound until a site or user file sets a key, and every later file only
narrows it (a project's or ``SAFEHUB_POLICY`` file, and every file after a ``final`` one,
never widens even the default): a folder is kept where it lies inside the bound (links
resolved first), a program or a port where the bound lists it too.
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

from safehub._internal.programs import find_program
from safehub._internal.warn import warn
from safehub.errors import ConfineError, SpecError
from safehub.policy import Policy
from safehub.run.confine.ruleset import Grant, Ruleset
from safehub.run.torchhub import hub_dir

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


def _safehub_folders(settings: Any) -> list[Grant]:
    import platformdirs

    data = Path(settings.data_dir)
    log = Path(settings.audit_log).parent if settings.audit_log else Path(settings.log_dir)
    folders = [(settings.cache_dir, "safehub's cache"),
               (data / "verified", "safehub's records"), (data / "signatures", "safehub's records"),
               (data / "weights", "safehub's records"), (log, "safehub's audit log"),
               (hub_dir(), "torch's hub dir"), (tempfile.gettempdir(), "the temp dir"),
               (platformdirs.user_cache_dir("sigstore-python", appauthor=False),
                "sigstore's cache"),
               (platformdirs.user_data_dir("sigstore-python", appauthor=False),
                "sigstore's data")]
    grants = [Grant(os.path.realpath(os.path.expanduser(str(p))), why) for p, why in folders]
    grants += [Grant(p, why) for p, why in (("/dev/shm", "shared memory (DataLoader workers)"),
                                            (os.devnull, "the null device"))
               if os.path.exists(p)]
    return grants


def plan(policy: Policy, settings: Any, command: Sequence[str], *, abi: int,
         environ: Mapping[str, str] | None = None) -> Ruleset:
    """The ruleset for ``command`` (its first word is looked up on ``PATH``)."""
    env = os.environ if environ is None else environ
    real = find_program(command[0], env)[1]
    if not real or not os.path.isfile(real):
        raise SpecError(f"cannot run {command[0]!r}: not found",
                        hint="check the command and its path")
    # [confine] merges as every policy key (Policy.confine); entries compare as resolved here.
    folder = functools.cache(lambda p: os.path.realpath(os.path.expanduser(p)))
    program = functools.cache(lambda e: _program(e, env))
    merged = {name: policy.confine(name, resolve) for name, resolve in (
        ("writes", folder), ("exec", lambda e: program(e) or e), ("connect_ports", None))}
    writes = list(dict.fromkeys(map(folder, merged["writes"].value)))
    grants = [Grant(p, f"[confine] writes in {merged['writes'].source}") for p in writes]
    grants += [g for g in _safehub_folders(settings) if g.path not in writes]
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
    return Ruleset(abi, tuple(_unique(grants)), tuple(_unique(programs)), ports,
                   scoped=abi >= 6, notes=tuple(notes))


def _unique(grants: Iterable[Grant]) -> list[Grant]:
    seen: dict[str, Grant] = {}
    for g in grants:
        seen.setdefault(g.path, g)
    return list(seen.values())


def confinement(hub: Any, command: Sequence[str], *, dry_run: bool = False) -> Ruleset:
    """The ruleset for ``command`` under ``hub``'s policy and settings; unless
    ``dry_run``, the kernel must offer what it needs (else :class:`ConfineError`) and the
    audit line records it (decision ``confine``)."""
    from safehub.run import confine

    if dry_run:
        try:
            abi = confine.available()
        except ConfineError as e:
            ruleset = plan(hub.policy, hub.settings, command, abi=0)
            return Ruleset(0, ruleset.writes, ruleset.exec, ruleset.connect_ports,
                           notes=(*ruleset.notes, f"not applied here: {e.message}"))
    else:
        abi = confine.available()
    ruleset = plan(hub.policy, hub.settings, command, abi=abi)
    if not dry_run:
        for note in ruleset.notes:
            warn(f"safehub run --confine: {note}")
        hub.audit.write("confine", repo="", reasons=[f"safehub run --confine, Landlock ABI {abi}"],
                        command=list(command), confine=ruleset.to_json())
    return ruleset
