"""The guards held while a repo's code runs (step 9): weights and runtime, from the policy."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safehub._internal.urls import hosts_of_urls
from safehub.run import runtime, torchhub
from safehub.run.runtime import OwnWork, RuntimeGuard, RuntimeRules
from safehub.store.records import ConsentStore, WeightPins

if TYPE_CHECKING:
    from safehub.config import Settings
    from safehub.policy import Decision
    from safehub.run.confine.ruleset import Ruleset
    from safehub.run.weights import WeightsGuard
    from safehub.sources.transport import Transport
    from safehub.spec import RepoSpec
    from safehub.store.cache import CachedTree
    from safehub.store.lockfile import LockEntry

__all__ = ["Weights", "once", "own_work", "runtime_guard", "weights_guard"]


def _user_policy() -> Path:
    from safehub.policy import user_file

    return user_file()


def runtime_guard(spec: RepoSpec, decision: Decision, tree: CachedTree, *,
                  mode: str, own: OwnWork | Callable[[], OwnWork] | None = None,
                  noticed: Path | None = None, confined: Ruleset | None = None
                  ) -> RuntimeGuard:
    """The runtime guard for one load: the policy's runtime keys, merged; ``own``: what
    safehub's own work may do while it pauses the guard (:func:`own_work`); ``noticed``:
    the user data dir where a notice said once per user is recorded (:func:`once`);
    ``confined``: the ruleset of ``safehub run --confine`` the process runs under."""
    reqs = decision.requirements
    user_policy = str(_user_policy())
    network, programs, writes = reqs.runtime.merged(mode)
    rules = RuntimeRules(
        mode=mode,  # type: ignore[arg-type]
        network=network, subprocess=programs, writes=writes,
        weights_hosts=hosts_of_urls(reqs.runtime.weights_patterns()),
        shadowing=reqs.runtime.shadowing, pickles="pickle" in reqs.weights_format,
        source="; ".join(reqs.runtime.rules) or "the policy",
        edit=reqs.runtime.edit if reqs.runtime.edit[1] else (user_policy, ""),
        user_policy=user_policy,
        repo_key=spec.key)
    return RuntimeGuard(rules, repo=spec.repo, tree=tree.path, verified_ns=tree.verified_ns,
                        tree_ident=tree.ident, own=own,
                        first_time=once(noticed) if noticed is not None else None,
                        confined=confined)


def once(data_dir: Path) -> Callable[[str], bool]:
    """Whether a notice (a warning that says something true the user need not act on each
    time, such as a repo's module shadowing its own installed distribution) is new for this
    user: recorded in ``<data_dir>/notices.json`` when first said. Best effort: a record
    that cannot be read or written says the notice again, and two processes at once may
    both say it."""
    from safehub._internal.fsutil import read_json, write_json
    from safehub.run.runtime import own_work

    path = data_dir / "notices.json"

    def first_time(key: str) -> bool:
        with own_work():  # safehub's record, even while a repo's code is being guarded
            try:
                said = read_json(path)
            except (OSError, ValueError, RecursionError):
                said = []
            said = [k for k in said if isinstance(k, str)] if isinstance(said, list) else []
            if key in said:
                return False
            with contextlib.suppress(OSError):
                write_json(path, [*said, key], mode=0o600)
        return True

    return first_time


def own_work(settings: Settings, decision: Decision, audit_path: Path) -> OwnWork:
    """What safehub's own work may touch during a load (a nested load's fetch and checks,
    a weights download, the audit line): its hosts (any, where the weights patterns name
    none or a wildcard: the download may go where the policy lets it), its folders (cache,
    data but never the consent records, logs, sigstore's caches, the temp dir); never a
    process. safehub's own places are :meth:`Settings.own_places` (the audit log's folder
    for the log), the consent records' folder is the records module's."""
    import functools

    import platformdirs

    from safehub.run.hfplaces import hub_cache, hub_endpoint

    patterns = [p.pattern for ps in decision.requirements.weights for p in ps
                if not p.pattern.startswith("hf://")]  # a Hub repo names no host
    weights = hosts_of_urls(patterns)
    # Hub files go to the endpoint and its CDN, each hop checked by safehub (run/hfhub.py)
    hub = any(p.pattern.startswith(("hf://", hub_endpoint() + "/"))
              for ps in decision.requirements.weights for p in ps)

    @functools.cache
    def hosts() -> tuple[str, ...] | None:
        """Worked out on the first connection (the proxies' reading imports urllib.request)."""
        from safehub.sources.transport import proxy_hosts

        if not patterns or hub or any("*" in h for h in weights):
            return None
        return (*settings.transport_config().allowed_hosts, *weights,
                *proxy_hosts([settings.api_url, settings.web_url, *patterns]))

    own = [p.path.parent if p.file else p.path for p in settings.own_places()]
    roots = (*own, audit_path.parent,
             Path(platformdirs.user_cache_dir("sigstore-python", appauthor=False)),
             Path(platformdirs.user_data_dir("sigstore-python", appauthor=False)),
             Path(tempfile.gettempdir()), hub_cache())
    return OwnWork(hosts, tuple(dict.fromkeys(os.path.realpath(r) for r in roots)),
                   (os.path.realpath(settings.data_dir / ConsentStore.FOLDER),))


class Weights:
    """The weights guard of one load, made when the repo's code first asks for a file:
    most loads fetch none through torch.hub or the Hub, and never import the guard's
    module (:mod:`safehub.run.weights`, with its checks of every weights format)."""

    def __init__(self, make: Callable[[], WeightsGuard]) -> None:
        self._make = make
        self._guard: WeightsGuard | None = None

    def guard(self) -> WeightsGuard:
        """The guard, made at the first call (safehub's own work, not the repo's)."""
        if self._guard is None:
            with runtime.own_work():  # safehub's import (its files read), not the repo's
                self._guard = self._make()
        return self._guard

    def handlers(self) -> dict[str, Callable[..., Any]]:
        """The functions that stand in for torch.hub's (:data:`torchhub.WEIGHTS`)."""
        def held(name: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                return getattr(self.guard(), name)(*args, **kwargs)

            return call

        return {name: held(name) for name in torchhub.WEIGHTS}


def weights_guard(spec: RepoSpec, decision: Decision, lock: LockEntry | None, *,
                  data_dir: Path, transport: Callable[[], Transport], locked: str = "",
                  entrypoint: str | None = None,
                  bound: dict[str, str] | None = None) -> WeightsGuard:
    """The weights guard for one load: the policy's patterns and formats, the lockfile's
    pins; ``transport`` makes the transport of its downloads (called on the first one);
    ``locked``: where locked mode was switched on ("": off); ``bound``: the weights the
    consent this load runs on binds."""
    from safehub.run.weights import WeightsGuard

    reqs = decision.requirements
    pins = lock.weights if lock is not None else ()
    return WeightsGuard(
        repo=spec.repo, patterns=reqs.weights, rules=reqs.weights_rules,
        weights_only=reqs.weights_only, warn_only=decision.mode == "warn",
        locked={w.url: w.sha256 for w in pins},
        records=WeightPins(data_dir), repo_key=spec.key, transport=transport,
        locked_spec=lock.spec if lock is not None else None, locked_mode=locked,
        entrypoint=entrypoint, sizes={w.url: w.size for w in pins if w.size is not None},
        formats=reqs.weights_format, format_rules=reqs.weights_format_rules,
        bound=dict(bound or {}), spec_asked=str(spec),
        commits={w.url: w.commit for w in pins if w.commit}, told=_told_to_parent())


def _told_to_parent() -> Callable[[str, str, int, str], None] | None:
    """Under a parent that asks (``safehub lock --entrypoint``, ``safehub run --confine``:
    ``SAFEHUB_BROKER``), each file the guard checked is told to it (URL, sha256, size, a Hub
    file's commit): the parent checks them itself before it pins any."""
    from safehub._internal import broker

    if not broker.available():
        return None

    def tell(url: str, sha256: str, size: int, commit: str) -> None:
        broker.ask({"op": "pinned", "url": url, "sha256": sha256, "size": size,
                    "commit": commit})

    return tell
