"""How the ``safehub`` command shows the library's typed reports as text.

Each function takes a report (or its JSON form) and returns the lines a person reads; the
command prints them, or the JSON form with ``--json``. Nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["cache_checks", "cache_rows", "check", "lock_changes", "lock_statuses", "policy",
           "prefetched", "runtime"]


def check(report: Any) -> str:
    lines = [f"{report.spec}: {report.outcome.upper()} ({report.why})"]
    if report.commit:
        lines.append(f"  commit   {report.commit}  ({report.proof})")
    if report.digest:
        lines.append(f"  digest   {report.digest} (cached, re-checked)")
    if report.entrypoint_note:
        lines.append(f"  note     {report.entrypoint_note}")
    for reason in report.reasons:
        lines.append(f"  policy   {reason}")
    if report.fix:
        lines.append(f"  fix      {report.fix}")
    return "\n".join(lines)


def lock_statuses(results: Sequence[Any]) -> str:
    return "\n".join(
        f"ok    {r.spec} {r.locked[:12]}" if r.ok else
        f"MOVED {r.spec} locked {r.locked} now {r.now}" if r.now else
        f"FAIL  {r.spec}: {r.error}"
        for r in results) or "(the lockfile is empty)"


def lock_changes(changes: Sequence[Any], path: object) -> str:
    rows = [f"{c.change:9} {c.spec} {c.commit}"
            + (f" (was {c.previous})" if c.previous and c.previous != c.commit else "")
            for c in changes]
    return "\n".join([*rows, f"wrote {path}"])


def prefetched(rows: Sequence[Any]) -> str:
    return "\n".join(f"{r.spec} {r.commit[:12]} {r.digest[:23]} -> {r.mirror or r.path}"
                     for r in rows)


def cache_rows(rows: Sequence[Any], root: object) -> str:
    return "\n".join(
        f"{r.commit[:12]}  {','.join(r.repos) or '-':30}  {r.files:6} files  "
        f"{r.digest[:23]}  {r.level}" for r in rows) or f"(the cache at {root} is empty)"


def cache_checks(results: Sequence[Any]) -> str:
    return "\n".join(
        f"{'ok  ' if r.ok else 'FAIL'} {r.commit}" + ("" if r.ok else f": {r.error}")
        for r in results) or "(nothing to verify)"


def policy(data: dict[str, Any], searched: Sequence[Any]) -> str:
    lines = ["policy files looked for, in merge order:"]
    for c in searched:
        lines.append(f"  {'found  ' if c.exists else 'absent '} {c.origin:8} {c.path}")
    lines.append("merged settings:")
    for name, info in data["settings"].items():
        if info["from"] == "default" and name not in ("mode", "unknown_repos", "runtime"):
            continue
        final = ", final" if info["final"] else ""
        lines.append(f"  {name} = {info['value']!r}  (from {info['from']}{final})")
    lines.append("rules:" if data["rules"] else "rules: (none)")
    for rule in data["rules"]:
        extra = {k: v for k, v in rule.items()
                 if k not in ("kind", "from", "index", "admits", "repo")}
        note = "" if rule["admits"] in (None, True) else \
            "  [after a final file: adds requirements only]"
        lines.append(f"  [[{rule['kind']}]] {rule['repo']}  {extra or ''}  "
                     f"({rule['from']} #{rule['index']}){note}")
    return "\n".join(lines)


def runtime(report: dict[str, Any]) -> str:
    """What the repo's code did while it ran (``load --report``)."""
    lines = [f"runtime guard ({report['mode']}) for {report['repo']}:"]
    for key, label in (("hosts", "connected to"), ("lookups", "looked up"),
                       ("programs", "started"), ("writes", "wrote outside its tree"),
                       ("libraries", "loaded native code"), ("environ", "changed environment"),
                       ("leftovers", "left imported")):
        lines.append(f"  {label:22} {', '.join(report[key]) or '-'}")
    for shadow in report["shadowing"]:
        lines.append(f"  {'shadows':22} {shadow['name']} ({shadow['shadows']})")
    for refusal in report["refused"]:
        lines.append(f"  {'REFUSED':22} {refusal['message']}")
    return "\n".join(lines)
