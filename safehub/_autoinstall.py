"""Install safehub into torch.hub the moment torch.hub is imported (``safehub run``)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["SITE_DIR", "arm"]

SITE_DIR = Path(__file__).resolve().parent / "_data" / "autoinstall"


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        import safehub

        safehub.install()


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for ``torch.hub`` and wraps its loader; then steps aside."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch.hub":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def arm() -> None:
    """Route torch.hub through safehub now, or as soon as it is imported."""
    if "torch.hub" in sys.modules:
        import safehub

        safehub.install()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
