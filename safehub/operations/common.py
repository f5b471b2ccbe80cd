"""What the operations share: their reports' JSON form, and the verified tree of a spec."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from safehub.admission import Admitted
    from safehub.hub import Hub

__all__ = ["Report", "verified_tree"]


class Report:
    """A frozen report an operation returns; the CLI prints it or its :meth:`to_json`."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]


def verified_tree(hub: Hub, admitted: Admitted) -> Any:
    """The spec's tree, fetched and verified as a load does (from the cache if it is there)."""
    return hub.fetcher.tree(admitted.resolved, admitted.lock, verbose=False)
