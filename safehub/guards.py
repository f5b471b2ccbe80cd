"""The guards held while a repo's code runs (step 9): weights and runtime, from the policy."""

from __future__ import annotations

from pathlib import Path

from safehub._internal.warn import warn
from safehub.cache import Cache, CachedTree
from safehub.errors import SafehubError
from safehub.lockfile import LockEntry, Lockfile, WeightPin
from safehub.policy import Decision
from safehub.records import WeightPins
from safehub.runtime import RuntimeGuard, RuntimeRules, hosts_of_urls
from safehub.spec import RepoSpec
from safehub.transport import Transport
from safehub.weights import WeightsGuard

__all__ = ["runtime_guard", "weights_guard"]


def _user_policy() -> Path:
    from safehub.policy import user_file

    return user_file()


def runtime_guard(spec: RepoSpec, decision: Decision, tree: CachedTree, *,
                  mode: str) -> RuntimeGuard:
    """The runtime guard for one load: the policy's runtime keys, merged."""
    reqs = decision.requirements
    network, programs, writes = reqs.runtime.merged(mode)
    rules = RuntimeRules(
        mode=mode,  # type: ignore[arg-type]
        network=network, subprocess=programs, writes=writes,
        weights_hosts=hosts_of_urls(reqs.runtime.weights_patterns()),
        shadowing=reqs.runtime.shadowing,
        source="; ".join(reqs.runtime.rules) or "the policy",
        edit=reqs.runtime.edit if reqs.runtime.edit[1] else (str(_user_policy()), ""),
        repo_key=spec.key)
    return RuntimeGuard(rules, repo=spec.repo, tree=tree.path, sealed_ns=tree.sealed,
                        tree_ident=tree.ident)


def weights_guard(spec: RepoSpec, decision: Decision, lock: LockEntry | None, *,
                  lockfile: Path, cache: Cache, data_dir: Path,
                  transport: Transport) -> WeightsGuard:
    """The weights guard for one load; new pins of a locked spec go into the lockfile."""

    def pin(url: str, sha256: str) -> None:
        try:
            with cache.lock("lockfile"):
                current = Lockfile.load(lockfile)
                current.add_weight(spec, WeightPin(url, sha256))
                current.save()
        except (SafehubError, OSError) as e:
            warn(f"could not pin the weights {url} in {lockfile}: {e}")

    reqs = decision.requirements
    return WeightsGuard(
        repo=spec.repo, patterns=reqs.weights, rules=reqs.weights_rules,
        weights_only=reqs.weights_only, warn_only=decision.mode == "warn",
        locked={w.url: w.sha256 for w in lock.weights} if lock is not None else {},
        records=WeightPins(data_dir), on_new_pin=pin if lock is not None else None,
        transport=transport)
