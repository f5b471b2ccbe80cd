"""Modules of a verified tree imported with their compiled code from the user's store.

:func:`serve` names a verified tree's folders and the user's :class:`BytecodeStore`; from
then on (for the rest of the process, as the tree is checked on open), a path hook
placed first in ``sys.path_hooks`` gives each folder within such a tree a
``FileFinder`` whose source loader is :class:`StoredLoader`: it reads the source as the
normal loader does (the runtime guard checks that open, as every read of a tree file),
then takes the code compiled from exactly those bytes from the store, or compiles them
and stores the result. No ``.pyc`` of the tree is ever read (the finder knows no
sourceless modules) and nothing is written into the tree; extension modules load as
always. Folders outside every tree served are left to the usual hooks.

hubconf.py itself is imported by torch by its file location (``torch.hub._import_module``),
not through a finder: routed there, :func:`stored_spec` gives it the same loader.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import threading
import types

from safehub._internal.fsutil import those_within, within
from safehub.store.bytecode import BytecodeStore, key

__all__ = ["StoredLoader", "serve", "stored_spec"]

_LOCK = threading.Lock()
_TREES: dict[str, BytecodeStore] = {}  # a verified tree's folder (+ separator) -> its store


def serve(folders: tuple[str, ...], store: BytecodeStore) -> None:
    """Import the modules under ``folders`` (the spellings of one verified tree, each ending
    in a separator) with :class:`StoredLoader`, compiled code kept in ``store``."""
    with _LOCK:
        new = [f for f in folders if f not in _TREES]
        for folder in folders:
            _TREES[folder] = store
        if _path_hook not in sys.path_hooks:
            sys.path_hooks.insert(0, _path_hook)
    if new:  # a finder the usual hooks made for a folder of the tree before: made again
        for entry in those_within([p for p in sys.path_importer_cache if isinstance(p, str)],
                                  new):
            sys.path_importer_cache.pop(entry, None)


def _store_for(path: str) -> BytecodeStore | None:
    for folder, store in tuple(_TREES.items()):  # another thread may serve a tree meanwhile
        if within(path, folder):
            return store
    return None


def _path_hook(entry: str) -> importlib.machinery.FileFinder:
    """The finder of a folder within a tree :func:`serve` named; ImportError (the next
    hook is asked) for any other."""
    folder = os.path.abspath(entry) if entry else os.getcwd()
    if not _TREES or _store_for(folder) is None:
        raise ImportError("not a folder of a verified tree")
    return importlib.machinery.FileFinder(
        entry,
        (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
        (StoredLoader, importlib.machinery.SOURCE_SUFFIXES))


def stored_spec(name: str, path: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of the source file ``path`` imported as ``name`` with :class:`StoredLoader`
    (hubconf.py, which torch imports by its location), if it lies in a tree :func:`serve`
    named; None for any other file, left to the usual loader."""
    if not _TREES or not path.endswith(".py") or _store_for(os.path.abspath(path)) is None:
        return None
    return importlib.util.spec_from_file_location(name, path, loader=StoredLoader(name, path))


class StoredLoader(importlib.machinery.SourceFileLoader):
    """A source file's loader whose compiled code comes from the user's store."""

    def get_code(self, fullname: str) -> types.CodeType:
        path = self.get_filename(fullname)
        source = self.get_data(path)  # the normal read: the runtime guard checks the open
        store = _store_for(path)
        name = key(path, source)
        code = store.read(name) if store is not None else None
        if code is None:
            code = self.source_to_code(source, path)
            if store is not None and not sys.flags.dont_write_bytecode:
                _keep(store, name, code)
        return code


def _keep(store: BytecodeStore, name: str, code: types.CodeType) -> None:
    """Write an entry as safehub's own work (not the repo's: the guard neither records nor
    refuses it); a store that cannot be written is no store."""
    from safehub.run.runtime import own_work

    with own_work():
        store.write(name, code)
