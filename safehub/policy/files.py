"""Finding, reading and caching the policy files.

Files are read in this order (each one that exists):

1. ``policy.toml`` in the site config dirs for "safehub", written by admins: on POSIX
   always ``/etc/xdg/safehub/policy.toml`` first (whatever ``XDG_CONFIG_DIRS`` says: an
   environment that sets it must not drop the admin's floor), then every folder of
   ``XDG_CONFIG_DIRS`` (platformdirs' site config dirs), each real path once;
2. ``policy.toml`` in the user config dir (``~/.config/safehub``);
3. ``./safehub.toml`` in the working directory (a project's file: only the keys the
   declaration allows a project, paths inside the project folder);
4. each file in ``SAFEHUB_POLICY`` (``os.pathsep``-separated; a missing one is an error).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub.errors import PolicyError
from safehub.policy.keys import KEYS
from safehub.policy.model import Policy
from safehub.policy.places import user_file
from safehub.policy.schema import FileSpec, Table, parse_text

__all__ = ["PROJECT_FILE", "SYSTEM_CONFIG_DIR", "Candidate", "describe", "discover",
           "load_policy", "searched", "user_file", "validate_file"]

PROJECT_FILE = "safehub.toml"

#: The fixed system config folder whose ``safehub/policy.toml`` is read on every POSIX
#: system, however ``XDG_CONFIG_DIRS`` is set. Not read from the environment on purpose;
#: the test suite points it at a temporary folder (tests/conftest.py).
SYSTEM_CONFIG_DIR: Path | None = Path("/etc/xdg") if os.name == "posix" else None


class Candidate(Frozen):
    """A place a policy file is looked for, and whether one is there."""

    path: Path
    origin: str  # site, user, project or extra
    exists: bool
    problem: str = ""
    """Why something is at ``path`` yet is not a policy file (a dangling link, a FIFO, a
    folder, a name too long): a policy that cannot be read refuses loads (fail closed)."""


def searched(environ: Mapping[str, str] | None = None) -> list[Candidate]:
    """Every path looked at, in merge order (``safehub policy show``)."""
    import platformdirs

    env = os.environ if environ is None else environ
    dirs = platformdirs.PlatformDirs("safehub", appauthor=False, multipath=True)
    site = [] if SYSTEM_CONFIG_DIR is None else [SYSTEM_CONFIG_DIR / "safehub"]
    site += [Path(p) for p in dirs.site_config_dir.split(os.pathsep) if p]
    places, seen = [], set()
    for folder in site:
        real = os.path.realpath(folder / "policy.toml")
        if real not in seen:  # /etc/xdg in XDG_CONFIG_DIRS too: read once, first
            seen.add(real)
            places.append((folder / "policy.toml", "site"))
    places.append((user_file(), "user"))
    places.append((Path.cwd() / PROJECT_FILE, "project"))
    places += [(Path(extra).expanduser(), "extra")
               for extra in env.get("SAFEHUB_POLICY", "").split(os.pathsep) if extra]
    return [_candidate(p, origin) for p, origin in places]


def _candidate(path: Path, origin: str) -> Candidate:
    """Absent only if nothing is there; anything else that is not a regular file (a
    dangling link, a FIFO, a folder) or cannot be looked at is a problem, never skipped."""
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            return Candidate(path, origin, False, "is a link to nothing")
        return Candidate(path, origin, False)
    except NotADirectoryError:
        return Candidate(path, origin, False)
    except OSError as e:
        return Candidate(path, origin, False, f"cannot be looked at ({e.strerror or e})")
    if not stat.S_ISREG(st.st_mode):
        return Candidate(path, origin, False, "is not a regular file")
    return Candidate(path, origin, True)


def discover(environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """The policy files that apply, in merge order, with their origin."""
    found = []
    for c in searched(environ):
        if c.exists:
            found.append((c.path, c.origin))
        elif c.problem and c.origin != "extra":
            raise PolicyError(
                f"the {c.origin} policy file {str(c.path)!r} {c.problem}",
                fix=fixes.say("make it a readable policy file, or remove it; until then no repo "
                              "loads (fail closed: a policy that cannot be read is never skipped)"))
        elif c.origin == "extra":
            raise PolicyError(
                f"SAFEHUB_POLICY names {str(c.path)!r}, which is not a readable file"
                + (f" (it {c.problem})" if c.problem else ""),
                fix=fixes.say("fix SAFEHUB_POLICY; a missing policy refuses every load (fail "
                              "closed)"),
            )
    return found


_FileKey = tuple[str, str, int, int, int, int]
_PARSED: dict[_FileKey, FileSpec] = {}
_MERGED: dict[tuple[_FileKey, ...], Policy] = {}


def _file_key(path: Path, origin: str) -> _FileKey:
    try:
        st = path.stat()
    except OSError as e:
        raise PolicyError(
            f"policy file {path} cannot be read ({e})",
            fix=fixes.say("check the path (it must name a readable file) and its permissions; "
                          "until then no repo loads (fail closed)"),
        ) from e
    return (str(path), origin, st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def _read(path: Path, key: _FileKey) -> FileSpec:
    hit = _PARSED.get(key)
    if hit is not None:
        return hit
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(
            f"policy file {path} cannot be read ({e})",
            fix=fixes.say("it must be a readable UTF-8 text file, not a folder: fix the path, its "
                          "permissions or its encoding; until then no repo loads (fail closed)"),
        ) from e
    spec = parse_text(text, str(path), origin=key[1])
    if len(_PARSED) > 64:
        _PARSED.clear()
    _PARSED[key] = spec
    return spec


def load_policy(environ: Mapping[str, str] | None = None,
                paths: Sequence[Path] | None = None) -> Policy:
    """Read and merge the policy files (``paths``, or :func:`discover`).

    Parsed files and the merged result are kept per process, keyed by each file's path,
    size, mtime, ctime and inode: an edited file is read again at the next load.
    """
    files = discover(environ) if paths is None else [(p, "extra") for p in paths]
    if not files:
        return Policy()
    keys = tuple(_file_key(p, origin) for p, origin in files)
    merged = _MERGED.get(keys)
    if merged is None:
        merged = Policy.from_files([_read(p, k) for (p, _), k in zip(files, keys, strict=True)])
        if len(_MERGED) > 16:
            _MERGED.clear()
        _MERGED[keys] = merged
    return merged


def validate_file(path: Path, *, origin: str = "extra") -> Policy:
    """Parse one file on its own (``safehub policy validate``); raise PolicyError if bad."""
    return Policy.from_files([_read(path, _file_key(path, origin))])


def describe(policy: Policy) -> dict[str, Any]:
    """The merged policy as data, each rule with its file (``safehub policy show``, beside
    :func:`searched`); ``warn_files``: the files whose own refusals only warn; ``confine``:
    each key merged (entries compared as written: ``safehub run --confine --dry-run``
    resolves links and ``PATH`` names), what no file could widen (``notes``) and each file's
    own value (``layers``)."""
    from safehub.policy.local import holders

    mode, unknown = policy.setting("mode"), policy.setting("unknown_repos")
    return {
        "files": list(policy.files),
        "mode": {"value": mode.value, "from": mode.source},
        "warn_files": [f.source for f in policy.layers if f.warns],
        "unknown_repos": {"value": unknown.value, "from": unknown.source},
        "settings": {name: {"value": _plain(s.value), "from": s.source, "final": s.final}
                     for name in KEYS["safehub"]
                     if KEYS["safehub"][name].merge not in ("per-file", "each")
                     for s in (policy.setting(name),)},
        "local_dirs": [{"from": source, "value": None if dirs is None else list(dirs)}
                       for _, source, dirs in holders(policy)],
        "confine": {name: {"value": _plain(merged.value), "from": merged.source,
                           "final": merged.final, "notes": list(merged.notes),
                           "layers": [{"from": source, "value": _plain(value)}
                                      for source, value in policy.confine_layers(name)]}
                    for name in KEYS["confine"] for merged in (policy.confine(name),)},
        "oci": [{"from": f.source, **_plain(f.oci)} for f in policy.layers if f.oci is not None],
        "rules": [
            {"kind": r.kind, "from": r.source, "index": r.index + 1,
             "admits": r.admits if r.kind == "allow" else None,
             **{k: _plain(v) for k, v in r.table.set_values().items()}}
            for r in policy.rules
        ],
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Table):
        return {k: _plain(v) for k, v in value.set_values().items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
