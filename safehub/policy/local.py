"""``source="local"`` loads held to ``[safehub] local_dirs``.

A folder on this machine is code its user vouches for, as in torch.hub: nothing is
fetched or hashed. An admin who allows only named repos can still say which folders may
load: every file that sets ``local_dirs`` must list a folder holding the real path
(symlinks resolved); a ``final`` file that says ``unknown_repos = "deny"`` and sets no
``local_dirs`` admits none (later files cannot add one); otherwise ``unknown_repos =
"deny"`` (from any file) without any ``local_dirs`` admits none. A refusal names every
file that must admit the folder, and its fix names files that may set the key (never a
project's ``./safehub.toml``, which may not). A file that says ``mode = "warn"`` only warns
about its own ``local_dirs`` (or its own ``unknown_repos = "deny"``); another file's refusal
holds.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.fsutil import within
from safehub.policy.places import user_file
from safehub.policy.schema import FileSpec

if TYPE_CHECKING:
    from safehub.policy.model import Decision, Policy

__all__ = ["decide_local", "holders"]

Holder = tuple[FileSpec | None, str, tuple[str, ...] | None]


def holders(policy: Policy) -> list[Holder]:
    """The files a local folder must satisfy: (file, its path or the setting's source, its
    ``local_dirs``; None: it sets none and admits no folder)."""
    found: list[Holder] = []
    for spec in policy.layers:
        table = spec.safehub
        if "local_dirs" in table.given:
            found.append((spec, spec.source, tuple(table.local_dirs)))
        elif table.final and "unknown_repos" in table.given and table.unknown_repos == "deny":
            found.append((spec, spec.source, None))
    if not found and policy.setting("unknown_repos").value == "deny":
        source, _ = policy._unknown_deny()
        origin = next((s for s in policy.layers if s.source == source), None)
        found.append((origin, source, None))
    return found


def decide_local(policy: Policy, folder: str) -> Decision:
    """The policy's answer on a local load of ``folder`` (see the module docstring)."""
    from safehub.policy.decision import Decision, Requirements

    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        from safehub.errors import HubconfError

        what = "is not a folder" if os.path.exists(real) else "does not exist"
        raise HubconfError(f"the local folder {folder} {what}, so there is no hubconf.py to "
                           "load (source='local' loads a folder on this machine)",
                           fix=fixes.say("check the path"))
    def admits(dirs: tuple[str, ...] | None) -> bool:
        return any(within(real, os.path.realpath(os.path.expanduser(d))) for d in dirs or ())

    held = holders(policy)
    failing = [(spec, source, dirs) for spec, source, dirs in held if not admits(dirs)]
    if (failing and all(spec is not None and spec.warns for spec, _, _ in failing)
            and not any(admits(dirs) for _, _, dirs in held)
            and policy.setting("unknown_repos").value == "deny"):
        # Only files that warn refuse, and no list admits the folder: an enforced
        # unknown_repos = "deny" still holds (a later file's warn cannot soften it).
        source, soft = policy._unknown_deny()
        origin = next((s for s in policy.layers if s.source == source), None)
        if not soft and all(src != source for _, src, _ in failing):
            failing.append((origin, source, None))
    if not failing:
        return Decision("allow", (f"local folder {real}" + (" (in local_dirs)" if held
                                                             else ""),), Requirements())
    reasons = [f"the local folder {real} is not in local_dirs of {source}" if dirs is not None
               else f"no local folder loads: {source} says unknown_repos = 'deny' and sets "
               "no local_dirs" for _, source, dirs in failing]
    targets: dict[str, tuple[str, ...]] = {}
    for spec, source, dirs in failing:
        where = source if spec is not None and spec.origin != "project" else _user_file()
        targets[where] = (*targets.get(where, ()), *(dirs or ()))
    fix = fixes.both(*(fixes.change(where, "[safehub]", [
        "local_dirs = [" + ", ".join(json.dumps(d) for d in dict.fromkeys((*dirs, real)))
        + "]"]) for where, dirs in targets.items()))
    # A file that says mode = "warn" only warns about its own list; any other refuses.
    soft = all(spec is not None and spec.warns for spec, _, _ in failing)
    return policy._refuse(soft, "; ".join(reasons), fix)


def _user_file() -> str:
    return str(user_file())
