"""Everything that touches ``torch.hub``: originals, patching, delegation.

torch is imported here lazily, on first use, so ``import safehub`` stays cheap.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from safehub.errors import HubconfError

__all__ = ["call_entrypoint", "entrypoints", "install", "original", "uninstall"]

_ORIGINALS: dict[str, Any] = {}
_PATCHED = ("load", "list", "help")


def torch_hub() -> ModuleType:
    """The torch.hub module (from sys.modules: torch may still be initialising)."""
    module = sys.modules.get("torch.hub")
    if module is None:
        import torch.hub  # noqa: F401

        module = sys.modules["torch.hub"]
    return module


def original(name: str) -> Any:
    """torch.hub's own function ``name``, even while :func:`install` has replaced it."""
    return _ORIGINALS.get(name) or getattr(torch_hub(), name)


def install(replacements: dict[str, Any]) -> None:
    hub = torch_hub()
    for name in _PATCHED:
        current = getattr(hub, name)
        if name not in _ORIGINALS:
            _ORIGINALS[name] = current
        setattr(hub, name, replacements[name])


def uninstall() -> None:
    hub = torch_hub()
    for name, func in list(_ORIGINALS.items()):
        setattr(hub, name, func)
    _ORIGINALS.clear()


def _require_hubconf(repo_dir: Path) -> Path:
    hubconf = repo_dir / "hubconf.py"
    if not hubconf.is_file():
        raise HubconfError(
            f"{str(repo_dir)!r} has no hubconf.py, so it is not a torch.hub repo",
            hint="check the repo and ref; torch.hub needs hubconf.py at the repo root",
        )
    return hubconf


@contextlib.contextmanager
def _no_bytecode() -> Iterator[None]:
    # A __pycache__ written into a verified tree would be run on the next import without
    # being checked (timestamp-based .pyc), so none is ever written there.
    old = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = old


def call_entrypoint(repo_dir: Path, model: str, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
    """Run entrypoint ``model`` of ``repo_dir`` through torch's own local loader."""
    _require_hubconf(repo_dir)
    load = original("load")
    with _no_bytecode():
        try:
            return load(str(repo_dir), model, *args, source="local", trust_repo=True, **kwargs)
        except RuntimeError as e:
            if str(e) == f"Cannot find callable {model} in hubconf":
                raise HubconfError(
                    f"hubconf.py of {str(repo_dir)!r} has no callable entrypoint {model!r}",
                    hint="list the entrypoints with safehub.list(...) or `safehub check`",
                ) from e
            raise


def _import_hubconf(repo_dir: Path) -> ModuleType:
    hubconf = _require_hubconf(repo_dir)
    spec = importlib.util.spec_from_file_location("hubconf", hubconf)
    if spec is None or spec.loader is None:
        raise HubconfError(f"cannot import {str(hubconf)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(repo_dir))
    try:
        with _no_bytecode():
            spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(repo_dir))
    return module


def entrypoints(repo_dir: Path) -> list[str]:
    """Public callables of hubconf.py, as torch.hub.list returns them."""
    module = _import_hubconf(repo_dir)
    return [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]


def docstring(repo_dir: Path, model: str) -> str | None:
    """The entrypoint's docstring, as torch.hub.help returns it."""
    module = _import_hubconf(repo_dir)
    missing = [
        dep for dep in getattr(module, "dependencies", None) or ()
        if importlib.util.find_spec(dep) is None
    ]
    if missing:
        raise RuntimeError(f"Missing dependencies: {', '.join(missing)}")
    func = getattr(module, model, None) if isinstance(model, str) else None
    if func is None or not callable(func):
        raise HubconfError(
            f"hubconf.py of {str(repo_dir)!r} has no callable entrypoint {model!r}",
            hint="list the entrypoints with safehub.list(...)",
        )
    doc = func.__doc__
    return doc if doc is None else str(doc)
