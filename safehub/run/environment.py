"""The environment hook: ``safehub install --environment`` writes one ``.pth`` file into the
active environment's site-packages, so that every Python process of that environment routes
torch.hub through safehub, whatever its command line or environment says: ``python -E``,
``python -I``, a scrubbed environment, a program started by a shell script that drops
``PYTHONPATH``. Only ``python -S`` (no ``site`` at all) skips it.

Python's ``site`` module runs a ``.pth`` line that starts with ``import``: this one arms
safehub (:func:`safehub.run.autoinstall.arm`), which replaces torch.hub's functions the
moment torch.hub is imported, and does nothing else; if safehub is no longer importable
(uninstalled, the file left behind), it does nothing at all.

It is an honest hook, not a cage: code that runs in the process can undo it
(``safehub.uninstall()``). The kernel's confinement (``safehub run --confine``) is what
holds code that might not be honest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub._internal.fsutil import atomic_write
from safehub.errors import PolicyDenied, SafehubError

if TYPE_CHECKING:
    from safehub.policy import Policy

__all__ = ["FILE_NAME", "LINE", "Hook", "gate", "hook", "install", "require", "uninstall"]

FILE_NAME = "safehub-torchhub.pth"
LINE = ('import sys; exec("try:\\n import safehub.run.autoinstall as _safehub\\n'
        'except ImportError:\\n pass\\nelse:\\n _safehub.arm()")\n')
"""The file's one line (``site`` runs a line that starts with ``import``)."""


class Hook(Frozen):
    """Where the environment hook goes, and whether it is in place."""

    path: Path
    state: str
    """``installed``, ``missing``, or ``changed`` (a file of that name that is not ours)."""

    @property
    def installed(self) -> bool:
        return self.state == "installed"

    def to_json(self) -> dict[str, str]:
        return {"path": str(self.path), "state": self.state}

    def describe(self) -> str:
        if self.installed:
            return f"the environment hook is in place ({self.path})"
        how = "missing" if self.state == "missing" else "changed (not the line safehub wrote)"
        return (f"the environment hook is {how}: {self.path} (`safehub install --environment` "
                "routes every Python process of this environment)")


def site_packages() -> Path:
    """The active environment's site-packages (a virtual environment's own, if active)."""
    import sysconfig  # only where the hook is looked for: not on a load the policy lets be

    return Path(sysconfig.get_paths()["purelib"])


def hook(folder: Path | None = None) -> Hook:
    """The hook's state in ``folder`` (default: :func:`site_packages`)."""
    path = (folder or site_packages()) / FILE_NAME
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(4096)
    except FileNotFoundError:
        return Hook(path, "missing")
    except OSError:
        return Hook(path, "changed")
    return Hook(path, "installed" if text == LINE else "changed")


def install(folder: Path | None = None) -> Hook:
    """Write the hook (atomically; again over a changed one)."""
    path = (folder or site_packages()) / FILE_NAME
    try:
        atomic_write(path, LINE.encode(), mode=0o644)
    except OSError as e:
        raise SafehubError(
            f"cannot write the environment hook {path} ({e.strerror or e})",
            fix=fixes.say("run it as the user who owns this environment (for a system "
                           "Python, an admin), or activate the environment to route first")
        ) from e
    return hook(folder)


def uninstall(folder: Path | None = None) -> bool:
    """Remove the hook; False if there was none."""
    path = (folder or site_packages()) / FILE_NAME
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise SafehubError(f"cannot remove the environment hook {path} ({e.strerror or e})",
                           fix=fixes.say("run it as the user who owns this environment")
                           ) from e
    return True


def gate(policy: Policy) -> None:
    """A policy's ``environment_hook = "required"``: no load (nor ``check``) in an
    environment without the hook."""
    setting = policy.setting("environment_hook")
    if setting.value == "required":
        require(setting.source)


def require(source: str, folder: Path | None = None) -> None:
    """A policy's ``environment_hook = "required"`` (from ``source``): refuse a load in an
    environment where the hook is not in place."""
    found = hook(folder)
    if not found.installed:
        raise PolicyDenied(
            f"{source} requires the environment hook (environment_hook = \"required\"), "
            f"and {found.describe()[4:]}",
            fix=fixes.run("safehub install --environment",
                           "as the environment's owner, then load again"))
