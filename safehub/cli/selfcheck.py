"""``safehub env``: one self-check of this environment, as ``hf env`` is for Hugging Face.

Read-only and offline: versions from the installed metadata (nothing is imported), the
policy files searched and whether each parses, the lockfile, the folders safehub and torch
use (and whether they can be written), the environment hook, what the kernel offers
``--confine``, and where offline, locked and noninteractive came from.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from safehub.cli import text
from safehub.cli.common import EXIT_OK, emit
from safehub.errors import PolicyError, SafehubError

__all__ = ["environment_report"]

_PACKAGES = ("torch", "sigstore", "model-signing", "requests", "huggingface_hub",
             "cryptography")


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _writable(path: Path) -> bool:
    """Whether ``path`` (or the nearest folder above it that exists) can be written."""
    for place in (path, *path.parents):
        if place.exists():
            return place.is_dir() and os.access(place, os.W_OK | os.X_OK)
    return False


def _folder(path: Path) -> dict[str, Any]:
    return {"path": str(path), "exists": path.is_dir(), "writable": _writable(path)}


def _policy_files() -> tuple[list[dict[str, Any]], Any]:
    """Each place searched (whether a file is there and parses), and the merged policy (the
    defaults when a file does not parse: what follows is then the environment's alone)."""
    from safehub.policy import Policy, load_policy, searched, validate_file

    files = []
    for place in searched():
        row: dict[str, Any] = {"path": str(place.path), "role": place.origin,
                               "exists": place.exists, "valid": None, "error": None}
        if place.problem:
            row.update(valid=False, error=place.problem)
        elif place.exists:
            try:
                validate_file(place.path, origin=place.origin)
                row["valid"] = True
            except PolicyError as e:
                row.update(valid=False, error="; ".join(e.faults) or e.summary)
        files.append(row)
    try:
        return files, load_policy()
    except SafehubError:
        return files, Policy()


def _kernel() -> dict[str, Any]:
    from safehub.run.confine import MIN_ABI, _landlock, _seccomp

    try:
        abi: int | None = _landlock.abi()
        landlock_error = "" if abi and abi >= MIN_ABI else (
            "no Landlock in this kernel" if not abi else f"ABI {abi} < {MIN_ABI} (Linux 6.7)")
    except OSError as e:
        abi, landlock_error = None, f"cannot ask the kernel ({e.strerror})"
    try:
        seccomp: str | None = _seccomp.available()
        seccomp_error = ""
    except OSError as e:  # SeccompError is one
        seccomp, seccomp_error = None, str(e.strerror or e)
    return {"landlock_abi": abi, "landlock_ok": not landlock_error,
            "landlock_error": landlock_error or None, "libseccomp": seccomp,
            "seccomp_error": seccomp_error or None,
            "confine_ok": not landlock_error and not seccomp_error}


def environment_report() -> dict[str, Any]:
    """What ``safehub env --json`` prints."""
    from safehub import __version__
    from safehub.config import Settings, noninteractive, resolve_setting
    from safehub.run import environment

    files, policy = _policy_files()
    settings = Settings.from_env(policy=policy)
    lockfile = settings.lockfile_path
    torch_home = Path(os.path.expanduser(os.environ.get("TORCH_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "torch")))
    asked = resolve_setting(policy, "noninteractive", os.environ)
    quiet = noninteractive(policy, os.environ)
    return {
        "versions": {"safehub": __version__, "python": sys.version.split()[0],
                     **{p: _version(p) for p in _PACKAGES}},
        "policy_files": files,
        "lockfile": {"path": str(lockfile), "exists": lockfile.is_file(),
                     "chosen_by": "SAFEHUB_LOCKFILE or the policy's lockfile"
                     if settings.lockfile else "the default: ./safehub.lock"},
        "cache_dir": {**_folder(settings.cache_dir), "chosen_by": settings.cache_source},
        "data_dir": _folder(settings.data_dir),
        "torch_hub_dir": _folder(torch_home / "hub"),
        "environment_hook": environment.hook().to_json(),
        "kernel": _kernel(),
        "settings": {
            "offline": {"value": settings.offline,
                        "from": str(settings.offline_source) if settings.offline else None},
            "locked": {"value": settings.locked,
                       "from": str(settings.locked_source) if settings.locked else None},
            "noninteractive": {"value": quiet, "from": (
                str(asked[1]) if asked[0] else "CI, SAFEHUB_CONFINED or a stdin that is "
                "not a terminal" if quiet else None)}},
    }


def _shown(r: dict[str, Any]) -> str:
    def yes(flag: object) -> str:
        return "yes" if flag else "no"

    versions = r["versions"]
    rows = [f"safehub {versions['safehub']} (Python {versions['python']})"]
    rows += [f"  {p} {v or 'not installed'}" for p, v in versions.items()
             if p not in ("safehub", "python")]
    rows.append("policy files (merge order):")
    for f in r["policy_files"]:
        state = ("not there" if not f["exists"] and f["valid"] is None else
                 "ok" if f["valid"] else f"INVALID: {f['error']}")
        rows.append(f"  {f['role']:<8} {f['path']}: {state}")
    lock = r["lockfile"]
    rows.append(f"lockfile: {lock['path']} ({'there' if lock['exists'] else 'not there'}; "
                f"{lock['chosen_by']})")
    for key, label in (("cache_dir", "cache dir"), ("data_dir", "data dir"),
                       ("torch_hub_dir", "torch hub dir")):
        d = r[key]
        rows.append(f"{label}: {d['path']} (exists: {yes(d['exists'])}, writable: "
                    f"{yes(d['writable'])})")
    hook = r["environment_hook"]
    rows.append(f"environment hook: {hook.get('state')} ({hook.get('path')})")
    k = r["kernel"]
    rows.append(f"Landlock ABI: {k['landlock_abi']}"
                + (f" ({k['landlock_error']})" if k["landlock_error"] else ""))
    rows.append(f"libseccomp: {k['libseccomp'] or 'not available'}"
                + (f" ({k['seccomp_error']})" if k["seccomp_error"] else ""))
    rows.append(f"--confine works here: {yes(k['confine_ok'])}")
    for name, s in r["settings"].items():
        rows.append(f"{name}: {'on' if s['value'] else 'off'}"
                    + (f" (from {s['from']})" if s["from"] else ""))
    return text.lines(rows)


def env(args: argparse.Namespace) -> int:
    """``safehub env``."""
    report = environment_report()
    emit(args, report, _shown(report))
    return EXIT_OK
