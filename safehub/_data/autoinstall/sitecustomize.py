"""Routes torch.hub through safehub in every Python program `safehub run` starts.

`safehub run` puts this folder first on PYTHONPATH. Python imports ``sitecustomize`` at
start-up: this one first runs the ``sitecustomize`` it shadows (if there is one), then
arms safehub, which replaces torch.hub.load/list/help as soon as torch.hub is imported.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_run_shadowed()

from safehub.run.autoinstall import arm  # noqa: E402

arm()
