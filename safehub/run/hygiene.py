"""Module hygiene: what a repo's top-level modules shadow, and what it leaves imported.

torch puts the repo's folder first on ``sys.path`` while it imports ``hubconf.py`` and runs
the entrypoint, so a top-level ``json.py`` or ``utils/`` in the repo wins over the standard
library's ``json`` or the caller's ``utils`` for every import made meanwhile, and stays in
``sys.modules`` afterwards, where it answers the caller's later ``import`` too.

>>> import tempfile
>>> tree = Path(tempfile.mkdtemp())
>>> (tree / "hubconf.py").write_text("")
0
>>> (tree / "pdb.py").write_text("")          # shadows the standard library's pdb
0
>>> (tree / "mymodels").mkdir()
>>> (tree / "mymodels" / "__init__.py").write_text("")   # shadows nothing
0
>>> [(s.name, s.shadows) for s in shadowing(tree)]
[('pdb', 'stdlib')]
"""

from __future__ import annotations

import _imp
import contextlib
import functools
import importlib.machinery
import os
import re
import sys
import threading
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safehub._internal.frozen import Frozen
from safehub._internal.fsutil import within_any

if TYPE_CHECKING:  # imported where used: it costs a start that never needs it
    import importlib.metadata

__all__ = ["Shadow", "first_warning", "leftovers", "owners_of", "shadowing", "top_level_owners"]

# Standard-library names no library imports at run time (demos and IDLE); a repo's module
# of that name is not reported. ``test`` is not in sys.stdlib_module_names at all.
_NEVER_IMPORTED = frozenset({"test", "idlelib", "turtledemo", "this", "antigravity",
                             "__hello__", "__phello__"})
_SKIPPED = frozenset({"hubconf"})  # torch imports it by file, not by name


class Shadow(Frozen):
    """A top-level module of the tree that has a namesake elsewhere.

    ``shadows`` is ``"stdlib"``, ``"distribution NAME"`` (an installed distribution's
    top-level module; several are comma-separated), ``"module PATH"`` (a module on
    ``sys.path`` that no distribution owns, such as the caller's own ``utils``), or
    ``"already imported"`` (only in ``sys.modules``). ``imported`` says that the namesake is
    already imported: then ``import name`` keeps answering with it (the repo's own imports
    get it instead of the repo's module), and the repo's module does not replace it.
    """

    name: str
    path: Path
    shadows: str
    imported: bool
    own_distribution: bool = False
    """Every distribution it shadows names the repo as its source (``Home-page`` or a
    ``Project-URL`` on GitHub): the repo is where the installed package comes from
    (``huggingface/pytorch-image-models`` and the distribution ``timm``)."""

    @property
    def kind(self) -> str:
        """``stdlib``, ``distribution``, ``module`` or ``imported``."""
        first = self.shadows.split(" ", 1)[0]
        return "imported" if first == "already" else first

    @property
    def takes_effect(self) -> bool:
        """The repo's module would replace a standard-library or installed module for the
        rest of the process (it is not imported yet)."""
        return not self.imported and self.kind in ("stdlib", "distribution")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "shadows": self.shadows,
                "imported": self.imported, "own_distribution": self.own_distribution}


_NAMES: dict[tuple[str, int, int], dict[str, Path]] = {}
_SPECS: dict[tuple[str, tuple[str, ...]], str | None] = {}


def _module_names(tree: Path) -> dict[str, Path]:
    """Top-level importable names in ``tree`` (kept per process while the folder is
    unchanged: a verified tree does not change)."""
    try:
        st = os.stat(tree)
    except OSError:
        return {}
    key = (str(tree), st.st_ino, st.st_ctime_ns)
    names = _NAMES.get(key)
    if names is None:
        names = _NAMES[key] = _list_module_names(tree)
    return names


def _origin(name: str, others: tuple[str, ...],
            listed: tuple[frozenset[str], tuple[str, ...]] | None = None) -> str | None:
    """Where ``name`` would be found on ``others`` (kept per process and search path;
    ``listed``: :func:`_listed` of ``others``, to search only where the name can be)."""
    key = (name, others)
    if key not in _SPECS:
        where = list(others)
        if listed is not None and name.lower() not in listed[0]:
            where = list(listed[1])
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, where) if where else None
        except (ImportError, ValueError, OSError):
            spec = None
        _SPECS[key] = spec.origin if spec is not None and spec.has_location else None
    return _SPECS[key]


def _listed(others: tuple[str, ...]) -> tuple[frozenset[str], tuple[str, ...]]:
    """The names the plain folders of ``others`` hold, cut at the first dot, in lower case,
    and the entries that are not plain folders (a zip, a path hook's own entry, one the
    path finder has not seen yet), in their order. A name not listed can only come from
    those: one listing per folder instead of a path search per name. A folder is listed
    again when its mtime changes, as the path finder does."""
    names: set[str] = set()
    rest: list[str] = []
    cache = sys.path_importer_cache
    for entry in others:
        finder = cache.get(entry or os.getcwd(), rest)
        if finder is None:
            continue  # no hook takes it: nothing is found there
        if type(finder) is not importlib.machinery.FileFinder:
            rest.append(entry)
            continue
        try:
            mtime = os.stat(finder.path).st_mtime_ns
            hit = _LISTINGS.get(finder.path)
            if hit is None or hit[0] != mtime:
                hit = _LISTINGS[finder.path] = (mtime, frozenset(
                    n.partition(".")[0].lower() for n in os.listdir(finder.path)))
        except OSError:
            rest.append(entry)
            continue
        names |= hit[1]
    return frozenset(names), tuple(rest)


_LISTINGS: dict[str, tuple[int, frozenset[str]]] = {}


def _list_module_names(tree: Path) -> dict[str, Path]:
    """Top-level importable names in ``tree``: modules, extension modules, packages
    (not ``hubconf``: torch imports it by its file, not by its name)."""
    suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    names: dict[str, Path] = {}
    try:
        entries = sorted(os.scandir(tree), key=lambda e: e.name)
    except OSError:
        return names
    shortest = sorted(suffixes, key=len)  # "__init__.py" first: one stat for most packages
    for entry in entries:
        if entry.is_dir():
            if entry.name.isidentifier() and entry.name not in _SKIPPED and any(
                    os.path.isfile(os.path.join(entry.path, "__init__" + s)) for s in shortest):
                names[entry.name] = Path(entry.path)  # a package wins over a module
            continue
        for suffix in suffixes:
            if entry.name.endswith(suffix):
                stem = entry.name[: -len(suffix)]
                if stem.isidentifier() and stem not in _SKIPPED:
                    names.setdefault(stem, Path(entry.path))
                break
    return names


def _file_of(module: Any) -> list[str]:
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        return []
    files = []
    file = namespace.get("__file__")
    if isinstance(file, str):
        files.append(file)
    elif namespace.get("__path__") is not None:
        with contextlib.suppress(Exception):  # a broken namespace path is no reason to fail
            files.extend(p for p in namespace["__path__"] if isinstance(p, str))
    return files


def _inside(files: list[str], roots: tuple[str, ...]) -> bool:
    for file in files:
        path = file if os.path.isabs(file) else os.path.abspath(file)
        if within_any(path, roots):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _roots(tree: Path) -> tuple[str, ...]:
    return tuple({os.path.abspath(tree), os.path.realpath(tree)})


_OWNERS: dict[str, tuple[str, ...]] | None = None
_OWNERS_LOCK = threading.Lock()


def _tops_from_record(record: str) -> set[str]:
    tops = set()
    for line in record.splitlines():
        path = line.split(",", 1)[0].strip('"')
        first = path.split("/", 1)[0]
        if not first or first.startswith(("..", "__pycache__")) or first.endswith(
                (".dist-info", ".data", ".egg-info", ".pth")):
            continue
        if "/" in path:
            tops.add(first)
        else:
            tops.add(first.split(".", 1)[0])
    return tops


def top_level_owners() -> dict[str, tuple[str, ...]]:
    """Top-level module name -> installed distributions that provide it (cached per
    process; read from ``top_level.txt``, else from ``RECORD``)."""
    import importlib.metadata

    global _OWNERS
    with _OWNERS_LOCK:
        if _OWNERS is None:
            owners: dict[str, set[str]] = {}
            for dist in importlib.metadata.distributions():
                name = dist.metadata["Name"] or "?"
                for top in _tops(dist):
                    owners.setdefault(top, set()).add(name)
            _OWNERS = {k: tuple(sorted(v)) for k, v in owners.items()}
        return _OWNERS


def _tops(dist: importlib.metadata.Distribution, wanted: Collection[str] = ()) -> set[str]:
    """The distribution's top-level names (``wanted``: only whether these are among them,
    and a ``RECORD`` that names none of them as text is not parsed)."""
    text = dist.read_text("top_level.txt")
    if text:
        return set(text.split())
    record = dist.read_text("RECORD") or ""
    if wanted and not any(name in record for name in wanted):
        return set()
    return _tops_from_record(record)


_OWNED: dict[str, tuple[str, ...]] = {}
_OWNED_KEY: tuple[Any, ...] = ()


def owners_of(names: Collection[str]) -> dict[str, tuple[str, ...]]:
    """:func:`top_level_owners` for ``names`` only: the same answer, without reading every
    distribution's metadata (only the ones that provide one of the names).

    Kept per process while ``sys.path`` and the mtime of each of its entries stay the
    same: installing or removing a distribution adds or removes its ``.dist-info`` folder
    in a ``sys.path`` entry, which changes that entry's mtime, and drops what was kept.
    """
    import importlib.metadata

    global _OWNED_KEY
    key = _path_key()
    with _OWNERS_LOCK:
        if key != _OWNED_KEY:
            _OWNED.clear()
            _OWNED_KEY = key
        wanted = {n for n in names if n not in _OWNED}
        if wanted:
            found: dict[str, set[str]] = {n: set() for n in wanted}
            for dist in importlib.metadata.distributions():
                hits = wanted & _tops(dist, wanted)
                if hits:
                    owner = dist.metadata["Name"] or "?"
                    for name in hits:
                        found[name].add(owner)
            _OWNED.update({n: tuple(sorted(v)) for n, v in found.items()})
        return {n: _OWNED[n] for n in names}


def _path_key() -> tuple[Any, ...]:
    """``sys.path`` with each entry's mtime (None where it cannot be read)."""
    stamps: list[Any] = []
    for entry in sys.path:
        try:
            stamps.append((entry, os.stat(entry or os.curdir).st_mtime_ns))
        except (OSError, ValueError):
            stamps.append((entry, None))
    return tuple(stamps)


def _classify(name: str, origin: str) -> str:
    if name in sys.stdlib_module_names:
        return "stdlib"
    owners = owners_of((name,))[name]
    if owners:
        return "distribution " + ", ".join(owners)
    return f"module {origin}"


_GITHUB_REPO = (r"https?://(?:www\.)?github\.com/([A-Za-z0-9-]+)/([A-Za-z0-9._-]+?)"
                r"(?:\.git)?(?:[/#?].*)?$")
"""A GitHub repo's URL (compiled at the first distribution a tree shadows)."""


def source_repos(distribution: str) -> set[str]:
    """The GitHub repos (``owner/name``, lower case) an installed distribution names as
    its home or source in its metadata.

    >>> source_repos("no-such-distribution")
    set()
    """
    import importlib.metadata

    try:
        metadata = importlib.metadata.metadata(distribution)
    except importlib.metadata.PackageNotFoundError:
        return set()
    urls = [*(metadata.get_all("Home-page") or ()), *(metadata.get_all("Download-URL") or ())]
    urls += [entry.partition(",")[2] for entry in metadata.get_all("Project-URL") or ()]
    found = set()
    for url in urls:
        match = re.match(_GITHUB_REPO, url.strip())
        if match:
            found.add(f"{match[1]}/{match[2]}".lower())
    return found


def _own_distribution(name: str, repo: str) -> bool:
    owners = owners_of((name,))[name]
    return bool(repo) and bool(owners) and all(repo.lower() in source_repos(d) for d in owners)


def shadowing(tree: Path, repo: str = "") -> list[Shadow]:
    """Top-level modules of ``tree`` that would hide (or be hidden by) another module
    (``repo``: the repo the tree is, ``owner/name``, to tell its own distribution).

    Names that cannot be shadowed (built-in and frozen modules, found before ``sys.path``
    is searched), ``hubconf``, and demo-only standard-library names are left out.
    """
    names = _module_names(tree)
    modules = sys.modules
    # the modules themselves, not their ids (an id is reused once a module is freed)
    key = (tree, repo, id(names), tuple(sys.path), tuple(map(modules.get, names)))
    hit = _SHADOWS.get(key)
    if hit is None:
        if len(_SHADOWS) > 64:
            _SHADOWS.clear()
        hit = _SHADOWS[key] = tuple(_shadowing(tree, repo, names))
    return list(hit)


_SHADOWS: dict[tuple[Any, ...], tuple[Shadow, ...]] = {}  # the answer, while nothing changed


def _shadowing(tree: Path, repo: str, names: dict[str, Path]) -> list[Shadow]:
    roots = _roots(tree)
    others = tuple(p for p in sys.path
                   if (os.path.abspath(p or os.curdir) + os.sep) not in roots)
    found: list[Shadow] = []
    listed = _listed(others) if len(names) > 8 else None  # a few names: a search is less
    for name, path in names.items():
        if name in _NEVER_IMPORTED or name in sys.builtin_module_names \
                or _imp.is_frozen(name):
            continue
        module = sys.modules.get(name)
        imported = module is not None and not _inside(_file_of(module), roots)
        origin = _origin(name, others, listed)
        if origin:
            kind = _classify(name, origin)
            found.append(Shadow(name, path, kind, imported, kind.startswith("distribution")
                                and _own_distribution(name, repo)))
        elif imported:
            found.append(Shadow(name, path, "already imported", True))
    return found


_WARNED: set[tuple[str, str, Path, str]] = set()


def first_warning(repo: str, shadow: Shadow) -> bool:
    """Whether the warning about ``shadow`` is the first this process gives for it: a
    repo's module that shadows another is warned about once per process (per repo, name,
    tree and what it shadows), not on every load of the same tree. Every load still
    records it in its report."""
    key = (repo, shadow.name, shadow.path, shadow.shadows)
    with _OWNERS_LOCK:
        if key in _WARNED:
            return False
        _WARNED.add(key)
        return True


def leftovers(tree: Path, before: Collection[str] = ()) -> list[str]:
    """Modules loaded from ``tree`` (not named in ``before``) still in ``sys.modules``.

    Each answers a later ``import`` of its name anywhere in the process: the caller's own
    ``utils`` or ``models`` imported after the load gets the repo's.
    """
    roots = _roots(tree)
    modules = sys.modules
    if isinstance(before, dict) and len(modules) == len(before):
        return []  # nothing new imported (the common warm load: the repo's modules stayed)
    new = modules.keys() - (before.keys() if isinstance(before, dict) else set(before))
    return sorted(name for name in new if _inside(_file_of(modules.get(name)), roots))
