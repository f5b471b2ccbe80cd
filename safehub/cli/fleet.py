"""The command's fleet verbs: ``prefetch`` (with ``--oci``), ``oci export``, ``oci import``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from safehub.cli import text

__all__ = ["cmd_oci_export", "cmd_oci_import", "cmd_prefetch"]


def _published(rows: Any) -> str:
    return "\n".join(f"{r.spec} {r.commit[:12]} -> {r.target}@{r.manifest}"
                     + (f" (tag {r.tag})" if r.tag else "") for r in rows)


def cmd_prefetch(args: argparse.Namespace) -> int:
    from safehub import fleet, operations
    from safehub.cli import EXIT_OK, _emit, _hub, _specs_from

    hub = _hub(args)
    specs = _specs_from(args)
    if args.oci:
        pushed = fleet.publish(hub, specs, args.oci)
        specs = [r.spec for r in pushed]
    mirror = Path(args.mirror) if args.mirror else None
    rows = operations.prefetch(hub, specs, mirror=mirror, read_only=args.read_only)
    if args.oci:
        _emit(args, [r.to_json() for r in pushed], _published(pushed))
        return EXIT_OK
    _emit(args, [r.to_json() for r in rows], text.prefetched(rows))
    return EXIT_OK


def cmd_oci_export(args: argparse.Namespace) -> int:
    from safehub import fleet
    from safehub.cli import EXIT_OK, _emit, _hub

    rows = fleet.export(_hub(args), Path(args.folder))
    _emit(args, [r.to_json() for r in rows], _published(rows))
    return EXIT_OK


def cmd_oci_import(args: argparse.Namespace) -> int:
    from safehub import fleet
    from safehub.cli import EXIT_OK, _emit, _hub

    rows = fleet.import_layout(_hub(args), Path(args.folder), args.target)
    _emit(args, [r.to_json() for r in rows], _published(rows))
    return EXIT_OK
