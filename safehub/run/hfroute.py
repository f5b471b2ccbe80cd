"""Routing huggingface_hub's download functions to the load that runs (see
:mod:`safehub.run.hfhub`).

The code of the undecorated ``hf_hub_download`` and ``snapshot_download`` is swapped for a
trampoline (:func:`safehub.run.torchhub.trampoline`), so references libraries took at
import time are routed too; a call asks :func:`safehub.run.torchhub.routed_to` for the
load's handler and runs the library's own code where there is none. safehub never imports
the library: :func:`route` swaps a module already imported, else a finder waits for it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from safehub.run.weights import WeightsGuard

__all__ = ["HELD", "handlers", "offline_during", "route"]

HELD = {"hf_hub_download": "huggingface_hub.file_download",
        "snapshot_download": "huggingface_hub._snapshot_download"}
"""The functions routed, and the module each is defined in."""
_ORIGINALS: dict[str, Callable[..., Any]] = {}


def route() -> None:
    """Route the held functions here: now for an imported module, else when it is."""
    for name, module in HELD.items():
        if module in sys.modules:
            _swap(name, sys.modules[module])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):  # it stays: a module
        sys.meta_path.insert(0, _Finder())  # imported again is routed again


def handlers(guard: Callable[[], WeightsGuard]) -> dict[str, Callable[..., Any]]:
    """The load's stand-ins for the held functions (routing put in place): each hands its
    call to :class:`safehub.run.hfhub.HubFiles` for the load's weights guard (``guard()``
    makes it at the first call), imported at the first call (a load whose code downloads
    nothing from the Hub imports none of it)."""
    route()

    def held(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            from safehub.run.runtime import own_work

            with own_work():  # safehub's import (its files read, compiled), not the repo's
                from safehub.run.hfhub import HubFiles
            return getattr(HubFiles(guard()), name)(*args, **kwargs)

        return call

    return {name: held(name) for name in HELD}


@contextlib.contextmanager
def offline_during(offline: bool) -> Iterator[None]:
    """While the block runs, safehub's offline mode is the library's too, for its own
    calls safehub does not hold: ``HF_HUB_OFFLINE=1`` in the environment (read when the
    library is imported, and by processes the code starts) and in its settings if it is
    imported already. Both are put back after."""
    if not offline:
        yield
        return
    constants = sys.modules.get("huggingface_hub.constants")
    before = (os.environ.get("HF_HUB_OFFLINE"), getattr(constants, "HF_HUB_OFFLINE", None))
    os.environ["HF_HUB_OFFLINE"] = "1"
    if constants is not None:
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if before[0] is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before[0]
        if constants is not None:
            constants.HF_HUB_OFFLINE = before[1]  # type: ignore[attr-defined]


def _swap(name: str, module: types.ModuleType) -> None:
    import inspect

    from safehub.run.torchhub import trampoline

    func = getattr(module, name, None)
    inner = inspect.unwrap(func) if callable(func) else None  # under its decorators
    if not isinstance(inner, types.FunctionType) or inner.__closure__:
        return  # not the function this module knows: leave it alone
    if inner.__code__.co_filename.startswith("<safehub routing"):
        return  # routed already
    copy = types.FunctionType(inner.__code__, inner.__globals__, inner.__name__,
                              inner.__defaults__, None)
    copy.__kwdefaults__ = inner.__kwdefaults__
    _ORIGINALS[name] = copy
    inner.__code__ = trampoline(name, inner, "safehub.run.hfroute")


def _dispatch(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from safehub.run.torchhub import routed_to

    return (routed_to(name) or _ORIGINALS[name])(*args, **kwargs)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self.inner, self.name = inner, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.inner.exec_module(module)
        _swap(self.name, module)


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for huggingface_hub's two modules and routes each as it is imported."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("huggingface_hub."):  # asked of every import: say no fast
            return None
        name = next((n for n, m in HELD.items() if m == fullname), None)
        if name is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, name)
        return spec
