"""``safehub lock`` and ``lock --check``: pinning specs to commits in the lockfile."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from safehub import pipeline
from safehub._internal import fixes
from safehub._internal.frozen import replace
from safehub.errors import IntegrityError, PinError, SafehubError, SpecError
from safehub.operations.common import Report
from safehub.spec import RepoSpec, is_full_sha
from safehub.store.lockfile import LockEntry, Lockfile, WeightPin, spec_key
from safehub.store.records import WeightPins

if TYPE_CHECKING:
    from safehub.hub import Hub
    from safehub.operations.pinned import PinStatus
    from safehub.run.confine import Ruleset

__all__ = ["EntrypointFetches", "LockChange", "LockStatus", "lock", "lock_check",
           "lock_check_weights", "lock_entrypoint"]

_LOCK = pipeline.Plan(upto="signature", resolution="fresh", locked=True, pinned=False,
                      verbose=False)
"""``lock``: resolved afresh, the tree checked against the commit (the entry is being
written), the policy's signature verified (its signer is pinned)."""
_ONLINE = pipeline.Plan(upto="admit", resolution="online")
"""``lock --check``: admission with the ref asked online, nothing recorded."""
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MOST_FILES = 10_000
"""The most files one ``lock --entrypoint`` child may tell it checked."""


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
            entry = replace(entry, weights=old.weights, oci=old.oci)
        entry = entry.with_pins(_pins(pins, spec.key))
        change = "added" if old is None else (
            "unchanged" if old.commit == entry.commit else "upgraded")
        lockfile.put(entry)
        changes.append(LockChange(entry.spec, entry.commit, change,
                                  old.commit if old is not None else None))
    lockfile.save()
    hub.forget_lockfile()
    return changes


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


class EntrypointFetches(Report):
    """What ``lock SPEC --entrypoint NAME`` ran, and the files it pinned for it."""

    spec: str
    entrypoint: str
    weights: tuple[WeightPin, ...]
    fetched: tuple[str, ...] = ()
    """Every URL safehub downloaded while it ran (redirect hops included)."""


Launch = Callable[..., int]
"""What starts the child and waits for it: ``safehub run``'s own launcher
(``safehub.run.autoinstall.launch``, given by the command line, a layer above)."""


def lock_entrypoint(hub: Hub, spec: str, entrypoint: str, kwargs: str | None = None, *,
                    launch: Launch, upgrade: bool = False, trust: bool = False
                    ) -> tuple[list[LockChange], EntrypointFetches]:
    """Lock ``spec``, run its ``entrypoint`` once as ``safehub load`` would (same policy,
    admission and trust; ``kwargs`` a JSON object), and pin every file it fetched in the
    entry: URL, sha256, size (and a Hub file's commit).

    The entrypoint runs in a child process (``python -m safehub load``, the locked commit)
    with a torch hub dir and a Hub cache of its own, so every file it needs is fetched and
    hashed there; under ``--confine``'s rules where the kernel offers them (:func:`_runner`).
    The child tells each file it checked over a channel this process owns; each is then
    asked again here (:func:`_checked_here`), and pinned only if the whole load succeeded
    and every file answers with what the child saw. ``launch`` starts it, as ``safehub run``
    starts its job (its ruleset, a channel for its requests).
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
    # Consent is asked here, where the terminal is (a confined child never prompts).
    hub.prepare(key, entrypoint=entrypoint, trust_repo=True if trust else "check",
                verbose=False)
    fetched, told = _run_entrypoint(hub, key, entrypoint, kwargs, launch)
    lockfile = Lockfile.load(hub.lockfile_path)
    entry = lockfile.entries[key]
    pins = _checked_here(hub, entry, told, entrypoint)
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
    records = WeightPins(hub.settings.data_dir)
    lockfile.put(replace(entry, weights=tuple(held[u] for u in sorted(held)))
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


def _told(into: dict[str, WeightPin]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The parent's end of the child's ``pinned`` requests: each kept as the child said
    it, to be asked again here (a malformed one is refused, and fails the child's load)."""
    def pinned(request: dict[str, Any]) -> dict[str, Any]:
        url, sha256, size, commit = (request.get(k) for k in ("url", "sha256", "size",
                                                               "commit"))
        if not (isinstance(url, str) and 0 < len(url) <= 4096 and isinstance(sha256, str)
                and _HEX64.fullmatch(sha256) and type(size) is int and size >= 0
                and isinstance(commit, str) and (not commit or is_full_sha(commit))
                and len(into) < _MOST_FILES):
            raise ValueError("a pinned file is a url, a sha256, a size and a commit")
        into[url] = WeightPin(url, sha256, size, commit if url.startswith("hf://") else "")
        return {"ok": True}

    return pinned


def _checked_here(hub: Hub, entry: LockEntry, told: Mapping[str, WeightPin],
                  entrypoint: str) -> tuple[WeightPin, ...]:
    """What the child said it checked, asked again by this process: each URL must be one
    the policy's ``weights`` patterns allow for the repo, and answer with the size and
    digest the child saw (:func:`~safehub.operations.pinned.confirm`: a digest the server
    gives, else a download hashed here). The child's word is no pin."""
    from safehub.operations.pinned import confirm

    pins = tuple(told[u] for u in sorted(told))
    for pin in pins:
        try:
            confirm(hub, entry, pin)
        except SafehubError as e:
            message = (f"{entrypoint} of {entry.spec} fetched {pin.url}, but asked again here "
                       f"it does not answer as it did: {e.message}; nothing was pinned")
            try:
                refusal = type(e)(message, fix=e.fix)
            except TypeError:  # an error that carries more than words
                refusal = SafehubError(message, fix=e.fix)
            raise refusal from e
    return pins


def _run_entrypoint(hub: Hub, spec: str, entrypoint: str, kwargs: str | None,
                    launch: Launch) -> tuple[list[str], dict[str, WeightPin]]:
    """``safehub load SPEC ENTRYPOINT`` in a child process (confined where the kernel
    allows), with a torch hub dir and a Hub cache of its own; the URLs it fetched (its
    runtime report) and the files it told it checked, or its refusal raised here."""
    import os
    import sys
    import tempfile

    from safehub.operations.job import serve

    command = [sys.executable, "-m", "safehub", "load", spec, entrypoint, "--json", "--report",
               "--quiet", "--lockfile", str(hub.lockfile_path),
               *(["--kwargs", kwargs] if kwargs is not None else [])]
    told: dict[str, WeightPin] = {}
    ruleset = _runner(hub, command)
    with tempfile.TemporaryDirectory(prefix="safehub-lock-") as own, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
        home = ruleset.job if ruleset is not None and ruleset.job else own
        env = {"TORCH_HOME": os.path.join(home, "torch"),
               "HF_HUB_CACHE": os.path.join(home, "huggingface"),
               "SAFEHUB_CACHE_DIR": str(hub.cache.root)}
        code = launch(command, ruleset, broker=serve(hub, pinned=_told(told)),
                      environment=env, stdout=out, routed=False)
        out.seek(0)
        answer = _answer(out.read(1 << 20))
    if code != 0 or "error" in answer:
        from safehub import errors

        kind = getattr(errors, str(answer.get("error", "")), None)
        cls = kind if isinstance(kind, type) and issubclass(kind, SafehubError) else SafehubError
        message, hint = answer.get("message"), answer.get("hint")
        raise cls(f"running {entrypoint} of {spec} to lock what it fetches failed: "
                  f"{message or f'exit {code}'}; nothing was pinned",
                  fix=fixes.say(str(hint)) if hint else fixes.say(
                      f"run `safehub load {spec} {entrypoint}` to see why"))
    runtime = answer.get("runtime") if isinstance(answer.get("runtime"), dict) else {}
    urls = runtime.get("fetched", []) if isinstance(runtime, dict) else []
    return ([u for u in urls if isinstance(u, str)] if isinstance(urls, list) else []), told


def _answer(text: str) -> dict[str, Any]:
    """The child's ``--json`` answer: the whole output, else its last line (a native
    library may have written to the same stream first); {} if there is none."""
    import json

    lines = [line for line in text.splitlines() if line.strip()]
    for candidate in (text, lines[-1] if lines else ""):
        try:
            answer = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(answer, dict):
            return answer
    return {}


def _runner(hub: Hub, command: Sequence[str]) -> Ruleset | None:
    """The ruleset the child runs under: ``safehub run --confine``'s for the command
    (its ``[confine]`` rules, its own temp dir, which holds its torch hub dir and Hub
    cache). Where the kernel cannot confine it, None (said once, and the child runs as
    ``safehub load`` would), unless confinement is required (``SAFEHUB_CONFINE``, a
    policy's ``confine = true``): then that is refused as ``safehub run`` refuses it."""
    from safehub._internal.warn import warn
    from safehub.errors import ConfineError
    from safehub.run import confine
    from safehub.run.confine.plan import confinement

    try:
        confine.available()
    except ConfineError as e:
        if hub.settings.confine:
            raise
        warn(f"safehub lock --entrypoint: {e.message}; the entrypoint runs unconfined, as "
             "`safehub load` would")
        return None
    return confinement(hub, command)  # a ruleset it refuses (a write grant that holds
    # the lockfile, say) is refused here too
