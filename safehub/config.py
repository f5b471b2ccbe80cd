"""Settings from the environment and the policy, with bounded and documented defaults.

Three layers, later winning where allowed: the defaults below; the ``[safehub]`` section of
the policy files; the environment (``SAFEHUB_*``), except over a setting a ``final = true``
file holds. ``offline`` and ``noninteractive`` only ever add up. Keyword arguments of
:class:`safehub.Hub` replace fields last. Which policy key maps to which variable is
declared once, in :mod:`safehub.policy.keys`.

>>> s = Settings.from_env({"SAFEHUB_CACHE_DIR": "/tmp/c", "CI": "true"})
>>> str(s.cache_dir), s.noninteractive, s.api_url
('/tmp/c', True, 'https://api.github.com')
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from safehub.errors import SpecError
from safehub.limits import DEFAULTS, Limits
from safehub.policy import Policy
from safehub.policy.keys import KEYS
from safehub.sources.transport import TransportConfig

__all__ = ["DEFAULTS", "Limits", "Settings", "env_flag"]

APP = "safehub"


def env_flag(environ: Mapping[str, str], name: str) -> bool:
    """True for ``1``, ``true``, ``yes``, ``on``; false for unset, empty, ``0``, ``false``,
    ``no``, ``off``; anything else is a :class:`SpecError` (a typo never means "off")."""
    value = environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise SpecError(f"{name}={environ[name]!r} is not a yes or no",
                    hint=f"set {name}=1 to turn it on, or unset it")


def _user_dir(kind: str) -> Path:
    import platformdirs

    dirs = platformdirs.PlatformDirs(APP, appauthor=False)
    return Path(getattr(dirs, kind))


def _number(environ: Mapping[str, str], name: str, default: float, kind: type) -> Any:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise SpecError(f"{name}={raw!r} is not a {'whole ' if kind is int else ''}number",
                        hint=f"unset {name}") from None
    if not math.isfinite(value):
        raise SpecError(f"{name}={raw!r} is not a finite number", hint=f"unset {name}")
    if value < 0 or (kind is int and value == 0):
        raise SpecError(f"{name}={raw!r} must be positive", hint=f"unset {name}")
    return value


def _base_url(value: str | None, name: str, default: str) -> str:
    url = value or default
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # such as an unclosed [IPv6 address
        host = None
    if not host or parts.scheme != "https":
        raise SpecError(
            f"{name}={url!r} is not an https:// URL",
            hint="safehub only talks HTTPS; for a private CA set REQUESTS_CA_BUNDLE",
        )
    return url.rstrip("/")


def _oci_places(raw: Any, where: str) -> tuple[str, ...]:
    """``SAFEHUB_OCI`` (comma-separated) or the policy's ``oci`` list, each entry checked."""
    from safehub._internal.ocirefs import split_place

    items = raw.split(",") if isinstance(raw, str) else list(raw or ())
    places = tuple(item.strip() for item in items if item.strip())
    for item in places:
        if item.startswith("http://") and not where.startswith("oci in "):
            raise SpecError(f"{where}: {item!r} speaks plain HTTP, which only a policy file "
                            "may ask for (oci = [\"http://127.0.0.1:PORT/REPO\"] in [safehub])",
                            hint="give the registry TLS, or name it in a policy file")
        try:
            split_place(item)
        except ValueError as e:
            raise SpecError(f"{where}: {item!r} is {e}",
                            hint="write SAFEHUB_OCI=registry.example.com/team/hub (comma "
                            "separated, tried in order) or SAFEHUB_OCI=oci:/path/to/dir") from None
    return places


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def resolve_setting(policy: Policy, name: str, environ: Mapping[str, str]) -> tuple[Any, str]:
    """(value, where it came from) for a ``[safehub]`` key, the environment included."""
    key = KEYS["safehub"][name]
    setting = policy.setting(name)
    source = "default" if setting.source == "default" else f"{name} in {setting.source}"
    if key.merge == "any-true":
        if key.env and env_flag(environ, key.env):
            return True, f"{key.env}={environ[key.env]}"
        return bool(setting.value), source
    if key.env and environ.get(key.env) and not setting.final:
        return environ[key.env], key.env
    return setting.value, source


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
    runtime: str = "observe"
    """The runtime guard's mode while hubconf runs (``observe``, ``enforce``, ``off``)."""
    offline_source: str = "SAFEHUB_OFFLINE=1"
    """Where offline mode was switched on (for messages)."""
    confine: bool = False
    """``safehub run`` confines its command (``SAFEHUB_CONFINE=1`` or ``confine = true``)."""
    oci: tuple[str, ...] = ()
    """Where locked specs load from instead of GitHub (``SAFEHUB_OCI``, ``oci = [...]``):
    ``REGISTRY/REPOSITORY`` or ``oci:DIR`` entries, tried in order."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 policy: Policy | None = None) -> Settings:
        """Read ``SAFEHUB_*`` (and ``CI``, ``GITHUB_TOKEN``) and the policy's settings."""
        env = os.environ if environ is None else environ
        policy = policy or Policy()

        def value(name: str) -> Any:
            return resolve_setting(policy, name, env)[0]

        offline, offline_source = resolve_setting(policy, "offline", env)
        ci = env.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")
        noninteractive = (value("noninteractive") or ci
                          or not _stdin_is_tty())
        hosts_raw = value("allowed_hosts") or ()
        if isinstance(hosts_raw, str):
            hosts_raw = hosts_raw.split(",")
        limits = Limits(
            max_archive_bytes=_number(env, "SAFEHUB_MAX_ARCHIVE_BYTES",
                                      DEFAULTS.max_archive_bytes, int),
            max_tree_bytes=_number(env, "SAFEHUB_MAX_TREE_BYTES", DEFAULTS.max_tree_bytes, int),
            max_files=_number(env, "SAFEHUB_MAX_FILES", DEFAULTS.max_files, int),
            deadline=_number(env, "SAFEHUB_TIMEOUT", DEFAULTS.deadline, float),
            backoff=_number(env, "SAFEHUB_BACKOFF", DEFAULTS.backoff, float),
        )
        cache, lockfile, audit = value("cache_dir"), value("lockfile"), value("audit_log")
        return cls(
            cache_dir=Path(cache).expanduser() if cache else _user_dir("user_cache_dir"),
            data_dir=_user_dir("user_data_dir"),
            log_dir=_user_dir("user_log_dir"),
            api_url=_base_url(value("github_api_url"), "SAFEHUB_GITHUB_API_URL",
                              "https://api.github.com"),
            web_url=_base_url(value("github_url"), "SAFEHUB_GITHUB_URL", "https://github.com"),
            token=env.get("GITHUB_TOKEN") or None,
            offline=bool(offline),
            noninteractive=bool(noninteractive),
            extra_hosts=frozenset(h.strip().lower() for h in hosts_raw if h.strip()),
            limits=limits,
            audit_log=Path(audit).expanduser() if audit else None,
            lockfile=Path(lockfile).expanduser() if lockfile else None,
            tree_fallback=bool(value("tree_fallback")),
            runtime=str(value("runtime")),
            offline_source=offline_source,
            confine=bool(value("confine")),
            oci=_oci_places(*resolve_setting(policy, "oci", env)),
        )

    def with_changes(self, **changes: object) -> Settings:
        """A copy with some fields replaced (``Hub(**overrides)`` uses this)."""
        if changes.get("offline") and "offline_source" not in changes:
            changes["offline_source"] = "Hub(offline=True)"
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def offline_off(self) -> str:
        """How to turn offline mode off, by where it was turned on (for messages).

        >>> Settings.from_env({"SAFEHUB_OFFLINE": "1"}).offline_off
        'turn offline mode off: unset SAFEHUB_OFFLINE (it is SAFEHUB_OFFLINE=1 now)'
        """
        source = self.offline_source
        if source.startswith("Hub("):
            return f"turn offline mode off: build the Hub without {source[4:-1]}"
        if source.startswith("offline in "):
            return f"turn offline mode off: remove offline = true from {source[11:]}"
        return f"turn offline mode off: unset {source.partition('=')[0]} (it is {source} now)"

    def offline_fix(self, spec: str) -> str:
        """What gets an offline load of ``spec`` past a tree that is not cached."""
        import shlex

        from safehub._internal import fixes

        return fixes.either(
            fixes.run(f"safehub prefetch {shlex.quote(spec)}",
                      f"{self.network_machine}, then share its cache (SAFEHUB_CACHE_DIR) "
                      "with this one"),
            fixes.say(self.offline_off))

    @property
    def network_machine(self) -> str:
        """Where a command that needs the network can run (offline mode may come with
        a policy file, which that machine must not read)."""
        if self.offline_source.startswith("offline in "):
            return (f"on a machine with network where {self.offline_source[11:]} does not "
                    "apply (it sets offline = true)")
        return "on a machine with network"

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

    def transport_config(self) -> TransportConfig:
        """The transport's own rules, taken from these settings."""
        lim = self.limits
        return TransportConfig(
            allowed_hosts=self.allowed_hosts, connect_timeout=lim.connect_timeout,
            stall_timeout=min(lim.read_timeout, lim.deadline), deadline=lim.deadline,
            retries=lim.retries, backoff=lim.backoff, max_json_bytes=lim.max_api_bytes,
            offline=self.offline, offline_source=self.offline_source)
