"""``safehub lock`` and ``lock --check``: pinning specs to commits in the lockfile."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from safehub import pipeline
from safehub._internal import fixes
from safehub.errors import IntegrityError, PinError, SafehubError, SpecError
from safehub.operations.common import Report
from safehub.spec import RepoSpec, is_full_sha
from safehub.store.lockfile import LockEntry, Lockfile, WeightPin, spec_key
from safehub.store.records import WeightPins

if TYPE_CHECKING:
    from safehub.hub import Hub
    from safehub.operations.pinned import PinStatus

__all__ = ["EntrypointFetches", "LockChange", "LockStatus", "lock", "lock_check",
           "lock_check_weights", "lock_entrypoint"]

_LOCK = pipeline.Plan(upto="signature", resolution="fresh", locked=True, pinned=False,
                      verbose=False)
"""``lock``: resolved afresh, the tree checked against the commit (the entry is being
written), the policy's signature verified (its signer is pinned)."""
_ONLINE = pipeline.Plan(upto="admit", resolution="online")
"""``lock --check``: admission with the ref asked online, nothing recorded."""


@dataclass(frozen=True)
class LockChange(Report):
    spec: str
    commit: str
    change: str  # added, upgraded, unchanged, kept
    previous: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["from"] = data.pop("previous")
        return data


def lock(hub: Hub, specs: Sequence[str] = (), *, upgrade: bool = False,
         rewrite: bool = False) -> list[LockChange]:
    """Pin ``specs`` in the lockfile (fetching and verifying each); return what changed.

    Specs already locked are kept unless ``upgrade`` (which, with no specs, re-resolves
    every entry). ``rewrite`` starts the file afresh, without reading it (an invalid one
    too): only ``specs`` are in it afterwards. Policy denials still apply; nothing is
    trusted or run.
    """
    if rewrite and not specs:
        raise SpecError("--rewrite needs the specs to write", fix=fixes.run(
            "safehub lock --rewrite owner/name:ref ...",
            "with every spec the lockfile should pin"))
    lockfile = Lockfile(hub.lockfile_path) if rewrite else Lockfile.load(
        hub.lockfile_path, missing_ok=True)
    if rewrite:
        hub.forget_lockfile(instead=lockfile)  # admission must not read the old file either
    targets = list(specs) or (list(lockfile.entries) if upgrade else [])
    if not targets:
        raise SpecError("nothing to lock", fix=fixes.run("safehub lock owner/name:ref ..."))
    changes: list[LockChange] = []
    pins = WeightPins(hub.settings.data_dir)
    for text in targets:
        spec = RepoSpec.parse(text)
        old = lockfile.get(spec)
        if old is not None and not upgrade:
            lockfile.put(old.with_pins(_pins(pins, spec.key)))
            changes.append(LockChange(old.spec, old.commit, "kept"))
            continue
        passed = pipeline.steps(hub.context, spec, _LOCK)
        tree, signed = passed.tree, passed.signature
        assert tree is not None and signed is not None
        r = hub.resolver.spelled(passed.admitted.resolved)  # as the tree was named
        signer = signed.signer
        entry = LockEntry(spec_key(spec), r.commit, r.tree, tree.digest, r.ref, r.proof,
                          tree.level, signer, repo=r.url_name, resolved_ref=r.full_ref)
        if old is not None and (old.commit, old.digest) == (entry.commit, entry.digest):
            entry = dataclasses.replace(entry, weights=old.weights, oci=old.oci)
        entry = entry.with_pins(_pins(pins, spec.key))
        change = "added" if old is None else (
            "unchanged" if old.commit == entry.commit else "upgraded")
        lockfile.put(entry)
        changes.append(LockChange(entry.spec, entry.commit, change,
                                  old.commit if old is not None else None))
    lockfile.save()
    hub.forget_lockfile()
    return changes


@dataclass(frozen=True)
class LockStatus(Report):
    spec: str
    locked: str
    now: str | None
    ok: bool
    error: str | None = None
    fix: fixes.Fix | None = None

    def to_json(self) -> dict[str, Any]:  # the fix as text, as for `check`
        return {**super().to_json(), "fix": fixes.render(self.fix) if self.fix else None}


def lock_check(hub: Hub) -> list[LockStatus]:
    """Ask GitHub whether every locked ref still names its locked commit (and is the
    repo's own, and the policy still admits it); nothing is cached or changed."""
    lockfile = hub.lockfile
    if lockfile is None:
        raise PinError(f"no lockfile at {hub.lockfile_path}",
                       fix=fixes.run("safehub lock SPEC", "to create one"))
    results = []
    for key in sorted(lockfile.entries):
        entry = lockfile.entries[key]
        try:
            now = pipeline.steps(hub.context, RepoSpec.parse(entry.spec),
                                 _ONLINE).admitted.resolved
            where = now.url_name.lower()
            if entry.repo and entry.repo.lower() != where:
                # The entry locks code from another repo than the spec names today.
                results.append(LockStatus(key, entry.commit, None, False,
                                          f"locked to code from {entry.repo}, but {entry.spec} "
                                          f"is {now.url_name} now", fixes.run(
                                              f"safehub lock {shlex.quote(entry.spec)}",
                                              "after checking why")))
                continue
            ok = now.commit == entry.commit and now.tree == entry.tree
            results.append(LockStatus(key, entry.commit, now.commit, ok, fix=None if ok else (
                fixes.run(f"safehub lock --upgrade {shlex.quote(entry.spec)}",
                          "if the move is expected (review the new commit first)"))))
        except SafehubError as e:
            results.append(LockStatus(key, entry.commit, None, False,
                                      f"{type(e).__name__}: {e.message}", e.fix))
    return results


def lock_check_weights(hub: Hub) -> list[PinStatus]:
    """Ask every file the lockfile pins whether it still answers with its pinned size and
    digest (a HEAD where the server gives a digest, else a download hashed and discarded);
    nothing is kept or changed."""
    from safehub.operations.pinned import check_pins

    lockfile = hub.lockfile
    if lockfile is None:
        return []
    return [s for key in sorted(lockfile.entries) for s in check_pins(hub,
                                                                       lockfile.entries[key])]


@dataclass(frozen=True)
class EntrypointFetches(Report):
    """What ``lock SPEC --entrypoint NAME`` ran, and the files it pinned for it."""

    spec: str
    entrypoint: str
    weights: tuple[WeightPin, ...]
    fetched: tuple[str, ...] = ()
    """Every URL safehub downloaded while it ran (redirect hops included)."""


def lock_entrypoint(hub: Hub, spec: str, entrypoint: str, kwargs: str | None = None, *,
                    upgrade: bool = False, trust: bool = False
                    ) -> tuple[list[LockChange], EntrypointFetches]:
    """Lock ``spec``, run its ``entrypoint`` once as ``safehub load`` would (same policy,
    admission and trust; ``kwargs`` a JSON object), and pin every file it fetched in the
    entry: URL, sha256, size (and a Hub file's commit).

    The entrypoint runs in a child process (``python -m safehub load``, the locked commit)
    with a fresh torch hub dir of its own, so every file it needs is fetched and hashed
    there rather than taken from a checkpoint folder; the files are pinned only if the whole
    load succeeded.
    """
    import json

    if kwargs is not None:
        try:
            parsed = json.loads(kwargs)
        except (ValueError, RecursionError) as e:
            raise SpecError(f"--kwargs is not JSON ({e})",
                            fix=fixes.say("""give a JSON object, e.g. --kwargs '{"n": 2}'""")
                            ) from e
        if not isinstance(parsed, dict):
            raise SpecError("--kwargs must be a JSON object",
                            fix=fixes.say("""e.g. --kwargs '{"pretrained": true}'"""))
    changes = lock(hub, [spec], upgrade=upgrade)
    key, repo = changes[0].spec, RepoSpec.parse(spec).key
    records = WeightPins(hub.settings.data_dir)
    before = {url: records.get(url) for url in records.for_repo(repo)}
    fetched = _run_entrypoint(hub, key, entrypoint, kwargs, trust)
    now = {url: records.get(url) for url in records.for_repo(repo)}
    pins = tuple(_pin(url, seen) for url, seen in sorted(now.items())
                 if seen is not None and (before.get(url) != seen or url in fetched))
    lockfile = Lockfile.load(hub.lockfile_path)
    entry = lockfile.entries[key]
    held = {w.url: w for w in entry.weights}
    for pin in pins:
        old = held.get(pin.url)
        if old is not None and old.sha256 != pin.sha256:
            raise IntegrityError(
                f"{entrypoint} of {key} fetched {pin.url} with sha256 {pin.sha256}, but the "
                f"lockfile pins {old.sha256}; the lockfile was not changed",
                fix=fixes.say("review why the file changed; if it should, remove its "
                              "[[repo.weights]] entry and lock again"))
        held[pin.url] = pin
    lockfile.put(dataclasses.replace(entry, weights=tuple(held[u] for u in sorted(held)))
                 .with_pins(_pins(records, repo)))
    lockfile.save()
    hub.forget_lockfile()
    return changes, EntrypointFetches(key, entrypoint, pins, tuple(fetched))


def _pins(records: WeightPins, repo: str) -> dict[str, WeightPin]:
    """The user's pins of the files ``repo``'s code fetched, as lockfile pins (a Hub
    file's commit and every file's size carried over)."""
    return {url: _pin(url, seen) for url in records.for_repo(repo)
            if (seen := records.get(url)) is not None}


def _pin(url: str, seen: Mapping[str, Any]) -> WeightPin:
    """A lockfile pin from the user's record of a file (its stat holds the size)."""
    stat, said = seen.get("stat"), seen.get("size")
    size = said if type(said) is int and said >= 0 else (
        stat[0] if isinstance(stat, list) and stat and type(stat[0]) is int else None)
    commit = seen.get("commit")
    hub_commit = commit if url.startswith("hf://") and isinstance(commit, str) and \
        is_full_sha(commit) else ""
    return WeightPin(url, str(seen["sha256"]), size, hub_commit)


def _run_entrypoint(hub: Hub, spec: str, entrypoint: str, kwargs: str | None,
                    trust: bool) -> list[str]:
    """``safehub load SPEC ENTRYPOINT`` in a child process with a torch hub dir of its own;
    the URLs it fetched (its runtime report), or its refusal raised here."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from safehub import errors

    command = [sys.executable, "-m", "safehub", "load", spec, entrypoint, "--json", "--report",
               "--quiet", "--lockfile", str(hub.lockfile_path),
               *(["--kwargs", kwargs] if kwargs is not None else []),
               *(["--trust"] if trust else [])]
    with tempfile.TemporaryDirectory(prefix="safehub-lock-") as home:
        env = {**os.environ, "TORCH_HOME": home, "SAFEHUB_CACHE_DIR": str(hub.cache.root)}
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True,
                              check=False)
    try:
        answer = json.loads(done.stdout) if done.stdout.strip() else {}
    except (ValueError, RecursionError):
        answer = {}
    if done.returncode != 0 or not isinstance(answer, dict) or "error" in answer:
        kind = getattr(errors, str(answer.get("error", "")), None) \
            if isinstance(answer, dict) else None
        cls = kind if isinstance(kind, type) and issubclass(kind, SafehubError) else SafehubError
        message = answer.get("message") if isinstance(answer, dict) else None
        hint = answer.get("hint") if isinstance(answer, dict) else None
        raise cls(f"running {entrypoint} of {spec} to lock what it fetches failed: "
                  f"{message or f'exit {done.returncode}'}; nothing was pinned",
                  fix=fixes.say(str(hint)) if hint else fixes.say(
                      f"run `safehub load {spec} {entrypoint}` to see why"))
    runtime = answer.get("runtime") if isinstance(answer.get("runtime"), dict) else {}
    urls = runtime.get("fetched", []) if isinstance(runtime, dict) else []
    return [u for u in urls if isinstance(u, str)] if isinstance(urls, list) else []
