"""Test-only: child Pythons the suite starts never read the machine's /etc/xdg/safehub.

The ``isolated`` fixture puts this folder on PYTHONPATH and names a temporary folder in
``SAFEHUB_TEST_SYSTEM_CONFIG_DIR``; safehub itself never reads that variable. This hook
sets ``safehub.policy.files.SYSTEM_CONFIG_DIR`` the moment that module is imported, and
runs the ``sitecustomize`` it shadows, if any (``safehub run`` chains to this one).
"""

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

_TARGET = "safehub.policy.files"


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    mine = [os.path.abspath(p or os.curdir) for p in sys.path]
    # Only what comes after this folder is shadowed by it (safehub run's own sitecustomize,
    # which comes before and runs this one, must not be run again).
    path = sys.path[mine.index(here) + 1:] if here in mine else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


class _Loader:
    def __init__(self, inner, folder):  # type: ignore[no-untyped-def]
        self.inner, self.folder = inner, folder

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.inner.create_module(spec)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        self.inner.exec_module(module)
        module.SYSTEM_CONFIG_DIR = self.folder


class _Finder:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.folder)
        return spec


_run_shadowed()
if os.environ.get("SAFEHUB_TEST_SYSTEM_CONFIG_DIR"):
    sys.meta_path.insert(0, _Finder(Path(os.environ["SAFEHUB_TEST_SYSTEM_CONFIG_DIR"])))
