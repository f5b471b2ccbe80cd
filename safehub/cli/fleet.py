"""The command's fleet verbs: ``prefetch`` (with ``--oci``), ``oci export``, ``oci import``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub.cli import text
from safehub.cli.common import EXIT_OK, emit, hub, specs_from

__all__ = ["cmd_oci_export", "cmd_oci_import", "cmd_prefetch"]


def _published(rows: Any) -> str:
    return text.lines(f"{r.spec} {r.commit[:12]} -> {r.target}@{r.manifest}"
                      + (f" (tag {r.tag})" if r.tag else "")
                      + (f", signed by {r.signature}" if r.signature else "") for r in rows)


def _signing(args: argparse.Namespace) -> Any:
    from safehub.fleet import Signing

    if getattr(args, "sign_key", None):
        return Signing(key=Path(args.sign_key))
    return Signing(keyless=True) if getattr(args, "sign_keyless", False) else None


def cmd_prefetch(args: argparse.Namespace) -> int:
    from safehub import fleet, operations

    the_hub = hub(args)
    specs = specs_from(args)
    sign = _signing(args)
    if sign is not None and not args.oci:
        from safehub.errors import SpecError

        raise SpecError("--sign-key and --sign-keyless sign OCI snapshots: they need --oci",
                        fix=fixes.run("safehub prefetch --oci REGISTRY/REPOSITORY "
                                      "--sign-key KEY SPEC"))
    pushed = fleet.publish(the_hub, specs, args.oci, sign=sign) if args.oci else []
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

    rows = fleet.export(hub(args), Path(args.folder), sign=_signing(args))
    emit(args, {"folder": args.folder, "entries": [r.to_json() for r in rows]},
         _published(rows))
    return EXIT_OK


def cmd_oci_import(args: argparse.Namespace) -> int:
    from safehub import fleet

    rows = fleet.import_layout(hub(args), Path(args.folder), args.target)
    emit(args, {"target": args.target, "entries": [r.to_json() for r in rows]},
         _published(rows))
    return EXIT_OK
