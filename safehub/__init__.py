"""safehub: a drop-in ``torch.hub.load`` that checks before any hubconf.py runs.

Use it where you would use torch.hub::

    import safehub as hub
    model = hub.load("org/repo:v1.0", "model", pretrained=False)

or route ``torch.hub.load/list/help`` through it for code you do not own::

    import safehub
    safehub.install()

The functions below have exactly the signatures of ``torch.hub``'s. Configuration comes
from policy files, the environment (``SAFEHUB_*``) and :class:`Hub`.

The public API is :data:`__all__` (docs/api.md): the torch.hub functions, :class:`Hub` and
what it is built from (:class:`Settings`, :class:`Policy` and :func:`load_policy`,
:class:`Lockfile` and :class:`LockEntry`, :class:`Transport` and :class:`TransportConfig`,
:class:`Source`), and the errors. Every submodule is internal: its names may change in any
release.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from safehub.errors import (
    CacheError,
    ConfineError,
    FetchError,
    HubconfError,
    IntegrityError,
    NoHubconfError,
    NotFoundError,
    OfflineError,
    PinError,
    PolicyDenied,
    PolicyError,
    RateLimitError,
    RepoMovedError,
    RuntimeGuardError,
    SafehubError,
    SignatureError,
    SpecError,
    TamperedError,
    UnreachableError,
    UntrustedRepoError,
)

if TYPE_CHECKING:
    import os

    from safehub.config import Settings
    from safehub.hub import Hub
    from safehub.policy import Policy, load_policy
    from safehub.sources.interface import Source
    from safehub.sources.transport import Transport, TransportConfig
    from safehub.store.cache.warm import State
    from safehub.store.lockfile import LockEntry, Lockfile

__version__ = "0.1.0"

__all__ = [
    "CacheError",
    "ConfineError",
    "FetchError",
    "Hub",
    "HubconfError",
    "IntegrityError",
    "LockEntry",
    "Lockfile",
    "NoHubconfError",
    "NotFoundError",
    "OfflineError",
    "PinError",
    "Policy",
    "PolicyDenied",
    "PolicyError",
    "RateLimitError",
    "RepoMovedError",
    "RuntimeGuardError",
    "SafehubError",
    "Settings",
    "SignatureError",
    "Source",
    "SpecError",
    "TamperedError",
    "Transport",
    "TransportConfig",
    "UnreachableError",
    "UntrustedRepoError",
    "download_url_to_file",
    "get_dir",
    "help",
    "install",
    "list",
    "load",
    "load_policy",
    "load_state_dict_from_url",
    "set_dir",
    "uninstall",
]


def __dir__() -> builtins.list[str]:
    """The API (``__all__``) and the version: not the typing helpers this module uses."""
    return sorted([*__all__, "__version__"])


def __getattr__(name: str) -> Any:
    """The public names that live in a submodule, imported on first use (PEP 562), so that
    ``import safehub`` stays cheap."""
    if name == "Hub":
        from safehub._internal import gcpause

        with gcpause.paused():  # it imports most of safehub (see gcpause)
            from safehub.hub import Hub

        return Hub
    if name == "Settings":
        from safehub.config import Settings

        return Settings
    if name in ("Policy", "load_policy"):
        from safehub import policy

        return getattr(policy, name)
    if name in ("Lockfile", "LockEntry"):
        from safehub.store import lockfile

        return getattr(lockfile, name)
    if name in ("Transport", "TransportConfig"):
        from safehub.sources import transport

        return getattr(transport, name)
    if name == "Source":
        from safehub.sources.interface import Source

        return Source
    raise AttributeError(f"module 'safehub' has no attribute {name!r}")


_WARM: State | None = None  # safehub.store.cache.warm.STATE, once a load needed it


def _hub() -> Hub:
    """The Hub the module-level functions use: built again whenever anything it was built
    from may have changed (the environment, the working directory, whether stdin is a
    terminal, and the bytes of every policy path searched and of the lockfile), so a
    policy file edited, added or removed between two calls is obeyed on the second
    (:mod:`safehub.store.cache.warm`, 1)."""
    global _WARM
    if _WARM is None:  # the warm path's state, imported on the first call (not at import)
        from safehub.store.cache.warm import STATE

        _WARM = STATE
    last = _WARM.memos.get("hub")
    if last is not None and last[0] == _key(last[0][3]):  # type: ignore[index]
        hub: Hub = last[1]
        return hub
    from safehub._internal import gcpause

    with gcpause.paused():  # the first call imports most of safehub (see gcpause)
        from safehub.hub import Hub
        from safehub.policy import searched

        hub = Hub()
        paths = (*(str(c.path) for c in searched()), str(hub.lockfile_path))
        _WARM.memos["hub"] = (_key(paths), hub)
    return hub


def _key(paths: tuple[str, ...]) -> tuple[Any, ...]:
    import os
    import sys

    from safehub._internal.fsutil import read_bytes

    def content(path: str) -> object:
        # The bytes, not the stat: two writes of one size within a clock tick share an
        # mtime. Reading a small file is cheap; parsing it again is what is saved.
        try:
            return read_bytes(path)
        except OSError as e:
            return e.errno

    try:
        tty = sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        tty = False
    raw = getattr(os.environ, "_data", None)  # the undecoded variables: a C-speed copy
    environ = raw.copy() if isinstance(raw, dict) else dict(os.environ)
    moved = getattr(sys.modules.get("torch.hub"), "_hub_dir", None)  # set_dir(): the cache
    return (environ, os.getcwd(), tty, paths, tuple(content(p) for p in paths), moved)


def load(
    repo_or_dir: str | os.PathLike[str],
    model: str,
    *args: Any,
    source: str = "github",
    trust_repo: bool | str | None = "check",
    force_reload: bool = False,
    verbose: bool = True,
    skip_validation: bool = False,
    **kwargs: Any,
) -> Any:
    """Load entrypoint ``model`` of a GitHub repo or local folder, like ``torch.hub.load``.

    Before any ``hubconf.py`` runs, the repo is resolved to one commit proven to be its
    own, its archive is fetched and verified against that commit, and the content must
    be trusted (``trust_repo``: ``"check"`` asks once per content on a terminal and
    refuses in CI; ``True`` trusts it). Arguments after ``model`` go to the entrypoint.
    ``skip_validation`` is accepted for compatibility and never skips the fork check.

    >>> import safehub
    >>> safehub.load("not a spec", "model")
    Traceback (most recent call last):
    ...
    safehub.errors.SpecError: invalid repo spec 'not a spec': expected exactly one '/'
      fix: write the repo as 'owner/name' or 'owner/name:ref', e.g. 'pytorch/vision:v0.10.0'
    """
    return _hub().load(
        repo_or_dir, model, *args, source=source, trust_repo=trust_repo,
        force_reload=force_reload, verbose=verbose, skip_validation=skip_validation, **kwargs,
    )


def list(
    github: str,
    force_reload: bool = False,
    skip_validation: bool = False,
    trust_repo: bool | str | None = "check",
    verbose: bool = True,
) -> builtins.list[str]:
    """The callable entrypoints of a repo's hubconf.py, like ``torch.hub.list``.

    The repo passes the same checks as in :func:`load` before its hubconf.py is imported.
    """
    return _hub().list(github, force_reload=force_reload, skip_validation=skip_validation,
                       trust_repo=trust_repo, verbose=verbose)


def help(
    github: str,
    model: str,
    force_reload: bool = False,
    skip_validation: bool = False,
    trust_repo: bool | str | None = "check",
) -> str | None:
    """The docstring of entrypoint ``model``, like ``torch.hub.help``, after every check."""
    return _hub().help(github, model, force_reload=force_reload,
                       skip_validation=skip_validation, trust_repo=trust_repo)


def get_dir() -> str:
    """torch.hub's directory (weights and checkpoints); safehub's cache lives elsewhere."""
    from safehub.run.torchhub import torch_hub

    result: str = torch_hub().get_dir()
    return result


def set_dir(d: str | os.PathLike[str]) -> None:
    """Set torch.hub's directory, as ``torch.hub.set_dir`` does."""
    import os

    from safehub._internal import fixes
    from safehub.run.torchhub import torch_hub

    if not isinstance(d, str | os.PathLike):
        raise SpecError(f"set_dir({d!r}): a folder path is a string or a path",
                        fix=fixes.say("e.g. safehub.set_dir('/data/torch-hub')"))
    torch_hub().set_dir(d)


def download_url_to_file(
    url: str,
    dst: str,
    hash_prefix: str | None = None,
    progress: bool = True,
) -> None:
    """Download ``url`` to ``dst``, as ``torch.hub.download_url_to_file`` does."""
    from safehub.run.torchhub import torch_hub

    torch_hub().download_url_to_file(url, dst, hash_prefix, progress)


def load_state_dict_from_url(
    url: str,
    model_dir: str | None = None,
    map_location: Any = None,
    progress: bool = True,
    check_hash: bool = False,
    file_name: str | None = None,
    weights_only: bool = False,
) -> dict[str, Any]:
    """Download and ``torch.load`` a state dict, as ``torch.hub.load_state_dict_from_url``."""
    from safehub.run.torchhub import torch_hub

    result: dict[str, Any] = torch_hub().load_state_dict_from_url(
        url, model_dir, map_location, progress, check_hash, file_name, weights_only
    )
    return result


#: What :func:`install` routes torch.hub's functions to. A refusal names the call the
#: program made: errors of routed calls render their fix for the ``torchhub`` surface
#: (:mod:`safehub.run.torchhub`), so nothing rewords text here.
_REPLACEMENTS: dict[str, Callable[..., Any]] = {"load": load, "list": list, "help": help}


def install() -> None:
    """Route ``torch.hub.load``, ``list`` and ``help`` through safehub, process-wide.

    Code you do not own that calls ``torch.hub.load("org/repo", ...)`` then gets every
    safehub check, also where it bound the function before this call (``from torch.hub
    import load``): torch.hub's functions themselves are routed, not only the module's
    attributes. :func:`uninstall` restores torch's behaviour.
    """
    from safehub.run import torchhub

    torchhub.install(_REPLACEMENTS)


def uninstall() -> None:
    """Undo :func:`install`."""
    from safehub.run import torchhub

    torchhub.uninstall()


