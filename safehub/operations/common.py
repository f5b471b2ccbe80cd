"""What the operations share: their reports' JSON form, and the verified tree of a spec."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from safehub import pipeline
from safehub._internal.frozen import Frozen, asdict

if TYPE_CHECKING:
    from safehub.admission import Admitted
    from safehub.hub import Hub
    from safehub.spec import RepoSpec
    from safehub.store.cache import CachedTree

__all__ = ["TREE", "Report", "verified_tree"]


class Report(Frozen):
    """A frozen report an operation returns; the CLI prints it or its :meth:`to_json`."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


TREE = pipeline.Plan(upto="tree", verbose=False)
"""``verify SPEC``, ``prefetch``: a load's steps up to the verified tree (nothing trusted,
nothing run)."""


def verified_tree(hub: Hub, spec: RepoSpec) -> tuple[Admitted, CachedTree]:
    """The spec admitted, and its tree fetched and verified as a load does (from the cache
    if it is there)."""
    passed = pipeline.steps(hub.context, spec, TREE)
    assert passed.tree is not None
    return passed.admitted, passed.tree
