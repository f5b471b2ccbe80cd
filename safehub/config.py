"""Settings from the environment, with bounded and documented defaults.

Everything here can be set three ways, later winning where allowed: the defaults below,
the environment (``SAFEHUB_*``), and keyword arguments of :class:`safehub.Hub`. Policy
files (see :mod:`safehub.policy`) may override the environment unless they say otherwise.

>>> s = Settings.from_env({"SAFEHUB_CACHE_DIR": "/tmp/c", "CI": "true"})
>>> str(s.cache_dir), s.noninteractive, s.api_url
('/tmp/c', True, 'https://api.github.com')
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from safehub.errors import SpecError

if TYPE_CHECKING:
    from safehub.policy import Policy

__all__ = ["DEFAULTS", "Limits", "Settings", "env_flag"]

APP = "safehub"


def env_flag(environ: Mapping[str, str], name: str) -> bool:
    """True if ``name`` is set to a yes-like value (``1``, ``true``, ``yes``, ``on``)."""
    return environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Limits:
    """Bounds on what a download may be; each one stops a resource-exhaustion attack."""

    max_archive_bytes: int = 512 * 1024 * 1024
    """Largest zip accepted from the network (``SAFEHUB_MAX_ARCHIVE_BYTES``)."""
    max_tree_bytes: int = 2 * 1024 * 1024 * 1024
    """Largest total size of the extracted files (``SAFEHUB_MAX_TREE_BYTES``)."""
    max_files: int = 100_000
    """Most entries an archive may hold (``SAFEHUB_MAX_FILES``)."""
    max_api_bytes: int = 32 * 1024 * 1024
    """Largest JSON answer read from the API."""
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    """Seconds to wait for a connection and between bytes (``SAFEHUB_TIMEOUT`` sets read)."""
    retries: int = 3
    """Extra attempts after a 5xx answer, a dropped connection or a truncated download."""
    backoff: float = 0.5
    """First pause before a retry in seconds; doubles each time (``SAFEHUB_BACKOFF``)."""
    lock_timeout: float = 600.0
    """Seconds to wait for another process installing the same commit."""


DEFAULTS = Limits()


def _user_dir(kind: str) -> Path:
    import platformdirs

    dirs = platformdirs.PlatformDirs(APP, appauthor=False)
    return Path(getattr(dirs, kind))


def _int_env(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SpecError(f"{name}={raw!r} is not a whole number", hint=f"unset {name}") from None
    if value <= 0:
        raise SpecError(f"{name}={raw!r} must be positive", hint=f"unset {name}")
    return value


def _float_env(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SpecError(f"{name}={raw!r} is not a number", hint=f"unset {name}") from None
    if value < 0:
        raise SpecError(f"{name}={raw!r} must not be negative", hint=f"unset {name}")
    return value


def _base_url(value: str | None, name: str, default: str) -> str:
    url = value or default
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise SpecError(
            f"{name}={url!r} is not an https:// URL",
            hint="safehub only talks HTTPS; for a private CA set REQUESTS_CA_BUNDLE",
        )
    return url.rstrip("/")


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class Settings:
    """Where safehub keeps things and how it talks to the network."""

    cache_dir: Path
    data_dir: Path
    log_dir: Path
    api_url: str = "https://api.github.com"
    web_url: str = "https://github.com"
    token: str | None = field(default=None, repr=False)
    offline: bool = False
    noninteractive: bool = False
    extra_hosts: frozenset[str] = frozenset()
    limits: Limits = DEFAULTS
    audit_log: Path | None = None
    """The audit log a policy requires (default: ``audit.jsonl`` in the user log dir)."""
    lockfile: Path | None = None
    tree_fallback: bool = True
    """Whether the per-file check may stand in when .gitattributes rewrites exports."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 policy: Policy | None = None) -> Settings:
        """Read ``SAFEHUB_*`` (and ``CI``, ``GITHUB_TOKEN``) from ``environ``.

        Settings in the ``[safehub]`` section of policy files come between the defaults and
        the environment, except those from a ``final = true`` file: the environment cannot
        change those. ``offline`` and ``noninteractive`` only ever add up (either side can
        turn them on).
        """
        env = os.environ if environ is None else environ

        def pick(env_name: str, key: str) -> Any:
            found = policy.setting(key) if policy is not None else None
            if found is not None and found[2]:
                return found[0]
            if env.get(env_name):
                return env[env_name]
            return found[0] if found is not None else None

        def policy_flag(key: str) -> bool:
            found = policy.setting(key) if policy is not None else None
            return bool(found and found[0])

        cache = pick("SAFEHUB_CACHE_DIR", "cache_dir")
        noninteractive = (
            env_flag(env, "SAFEHUB_NONINTERACTIVE") or env_flag(env, "CI")
            or policy_flag("noninteractive") or not _stdin_is_tty()
        )
        hosts_raw = pick("SAFEHUB_ALLOWED_HOSTS", "allowed_hosts") or ()
        if isinstance(hosts_raw, str):
            hosts_raw = hosts_raw.split(",")
        hosts = frozenset(h.strip().lower() for h in hosts_raw if h.strip())
        limits = Limits(
            max_archive_bytes=_int_env(
                env, "SAFEHUB_MAX_ARCHIVE_BYTES", DEFAULTS.max_archive_bytes
            ),
            max_tree_bytes=_int_env(env, "SAFEHUB_MAX_TREE_BYTES", DEFAULTS.max_tree_bytes),
            max_files=_int_env(env, "SAFEHUB_MAX_FILES", DEFAULTS.max_files),
            read_timeout=_float_env(env, "SAFEHUB_TIMEOUT", DEFAULTS.read_timeout),
            backoff=_float_env(env, "SAFEHUB_BACKOFF", DEFAULTS.backoff),
        )
        audit = policy.setting("audit_log") if policy is not None else None
        lockfile = pick("SAFEHUB_LOCKFILE", "lockfile")
        fallback = policy.setting("tree_fallback") if policy is not None else None
        return cls(
            cache_dir=Path(cache).expanduser() if cache else _user_dir("user_cache_dir"),
            data_dir=_user_dir("user_data_dir"),
            log_dir=_user_dir("user_log_dir"),
            api_url=_base_url(pick("SAFEHUB_GITHUB_API_URL", "github_api_url"),
                              "SAFEHUB_GITHUB_API_URL", "https://api.github.com"),
            web_url=_base_url(pick("SAFEHUB_GITHUB_URL", "github_url"), "SAFEHUB_GITHUB_URL",
                              "https://github.com"),
            token=env.get("GITHUB_TOKEN") or None,
            offline=env_flag(env, "SAFEHUB_OFFLINE") or policy_flag("offline"),
            noninteractive=noninteractive,
            extra_hosts=hosts,
            limits=limits,
            audit_log=Path(audit[0]).expanduser() if audit else None,
            lockfile=Path(lockfile).expanduser() if lockfile else None,
            tree_fallback=bool(fallback[0]) if fallback else True,
        )

    def with_changes(self, **changes: object) -> Settings:
        """A copy with some fields replaced (``Hub(**overrides)`` uses this)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def api_host(self) -> str:
        return (urlsplit(self.api_url).hostname or "").lower()

    @property
    def allowed_hosts(self) -> frozenset[str]:
        """Hosts a download may be redirected to.

        The API and web hosts, ``SAFEHUB_ALLOWED_HOSTS``, and for github.com the hosts
        GitHub itself redirects archive and release downloads to.
        """
        hosts = {self.api_host, (urlsplit(self.web_url).hostname or "").lower()}
        if "github.com" in hosts:
            hosts |= {
                "codeload.github.com",
                "objects.githubusercontent.com",
                "release-assets.githubusercontent.com",
            }
        return frozenset(hosts | self.extra_hosts)
