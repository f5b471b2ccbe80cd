"""The weights guard: what hubconf may download while it runs inside ``safehub.load``.

While a hub repo's code runs (``load``, ``list``, ``help``), ``torch.hub``'s
``download_url_to_file`` and ``load_state_dict_from_url`` (and safehub's, which call
them) are wrapped:

* a URL must match the policy's ``weights`` patterns (every matching rule's list), else
  :class:`PolicyDenied` before any byte is fetched;
* every file fetched, or found in torch's checkpoint folder, is hashed in full (torch
  checks an 8-character prefix, and only if the file name carries one). The first hash
  of a URL is pinned: in the lockfile if the spec is locked (``[[repo.weights]]``), and
  in the user's data dir; a later file with another hash is an :class:`IntegrityError`
  and is deleted before torch loads it;
* ``load_state_dict_from_url`` runs with ``weights_only=True`` (no pickled code) unless
  every matching policy rule says ``weights_only = false``.

Code that fetches with other libraries is not covered: safehub does not sandbox a repo
it has decided to trust (see docs/threat-model.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from safehub._internal.globs import Glob
from safehub._internal.warn import warn
from safehub.errors import IntegrityError, PolicyDenied
from safehub.records import WeightPins

__all__ = ["WeightsGuard"]

_LOCK = threading.Lock()


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


@dataclass
class WeightsGuard:
    """The rules for one load; use :meth:`active` around the code that runs hubconf."""

    repo: str
    patterns: tuple[tuple[Glob, ...], ...] = ()
    weights_only: bool = True
    warn_only: bool = False
    locked: dict[str, str] = field(default_factory=dict)
    records: WeightPins | None = None
    on_new_pin: Callable[[str, str], None] | None = None

    def check_url(self, url: str) -> None:
        parts = urlparse(url)
        if parts.username or parts.password or parts.fragment or not parts.hostname:
            raise PolicyDenied(
                f"hubconf.py of {self.repo} tried to download {url!r}: URLs with credentials, "
                "a fragment or no host are refused",
                hint="download weights from a plain https://host/path URL",
            )
        # Patterns see the URL as it will be fetched, rebuilt from its parts, so that
        # 'https://evil.example#.myorg.example/x' cannot pass for a myorg URL.
        canonical = f"{parts.scheme}://{parts.netloc}{parts.path}" + (
            f"?{parts.query}" if parts.query else "")
        for patterns in self.patterns:
            if not any(p.match(canonical) for p in patterns):
                allowed = ", ".join(p.pattern for p in patterns)
                message = (f"hubconf.py of {self.repo} tried to download {url}, which the "
                           f"policy's weights patterns do not allow ({allowed})")
                if self.warn_only:
                    warn(f"{message} (mode = 'warn', allowed)")
                    return
                raise PolicyDenied(message, hint="an admin can add the URL pattern to "
                                   "`weights` of the repo's [[allow]] rule")

    def _sha256(self, url: str, path: Path) -> str:
        st = path.stat()
        seen = self.records.get(url) if self.records is not None else None
        if seen and seen.get("file") == str(path) and seen.get("stat") == _stat_key(st):
            return str(seen["sha256"])
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()

    def check_file(self, url: str, path: Path) -> None:
        """Hash the whole file; refuse (and delete) it if it is not the pinned one."""
        digest = self._sha256(url, path)
        seen = self.records.get(url) if self.records is not None else None
        pinned = self.locked.get(url) or (str(seen["sha256"]) if seen else None)
        if pinned is not None and pinned != digest:
            with contextlib.suppress(OSError):
                path.unlink()
            raise IntegrityError(
                f"the weights from {url} have sha256 {digest}, but {pinned} was pinned "
                f"({'in the lockfile' if url in self.locked else 'when first downloaded'}); "
                f"the file {path} was deleted",
                hint="if the publisher really replaced the file, remove the pin (the "
                "lockfile's [[repo.weights]] entry) and load again",
            )
        if self.records is not None:
            self.records.put(url, digest, path, lambda p: _stat_key(p.stat()))
        if url not in self.locked and self.on_new_pin is not None:
            self.on_new_pin(url, digest)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Hold this guard while the block runs (nested and concurrent loads included).

        torch.hub's two functions are wrapped once, while any guard is active; each call
        is checked by the guard of the load it belongs to (the current context's, or the
        latest one for threads hubconf started), and guards may end in any order.
        """
        with _LOCK:
            if not _ACTIVE:
                _install()
            _ACTIVE.append(self)
        token = _CURRENT.set(self)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            with _LOCK:
                _ACTIVE.remove(self)
                if not _ACTIVE:
                    _uninstall()


_CURRENT: contextvars.ContextVar[WeightsGuard | None] = contextvars.ContextVar(
    "safehub_weights_guard", default=None)
_ACTIVE: list[WeightsGuard] = []
_ORIGINAL: dict[str, Any] = {}


def _guard() -> WeightsGuard | None:
    return _CURRENT.get() or (_ACTIVE[-1] if _ACTIVE else None)


def _install() -> None:
    from safehub._internal.torchhub import torch_hub

    hub: Any = torch_hub()
    _ORIGINAL["download_url_to_file"] = inner_download = hub.download_url_to_file
    _ORIGINAL["load_state_dict_from_url"] = inner_state_dict = hub.load_state_dict_from_url

    def download_url_to_file(url: str, dst: str, hash_prefix: str | None = None,
                             progress: bool = True) -> None:
        guard = _guard()
        if guard is not None:
            guard.check_url(url)
        inner_download(url, dst, hash_prefix, progress)
        if guard is not None:
            guard.check_file(url, Path(os.path.expanduser(dst)))

    def load_state_dict_from_url(url: str, model_dir: str | None = None,
                                 map_location: Any = None, progress: bool = True,
                                 check_hash: bool = False, file_name: str | None = None,
                                 weights_only: bool = False) -> Any:
        guard = _guard()
        if guard is not None:
            guard.check_url(url)
            folder = model_dir or os.path.join(hub.get_dir(), "checkpoints")
            cached = Path(folder) / (file_name or os.path.basename(urlparse(url).path))
            if cached.is_file():  # torch would load it without downloading: check it first
                guard.check_file(url, cached)
            if guard.weights_only and not weights_only:
                weights_only = True  # no pickled code from the network unless policy says so
        return inner_state_dict(url, model_dir, map_location, progress, check_hash,
                                file_name, weights_only)

    hub.download_url_to_file = download_url_to_file
    hub.load_state_dict_from_url = load_state_dict_from_url


def _uninstall() -> None:
    from safehub._internal.torchhub import torch_hub

    hub: Any = torch_hub()
    for name, func in _ORIGINAL.items():
        setattr(hub, name, func)
    _ORIGINAL.clear()
