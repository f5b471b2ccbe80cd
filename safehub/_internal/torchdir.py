"""torch's hub dir, worked out once for every part that needs it (the cache root beneath a
moved hub dir, the runtime guard's writable places, the weights guard's checkpoint folder,
what a confined job may not change), without importing torch.

It answers as ``torch.hub.get_dir()`` does: the folder ``torch.hub.set_dir()`` gave in this
process (which needs torch imported already, so ``sys.modules`` is where to look), else
``$TORCH_HOME/hub``, else ``$XDG_CACHE_HOME/torch/hub`` (``~/.cache/torch/hub``).

>>> found = torch_hub_dir({"TORCH_HOME": "/data/torch"})
>>> found.path, found.moved_by
('/data/torch/hub', 'TORCH_HOME')
>>> torch_hub_dir({"XDG_CACHE_HOME": "/c"}).moved_by is None
True
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from safehub._internal.frozen import Frozen

__all__ = ["TorchHubDir", "torch_hub_dir", "torch_hub_path"]


class TorchHubDir(Frozen):
    """torch's hub dir (``path``, as ``get_dir()`` would return it) and what moved it from
    torch's default (``"torch.hub.set_dir()"``, ``"TORCH_HOME"``), or None where it is
    torch's default."""

    path: str
    moved_by: str | None


def torch_hub_dir(environ: Mapping[str, str] | None = None) -> TorchHubDir:
    """torch's hub dir for ``environ`` (default: this process's environment) and this
    process's ``set_dir()``."""
    env = os.environ if environ is None else environ
    path, by = _where(env)
    default_home = _default_home(env)
    if by == "set_dir":
        same = os.path.realpath(path) == os.path.realpath(os.path.join(default_home, "hub"))
        return TorchHubDir(path, None if same else "torch.hub.set_dir()")
    home = env.get("TORCH_HOME")
    moved = bool(home) and os.path.realpath(os.path.dirname(path)) != \
        os.path.realpath(default_home)
    return TorchHubDir(path, "TORCH_HOME" if moved else None)


def torch_hub_path(environ: Mapping[str, str] | None = None) -> str:
    """Only the path of :func:`torch_hub_dir` (what a load's guards ask, on every load:
    no ``realpath`` to tell what moved it)."""
    return _where(os.environ if environ is None else environ)[0]


def _default_home(env: Mapping[str, str]) -> str:
    return os.path.expanduser(os.path.join(env.get("XDG_CACHE_HOME", "~/.cache"), "torch"))


def _where(env: Mapping[str, str]) -> tuple[str, str]:
    """The hub dir and what named it: ``set_dir``, ``TORCH_HOME`` or ``default``."""
    hub = sys.modules.get("torch.hub")
    set_to = getattr(hub, "_hub_dir", None) if hub is not None else None
    if isinstance(set_to, str | os.PathLike) and os.fspath(set_to):
        return str(os.fspath(set_to)), "set_dir"
    home = env.get("TORCH_HOME")
    if home is None:
        return os.path.join(_default_home(env), "hub"), "default"
    return os.path.join(os.path.expanduser(home), "hub"), "TORCH_HOME"
