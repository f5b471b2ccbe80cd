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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, field, replace
from safehub._internal.hosts import normalise_host
from safehub._internal.torchdir import torch_hub_dir
from safehub._internal.urls import UrlError, read_url
from safehub.errors import SpecError
from safehub.limits import DEFAULTS, Limits
from safehub.policy import Policy
from safehub.policy.held import Ignored, held_back, ignored_variables, say_ignored
from safehub.policy.keys import KEYS

if TYPE_CHECKING:  # the transport is imported where a request is about to be made
    from safehub.sources.transport import Transport, TransportConfig

__all__ = ["DEFAULTS", "ENVIRONMENT", "EnvVar", "Ignored", "Limits", "Origin", "OwnPlace",
           "Settings", "env_flag", "environment", "held_back", "noninteractive", "say_ignored"]

APP = "safehub"


class EnvVar(Frozen):
    """An environment variable safehub reads, and what it means (``safehub docs env``)."""

    name: str
    meaning: str
    policy_key: str | None = None
    """The ``[safehub]`` key that sets it in a policy file too (the environment wins
    unless that file is ``final = true``)."""


#: The variables that no policy key declares (those are in safehub.policy.keys: ``env=``).
ENVIRONMENT: tuple[EnvVar, ...] = (
    EnvVar("SAFEHUB_POLICY", "extra policy files (`os.pathsep`-separated), read after the "
           "site, user and `./safehub.toml` files; they can only tighten them"),
    EnvVar("SAFEHUB_MAX_ARCHIVE_BYTES", "archive download cap in bytes (default 512 MiB)"),
    EnvVar("SAFEHUB_MAX_TREE_BYTES", "extracted size cap in bytes (default 2 GiB)"),
    EnvVar("SAFEHUB_MAX_FILES", "extracted entry cap (default 100,000)"),
    EnvVar("SAFEHUB_TIMEOUT", "the most one request may take, connection to last byte, in "
           "seconds (default 300; weights downloads at least an hour; no byte for 30 s also "
           "ends it)"),
    EnvVar("SAFEHUB_BACKOFF", "first retry pause in seconds (default 0.5, doubling; 3 "
           "retries)"),
    EnvVar("SAFEHUB_DEBUG", "`1`: the command shows the traceback of an unexpected error "
           "(a bug) instead of one line"),
    EnvVar("SAFEHUB_CONFINED", "set by `safehub run --confine` for the programs it starts "
           "(what the kernel holds them to); not for you to set"),
    EnvVar("SAFEHUB_BROKER", "set by `safehub run --confine` for the programs it starts "
           "(the channel to ask it for a cache miss); not for you to set"),
    EnvVar("CI", "`true` (any yes): never prompt, as `SAFEHUB_NONINTERACTIVE=1`"),
    EnvVar("GITHUB_TOKEN", "sent as a bearer token to URLs under the API base only (API "
           "quota; private repos)"),
    EnvVar("REQUESTS_CA_BUNDLE", "a private CA for a GitHub Enterprise, mirror or registry "
           "host (else `CURL_CA_BUNDLE`, else `SSL_CERT_FILE`; unset: certifi's bundle)"),
    EnvVar("HTTPS_PROXY", "the proxy safehub's requests go through (else `ALL_PROXY`; hosts "
           "in `NO_PROXY` and this machine's own go direct), read as requests reads it"),
    EnvVar("TORCH_HOME", "torch's own: where torch keeps its hub dir (weights go there, as "
           "with torch.hub)"),
)


def environment() -> tuple[EnvVar, ...]:
    """Every variable safehub reads: the policy keys' (``env=``) first, then the others."""
    keyed = tuple(EnvVar(key.env, key.doc, f"[safehub] {key.name}")
                  for key in KEYS["safehub"].values() if key.env)
    return keyed + ENVIRONMENT


def env_flag(environ: Mapping[str, str], name: str) -> bool:
    """True for ``1``, ``true``, ``yes``, ``on``; false for unset, empty, ``0``, ``false``,
    ``no``, ``off``; anything else is a :class:`SpecError` (a typo never means "off")."""
    value = environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise SpecError(f"{name}={environ[name]!r} is not a yes or no",
                    fix=fixes.say(f"set {name}=1 to turn it on, or unset it"))


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
                        fix=fixes.run(f"unset {name}")) from None
    if not math.isfinite(value):
        raise SpecError(f"{name}={raw!r} is not a finite number", fix=fixes.run(f"unset {name}"))
    if value < 0 or (kind is int and value == 0):
        raise SpecError(f"{name}={raw!r} must be positive", fix=fixes.run(f"unset {name}"))
    return value


def _base_url(value: str | None, name: str, default: str) -> str:
    """The base as the transport reads it (:func:`~safehub._internal.urls.read_url`),
    without a final ``/``."""
    url = value or default
    try:
        return str(read_url(url)).rstrip("/")
    except UrlError as e:
        raise SpecError(f"{name}: {e}; safehub only talks HTTPS to a plain "
                        "https://host[:port]/path base",
                        fix=fixes.say(f"{e.advice} (for a private CA set "
                                      f"REQUESTS_CA_BUNDLE)")) from None


def _cache_dir(policy: Policy, environ: Mapping[str, str]) -> tuple[Path, str]:
    """The cache root and the rule that chose it: ``SAFEHUB_CACHE_DIR`` or a policy's
    ``cache_dir``; else beneath torch's hub dir, in a folder of its own, where the user
    moved that dir; else the user cache dir."""
    cache, source = resolve_setting(policy, "cache_dir", environ)
    if cache:
        return Path(cache).expanduser(), str(source)
    torch_hub = torch_hub_dir(environ)
    if torch_hub.moved_by is not None:
        return (Path(torch_hub.path) / APP,
                f"beneath torch's hub dir, which {torch_hub.moved_by} moved")
    return _user_dir("user_cache_dir"), "the default: the user cache dir"


def _oci_places(raw: Any, where: Origin) -> tuple[str, ...]:
    """``SAFEHUB_OCI`` (comma-separated) or the policy's ``oci`` list, each entry checked."""
    from safehub._internal.ocirefs import split_place

    items = raw.split(",") if isinstance(raw, str) else list(raw or ())
    places = tuple(item.strip() for item in items if item.strip())
    for item in places:
        if item.startswith("http://") and where.kind != "file":
            raise SpecError(f"{where}: {item!r} speaks plain HTTP, which only a policy file "
                            "may ask for (oci = [\"http://127.0.0.1:PORT/REPO\"] in [safehub])",
                            fix=fixes.say("give the registry TLS, or name it in a policy file"))
        try:
            split_place(item)
        except ValueError as e:
            raise SpecError(f"{where}: {item!r} is {e}",
                            fix=fixes.say("write SAFEHUB_OCI=registry.example.com/team/hub (comma "
                            "separated, tried in order) or SAFEHUB_OCI=oci:/path/to/dir")) from None
    return places


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def noninteractive(policy: Policy, environ: Mapping[str, str]) -> bool:
    """Whether safehub must never ask a question, decided once for every prompt (a load's
    consent, ``policy init``'s confirmation): the policy's ``noninteractive`` or
    ``SAFEHUB_NONINTERACTIVE``, ``CI`` set to anything but a no, a job of ``safehub run
    --confine`` (``SAFEHUB_CONFINED``), or a stdin that is not a terminal.

    >>> noninteractive(Policy(), {"CI": "woodpecker"}), noninteractive(Policy(), {"CI": "0"})
    ... # doctest: +ELLIPSIS
    (True, ...)
    """
    ci = environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")
    return bool(resolve_setting(policy, "noninteractive", environ)[0] or ci
                or environ.get("SAFEHUB_CONFINED") or not _stdin_is_tty())


class OwnPlace(Frozen):
    """A place where safehub keeps what a later run trusts: ``path``, ``what`` it is (as
    messages name it), ``moved_by``: the setting that moves it elsewhere, and whether it is
    one ``file`` (written in its folder) rather than a folder."""

    path: Path
    what: str
    moved_by: str
    file: bool = False


class Origin(Frozen):
    """Where a setting's value came from: a ``variable``, a policy ``file``, a ``hub``
    argument or the ``default``; ``where`` names it, ``str()`` as messages say it."""

    kind: Literal["variable", "file", "hub", "default"]
    where: str
    text: str

    def __str__(self) -> str:
        return self.text


_OFFLINE_VARIABLE = Origin("variable", "SAFEHUB_OFFLINE", "SAFEHUB_OFFLINE=1")
_LOCKED_VARIABLE = Origin("variable", "SAFEHUB_LOCKED", "SAFEHUB_LOCKED=1")


def resolve_setting(policy: Policy, name: str, environ: Mapping[str, str]
                    ) -> tuple[Any, Origin]:
    """(value, where it came from) for a ``[safehub]`` key, the environment included."""
    key = KEYS["safehub"][name]
    setting = policy.setting(name)
    source = (Origin("default", "", "default") if setting.source == "default"
              else Origin("file", setting.source, f"{name} in {setting.source}"))
    if key.merge == "any-true":
        if key.env and env_flag(environ, key.env):
            return True, Origin("variable", key.env, f"{key.env}={environ[key.env]}")
        return bool(setting.value), source
    if key.env and environ.get(key.env) and not setting.final:
        return environ[key.env], Origin("variable", key.env, key.env)
    return setting.value, source


class Settings(Frozen):
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
    offline_source: Origin = _OFFLINE_VARIABLE
    """Where offline mode was switched on (for messages and their fixes)."""
    confine: bool = False
    """``safehub run`` confines its command (``SAFEHUB_CONFINE=1`` or ``confine = true``)."""
    ignored: tuple[Ignored, ...] = ()
    """Variables and arguments a policy file overrides (:class:`Ignored`)."""
    finals: tuple[tuple[str, str], ...] = ()
    """``(key, file)`` for each ``[safehub]`` key a ``final = true`` file holds."""
    cache_source: str = "the default: the user cache dir"
    """Which rule chose ``cache_dir`` (``policy show``, ``cache ls``)."""
    locked: bool = False
    """Locked mode (``SAFEHUB_LOCKED=1``, ``locked = true``, ``--locked``): whatever a load
    runs or fetches through a held path must be pinned in the lockfile, and nothing is
    pinned on first use."""
    locked_source: Origin = _LOCKED_VARIABLE
    """Where locked mode was switched on (for messages)."""
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
        locked, locked_source = resolve_setting(policy, "locked", env)
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
        cache, cache_source = _cache_dir(policy, env)
        lockfile, audit = value("lockfile"), value("audit_log")
        return cls(
            cache_dir=cache,
            data_dir=_user_dir("user_data_dir"),
            log_dir=_user_dir("user_log_dir"),
            api_url=_base_url(value("github_api_url"), "SAFEHUB_GITHUB_API_URL",
                              "https://api.github.com"),
            web_url=_base_url(value("github_url"), "SAFEHUB_GITHUB_URL", "https://github.com"),
            token=env.get("GITHUB_TOKEN") or None,
            offline=bool(offline),
            noninteractive=noninteractive(policy, env),
            extra_hosts=frozenset(normalise_host(h) for h in hosts_raw if h.strip()),
            limits=limits,
            audit_log=Path(audit).expanduser() if audit else None,
            lockfile=Path(lockfile).expanduser() if lockfile else None,
            tree_fallback=bool(value("tree_fallback")),
            runtime=str(value("runtime")),
            offline_source=offline_source,
            confine=bool(value("confine")),
            locked=bool(locked),
            locked_source=locked_source,
            ignored=ignored_variables(policy, env),
            finals=tuple((name, policy.setting(name).source) for name in KEYS["safehub"]
                         if policy.setting(name).final),
            cache_source=cache_source,
            oci=_oci_places(*resolve_setting(policy, "oci", env)),
        )

    def with_overrides(self, policy: Policy, **changes: Any) -> Settings:
        """``Hub(**changes)``: a later layer, applied where the policy files let it
        (:func:`held_back`); the rest is left out and listed in :attr:`ignored`."""
        kept, ignored = {}, list(self.ignored)
        for name, value in changes.items():
            held = held_back(policy, name, value)
            if held is None:
                kept[name] = value
            else:
                ignored.append(held)
        return self.with_changes(**kept, ignored=tuple(ignored))

    def final_in(self, key: str) -> str | None:
        """The file that holds ``key`` with ``final = true``, if one does."""
        return dict(self.finals).get(key)

    def how_to_set(self, key: str, usual: str) -> str:
        """``usual`` (say "point SAFEHUB_CACHE_DIR at a folder you can write"), unless a
        final file holds ``key``: then who can change it, since the variable is ignored."""
        by = self.final_in(key)
        if by is None:
            return usual
        return f"ask whoever keeps {by} to change its {key} (final = true there)"

    def with_changes(self, **changes: object) -> Settings:
        """A copy with some fields replaced (``Hub(**overrides)`` uses this)."""
        if changes.get("offline") and "offline_source" not in changes:
            changes["offline_source"] = Origin("hub", "offline=True", "Hub(offline=True)")
        if changes.get("locked") and "locked_source" not in changes:
            changes["locked_source"] = Origin("hub", "locked=True", "Hub(locked=True)")
        if changes.get("cache_dir") is not None and "cache_source" not in changes:
            changes["cache_source"] = "Hub(cache_dir=...)"
        return replace(self, **changes)

    @property
    def lockfile_path(self) -> Path:
        """The lockfile in force: ``SAFEHUB_LOCKFILE`` / the policy's ``lockfile``, else
        ``./safehub.lock`` (where a lockfile is looked for, existing or not)."""
        return self.lockfile or Path.cwd() / "safehub.lock"

    @property
    def audit_path(self) -> Path:
        """The audit log: the policy's ``audit_log``, else ``audit.jsonl`` in the log dir."""
        return self.audit_log or self.log_dir / "audit.jsonl"

    def own_places(self) -> tuple[OwnPlace, ...]:
        """safehub's own places, the one list: the cache, the user's records (the data dir,
        with the folders :mod:`safehub.store.records` declares) and the audit log. What
        safehub's own work may write while a repo's code runs, and what a confined job may
        never change, are both read from here.

        >>> [p.what for p in Settings.from_env({"SAFEHUB_CACHE_DIR": "/c"}).own_places()]
        ... # doctest: +NORMALIZE_WHITESPACE
        ["safehub's cache", "safehub's records: consent, verified trees, signature verdicts,
        weight pins, compiled modules of verified trees", "safehub's audit log"]
        """
        from safehub.store.records import FOLDERS

        return (OwnPlace(self.cache_dir, "safehub's cache", "SAFEHUB_CACHE_DIR"),
                OwnPlace(self.data_dir, f"safehub's records: {', '.join(FOLDERS.values())}",
                         "XDG_DATA_HOME"),
                OwnPlace(self.audit_path, "safehub's audit log",
                         "the policy's audit_log, or XDG_STATE_HOME", file=True))

    @property
    def offline_off(self) -> str:
        """How to turn offline mode off, by where it was turned on (for messages).

        >>> Settings.from_env({"SAFEHUB_OFFLINE": "1"}).offline_off
        'turn offline mode off: unset SAFEHUB_OFFLINE (it is SAFEHUB_OFFLINE=1 now)'
        """
        source = self.offline_source
        if source.kind == "hub":
            return f"turn offline mode off: build the Hub without {source.where}"
        if source.kind == "file":
            return f"turn offline mode off: remove offline = true from {source.where}"
        return f"turn offline mode off: unset {source.where} (it is {source} now)"

    def offline_fix(self, spec: str) -> fixes.Fix:
        """What gets an offline load of ``spec`` past a tree that is not cached."""
        import shlex

        return fixes.either(
            fixes.run(f"safehub prefetch {shlex.quote(spec)}",
                      f"{self.network_machine}, then share its cache with this one ("
                      + (f"this one's is {self.cache_dir}, set by {by}"
                         if (by := self.final_in("cache_dir")) else "SAFEHUB_CACHE_DIR")
                      + ")"),
            fixes.say(self.offline_off))

    @property
    def network_machine(self) -> str:
        """Where a command that needs the network can run (offline mode may come with
        a policy file, which that machine must not read)."""
        if self.offline_source.kind == "file":
            return (f"on a machine with network where {self.offline_source.where} does not "
                    "apply (it sets offline = true)")
        return "on a machine with network"

    @property
    def api_host(self) -> str:
        return read_url(self.api_url).host

    @property
    def allowed_hosts(self) -> frozenset[str]:
        """Hosts a download may be redirected to.

        The API and web hosts, ``SAFEHUB_ALLOWED_HOSTS``, and for github.com the hosts
        GitHub itself redirects archive and release downloads to.
        """
        hosts = {self.api_host, read_url(self.web_url).host}
        if "github.com" in hosts:
            hosts |= {
                "codeload.github.com",
                "objects.githubusercontent.com",
                "release-assets.githubusercontent.com",
            }
        return frozenset(hosts | self.extra_hosts)

    def transport(self, *, weights: bool = False) -> Transport:
        """A transport held to these settings (imported here: a warm load makes none).
        ``weights``: for weights downloads, with a deadline of at least an hour."""
        from safehub.sources.transport import Transport

        config = self.transport_config()
        if weights:
            config = replace(config, deadline=max(config.deadline, 3600.0))
        return Transport(config)

    def transport_config(self) -> TransportConfig:
        """The transport's own rules, taken from these settings."""
        from safehub.sources.transport import TransportConfig

        lim = self.limits
        return TransportConfig(
            allowed_hosts=self.allowed_hosts, connect_timeout=lim.connect_timeout,
            stall_timeout=min(lim.read_timeout, lim.deadline), deadline=lim.deadline,
            retries=lim.retries, backoff=lim.backoff, max_json_bytes=lim.max_api_bytes,
            offline=self.offline, offline_source=str(self.offline_source))
