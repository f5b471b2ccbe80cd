"""The command's fleet verbs: ``prefetch`` (with ``--oci``), ``oci export``, ``oci import``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from safehub.cli import text
from safehub.cli.common import EXIT_OK, emit, hub

__all__ = ["cmd_oci_export", "cmd_oci_import", "cmd_prefetch"]


def _published(rows: Any) -> str:
    return "\n".join(f"{r.spec} {r.commit[:12]} -> {r.target}@{r.manifest}"
                     + (f" (tag {r.tag})" if r.tag else "") for r in rows)


def cmd_prefetch(args: argparse.Namespace) -> int:
    from safehub import fleet, operations
    from safehub.cli import _specs_from

    the_hub = hub(args)
    specs = _specs_from(args)
    pushed = fleet.publish(the_hub, specs, args.oci) if args.oci else []
    if args.oci:
        specs = [r.spec for r in pushed]
    mirror = Path(args.mirror) if args.mirror else None
    rows = operations.prefetch(the_hub, specs, mirror=mirror, read_only=args.read_only)
    emit(args, {"cache": str(the_hub.cache.root), "mirror": str(mirror) if mirror else None,
                "entries": [r.to_json() for r in rows],
                "published": [r.to_json() for r in pushed]},
         _published(pushed) if args.oci else text.prefetched(rows))
    return EXIT_OK


def cmd_oci_export(args: argparse.Namespace) -> int:
    from safehub import fleet

    rows = fleet.export(hub(args), Path(args.folder))
    emit(args, {"folder": args.folder, "entries": [r.to_json() for r in rows]},
         _published(rows))
    return EXIT_OK


def cmd_oci_import(args: argparse.Namespace) -> int:
    from safehub import fleet

    rows = fleet.import_layout(hub(args), Path(args.folder), args.target)
    emit(args, {"target": args.target, "entries": [r.to_json() for r in rows]},
         _published(rows))
    return EXIT_OK
