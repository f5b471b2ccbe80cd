"""What the policy answers for one spec: the verdict, and the requirements a load must
meet once the content is downloaded (merged from every matching allow rule).

Plain frozen data: the merge that produces it is :mod:`safehub.policy.model`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub._internal.globs import Glob
from safehub.verify.signatures.signers import SignerSet

__all__ = ["Decision", "Requirements", "RuntimeRequirements", "Verdict"]

Verdict = Literal["allow", "prompt", "deny"]


class RuntimeRequirements(Frozen):
    """What the runtime guard holds hubconf code to (every matching rule's keys).

    Each key merges as ``each`` (every rule that sets it must allow an action): the merged
    lists keep only the entries every rule that sets the key lists, which never allows
    more than any one rule does.

    >>> RuntimeRequirements(network=(("a.example", "b.example"), ("b.example",))).merged()
    (('b.example',), None, None)
    """

    network: tuple[tuple[str, ...], ...] = ()
    subprocess: tuple[bool | tuple[str, ...], ...] = ()
    writes: tuple[tuple[str, ...], ...] = ()
    shadowing: str = "refuse"
    rules: tuple[str, ...] = ()
    edit: tuple[str, str] = ("", "")
    """(file, table) where an admin would change these keys: the first matching rule."""
    weights: tuple[tuple[str, ...], ...] = ()
    """The ``weights`` patterns of each rule whose weights hosts may be connected to."""
    floor: frozenset[str] = frozenset()
    """Keys that only rules which may not widen them set: rules that cannot admit the repo
    (after a ``final`` file) and rules of a later file than the first one whose rules
    match. They narrow, never widen: under ``enforce`` such a key stays at enforce's
    default (nothing allowed) whatever they list."""

    def merged(self, mode: str = "observe"
               ) -> tuple[tuple[str, ...] | None, bool | tuple[str, ...] | None,
                          tuple[str, ...] | None]:
        """(network, subprocess, writes) as one rule would say them (None: unset)."""
        programs: bool | tuple[str, ...] | None = None
        for value in self.subprocess:
            if value is False or programs is False:
                programs = False
            elif value is True:
                programs = True if programs is None else programs
            else:
                programs = value if programs in (None, True) else _common((programs, value))
        network, writes = _common(self.network), _common(self.writes)
        if mode == "enforce":  # unset where it may widen: nothing, whatever others say
            network = () if "network" in self.floor else network
            programs = False if "subprocess" in self.floor else programs
            writes = () if "writes" in self.floor else writes
        return network, programs, writes

    def weights_patterns(self) -> tuple[str, ...]:
        """The weights patterns whose hosts the code may connect to: those every rule that
        sets ``weights`` shares by host; none if only narrowing rules set it."""
        weights = [tuple(p for p in ps if not p.startswith("hf://")) for ps in self.weights]
        if "weights" in self.floor or not self.weights:  # hf:// repos grant no host
            return ()
        from safehub._internal.urls import pattern_authority

        def host(pattern: str) -> tuple[str, int | None]:
            return pattern_authority(pattern)  # patterns were checked when read

        shared = set.intersection(*({host(p) for p in ps} for ps in weights))
        return tuple(p for p in weights[0] if host(p) in shared)


def _common(lists: Sequence[Any]) -> tuple[str, ...] | None:
    if not lists:
        return None
    first, *rest = lists
    return tuple(x for x in first if all(x in other for other in rest))


class Requirements(Frozen):
    """What every matching allow rule asks of the content, merged (all must hold)."""

    pin: bool = False
    signature: str = "none"
    signer_sets: tuple[SignerSet, ...] = ()
    weights: tuple[tuple[Glob, ...], ...] = ()
    weights_only: bool = True
    weights_format: frozenset[str] = frozenset(("safetensors", "pickle"))
    """The checkpoint formats every matching rule's ``weights_format`` allows."""
    weights_format_rules: tuple[tuple[str, str], ...] = ()
    """(file, table) of each matching rule that narrows ``weights_format``."""
    runtime: RuntimeRequirements = RuntimeRequirements()
    weights_rules: tuple[tuple[str, str], ...] = ()
    """(file, table) of the rule each entry of ``weights`` comes from."""


class Decision(Frozen):
    """The policy's answer for one spec (before or after the ref is resolved)."""

    verdict: Verdict
    reasons: tuple[str, ...]
    requirements: Requirements = Requirements()
    mode: str = "enforce"
    """How the checks made once the content is downloaded (signature, weights URLs) fail:
    ``warn`` only if every matching rule that asks for them is in a file that says
    ``mode = "warn"`` (with none, if this decision's own refusals all only warn)."""
    violations: tuple[str, ...] = ()
    fix: fixes.Fix | None = None
    rules: tuple[str, ...] = ()
    """The rules that matched (``where`` of each), for hints."""
