"""Steps 3 and 4 of a load: a ref becomes one commit, proven to be the repo's own.

GitHub serves every commit of a fork network under every repo of that network, so
``owner/repo:<sha>`` may name code the owner never saw. A ref is therefore one of two
things, decided by its spelling alone:

* **hex** (4 to 40 hex digits): a commit. An abbreviated one is expanded
  (``commits/{prefix}``) and must start with what was asked. It is then proven to be an
  ancestor of (or equal to) the default branch with ``compare/heads/{default}...{sha}``
  (``behind`` or ``identical``), or else the tip or an ancestor of another branch or tag
  of the repo (listed, bounded). A commit found only in forks is refused.
* **a name**: confirmed to be a branch or a tag of the repo itself, asked fully
  qualified with ``git/ref`` (tags first, then branches; ``refs/tags/``, ``tags/``,
  ``refs/heads/`` and ``heads/`` choose one). Hidden namespaces (``refs/pull/...``) are
  never reached, whatever git's short-name rules would expand.

Where the answer comes from, in order: the lockfile (no request at all), the cache's record
of earlier resolutions, then the API. A renamed repo is followed only where the policy
names the new repo (``may_follow``).

Requests per cold resolution: a lightweight tag 2 (``git/ref``, ``git/commits``), an
annotated tag 3, a branch 3, no ref 3 (repo, ``git/ref``, ``git/commits``), a full sha 2
(repo, compare), an abbreviated sha 3.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, replace
from safehub.errors import NotFoundError, PinError, RepoMovedError
from safehub.spec import RepoSpec, is_full_sha, looks_like_sha
from safehub.store.cache import Cache, CommitProof, RefRecord

if TYPE_CHECKING:  # types only: the lockfile module is imported where a lockfile is read
    from safehub.sources.interface import Source
    from safehub.store.lockfile import Locked

__all__ = ["MAX_COMPARES", "Resolved", "Resolver", "resolve_online"]

MAX_COMPARES = 30
"""Most extra ``compare`` calls spent proving an old commit that is off the default branch."""


class Resolved(Frozen):
    """A spec turned into one commit, with the evidence that it is the repo's own."""

    spec: RepoSpec
    ref: str
    commit: str
    tree: str
    proof: str
    moved_to: RepoSpec | None = None
    """Where the repo lives now, if it was renamed and the policy names the new name."""
    name: str = ""
    """``owner/name`` as GitHub spells it, where known (URLs keep that spelling)."""
    full_ref: str = ""
    """The branch or tag resolved, in full (``refs/tags/v1.0``), where known: what the
    policy's ``refs`` are matched against once resolved."""

    @property
    def location(self) -> RepoSpec:
        """The repo to fetch from."""
        return self.moved_to or self.spec

    @property
    def url_name(self) -> str:
        return self.name or self.location.repo


def _name_candidates(ref: str) -> list[tuple[str, str]]:
    for prefix, kind in (("refs/tags/", "tags"), ("tags/", "tags"), ("refs/heads/", "heads"),
                         ("heads/", "heads")):
        if ref.startswith(prefix):
            return [(kind, ref[len(prefix):])]
    return [("tags", ref), ("heads", ref)]


def resolve_online(source: Source, spec: RepoSpec) -> Resolved:
    """Ask the source which commit ``spec`` names, and prove it is the repo's own."""
    ref = spec.ref
    if ref is None:
        default, name = source.repo_info(spec)
        target = source.ref(spec, "heads", default)
        if target is None:
            raise NotFoundError(f"{spec.repo} has no default branch {default!r}")
        return Resolved(spec, default, target.commit, source.commit_tree(spec, target.commit),
                        f"head of default branch {default}", name=name,
                        full_ref=f"refs/heads/{default}")
    if looks_like_sha(ref):
        sha = ref.lower()
        if len(sha) < 40:
            expanded = source.expand(spec, sha)
            if expanded is None or not expanded.startswith(sha):
                raise NotFoundError(f"{spec.repo} has no commit starting with {ref}",
                                    fix=_CHECK_SHA)
            sha = expanded
        return _prove(source, spec, sha, ref)
    for kind, name in _name_candidates(ref):
        target = source.ref(spec, kind, name)
        if target is not None:
            what = "tag" if kind == "tags" else "branch"
            return Resolved(spec, ref, target.commit, source.commit_tree(spec, target.commit),
                            f"{what} {name} of {spec.repo}", full_ref=f"refs/{kind}/{name}")
    source.repo_info(spec)  # a repo that does not answer is named as such, not its ref
    raise NotFoundError(
        f"{spec.repo} has no branch or tag named {ref!r}",
        fix=fixes.say("check the ref (the repo exists): a branch or tag name as the repo "
                      "spells it, or a commit's hex sha"))


def _prove(source: Source, spec: RepoSpec, sha: str, asked: str) -> Resolved:
    """Prove that commit ``sha`` is reachable from one of the repo's own refs."""
    default, name = source.repo_info(spec)
    candidates = [("heads", default)]
    listed = False
    for tried in range(MAX_COMPARES + 1):
        if not candidates:
            break
        kind, branch = candidates.pop(0)
        try:
            tree = source.contains(spec, f"{kind}/{branch}", sha)
        except NotFoundError as e:
            if listed:
                continue  # a listed ref that is gone (or never was): try the next one
            raise NotFoundError(f"{spec.repo} has no commit {sha}", fix=_CHECK_SHA) from e
        if tree is not None:
            what = "branch" if kind == "heads" else "tag"
            return Resolved(spec, asked, sha, tree, f"ancestor of {what} {branch}", name=name)
        if not listed:
            listed = True
            for kind_name, ref_kind in (("branches", "heads"), ("tags", "tags")):
                for ref_name, tip in source.refs(spec, kind_name):
                    if tip == sha:
                        return Resolved(spec, asked, sha, source.commit_tree(spec, sha),
                                        f"tip of {kind_name[:-1]} {ref_name}", name=name)
                    if (ref_kind, ref_name) != ("heads", default):
                        candidates.append((ref_kind, ref_name))
        if tried >= MAX_COMPARES:
            raise PinError(
                f"could not prove that commit {sha} belongs to {spec.repo}: it is not on "
                f"{default} and {MAX_COMPARES} other branches and tags were checked",
                fix=_BY_REF)
    raise PinError(
        f"commit {sha} is not in the history of any branch or tag of {spec.repo}; GitHub "
        "serves commits of forks under the parent's name, so it may come from a fork",
        fix=_FROM_FORK)


#: The fixes of a commit not proven to be the repo's own: what the caller asks for changes
#: (where the call is in a repo's code, the user cannot apply them).
_CHECK_SHA = fixes.say("check the sha; commits of forks must be loaded from the fork")
_BY_REF = fixes.say("load it by the branch or tag that contains it")
_FROM_FORK = fixes.say("if it is a fork's commit, load it from the fork ('owner/fork:sha') "
                       "after reviewing that fork")
CALLERS_FIXES = (_BY_REF, _FROM_FORK)


def moved_fix(new: str, *, nested: bool = False) -> fixes.Fix:
    """Load the repo by its new name, or name the new repo in a policy to follow it (the
    name as GitHub spells it). ``nested``: the repo's own code made the call, which the
    user cannot change: only the policy is theirs."""
    from safehub.policy import user_file

    follow = fixes.add(user_file(), ["[[allow]]", f'repo = "{new}"'])
    if nested:
        return fixes.noted(follow, f"the call is in the repo's code, so its name cannot be "
                           f"changed; to let it follow the move to {new}, ")
    return fixes.either(fixes.say(f"load it as {new!r}"), follow)


class Resolver:
    """Resolution with the lockfile and the cache in front of the API."""

    def __init__(self, cache: Cache, source: Callable[[], Source],
                 may_follow: Callable[[str], bool]) -> None:
        self.cache = cache
        self._source = source
        self.may_follow = may_follow

    def resolve(self, spec: RepoSpec, locked: Locked | None, *, force: bool = False
                ) -> Resolved:
        """The lockfile's answer, else the cache's, else the API's (recorded)."""
        if locked is not None and not force:
            lock, where = locked.entry, f"locked in {locked.file}"
            moved_to = None
            if lock.repo and lock.repo.lower() != spec.key:
                # The lockfile says the code comes from another repo (a rename when it was
                # locked): the same rule as a rename found online, and its rules apply.
                moved_to = self.follow(spec, lock.repo,
                                       f"{locked.file} locks {spec} to code from {lock.repo}")
            return Resolved(spec, lock.ref or spec.ref or "", lock.commit, lock.tree,
                            f"{where}: {lock.proof}" if lock.proof else where,
                            moved_to=moved_to, name=lock.repo, full_ref=lock.resolved_ref)
        if not force:
            hit = self.cached(spec)
            if hit is not None:
                return hit
        if self.cache.read_only:  # shared read-only, or a confined job's: record nothing
            resolved = self.online(spec)
        else:
            with self.cache.lock(f"repo-{spec.key}"):
                hit = None if force else self.cached(spec)  # another process may have
                resolved = hit or self.online(spec)          # resolved it meanwhile
                if hit is None:
                    self._record(spec, resolved)
        if locked is not None and resolved.commit != locked.entry.commit:
            from safehub.store.lockfile import spec_key

            raise PinError(
                f"{spec} is locked to commit {locked.entry.commit}, but {resolved.ref} now names "
                f"{resolved.commit}: the ref moved. Nothing new was run",
                fix=fixes.either(
                    fixes.run(f"safehub lock --upgrade {fixes.quote(spec_key(spec))}",
                              "if the move is expected (review it first)"),
                    fixes.say("load without force_reload to keep the locked commit")))
        return resolved

    def online(self, spec: RepoSpec) -> Resolved:
        """Ask GitHub; follow a rename only where the policy names the new repo."""
        try:
            return resolve_online(self._source(), spec)
        except RepoMovedError as moved:
            new = self.follow(spec, moved.new, f"{spec.repo} has moved to {moved.new} (the "
                              f"source answers for {moved.new} now)")
            found = resolve_online(self._source(), new)
            return Resolved(spec, found.ref, found.commit, found.tree,
                            f"{found.proof} (moved from {spec.repo}; the policy names "
                            f"{new.repo})", moved_to=new, name=found.name or new.repo,
                            full_ref=found.full_ref)

    def follow(self, spec: RepoSpec, new: str, seen: str) -> RepoSpec:
        """The rename rule, decided and said here only: ``spec``'s code is at ``new`` now
        (``seen`` says where that was found: the lockfile, the cache's record, the source).
        The old name can be registered again by someone else (repo-jacking), so the move is
        followed only where an ``[[allow]]`` rule names ``new``; the spec to resolve then."""
        if not self.may_follow(new.lower()):
            raise RepoMovedError(
                f"{seen}; the old name can be registered again by someone else "
                f"(repo-jacking), so safehub follows a move only where an [[allow]] rule "
                f"names the new repo, and none names {new}",
                old=spec.key, new=new, fix=moved_fix(new))
        return RepoSpec.parse(new if spec.ref is None else f"{new}:{spec.ref}")

    def spelled(self, resolved: Resolved) -> Resolved:
        """``resolved`` with ``owner/name`` as GitHub spells it (the API's ``full_name``,
        asked only if not yet known): what a lockfile records and a mirror is laid out by,
        for static servers that match names case-sensitively."""
        if resolved.name:
            return resolved
        _, name = self._source().repo_info(resolved.location)
        return replace(resolved, name=name)

    def cached(self, spec: RepoSpec) -> Resolved | None:
        """An earlier resolution from the cache's record, or None."""
        record = self.cache.read_repo(spec.key)
        ref = spec.ref
        if ref is not None and is_full_sha(ref):
            commit, label, full = ref, ref, ""
        else:
            hit = record.refs.get(ref or "")
            if hit is None:
                return None
            commit, label, full = hit.commit, hit.ref, hit.full
        proof = record.commits.get(commit)
        if proof is None:
            return None
        moved_to = None
        if record.moved_to is not None:
            moved_to = self.follow(spec, record.moved_to,  # the policy may have changed
                                   f"{spec.repo} has moved to {record.moved_to} (as the "
                                   "cache recorded when it was resolved)")
        return Resolved(spec, label, commit, proof.tree, proof.proof, moved_to=moved_to,
                        name=record.name, full_ref=full)

    def _record(self, spec: RepoSpec, resolved: Resolved) -> None:
        record = self.cache.read_repo(spec.key)
        if not (spec.ref and is_full_sha(spec.ref)):
            record.refs[spec.ref or ""] = RefRecord(resolved.ref, resolved.commit,
                                                    resolved.full_ref)
        record.commits[resolved.commit] = CommitProof(resolved.tree, resolved.proof)
        if resolved.moved_to is not None:
            record.moved_to = resolved.moved_to.key
        if resolved.name:
            record.name = resolved.name
        self.cache.write_repo(spec.key, record)
