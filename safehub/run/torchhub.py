"""Everything that touches ``torch.hub``: routing its functions, and delegating to it.

**Routing.** On first use, the code of torch.hub's ``load``, ``list``, ``help``,
``download_url_to_file`` and ``load_state_dict_from_url`` is replaced by a trampoline of
the same signature that asks :func:`_dispatch` what to run. The function objects stay the
same, so references taken before safehub was imported or installed (``from torch.hub
import load`` in a library, a hubconf's ``from torch.hub import load_state_dict_from_url``)
are routed too. Dispatch order, per call:

1. a handler pushed with :func:`handling` for the load this call belongs to (the calling
   context's, or the latest active one for threads its code started): nested loads while
   a repo's code runs, and the weights guard;
2. the replacements of :func:`install` (``safehub.install()``);
3. torch's own function (a copy of the original is kept, see :func:`original`).

torch.hub's ``_import_module``, which imports a hubconf.py by its file location, is
routed too: a hubconf.py of a verified tree takes its compiled code from the user's store
(:func:`safehub.run.bytecode.stored_spec`), any other file is imported by torch's own.

**Delegation.** :func:`call_entrypoint`, :func:`entrypoints` and :func:`docstring` hand a
verified folder to torch's own local loader. torch is imported lazily, on first use, so
``import safehub`` stays cheap.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub.errors import HubconfError, NoHubconfError, SafehubError

__all__ = [
    "NESTED",
    "ROUTED",
    "WEIGHTS",
    "call_entrypoint",
    "described",
    "docstring",
    "entrypoints",
    "handling",
    "install",
    "original",
    "routed_to",
    "torch_hub",
    "trampoline",
    "uninstall",
]

NESTED = ("load", "list", "help")
"""torch.hub's functions a repo's code calls to load another repo (a nested load)."""
WEIGHTS = ("download_url_to_file", "load_state_dict_from_url")
"""torch.hub's functions a repo's code calls to fetch a file (the weights guard holds them)."""
ROUTED = (*NESTED, *WEIGHTS)
_IMPORT = "_import_module"  # torch.hub's import of a hubconf.py by its location
_THEIRS = "_safehub_torch_code"  # torch's code of a routed function, kept on the function
_LOCK = threading.RLock()
_ORIGINALS: dict[str, types.FunctionType] = {}  # callable copies with torch's own code
_SWAPPED: dict[str, types.CodeType] = {}  # torch's code, to put back in uninstall_routing
_INSTALLED: dict[str, Callable[..., Any]] = {}
_ACTIVE: list[Mapping[str, Callable[..., Any]]] = []
_CURRENT: contextvars.ContextVar[tuple[Mapping[str, Callable[..., Any]], ...]] = \
    contextvars.ContextVar("safehub_torchhub_handlers", default=())


def torch_hub() -> types.ModuleType:
    """The torch.hub module (from sys.modules: torch may still be initialising)."""
    module = sys.modules.get("torch.hub")
    if module is None:
        try:
            import torch.hub  # noqa: F401
        except ImportError as e:
            raise HubconfError(f"torch cannot be imported ({e})",
                               fix=fixes.run("pip install torch", "to install it (safehub "
                                             "hands verified repos to torch's own loader)")) from e
        module = sys.modules["torch.hub"]
    return module


def trampoline(name: str, func: types.FunctionType,
               module: str = "safehub.run.torchhub") -> types.CodeType:
    """Code with ``func``'s parameters that calls ``module._dispatch(name, args, kwargs)``
    (``safehub.run.hfhub`` routes huggingface_hub's downloads with it too).

    Defaults live on the function object, not in its code, so torch's own defaults (and
    ``inspect.signature``) are unchanged.
    """
    params = inspect.signature(func).parameters.values()
    header, args, kwargs = [], [], []
    star = False
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            header.append(f"*{p.name}")
            args.append(f"*{p.name}")
            star = True
        elif p.kind is p.VAR_KEYWORD:
            header.append(f"**{p.name}")
            kwargs.append(f"**{p.name}")
        elif p.kind is p.KEYWORD_ONLY:
            if not star:
                header.append("*")
                star = True
            header.append(f"{p.name}=None" if p.default is not p.empty else p.name)
            kwargs.append(f"{p.name!r}: {p.name}")
        else:
            header.append(f"{p.name}=None" if p.default is not p.empty else p.name)
            args.append(p.name)
    source = (f"def {func.__name__}({', '.join(header)}):\n"
              f"    return __import__({module!r}, fromlist=['_dispatch'])"
              f"._dispatch({name!r}, ({', '.join(args)}{',' if args else ''}), "
              f"{{{', '.join(kwargs)}}})\n")
    scope: dict[str, Any] = {}
    where = "torch.hub" if module == "safehub.run.torchhub" else func.__module__
    exec(compile(source, f"<safehub routing of {where}.{name}>", "exec"), scope)
    code: types.CodeType = scope[func.__name__].__code__
    return code


def _route() -> None:
    """Swap torch.hub's functions' code for trampolines (once per process)."""
    # torch.hub first, outside the check: its first import may route it already (under
    # ``safehub run`` the import hook installs safehub), and a copy taken after that
    # would be of a trampoline, which dispatches back here for ever.
    hub = torch_hub()
    with _LOCK:
        if _SWAPPED:
            return
        for name in (*ROUTED, _IMPORT):
            func = getattr(hub, name, None)
            if not isinstance(func, types.FunctionType) or func.__closure__:
                continue  # not the plain function torch ships: leave it alone
            # torch's own code is kept on the function too: where this module is imported
            # afresh (``importlib.reload``, a test forgetting modules), its code is a
            # trampoline already, and a copy of that would dispatch back here for ever
            theirs = func.__dict__.setdefault(_THEIRS, func.__code__)
            copy = types.FunctionType(theirs, func.__globals__, func.__name__,
                                      func.__defaults__, func.__closure__)
            copy.__kwdefaults__ = func.__kwdefaults__
            copy.__dict__.update(func.__dict__)
            copy.__doc__ = func.__doc__
            _ORIGINALS[name] = copy
            _SWAPPED[name] = theirs
            func.__code__ = trampoline(name, func)


@functools.cache
def signature(name: str) -> inspect.Signature:
    """The signature of torch.hub's own function ``name`` (looked up once)."""
    return inspect.signature(original(name))


def original(name: str) -> Callable[..., Any]:
    """torch.hub's own function ``name``, whatever is routed or installed."""
    _route()
    return _ORIGINALS.get(name) or getattr(torch_hub(), name)


def _handler(name: str) -> Callable[..., Any] | None:
    for handlers in reversed(_CURRENT.get()):
        if name in handlers:
            mine: Callable[..., Any] = handlers[name]
            return mine
    with _LOCK:
        for handlers in reversed(_ACTIVE):
            if name in handlers:
                found: Callable[..., Any] = handlers[name]
                return found
    return None


_TREES: dict[str, Mapping[str, Callable[..., Any]]] = {}  # tree folder -> its load's handlers


def remember(prefixes: tuple[str, ...], handlers: Mapping[str, Callable[..., Any]]) -> None:
    """Keep ``handlers`` for calls made by code of these tree folders after their load
    returned (``model.forward``, a thread the repo started): such calls are the repo's."""
    with _LOCK:
        for prefix in prefixes:
            _TREES[prefix] = handlers


def _tree_handler(name: str) -> Callable[..., Any] | None:
    if not _TREES:
        return None
    prefixes = tuple(_TREES)
    frame = sys._getframe(3)
    for _ in range(256):
        if frame is None:
            return None
        filename = frame.f_code.co_filename
        if filename.startswith(prefixes):
            handlers = next(h for p, h in _TREES.items() if filename.startswith(p))
            found: Callable[..., Any] | None = handlers.get(name)
            return found
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _dispatch(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if name == _IMPORT:
        return _import_module(*args, **kwargs)
    target = (_handler(name) or _tree_handler(name) or _INSTALLED.get(name)
              or original(name))
    return target(*args, **kwargs)


def _import_module(name: str, path: str) -> types.ModuleType:
    """torch.hub's ``_import_module``, with a verified tree's compiled code from the store."""
    from safehub.run.bytecode import stored_spec

    spec = stored_spec(name, path)
    if spec is None or spec.loader is None:
        theirs: types.ModuleType = original(_IMPORT)(name, path)
        return theirs
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def routed_to(name: str) -> Callable[..., Any] | None:
    """The handler of the load a call of ``name`` belongs to, asked by another module's
    ``_dispatch`` called from its trampoline (the frames above are as they are here)."""
    return _handler(name) or _tree_handler(name)


@contextlib.contextmanager
def handling(handlers: Mapping[str, Callable[..., Any]]) -> Iterator[None]:
    """Route calls of torch.hub's functions named in ``handlers`` to them while the block
    runs (in this context, and in threads started meanwhile that have no handler of their
    own). Handlers stack: the innermost wins; they may end in any order."""
    _route()
    with _LOCK:
        _ACTIVE.append(handlers)
    _CURRENT.set((*_CURRENT.get(), handlers))
    try:
        yield
    finally:  # not a token reset: handlers may end in any order
        _CURRENT.set(tuple(h for h in _CURRENT.get() if h is not handlers))
        with _LOCK:
            _ACTIVE.remove(handlers)


def install(replacements: Mapping[str, Callable[..., Any]]) -> None:
    """Route torch.hub's functions to ``replacements`` (``safehub.install()``)."""
    _route()
    with _LOCK:
        _INSTALLED.update({name: _as_called(func) for name, func in replacements.items()})


def _as_called(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` as torch.hub's function once routed: the program called ``torch.hub.NAME``,
    so a refusal's fix is shown for that surface (``pass trust_repo=True to
    torch.hub.load``), rendered from the fix's data (:func:`safehub._internal.fixes.render`)."""
    @functools.wraps(func)
    def called(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SafehubError as e:
            e.surface = "torchhub"
            raise
    return called


def uninstall() -> None:
    with _LOCK:
        _INSTALLED.clear()


#: The fix for an entrypoint that is not there: list those that are.
_LIST_THEM = fixes.noted(fixes.either(fixes.run("safehub list SPEC"), fixes.call(function="list")),
                         "list the entrypoints: ")


# -- delegation ------------------------------------------------------------------------------

def _require_hubconf(repo_dir: Path) -> Path:
    hubconf = repo_dir / "hubconf.py"
    if not hubconf.is_file():
        raise NoHubconfError(
            f"{str(repo_dir)!r} has no hubconf.py at its root, so it is not a torch.hub repo",
            fix=fixes.say("check the repo and ref; torch.hub needs hubconf.py at the repo root"),
        )
    return hubconf


_bytecode_users = 0
_bytecode_saved = False


@contextlib.contextmanager
def _no_bytecode() -> Iterator[None]:
    """``sys.dont_write_bytecode`` while any repo's code is imported (a count: loads may
    overlap in threads). A ``__pycache__`` written into a verified tree would run on the
    next import without being checked (timestamp-based .pyc), and none lands in
    site-packages from a repo's imports either. The tree's own modules keep their compiled
    code in the user's store instead (:mod:`safehub.run.bytecode`)."""
    global _bytecode_users, _bytecode_saved
    with _LOCK:
        if _bytecode_users == 0:
            _bytecode_saved = sys.dont_write_bytecode
            sys.dont_write_bytecode = True
        _bytecode_users += 1
    try:
        yield
    finally:
        with _LOCK:
            _bytecode_users -= 1
            if _bytecode_users == 0:
                sys.dont_write_bytecode = _bytecode_saved


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
                raise _no_entrypoint(repo_dir, model) from e
            raise


def _no_entrypoint(repo_dir: Path, model: str) -> HubconfError:
    """``model`` is not a callable of hubconf.py: which names it does define (read from
    its syntax tree), and the one meant if ``model`` looks like a misspelling of one."""
    from safehub._internal.hubconf_ast import entrypoints_of
    from safehub._internal.text import did_you_mean

    try:
        found = entrypoints_of((repo_dir / "hubconf.py").read_text("utf-8", "replace")).names
    except OSError:
        found = frozenset()
    defined = f"; it defines: {', '.join(sorted(found))}" if found else ""
    return HubconfError(f"hubconf.py of {str(repo_dir)!r} has no callable entrypoint "
                        f"{model!r}{did_you_mean(model, found)}{defined}", fix=_LIST_THEM)


def _import_hubconf(repo_dir: Path) -> types.ModuleType:
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
    return described(repo_dir, model)[1]


def described(repo_dir: Path, model: str) -> tuple[str, str | None]:
    """The entrypoint's signature line (``tiny(n=2, bias=True)``, as inspect.signature
    shows it; ``tiny(...)`` if it has none) and its docstring (``safehub help``)."""
    import inspect

    module = _import_hubconf(repo_dir)
    missing = [
        dep for dep in getattr(module, "dependencies", None) or ()
        if importlib.util.find_spec(dep) is None
    ]
    if missing:
        raise RuntimeError(f"Missing dependencies: {', '.join(missing)}")
    func = getattr(module, model, None) if isinstance(model, str) else None
    if func is None or not callable(func):
        raise _no_entrypoint(repo_dir, model)
    try:
        line = f"{model}{inspect.signature(func)}"
    except (ValueError, TypeError):  # a callable with no signature to show
        line = f"{model}(...)"
    doc = func.__doc__
    return line, doc if doc is None else str(doc)
