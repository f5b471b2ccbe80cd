"""The merged policy: how files combine, and the answer for one spec.

Merging follows each key's declared ``merge`` (see :mod:`safehub.policy.keys` and
docs/policy.md, "How files merge"), and is monotone: a later file can add refusals and
requirements, never take one away.

* a matching ``[[deny]]`` rule in any file refuses; deny always wins;
* a repo is admitted by an ``[[allow]]`` rule in a file up to and including the first
  ``final = true`` file; later allow rules only add requirements;
* every matching ``[[allow]]`` rule's requirements must hold;
* each refusal carries its file's ``mode``: ``warn`` softens that file's refusals, never
  another's, and the verdict is the strictest of them and of the admission;
* ``[safehub]`` settings and ``[confine]`` keys merge as :data:`safehub.policy.keys.LAYERS`
  says, by one function (:func:`safehub.policy.merge.merge_key`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, field
from safehub._internal.globs import Glob
from safehub.policy.decision import Decision, Requirements, RuntimeRequirements, Verdict
from safehub.policy.keys import KEYS, WEIGHT_FORMATS, Choice
from safehub.policy.merge import Merged, Setting, merge_key, merge_settings
from safehub.policy.schema import FileSpec, Table, parse_text
from safehub.spec import RepoSpec, is_full_sha, ref_forms
from safehub.verify.signatures.signers import KeySigner, Signer, SignerSet

__all__ = ["Decision", "Policy", "Requirements", "Rule", "Setting"]

class Rule(Frozen):
    """One allow or deny rule, with the file it came from and compiled patterns."""

    kind: Literal["allow", "deny"]
    source: str
    index: int
    table: Table
    admits: bool
    repo: Glob
    refs: tuple[Glob, ...] | None
    entrypoints: tuple[Glob, ...] | None
    layer: int = 0  # its file's place in the merge order
    soft: bool = False  # its file says mode = "warn": its refusals only warn

    @property
    def where(self) -> str:
        return f"[[{self.kind}]] #{self.index + 1} ({self.table.repo}) in {self.source}"

    @property
    def label(self) -> str:
        return f"[[{self.kind}]] #{self.index + 1} ({self.table.repo})"

    def matches(self, key: str) -> bool:
        return self.repo.match(key)


class _Refusal(Frozen):
    """One reason to refuse, from one file: ``soft`` if that file says ``mode = "warn"``."""

    why: str
    fix: fixes.Fix
    source: str
    soft: bool = False


def _checks_mode(allows: Sequence[Rule], refusals: Sequence[_Refusal]) -> str:
    """:attr:`Decision.mode`: ``warn`` only where no file that enforces has a say."""
    asked = [r.soft for r in allows if r.table.signature != "none" or r.table.weights is not None]
    said = asked or [r.soft for r in refusals]
    return "warn" if said and all(said) else "enforce"


def _strictest(scope: str, name: str, values: Iterable[str]) -> str:
    choice = KEYS[scope][name].type
    assert isinstance(choice, Choice)
    return max(values, key=choice.strictness, default=KEYS[scope][name].default)


class Policy(Frozen):
    """The merged policy of every file found, in order.

    >>> p = Policy.from_text('[safehub]\\nunknown_repos = "deny"\\n'
    ...                      '[[allow]]\\nrepo = "pytorch/*"\\nrefs = ["v*"]\\n', "example.toml")
    >>> p.decide(RepoSpec.parse("PyTorch/vision:v0.10.0")).verdict
    'allow'
    >>> p.decide(RepoSpec.parse("someone/else:v1")).verdict
    'deny'
    """

    layers: tuple[FileSpec, ...] = ()
    rules: tuple[Rule, ...] = ()
    settings: Mapping[str, Setting] = field(default_factory=dict)

    @property
    def files(self) -> tuple[str, ...]:
        """The files merged, in order."""
        return tuple(f.source for f in self.layers)

    @classmethod
    def from_text(cls, text: str, source: str, *, origin: str = "user") -> Policy:
        return cls.from_files([parse_text(text, source, origin=origin)])

    @classmethod
    def from_files(cls, files: Sequence[FileSpec]) -> Policy:
        rules: list[Rule] = []
        final_seen = False
        for layer, spec in enumerate(files):
            soft = spec.warns
            for i, d in enumerate(spec.deny):
                rules.append(Rule("deny", spec.source, i, d, False, Glob(d.repo, fold=True),
                                  _globs(d.refs), None, layer, soft))
            for i, a in enumerate(spec.allow):
                rules.append(Rule("allow", spec.source, i, a, not final_seen,
                                  Glob(a.repo, fold=True), _globs(a.refs),
                                  _globs(a.entrypoints), layer, soft))
            final_seen = final_seen or spec.safehub.final
        return cls(tuple(files), tuple(rules), merge_settings(files))

    def setting(self, name: str) -> Setting:
        """A ``[safehub]`` key's merged value (its default, from ``"default"``, if unset)."""
        found = self.settings.get(name)
        return found if found is not None else Setting(KEYS["safehub"][name].default, "default")

    @property
    def mode(self) -> str:
        return str(self.setting("mode").value)

    def confine(self, name: str, resolve: Callable[[Any], Any] | None = None) -> Merged:
        """A ``[confine]`` key merged as every key is (:func:`merge_key`): the default is the
        bound until a site or user file sets the key; every later file, a project's and a
        ``SAFEHUB_POLICY`` file, and any file after a ``final`` one only narrow it. Entries
        are compared by what ``resolve`` makes of them (``safehub.run.confine.plan``
        resolves links and ``PATH`` names); the written entries are kept.

        >>> Policy.from_text("[confine]\\nconnect_ports = [443, 8443]\\n", "u.toml"
        ...                  ).confine("connect_ports").value
        (443, 8443)
        """
        return merge_key(KEYS["confine"][name], self.layers, resolve)

    def confine_layers(self, name: str) -> list[tuple[str, Any]]:
        """(file, value) of each file whose ``[confine]`` table sets ``name``, in order (what
        ``safehub policy show`` lists under the merged value)."""
        return [(f.source, f.confine[name]) for f in self.layers
                if f.confine is not None and name in f.confine.given]

    # -- deciding -----------------------------------------------------------------------

    def decide(self, spec: RepoSpec, *, entrypoint: str | None = None,
               ref: str | None = None, locked: bool = False, full_ref: str = "",
               resolved: bool = False) -> Decision:
        """Decide on a spec. ``ref`` overrides ``spec.ref`` (the resolved default branch);
        ``locked`` says a lockfile pins this spec (which satisfies ``pin = "commit"``);
        ``full_ref``: the branch or tag it resolved to (``refs/heads/dev``), once known.

        ``refs`` patterns match any way of writing the ref (``v1``, ``tags/v1``,
        ``refs/tags/v1``). Before resolution a short name's kind is unknown: a deny pattern
        written for a kind (``refs/heads/dev``) waits for the resolved name, and an allow
        pattern written for a kind admits it until then (decided again once resolved).

        Each refusal keeps its file's mode: ``mode = "warn"`` softens its own file's only.
        """
        key = spec.key
        ref = spec.ref if ref is None else ref
        names = ref_forms(ref, full_ref, resolved=resolved)
        refusals: list[_Refusal] = []
        for rule in self.rules:                                          # 1. deny rules
            if rule.kind != "deny" or not rule.matches(key):
                continue
            if rule.refs is not None and not any(_any(rule.refs, n) for n in names[0]):
                continue
            why = f"denied by {rule.where}" + (f": {rule.table.reason}" if rule.table.reason
                                               else "")
            fix: fixes.Fix = fixes.noted(fixes.remove(rule.source, rule.label), after=(
                " (an admin decision: ask whoever owns that file)"))
            if not rule.soft:  # deny wins: nothing another file says can lift it
                return self._refuse(False, why, fix, rules=(rule.where,))
            refusals.append(_Refusal(why, fix, rule.source, soft=True))
        allows = [r for r in self.rules if r.kind == "allow" and r.matches(key)]
        admitted = [r for r in allows if r.admits]
        reasons: list[str] = []
        if admitted:                                                     # 2. admission
            verdict: Verdict = "allow"
            reasons.append(f"allowed by {admitted[0].where}")
        else:                                                            # 3. unknown repos
            unknown = self.setting("unknown_repos")
            where = "the default" if unknown.source == "default" else unknown.source
            if allows:
                reasons.append(f"{allows[0].where} cannot admit a repo: it comes after a "
                               "final = true file")
            verdict = "allow" if unknown.value == "allow" else "prompt"
            if unknown.value == "deny":
                source, soft = self._unknown_deny()
                why = (f"no allow rule admits {spec.repo} and unknown_repos = 'deny' "
                       f"({source})")
                fix = self._admit_fix(spec, ref, source, locked)
                if not soft:
                    return self._refuse(False, why, fix, [*reasons, *(r.why for r in refusals)])
                refusals.append(_Refusal(why, fix, source, soft=True))
            else:
                reasons.append(f"no allow rule covers {spec.repo}; unknown_repos = "
                               f"{unknown.value!r} ({where})")
        reqs, found = _requirements(allows, spec, ref, names[1], entrypoint, locked)  # 4.
        refusals += found
        matched = tuple(r.where for r in allows)
        violations = tuple(r.why for r in refusals)
        hard = [r for r in refusals if not r.soft]
        if hard:
            return Decision("deny", (*reasons, *violations), reqs, "enforce", violations,
                            fix=fixes.both(*dict.fromkeys(r.fix for r in hard)),
                            rules=matched)
        mode = _checks_mode(allows, refusals)
        if refusals:  # only files that say mode = "warn" refuse: they warn, the user decides
            files = ", ".join(dict.fromkeys(r.source for r in refusals))
            return Decision("prompt", (*reasons, *violations,
                                       f"mode = 'warn' in {files}: loading anyway"),
                            reqs, mode, violations, rules=matched)
        return Decision(verdict, tuple(reasons), reqs, mode, rules=matched)

    def _unknown_deny(self) -> tuple[str, bool]:
        """The file whose ``unknown_repos = "deny"`` holds (an enforcing one first); soft?"""
        saying = [f for f in self.layers
                  if "unknown_repos" in f.safehub.given and f.safehub.unknown_repos == "deny"]
        held = next((f for f in saying if not f.warns), saying[0])
        return held.source, held.warns

    def decide_local(self, folder: str) -> Decision:
        """Decide on a ``source="local"`` load of ``folder`` (see :mod:`.local`)."""
        from safehub.policy.local import decide_local

        return decide_local(self, folder)

    def _admit_fix(self, spec: RepoSpec, ref: str | None, path: str, locked: bool) -> fixes.Fix:
        """The rule that admits ``spec``, written the way the file's other rules are: where
        they all pin commits, the new one does too (and the spec is locked as well)."""
        theirs = [r for r in self.rules if r.kind == "allow" and r.source == path]
        lines = ["[[allow]]", f'repo = "{spec.key}"']
        if theirs and all(r.table.pin == "commit" for r in theirs):
            lines.append('pin = "commit"')
            if not locked and not (ref is not None and is_full_sha(ref)):
                pinned = spec.key if ref is None else f"{spec.key}:{ref}"
                return fixes.both(fixes.add(path, lines),
                                  fixes.run(f"safehub lock {fixes.quote(pinned)}"))
        return fixes.add(path, lines)

    def names(self, key: str) -> bool:
        """True if an [[allow]] rule admits the repo ``key`` by name or glob (not merely
        ``unknown_repos = "allow"``), and no deny rule covers it."""
        if any(r.kind == "deny" and r.refs is None and r.matches(key) for r in self.rules):
            return False
        return any(r.kind == "allow" and r.admits and r.matches(key) for r in self.rules)

    def _refuse(self, soft: bool, why: str, fix: fixes.Fix, reasons: Iterable[str] = (),
                rules: tuple[str, ...] = ()) -> Decision:
        """A refusal on its own. ``soft``: its file says ``mode = "warn"``, so the violation
        is logged and the load goes on (it still needs the user's consent)."""
        if soft:
            return Decision("prompt", (*reasons, why, "mode = 'warn': loading anyway"),
                            Requirements(), "warn", (why,), rules=rules)
        return Decision("deny", (*reasons, why), Requirements(), "enforce", (why,), fix=fix,
                        rules=rules)


def _requirements(allows: Sequence[Rule], spec: RepoSpec, ref: str | None,
                  forms: Sequence[str], entrypoint: str | None, locked: bool
                  ) -> tuple[Requirements, list[_Refusal]]:
    """Combine every matching allow rule (each key by its declared merge); the violations,
    each with the fix that gets past it and whether its file only warns.

    The runtime keys (and the weights hosts) may be widened only by the admitting rules of
    the first file whose rules match: a later file's rule narrows them, so under
    ``runtime = "enforce"`` a key the first file leaves unset stays closed."""
    found: list[tuple[Rule, str, fixes.Fix]] = []
    signer_sets: list[SignerSet] = []
    weights: list[tuple[Glob, ...]] = []
    weights_rules: list[tuple[str, str]] = []
    network: list[tuple[str, ...]] = []
    programs: list[bool | tuple[str, ...]] = []
    writes: list[tuple[str, ...]] = []
    widen = [r for r in allows if r.admits and r.layer == allows[0].layer]
    floor = {key for key in ("network", "subprocess", "writes", "weights")
             if any(getattr(r.table, key) is not None for r in allows)
             and not any(getattr(r.table, key) is not None for r in widen)}
    for rule in allows:
        t = rule.table
        if rule.refs is not None and ref is not None and not any(
                _any(rule.refs, n) for n in forms):
            found.append((
                rule, f"ref {ref!r} is not one of {list(t.refs)} allowed by {rule.where}",
                fixes.either(fixes.say(f"ask for a ref that matches {list(t.refs)}"),
                             fixes.change(rule.source, rule.label,
                                          [f"refs = {_toml_list([*t.refs, ref])}"]))))
        if rule.entrypoints is not None and entrypoint is not None and not _any(
                rule.entrypoints, entrypoint):
            found.append((
                rule, f"entrypoint {entrypoint!r} is not one of {list(t.entrypoints)} allowed by "
                f"{rule.where}",
                fixes.change(rule.source, rule.label,
                             [f"entrypoints = {_toml_list([*t.entrypoints, entrypoint])}"])))
        if t.pin == "commit" and not locked and not (ref is not None and is_full_sha(ref)):
            pinned = spec.key if ref is None else f"{spec.key}:{ref}"
            found.append((
                rule, f"{rule.where} requires a pinned commit: a 40-hex sha, or the spec locked in "
                "the lockfile", fixes.run(f"safehub lock {fixes.quote(pinned)}")))
        if t.signature != "none":
            signer_sets.append(SignerSet(
                rule.label, tuple(Signer(**s.set_values()) for s in t.signers),
                tuple(KeySigner(Path(k)) for k in t.keys),
                Path(t.trust_config) if t.trust_config else None, t.signature_url,
                tuple(Path(c) for c in t.certificates), policy_file=rule.source))
        if t.weights is not None:
            weights.append(tuple(Glob(w) for w in t.weights))
            weights_rules.append((rule.source, rule.label))
        for name, into in (("network", network), ("subprocess", programs), ("writes", writes)):
            if t[name] is not None:
                into.append(t[name])
    tables = [r.table for r in allows]
    reqs = Requirements(
        pin=_strictest("allow", "pin", (t.pin for t in tables)) == "commit",
        signature=_strictest("allow", "signature", (t.signature for t in tables)),
        signer_sets=tuple(signer_sets),
        weights=tuple(weights),
        # strictest wins: pickles only if every matching rule says weights_only = false
        weights_only=not tables or any(t.weights_only for t in tables),
        runtime=RuntimeRequirements(
            tuple(network), tuple(programs), tuple(writes),
            _strictest("allow", "shadowing", (t.shadowing for t in tables)),
            tuple(r.where for r in allows),
            (allows[0].source, allows[0].label) if allows else ("", ""),
            tuple(tuple(t.weights) for t in tables if t.weights is not None),
            frozenset(floor)),
        weights_rules=tuple(weights_rules),
        # each rule's list must allow a format: the intersection
        weights_format=frozenset(WEIGHT_FORMATS).intersection(
            *(t.weights_format for t in tables)),
        weights_format_rules=tuple((r.source, r.label) for r in allows
                                   if set(r.table.weights_format) != set(WEIGHT_FORMATS)),
    )
    return reqs, [_Refusal(why, fix, rule.source, rule.soft) for rule, why, fix in found]


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"  # TOML basic strings


def _globs(values: Iterable[str] | None) -> tuple[Glob, ...] | None:
    return None if values is None else tuple(Glob(v) for v in values)


def _any(globs: Iterable[Glob], text: str) -> bool:
    return any(g.match(text) for g in globs)

