"""Whose code a Python frame runs: safehub's, a library's, or anybody else's (the repo's).

The runtime guard pauses for safehub's own work (a nested load's checks, a weights
download). Anything else that runs meanwhile, on that thread, is held to the guard as if
there were no pause: the repo's code reached through a hook it installed (a monkeypatched
function, a replaced stream, a ``gc`` callback) shows up as a frame that is neither
safehub's nor a library's between the audited action and the pause.

A frame is *safehub's* or a *library's* when it runs a function of a module in
``sys.modules``, in that module's own namespace, from that module's own file: safehub's
package, the standard library, or an installed distribution (``site-packages``). Code
compiled at run time, code in another namespace, and modules of a hub repo's tree are
none of these. (Code compiled under a library's file name into that library's namespace
passes: that is editing the interpreter, beyond what a tripwire holds.)
"""

from __future__ import annotations

import importlib.machinery
import os
import site
import sys
import sysconfig
from types import FrameType
from typing import Any

__all__ = ["foreign_between", "remember_modules", "safehubs"]

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY_DIRS = tuple(sorted({
    os.path.join(os.path.realpath(p), "") for p in (
        sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
        sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
        *getattr(site, "getsitepackages", lambda: [])(),
        getattr(site, "getusersitepackages", lambda: "")() or "")
    if p}))
_KNOWN: dict[tuple[int, int], tuple[Any, Any]] = {}
_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader,
            importlib.machinery.ExtensionFileLoader)
_FROZEN = importlib.machinery.FrozenImporter  # frames found safehub's or a library's


def safehubs(frame: Any) -> bool:
    """``frame`` runs safehub's own code: a function of one of its modules, in that module."""
    name = frame.f_globals.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    return (module is not None and (name == "safehub" or name.startswith("safehub."))
            and module.__dict__ is frame.f_globals
            and frame.f_code.co_filename.startswith(_OWN_DIR))


_BEFORE: dict[int, Any] = {}  # namespaces of modules imported before guarded code ran
_SEEN = 0


def remember_modules() -> None:
    """Note the modules imported so far (before the first guarded code runs): their code is
    a library's wherever it was found (``PYTHONPATH`` included). Skipped while the number
    of modules is unchanged: a namespace not noted only falls to the stricter rule."""
    global _SEEN
    if len(sys.modules) == _SEEN:
        return
    _SEEN = len(sys.modules)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is dict:
            _BEFORE.setdefault(id(namespace), namespace)


def _library(frame: FrameType, trees: tuple[str, ...]) -> bool:
    code, namespace = frame.f_code, frame.f_globals
    name = namespace.get("__name__")
    if type(name) is not str:
        return False
    module = sys.modules.get(name)
    if module is None or getattr(module, "__dict__", None) is not namespace:
        return False
    filename = code.co_filename
    if filename.startswith(trees):
        return False
    if _BEFORE.get(id(namespace)) is namespace:  # there before the repo's code ran
        origin = getattr(module, "__file__", None)
        return filename.startswith("<frozen ") or (
            type(origin) is str and os.path.realpath(origin) == os.path.realpath(filename))
    # Imported since: by importlib's own loaders, from a library folder (a module the
    # repo's code registered itself, with a name or file it chose, is not a library's).
    spec = getattr(module, "__spec__", None)
    loader = type(getattr(spec, "loader", None))
    if filename.startswith("<frozen "):
        return loader is _FROZEN and name.partition(".")[0] in sys.stdlib_module_names
    origin = getattr(spec, "origin", None)
    return (loader in _LOADERS and type(origin) is str
            and os.path.realpath(origin) == os.path.realpath(filename)
            and filename.startswith(_LIBRARY_DIRS))


def foreign_between(frame: FrameType | None, stop: Any, trees: tuple[str, ...] = ()) -> bool:
    """Some frame from ``frame`` outwards, up to ``stop`` (excluded), runs code that is
    neither safehub's nor a library's (see the module docstring). ``trees``: folders
    whose code is never a library's (the watched hub trees)."""
    for _ in range(512):
        if frame is None or frame is stop:
            return frame is None and stop is not None  # never reached the pause: foreign
        key = (id(frame.f_code), id(frame.f_globals))
        known = _KNOWN.get(key)
        if known is None or known[0] is not frame.f_code or known[1] is not frame.f_globals:
            if not (safehubs(frame) or _library(frame, trees)):
                return True
            _KNOWN[key] = (frame.f_code, frame.f_globals)  # module namespaces live on
        frame = frame.f_back
    return True
