"""The load pipeline: one direction, every check before any hubconf.py runs.

:meth:`Hub.prepare` is the pipeline of DESIGN.md, top to bottom. Everything it calls is a
step with one concern, in its own module.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from safehub import archive
from safehub._internal import torchhub
from safehub._internal.fsutil import rmtree
from safehub._internal.http import Http
from safehub.audit import AuditLog
from safehub.cache import Cache, CachedTree, Verdict
from safehub.config import Settings
from safehub.errors import (
    IntegrityError,
    NotFoundError,
    PinError,
    PolicyDenied,
    RepoMovedError,
    SafehubError,
    SignatureError,
    SpecError,
    UntrustedRepoError,
)
from safehub.github import GitHub, Resolved
from safehub.lockfile import LockEntry, Lockfile, WeightPin, spec_key
from safehub.policy import Decision, Policy, load_policy
from safehub.spec import RepoSpec, is_full_sha
from safehub.trust import ConsentStore, SignatureRecords, VerifiedRecords, ask
from safehub.weights import WeightPins, WeightsGuard

__all__ = ["Hub", "Prepared"]

_TRUST_VALUES = ("check", True, False, None)

# (tree path, scan, digest) this process re-hashed and accepted: served again without
# re-hashing even where the user's records cannot be written.
_SEEN: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Prepared:
    """A repo that passed every check: where its verified tree is and why it may run."""

    spec: RepoSpec
    resolved: Resolved
    tree: CachedTree
    decision: Decision
    trusted_by: str
    signature: str = ""

    @property
    def path(self) -> Path:
        return self.tree.path


def _say(verbose: bool, text: str) -> None:
    if verbose:
        sys.stderr.write(text + "\n")


class Hub:
    """safehub with explicit configuration.

    The module-level functions (``safehub.load`` ...) build a ``Hub`` from the
    environment and the policy files on each call; build one yourself to set things in
    code::

        hub = safehub.Hub(cache_dir="/shared/hub-cache", offline=True)
        model = hub.load("org/repo:v1", "model")

    Keyword arguments are :class:`~safehub.config.Settings` fields; ``policy`` replaces
    the policy files (``Policy.from_text(...)`` or :func:`safehub.policy.load_policy`).
    """

    def __init__(self, settings: Settings | None = None, *, policy: Policy | None = None,
                 **overrides: Any) -> None:
        self.policy = load_policy() if policy is None else policy
        base = settings or Settings.from_env(policy=self.policy)
        for name in ("cache_dir", "data_dir", "log_dir", "audit_log", "lockfile"):
            if overrides.get(name) is not None:
                overrides[name] = Path(overrides[name])
        self.settings = base.with_changes(**overrides) if overrides else base
        self.cache = Cache(self.settings.cache_dir, lock_timeout=self.settings.limits.lock_timeout)
        self.consents = ConsentStore(self.settings.data_dir)
        self.signature_records = SignatureRecords(self.settings.data_dir)
        self.verified = VerifiedRecords(self.settings.data_dir)
        self.audit = AuditLog(
            self.settings.audit_log or self.settings.log_dir / "audit.jsonl",
            required=self.settings.audit_log is not None,
            policy_files=self.policy.files,
        )
        self._http: Http | None = None
        self._lockfile: Lockfile | None = None
        self._no_lockfile = False

    @property
    def lockfile_path(self) -> Path:
        """``SAFEHUB_LOCKFILE`` / the policy's ``lockfile``, else ``./safehub.lock``."""
        return self.settings.lockfile or Path.cwd() / "safehub.lock"

    @property
    def lockfile(self) -> Lockfile | None:
        """The lockfile in force, or None. An explicitly named one must exist."""
        if self._lockfile is None and not self._no_lockfile:
            path = self.lockfile_path
            if self.settings.lockfile is None and not path.exists():
                self._no_lockfile = True
                return None
            self._lockfile = load_lockfile(path)
        return self._lockfile

    @property
    def github(self) -> GitHub:
        if self._http is None:
            self._http = Http(self.settings)
        return GitHub(self._http)

    # -- the pipeline -----------------------------------------------------------------

    def prepare(
        self, repo: str, *, entrypoint: str | None = None, trust_repo: Any = "check",
        force_reload: bool = False, verbose: bool = True,
    ) -> Prepared:
        """Run every check on ``repo`` and return its verified tree; nothing is imported."""
        if trust_repo not in _TRUST_VALUES:
            raise SpecError(
                f"trust_repo={trust_repo!r} is not one of 'check', True, False, None",
                hint="use trust_repo='check' (the default) or True",
            )
        spec = RepoSpec.parse(repo)                                       # 1. parse
        note = _Note(self.audit, spec, entrypoint)
        try:
            lock = self.lockfile.get(spec) if self.lockfile is not None else None
            decision = self._decide(spec, entrypoint, None, lock is not None)  # 2. decide
            resolved = self._resolve(spec, force_reload, lock)            # 3, 4. resolve, prove
            note.ref, note.commit = resolved.ref, resolved.commit
            if resolved.moved_to is not None:         # renamed: the new name's rules apply
                decision = self._decide(resolved.moved_to, entrypoint, resolved.ref,
                                        lock is not None)
            elif spec.ref is None:                                        # refs vs default branch
                decision = self._decide(spec, entrypoint, resolved.ref, lock is not None)
            tree = self._fetch_verified(resolved, decision, lock, force_reload,
                                        verbose)                          # 5, 6, 9
            note.digest = tree.digest
            decision, signature = self._signature(resolved, tree, decision)  # 7. signature
            note.signature = signature
            trusted_by = self._trust(resolved, tree.digest, trust_repo, decision,
                                     signature)                           # 8. trust
        except SafehubError as e:
            note.refused(e)
            raise
        if decision.violations:                                          # 11. audit
            note.write("warn", decision.reasons, trusted_by=trusted_by)
        else:
            note.write(trusted_by, decision.reasons)
        return Prepared(spec, resolved, tree, decision, trusted_by, signature)

    # -- 2: decide --------------------------------------------------------------------

    def _decide(self, spec: RepoSpec, entrypoint: str | None, ref: str | None,
                locked: bool) -> Decision:
        decision = self.policy.decide(spec, entrypoint=entrypoint, ref=ref, locked=locked)
        if decision.verdict == "deny":
            raise PolicyDenied(
                f"policy refuses {spec}: " + "; ".join(decision.reasons),
                hint=decision.fix or "see `safehub policy show` for the rules that apply",
            )
        if decision.violations:
            warnings.warn(
                f"policy violation for {spec} (mode = 'warn', loading anyway): "
                + "; ".join(decision.violations), stacklevel=4,
            )
        return decision

    # -- 3, 4: resolve ----------------------------------------------------------------

    def _cached_resolution(self, spec: RepoSpec) -> Resolved | None:
        record = self.cache.read_repo(spec.key)
        ref = spec.ref
        if ref is not None and is_full_sha(ref):
            commit = ref
            label = ref
        else:
            hit = record["refs"].get(ref or "")
            if not isinstance(hit, dict):
                return None
            commit = str(hit.get("commit"))
            label = str(hit.get("ref", ref))
        proof = record["commits"].get(commit)
        if not isinstance(proof, dict) or not is_full_sha(str(proof.get("tree"))):
            return None
        moved_to = None
        if isinstance(record.get("moved_to"), str):
            moved = record["moved_to"]
            if not self.policy.names(moved):  # the policy may have changed since
                raise RepoMovedError(
                    f"{spec.repo} has moved to {moved}, and no [[allow]] rule names {moved} "
                    "any more", old=spec.key, new=moved,
                    hint=f"load it as {moved!r}, or name it in an [[allow]] rule")
            moved_to = RepoSpec.parse(moved if spec.ref is None else f"{moved}:{spec.ref}")
        return Resolved(spec, label, commit, str(proof["tree"]), str(proof.get("proof")),
                        moved_to=moved_to)

    def _resolve(self, spec: RepoSpec, force_reload: bool,
                 lock: LockEntry | None = None) -> Resolved:
        if lock is not None and not force_reload:
            where = f"locked in {self.lockfile_path}"
            return Resolved(spec, lock.ref or spec.ref or "", lock.commit, lock.tree,
                            f"{where}: {lock.proof}" if lock.proof else where)
        if not force_reload:
            hit = self._cached_resolution(spec)
            if hit is not None:
                return hit
        with self.cache.lock(f"repo-{spec.key}"):
            if not force_reload:
                hit = self._cached_resolution(spec)   # another process may have resolved it
                if hit is not None:
                    return hit
            resolved = self._resolve_online(spec)
            record = self.cache.read_repo(spec.key)
            if not (spec.ref and is_full_sha(spec.ref)):
                record["refs"][spec.ref or ""] = {"ref": resolved.ref, "commit": resolved.commit}
            record["commits"][resolved.commit] = {"tree": resolved.tree, "proof": resolved.proof}
            if resolved.moved_to is not None:
                record["moved_to"] = resolved.moved_to.key
            self.cache.write_repo(spec.key, record)
        if lock is not None and resolved.commit != lock.commit:
            raise PinError(
                f"{spec} is locked to commit {lock.commit}, but {resolved.ref} now names "
                f"{resolved.commit}: the ref moved. Nothing new was run",
                hint=f"if the move is expected, review it and run `safehub lock --upgrade "
                f"{spec_key(spec)}`; otherwise load without force_reload to keep the locked "
                "commit",
            )
        return resolved

    def _resolve_online(self, spec: RepoSpec) -> Resolved:
        """Ask GitHub; follow a rename only where the policy names the new repo."""
        try:
            return self.github.resolve(spec)
        except RepoMovedError as moved:
            new = RepoSpec.parse(moved.new if spec.ref is None else f"{moved.new}:{spec.ref}")
            if not self.policy.names(new.key):
                raise
            resolved = self.github.resolve(new)
            return Resolved(spec, resolved.ref, resolved.commit, resolved.tree,
                            f"{resolved.proof} (moved from {spec.repo}; the policy names "
                            f"{new.repo})", moved_to=new)

    # -- 5, 6, 9: fetch, verify, install ------------------------------------------------

    def _fetch_verified(self, resolved: Resolved, decision: Decision, lock: LockEntry | None,
                        force_reload: bool, verbose: bool) -> CachedTree:
        commit = resolved.commit
        if not force_reload:
            hit = self._cache_hit(resolved, lock, verbose)
            if hit is not None:
                return hit
        with self.cache.lock(commit):
            if not force_reload:
                hit = self._cache_hit(resolved, lock, verbose)  # another process installed it
                if hit is not None:
                    return hit
            stage = self.cache.staging(commit)
            try:
                verdict = self._download_and_verify(resolved, decision, lock, stage, verbose)
                tree = self.cache.install(stage, verdict, replace=force_reload)
            finally:
                rmtree(stage)  # gone after install; after a failure nothing may stay
        self.verified.record(commit, tree.digest, tree.tree, str(tree.path), tree.scan())
        return tree

    def _cache_hit(self, resolved: Resolved, lock: LockEntry | None,
                   verbose: bool) -> CachedTree | None:
        hit = self.cache.lookup(resolved.commit)
        if hit is None:
            return None
        self._check_cached(hit, resolved, lock)
        _say(verbose, f"Using cache found in {hit.path}")
        return hit

    def _check_cached(self, hit: CachedTree, resolved: Resolved,
                      lock: LockEntry | None) -> None:
        """Serve a cached tree only if it is what this user (or the lockfile) verified.

        Fast path: the tree's scan and digest equal this user's record (one ``lstat`` per
        file). Otherwise every file is re-hashed against the verdict, and the content must
        be the one this user verified before, or the lockfile's, or (first sight, no
        lockfile) the commit's tree as resolved.
        """
        scan = hit.scan()
        known = self.verified.get(hit.commit)
        fast = (known is not None and known.get("digest") == hit.digest
                and known["scans"].get(str(hit.path)) == scan)
        if not fast and (str(hit.path), scan, hit.digest) not in _SEEN:
            hit.verify()
            if known is not None and known.get("digest") != hit.digest:
                raise IntegrityError(
                    f"the cached tree of {hit.commit} has digest {hit.digest}, but you "
                    f"verified {known.get('digest')} for that commit before: the cache was "
                    "rewritten",
                    hint="nothing ran; inspect the cache, then `safehub cache clear` and load "
                    "again",
                )
            if known is None and lock is None and hit.tree != resolved.tree:
                raise IntegrityError(
                    f"the cached tree of {hit.commit} claims git tree {hit.tree}, but the "
                    f"commit's tree is {resolved.tree}",
                    hint="nothing ran; `safehub cache clear` and load again",
                )
            scan = hit.scan()  # verify() may have removed stray __pycache__ folders
            self.verified.record(hit.commit, hit.digest, hit.tree, str(hit.path), scan)
            _SEEN.add((str(hit.path), scan, hit.digest))
        if lock is not None and hit.digest != lock.digest:
            raise IntegrityError(
                f"the cached tree of {hit.commit} has digest {hit.digest}, but "
                f"{self.lockfile_path} pins {lock.digest}",
                hint="nothing ran; run `safehub cache clear` and load again, or check how the "
                "lockfile was made",
            )

    def _download_and_verify(self, resolved: Resolved, decision: Decision,
                             lock: LockEntry | None, stage: Path, verbose: bool) -> Verdict:
        spec, commit = resolved.spec, resolved.commit
        url = self.github.archive_url(resolved.location, commit)
        zip_path = stage / "archive.zip"
        sys.stderr.write(f'Downloading: "{url}" to {stage}\n')
        assert self._http is not None
        what = f"archive of {spec.repo}@{commit[:12]}"
        with open(zip_path, "wb") as out:
            try:
                self._http.download(url, out, what=what, progress=verbose,
                                    max_bytes=self.settings.limits.max_archive_bytes)
            except NotFoundError:
                if not self.settings.token:
                    raise
                # The web host answers 404 for private repos; the REST endpoint takes the
                # token (sent to the API base only) and redirects to a signed archive URL.
                self._http.download(self.github.api_archive_url(resolved.location, commit),
                                    out, what=what, progress=verbose,
                                    max_bytes=self.settings.limits.max_archive_bytes)
        ext = archive.extract(zip_path, stage / "tree", commit=commit,
                              limits=self.settings.limits)
        os.unlink(zip_path)
        if lock is not None:
            # The lockfile's digest was taken when the commit was verified against its
            # tree; the same digest means the very same files. No API call is needed.
            if ext.digest != lock.digest:
                raise IntegrityError(
                    f"the archive of {spec_key(spec)} at {commit} has digest {ext.digest}, but "
                    f"{self.lockfile_path} pins {lock.digest}",
                    hint="the server or mirror sent other content; nothing ran. Check the "
                    "mirror, or how the lockfile was made",
                )
            return Verdict(commit=commit, tree=lock.tree, digest=ext.digest, level=lock.level,
                           files=ext.files, empty_dirs=ext.empty_dirs, source=spec.key)
        listing = None
        if ext.tree_id != resolved.tree:
            listing = self.github.tree_listing(resolved.location, resolved.tree)
        check = archive.check_tree(
            ext, resolved.tree, listing, allow_fallback=self.settings.tree_fallback,
            fetch_blob=lambda sha: self.github.blob(resolved.location, sha))
        if check.level != "tree":
            warnings.warn(
                f"{spec.repo}@{commit[:12]}: the archive differs from the commit's tree because "
                f"of .gitattributes export rules; {len(check.unverified)} file(s) could not be "
                "tied to the commit byte for byte (see `safehub cache ls --json`)",
                stacklevel=4,
            )
        return Verdict(
            commit=commit, tree=resolved.tree, digest=ext.digest, level=check.level,
            files=ext.files, unverified=check.unverified, omitted=check.omitted,
            empty_dirs=ext.empty_dirs, source=spec.key,
        )

    # -- 7: signature -------------------------------------------------------------------

    def _signature(self, resolved: Resolved, tree: CachedTree,
                   decision: Decision) -> tuple[Decision, str]:
        """Check the signature the policy asks for; return the decision and a status line.

        In ``mode = "warn"`` a failure is logged and the load continues with the user's
        consent, like any other violation.
        """
        try:
            return decision, self._verify_signature(resolved, tree, decision)[0]
        except SignatureError as e:
            if decision.mode != "warn":
                raise
            warnings.warn(f"signature check failed (mode = 'warn', loading anyway): "
                          f"{e.message}", stacklevel=4)
            return (replace(decision, verdict="prompt",
                            violations=(*decision.violations, e.message)),
                    f"INVALID ({e.message})")

    def _verify_signature(self, resolved: Resolved, tree: CachedTree,
                          decision: Decision) -> tuple[str, str]:
        """(status line, signer that verified or "") for the policy's signature rule."""
        from safehub import signatures

        reqs = decision.requirements
        if reqs.signature == "none":
            return "not checked (no policy asks for one)", ""
        policy_fp = signatures.fingerprint(reqs.signer_sets)
        known = self.signature_records.find(tree.commit, tree.digest, policy_fp)
        if known is not None:
            return f"verified ({known})", known
        found = self._find_signature(resolved, tree, reqs.signer_sets)
        if found is None:
            if reqs.signature == "required":
                where = next((s.location for s in reqs.signer_sets if s.location),
                             signatures.DEFAULT_SIGNATURE)
                raise SignatureError(
                    f"{resolved.spec.repo} at {resolved.commit} has no signature ({where}), and "
                    f"the policy requires one ({reqs.signer_sets[0].source})",
                    hint="ask the publisher to sign releases (docs/signing.md), or load a "
                    "signed commit",
                )
            return "unsigned (the policy allows that: signature = 'if-present')", ""
        bundle, in_tree = found
        result = signatures.Verifier(reqs.signer_sets).verify_tree(
            tree.path, bundle, signature_in_tree=in_tree)
        if result.uncovered:
            raise SignatureError(
                f"{len(result.uncovered)} file(s) of {resolved.spec.repo} are not covered by the "
                f"signature: {', '.join(result.uncovered[:5])}",
                hint="every file that could be imported must be signed; files the signer "
                "declared ignored count as unsigned. Ask the publisher to sign them",
            )
        self.signature_records.record(tree.commit, tree.digest, policy_fp, result.signer)
        return f"verified ({result.signer})", result.signer

    def _find_signature(self, resolved: Resolved, tree: CachedTree,
                        sets: Sequence[Any]) -> tuple[bytes, str | None] | None:
        """The bundle bytes and, if it lives in the tree, its path there."""
        from safehub.signatures import DEFAULT_SIGNATURE

        location = next((s.location for s in sets if s.location), None)
        source = next((s.source for s in sets if s.location), "")
        if location is None:
            path = tree.path / DEFAULT_SIGNATURE
            return (path.read_bytes(), DEFAULT_SIGNATURE) if path.is_file() else None
        repo = resolved.location
        values = {"owner": repo.owner.lower(), "name": repo.name.lower(), "repo": repo.key,
                  "ref": resolved.ref, "commit": resolved.commit}
        if location.startswith("release:"):
            location = (f"{self.settings.web_url}/{repo.key}/releases/download/{{ref}}/"
                        + location.removeprefix("release:"))
        try:
            target = location.format(**values)
        except (KeyError, ValueError) as e:
            raise SignatureError(f"bad signature_url {location!r} in {source}: {e}",
                                 hint="placeholders: {owner} {name} {repo} {ref} {commit}"
                                 ) from e
        if target.startswith("https://"):
            import io

            buf = io.BytesIO()
            try:
                self.github.http.download(target, buf, what=f"signature of {repo.repo}",
                                          max_bytes=16 * 1024 * 1024, progress=False)
            except NotFoundError:
                return None
            return buf.getvalue(), None
        path = Path(target).expanduser()
        if not path.is_absolute():
            policy_file = source.rpartition(" in ")[2]
            path = Path(policy_file).parent / path
        return (path.read_bytes(), None) if path.is_file() else None

    # -- 8: trust ---------------------------------------------------------------------

    def _trust(self, resolved: Resolved, digest: str, trust_repo: Any,
               decision: Decision, signature: str = "") -> str:
        """Who agreed to run this content; raise if nobody did."""
        key, commit = resolved.spec.key, resolved.commit
        if trust_repo is False:
            return self._ask(resolved, digest, "trust_repo=False asks every time", signature)
        if decision.verdict == "allow":
            return "allow"
        if decision.violations:
            why = "the policy was violated (mode = 'warn'): " + "; ".join(decision.violations)
        else:
            why = "; ".join(decision.reasons)
        # From here on the policy lets the user decide.
        if trust_repo is True:
            self.consents.record(key, commit, digest, "trust_repo=True")
            return "trust_repo"
        if trust_repo is None:
            warnings.warn(
                "trust_repo=None loads without asking (torch's legacy meaning); pass "
                "trust_repo=True to say so explicitly, or 'check' to be asked",
                stacklevel=5,
            )
            return "trust_repo"
        consents = self.consents.list(key)
        if any(c.commit == commit and c.digest == digest for c in consents):
            return "consent"
        earlier = [c for c in consents if c.commit != commit]
        if earlier:
            why = (f"you trusted {resolved.spec.repo} at {earlier[-1].commit[:12]} before, "
                   "but this is different content")
        return self._ask(resolved, digest, why, signature)

    def _ask(self, resolved: Resolved, digest: str, why: str, signature: str = "") -> str:
        spec = resolved.spec
        if self.settings.noninteractive:
            raise UntrustedRepoError(
                f"refused to run hubconf.py of {spec.repo} at commit {resolved.commit}: it is "
                f"not trusted ({why}), and nobody can be asked (non-interactive: CI=true, "
                "SAFEHUB_NONINTERACTIVE=1 or no terminal)",
                hint=f"pass trust_repo=True to safehub.load; or run once on this machine\n"
                f"      safehub trust {spec.repo}:{resolved.commit}\n"
                "    or have an admin allow it in a policy file:\n"
                f"      [[allow]]\n      repo = \"{spec.key}\"\n      pin = \"commit\"",
            )
        lines = [
            f"safehub: {spec.repo} wants to run code on this machine.",
            f"  repo       {spec.repo}",
            f"  ref        {resolved.ref}",
            f"  commit     {resolved.commit}",
            f"  digest     {digest}",
            f"  signature  {signature or 'not checked (no policy asks for one)'}",
            f"  why        {why}",
        ]
        if not ask(lines, f"Run hubconf.py of {spec.repo} at {resolved.commit[:12]}?"):
            declined = UntrustedRepoError(
                f"you declined to run {spec.repo} at {resolved.commit}",
                hint="nothing ran; answer y to trust this exact content",
            )
            declined.declined = True
            raise declined
        self.consents.record(spec.key, resolved.commit, digest, "prompt")
        return "prompt-yes"

    # -- dry run and explicit trust ------------------------------------------------------

    def check(self, repo: str, *, entrypoint: str | None = None) -> dict[str, Any]:
        """What a load would do, and why, without downloading an archive or running code.

        ``outcome`` is ``load`` (allowed, or this content was trusted), ``prompt`` (a
        terminal user would be asked), or ``refuse``.
        """
        spec = RepoSpec.parse(repo)
        report: dict[str, Any] = {"spec": str(spec), "repo": spec.key,
                                  "entrypoint": entrypoint,
                                  "policy_files": list(self.policy.files)}
        lock = self.lockfile.get(spec) if self.lockfile is not None else None
        decision = self.policy.decide(spec, entrypoint=entrypoint, locked=lock is not None)
        if decision.verdict != "deny":
            resolved = self._resolve(spec, False, lock)
            report.update(ref=resolved.ref, commit=resolved.commit, proof=resolved.proof)
            if spec.ref is None:
                decision = self.policy.decide(spec, entrypoint=entrypoint, ref=resolved.ref,
                                              locked=lock is not None)
        report.update(policy=decision.verdict, reasons=list(decision.reasons),
                      requirements={"pin": decision.requirements.pin,
                                    "signature": decision.requirements.signature},
                      violations=list(decision.violations))
        if decision.verdict == "deny":
            report.update(outcome="refuse", why="denied by policy", fix=decision.fix)
            return report
        entry = self.cache.lookup(report["commit"])
        if entry is not None:
            self._check_cached(entry, resolved, lock)
        report["cached"] = entry is not None
        report["digest"] = entry.digest if entry is not None else None
        consents = [c for c in self.consents.list(spec.key) if c.commit == report["commit"]
                    and (entry is None or c.digest == entry.digest)]
        if decision.verdict == "allow":
            report.update(outcome="load", why="the policy allows it")
        elif consents:
            report.update(outcome="load", why=f"you trusted this content {consents[-1].at}")
        elif self.settings.noninteractive:
            report.update(outcome="refuse", why="not trusted, and nobody can be asked",
                          fix=f"safehub trust {spec.repo}:{report['commit']}")
        else:
            report.update(outcome="prompt", why="not trusted yet: you would be asked")
        return report

    def trust(self, repo: str, *, force_reload: bool = False) -> Prepared:
        """Fetch and verify ``repo`` and record consent for its content (no code runs).

        A policy deny or requirement still wins; consent only matters where users decide.
        """
        prepared = self.prepare(repo, trust_repo=True, force_reload=force_reload,
                                verbose=False)
        r = prepared.resolved
        if self.consents.find(r.spec.key, r.commit, prepared.tree.digest) is None:
            self.consents.record(r.spec.key, r.commit, prepared.tree.digest, "safehub trust")
        return prepared

    def untrust(self, repo: str) -> int:
        """Forget consent for ``repo`` (one commit if the spec names a resolvable ref)."""
        spec = RepoSpec.parse(repo)
        commit = None
        if spec.ref is not None:
            lock = self.lockfile.get(spec) if self.lockfile is not None else None
            hit = self._cached_resolution(spec) if lock is None else None
            commit = lock.commit if lock else hit.commit if hit else spec.ref
            if not is_full_sha(commit):
                raise SpecError(
                    f"cannot tell which commit {spec} names without the network",
                    hint=f"name the commit ({spec.repo}:<sha>), or forget every commit of the "
                    f"repo with `safehub untrust {spec.repo}`",
                )
        return self.consents.remove(spec.key, commit)

    def verify(self, target: str, sets: Sequence[Any] = ()) -> dict[str, Any]:
        """Verify the signature of a local folder or a spec (fetched and verified first).

        ``sets`` (signer sets) default to the policy's for a spec. Raises
        :class:`SignatureError` if the signature is missing, invalid, or leaves files
        uncovered; nothing is trusted or run.
        """
        from safehub import signatures

        folder = Path(target)
        report: dict[str, Any] = {"target": target}
        found: tuple[bytes, str | None] | None = None
        if folder.is_dir():
            tree_path = folder
            bundle_path = folder / signatures.DEFAULT_SIGNATURE
            if bundle_path.is_file():
                found = bundle_path.read_bytes(), signatures.DEFAULT_SIGNATURE
        else:
            spec = RepoSpec.parse(target)
            lock = self.lockfile.get(spec) if self.lockfile is not None else None
            decision = self._decide(spec, None, None, lock is not None)
            resolved = self._resolve(spec, False, lock)
            tree = self._fetch_verified(resolved, decision, lock, False, verbose=False)
            tree_path = tree.path
            sets = sets or decision.requirements.signer_sets
            found = self._find_signature(resolved, tree, sets)
            report.update(commit=resolved.commit, digest=tree.digest)
        if not sets:
            raise SpecError("no signers to verify against",
                            hint="give --key, or --identity and --issuer, or a policy rule with "
                            "signers or keys for the repo")
        if found is None:
            raise SignatureError(f"no signature found for {target}",
                                 hint="sign it with `safehub sign DIR --key KEY` or "
                                 "`model_signing sign`, or set signature_url in the policy")
        bundle, in_tree = found
        result = signatures.Verifier(sets).verify_tree(tree_path, bundle,
                                                       signature_in_tree=in_tree)
        report.update(signer=result.signer, files=len(result.files),
                      uncovered=list(result.uncovered))
        if result.uncovered:
            raise SignatureError(
                f"the signature is valid ({result.signer}) but does not cover: "
                f"{', '.join(result.uncovered[:5])}; a load would refuse these",
                hint="sign every file (signer-declared ignored paths count as unsigned)",
            )
        return report

    # -- lockfile and fleet -------------------------------------------------------------

    def lock(self, specs: Sequence[str] = (), *, upgrade: bool = False) -> list[dict[str, Any]]:
        """Pin ``specs`` in the lockfile (fetching and verifying each); return what changed.

        Specs already locked are kept unless ``upgrade`` (which, with no specs, re-resolves
        every entry). Policy denials still apply; nothing is trusted or run.
        """
        lockfile = Lockfile.load(self.lockfile_path, missing_ok=True)
        targets = list(specs) or (list(lockfile.entries) if upgrade else [])
        if not targets:
            raise SpecError("nothing to lock", hint="safehub lock owner/name:ref ...")
        changes: list[dict[str, Any]] = []
        for text in targets:
            spec = RepoSpec.parse(text)
            old = lockfile.get(spec)
            if old is not None and not upgrade:
                changes.append({"spec": old.spec, "commit": old.commit, "change": "kept"})
                continue
            decision = self._decide(spec, None, None, True)   # being locked satisfies pin
            resolved = self._resolve(spec, True)
            if spec.ref is None:
                decision = self._decide(spec, None, resolved.ref, True)
            tree = self._fetch_verified(resolved, decision, None, False, verbose=False)
            signer = self._verify_signature(resolved, tree, decision)[1]
            entry = LockEntry(spec_key(spec), resolved.commit, resolved.tree, tree.digest,
                              resolved.ref, resolved.proof, tree.level, signer)
            if old is not None and (old.commit, old.digest) == (entry.commit, entry.digest):
                entry = replace(entry, weights=old.weights)
            change = "added" if old is None else (
                "unchanged" if old.commit == entry.commit else "upgraded")
            lockfile.put(entry)
            changes.append({"spec": entry.spec, "commit": entry.commit, "change": change,
                            "from": old.commit if old is not None else None})
        lockfile.save()
        self._lockfile, self._no_lockfile = None, False
        return changes

    def lock_check(self) -> list[dict[str, Any]]:
        """Ask GitHub whether every locked ref still names its locked commit (and is the
        repo's own); report each entry. Nothing is cached or changed."""
        lockfile = self.lockfile
        if lockfile is None:
            raise PinError(f"no lockfile at {self.lockfile_path}",
                           hint="create one with `safehub lock SPEC`")
        results = []
        for key in sorted(lockfile.entries):
            entry = lockfile.entries[key]
            spec = RepoSpec.parse(entry.spec)
            try:
                now = self._resolve_online(spec)
                ok = now.commit == entry.commit and now.tree == entry.tree
                results.append({"spec": key, "locked": entry.commit, "now": now.commit,
                                "ok": ok})
            except SafehubError as e:
                results.append({"spec": key, "locked": entry.commit, "now": None, "ok": False,
                                "error": f"{type(e).__name__}: {e.message}"})
        return results

    def prefetch(self, specs: Sequence[str] = (), *, mirror: Path | None = None,
                 read_only: bool = False) -> list[dict[str, Any]]:
        """Fill the cache (and optionally a mirror folder) for offline or fleet use.

        Without ``specs`` every lockfile entry is fetched. Each tree is verified as in a
        load (against the lockfile where locked); nothing is trusted or run. A mirror is
        laid out like the archive endpoint (``<mirror>/<owner>/<name>/zipball/<sha>``) so
        any static server can serve it as ``SAFEHUB_GITHUB_URL``. ``read_only`` seals the
        cache afterwards for sharing (:meth:`Cache.seal`).
        """
        lockfile = self.lockfile
        if specs:
            items = [RepoSpec.parse(t) for t in specs]
        elif lockfile is not None and lockfile.entries:
            items = [RepoSpec.parse(k) for k in sorted(lockfile.entries)]
        else:
            raise SpecError(f"nothing to prefetch: no specs given and no lockfile at "
                            f"{self.lockfile_path}",
                            hint="safehub prefetch owner/name:ref ..., or `safehub lock` first")
        done = []
        for spec in items:
            lock = lockfile.get(spec) if lockfile is not None else None
            decision = self._decide(spec, None, None, lock is not None)
            resolved = self._resolve(spec, False, lock)
            tree = self._fetch_verified(resolved, decision, lock, False, verbose=False)
            row: dict[str, Any] = {"spec": spec_key(spec), "commit": resolved.commit,
                                   "digest": tree.digest, "path": str(tree.path)}
            if mirror is not None:
                row["mirror"] = str(self._mirror(resolved, tree.digest, mirror))
            done.append(row)
        if read_only:
            self.cache.seal()
        return done

    def _mirror(self, resolved: Resolved, digest: str, mirror: Path) -> Path:
        """Download the archive into the mirror, verified to hold exactly ``digest``."""
        url = self.github.archive_url(resolved.location, resolved.commit)
        target = mirror / url.removeprefix(self.settings.web_url + "/")
        if target.is_file() and self._archive_digest(target, resolved.commit) == digest:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.partial")
        assert self._http is not None
        with open(tmp, "wb") as out:
            self._http.download(url, out, what=f"archive of {resolved.location.repo}",
                                max_bytes=self.settings.limits.max_archive_bytes,
                                progress=False)
        if self._archive_digest(tmp, resolved.commit) != digest:
            os.unlink(tmp)
            raise IntegrityError(
                f"the archive downloaded for the mirror from {url} does not hold the verified "
                f"content {digest}",
                hint="the server changed what it serves; do not publish this mirror",
            )
        os.replace(tmp, target)
        return target

    def _archive_digest(self, zip_path: Path, commit: str) -> str:
        with self.cache.lock(commit):
            stage = self.cache.staging(commit)
            try:
                return archive.extract(zip_path, stage / "tree", commit=commit,
                                       limits=self.settings.limits).digest
            finally:
                rmtree(stage)

    # -- the drop-in functions --------------------------------------------------------

    def load(
        self, repo_or_dir: str | os.PathLike[str], model: str, *args: Any,
        source: str = "github", trust_repo: Any = "check", force_reload: bool = False,
        verbose: bool = True, skip_validation: bool = False, **kwargs: Any,
    ) -> Any:
        """Like ``torch.hub.load``, with every check first (see :meth:`prepare`)."""
        path, guard = self._repo_dir(repo_or_dir, source, model, trust_repo, force_reload,
                                     verbose)
        with guard:                                                       # 10. delegate
            return torchhub.call_entrypoint(path, model, args, kwargs)

    def list(self, github: str, force_reload: bool = False, skip_validation: bool = False,
             trust_repo: Any = "check", verbose: bool = True) -> list[str]:
        path, guard = self._repo_dir(github, "github", None, trust_repo, force_reload, verbose)
        with guard:
            return torchhub.entrypoints(path)

    def help(self, github: str, model: str, force_reload: bool = False,
             skip_validation: bool = False, trust_repo: Any = "check") -> str | None:
        path, guard = self._repo_dir(github, "github", model, trust_repo, force_reload, True)
        with guard:
            return torchhub.docstring(path, model)

    def _repo_dir(self, repo_or_dir: str | os.PathLike[str], source: str,
                  entrypoint: str | None, trust_repo: Any, force_reload: bool,
                  verbose: bool) -> tuple[Path, contextlib.AbstractContextManager[None]]:
        """The folder to hand to torch, and the weights guard to hold while its code runs."""
        source = source.lower() if isinstance(source, str) else source
        if source == "local":
            return Path(os.fspath(repo_or_dir)), contextlib.nullcontext()  # your own code
        if source != "github":
            raise SpecError(
                f'Unknown source: "{source}". Allowed values: "github" | "local".',
                hint="use source='github' for owner/name[:ref] or 'local' for a folder",
            )
        prepared = self.prepare(str(repo_or_dir), entrypoint=entrypoint, trust_repo=trust_repo,
                                force_reload=force_reload, verbose=verbose)
        return prepared.path, self._weights_guard(prepared).active()

    def _weights_guard(self, prepared: Prepared) -> WeightsGuard:
        spec, decision = prepared.spec, prepared.decision
        lock = self.lockfile.get(spec) if self.lockfile is not None else None

        def pin(url: str, sha256: str) -> None:
            try:
                with self.cache.lock("lockfile"):
                    lockfile = Lockfile.load(self.lockfile_path)
                    lockfile.add_weight(spec, WeightPin(url, sha256))
                    lockfile.save()
            except (SafehubError, OSError) as e:
                warnings.warn(f"could not pin the weights {url} in {self.lockfile_path}: {e}",
                              stacklevel=2)

        return WeightsGuard(
            repo=spec.repo,
            patterns=decision.requirements.weights,
            weights_only=decision.requirements.weights_only,
            warn_only=decision.mode == "warn",
            locked={w.url: w.sha256 for w in lock.weights} if lock is not None else {},
            records=WeightPins(self.settings.data_dir),
            on_new_pin=pin if lock is not None else None,
        )


class _Note:
    """What the audit line of one load will say, filled in as the pipeline goes."""

    def __init__(self, log: AuditLog, spec: RepoSpec, entrypoint: str | None) -> None:
        self.log, self.spec, self.entrypoint = log, spec, entrypoint
        self.ref: str | None = spec.ref
        self.commit: str | None = None
        self.digest: str | None = None
        self.signature: str | None = None

    def write(self, decision: str, reasons: tuple[str, ...] | list[str], **extra: Any) -> None:
        if self.signature is not None:
            extra["signature"] = self.signature
        self.log.write(decision, repo=self.spec.key, ref=self.ref, commit=self.commit,
                       digest=self.digest, entrypoint=self.entrypoint, reasons=reasons,
                       **extra)

    def refused(self, error: SafehubError) -> None:
        if isinstance(error, PolicyDenied):
            kind = "deny"
        elif isinstance(error, UntrustedRepoError):
            kind = "prompt-no" if error.declined else "refused"
        else:
            kind = "error"
        self.write(kind, [f"{type(error).__name__}: {error.message}"])


_LOCKFILES: dict[tuple[str, int, int, int], Lockfile] = {}


def load_lockfile(path: Path) -> Lockfile:
    """A parsed lockfile, kept per process until the file changes."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return Lockfile.load(path)  # raises, naming the path
    except OSError as e:
        raise PinError(f"lockfile {path} cannot be read ({e})",
                       hint="fix its permissions; no repo loads until then (fail closed)") from e
    key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _LOCKFILES.get(key)
    if hit is None:
        hit = Lockfile.load(path)
        _LOCKFILES.clear()
        _LOCKFILES[key] = hit
    return hit
