"""The guards held while a repo's code runs (step 9): weights and runtime, from the policy."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal.hosts import hosts_of_urls
from safehub.run.runtime import OwnWork, RuntimeGuard, RuntimeRules
from safehub.run.weights import WeightsGuard
from safehub.store.records import ConsentStore, WeightPins

if TYPE_CHECKING:
    from safehub.config import Settings
    from safehub.policy import Decision
    from safehub.sources.transport import Transport
    from safehub.spec import RepoSpec
    from safehub.store.cache import CachedTree
    from safehub.store.lockfile import LockEntry

__all__ = ["own_work", "runtime_guard", "weights_guard"]


def _user_policy() -> Path:
    from safehub.policy import user_file

    return user_file()


def runtime_guard(spec: RepoSpec, decision: Decision, tree: CachedTree, *,
                  mode: str, own: OwnWork | Callable[[], OwnWork] | None = None
                  ) -> RuntimeGuard:
    """The runtime guard for one load: the policy's runtime keys, merged; ``own``: what
    safehub's own work may do while it pauses the guard (:func:`own_work`)."""
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
                        tree_ident=tree.ident, own=own)


def own_work(settings: Settings, decision: Decision, audit_path: Path) -> OwnWork:
    """What safehub's own work may touch during a load (a nested load's fetch and checks,
    a weights download, the audit line): its hosts (any, where the weights patterns name
    none or a wildcard: the download may go where the policy lets it), its folders (cache,
    data but never the consent records, logs, sigstore's caches, the temp dir); never a
    process. safehub's own places are :meth:`Settings.own_places` (the audit log's folder
    for the log), the consent records' folder is the records module's."""
    import functools

    import platformdirs

    patterns = [p.pattern for ps in decision.requirements.weights for p in ps]
    weights = hosts_of_urls(patterns)

    @functools.cache
    def hosts() -> tuple[str, ...] | None:
        """Worked out on the first connection (the proxies' reading imports requests)."""
        from safehub.sources.transport import proxy_hosts

        if not patterns or any("*" in h for h in weights):
            return None
        return (*settings.transport_config().allowed_hosts, *weights,
                *proxy_hosts([settings.api_url, settings.web_url, *patterns]))

    own = [p.path.parent if p.file else p.path for p in settings.own_places()]
    roots = (*own, audit_path.parent,
             Path(platformdirs.user_cache_dir("sigstore-python", appauthor=False)),
             Path(platformdirs.user_data_dir("sigstore-python", appauthor=False)),
             Path(tempfile.gettempdir()))
    return OwnWork(hosts, tuple(dict.fromkeys(os.path.realpath(r) for r in roots)),
                   (os.path.realpath(settings.data_dir / ConsentStore.FOLDER),))


def weights_guard(spec: RepoSpec, decision: Decision, lock: LockEntry | None, *,
                  data_dir: Path, transport: Callable[[], Transport], locked: str = "",
                  entrypoint: str | None = None,
                  bound: dict[str, str] | None = None) -> WeightsGuard:
    """The weights guard for one load: the policy's patterns and formats, the lockfile's
    pins; ``transport`` makes the transport of its downloads (called on the first one);
    ``locked``: where locked mode was switched on ("": off); ``bound``: the weights the
    consent this load runs on binds."""
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
        bound=dict(bound or {}), spec_asked=str(spec))
