"""OCI registries and image layouts as a place locked snapshots come from (issue 19).

:mod:`~safehub.sources.oci.artifact` is the snapshot's format,
:mod:`~safehub.sources.oci.registry` the distribution protocol over safehub's transport,
:mod:`~safehub.sources.oci.auth` docker's credentials, :mod:`~safehub.sources.oci.layout`
an OCI image layout folder, :mod:`~safehub.sources.oci.source` the source a load uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from safehub.sources.oci.layout import Layout
from safehub.sources.oci.registry import Registry, Target
from safehub.sources.oci.source import OciSource, Pin, Place
from safehub.sources.transport import Transport

__all__ = ["Layout", "OciSource", "Pin", "Place", "Registry", "Target", "place", "places"]


def place(text: str, transport: Transport, *, hosts: frozenset[str] = frozenset(),
          push: bool = False, environ: Mapping[str, str] | None = None) -> Registry | Layout:
    """``REGISTRY/REPOSITORY`` as a :class:`Registry`, ``oci:DIR`` as a :class:`Layout`."""
    if text.startswith("oci:"):
        return Layout(Path(text[4:]).expanduser())
    return Registry(transport, Target.parse(text), hosts=hosts, push=push, environ=environ)


def places(entries: Sequence[str], transport: Transport, *,
           hosts: frozenset[str] = frozenset()) -> list[Registry | Layout]:
    return [place(e, transport, hosts=hosts) for e in entries]
