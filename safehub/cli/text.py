"""How the ``safehub`` command shows the library's typed reports as text.

Each function takes a report (or its JSON form) and returns the lines a person reads; the
command prints them (:func:`out`), or the JSON form with ``--json`` (:func:`out_json`).
Nothing here decides anything. :class:`RepoCodeError` words a failure of the repo's own
code.

Every line is made printable on its own (:func:`lines`: a name, path, reason or message
from outside cannot start a line of its own, nor carry a terminal escape), and
:func:`out` makes the whole text printable once more, keeping only its line breaks.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from safehub._internal import fixes
from safehub._internal.text import printable

__all__ = ["OutputError", "RepoCodeError", "cache_checks", "cache_rows", "check",
           "detach_stdout", "flush", "lines", "lock_changes", "lock_statuses", "out",
           "out_json", "policy", "prefetched", "runtime", "said", "verified"]


class RepoCodeError(Exception):
    """The repo's own code (its hubconf.py, or a local folder's) failed while it ran."""

    def __init__(self, error: BaseException, spec: str, entrypoint: str | None,
                 local: bool = False) -> None:
        told = said(error)
        missing = told.partition("Missing dependencies:")[2].replace(",", " ").split()
        if isinstance(error, SystemExit):
            message = f"the code of {spec} ended the process (sys.exit({told}))"
            fix: fixes.Fix = fixes.say("the repo's code does this, not safehub: see the "
                                       "repo's docs")
        elif missing:
            message = f"hubconf.py of {spec} needs packages that are not installed: " + \
                ", ".join(missing)
            fix = fixes.run("pip install " + " ".join(shlex.quote(m) for m in missing))
        elif local:
            message = f"the code of {spec} raised {type(error).__name__}: {told}"
            fix = fixes.say(f"the error is the folder's own code's, not safehub's: fix "
                            f"{spec}/hubconf.py")
        else:
            message = f"the code of {spec} raised {type(error).__name__}: {told}"
            fix = fixes.say("the error is the repo's own, not safehub's: " + (
                f"check the arguments (`safehub help {spec} {entrypoint}` shows them) and "
                "the repo's docs" if entrypoint else "see the repo's docs"))
        super().__init__(message)
        self.message, self.fix, self.hint = message, fix, fixes.render(fix, "cli")


def said(error: BaseException, limit: int = 500) -> str:
    """What ``error`` says, on one line and bounded (even if its ``__str__`` fails)."""
    try:
        text = " ".join(str(error).split())
    except Exception:  # the repo's own exception class may break even that
        text = "(its message cannot be shown)"
    return (text[:limit] + " ...") if len(text) > limit else text or "(no message)"


class OutputError(Exception):
    """Standard output cannot be written (a full disk, a closed stream)."""


def lines(rows: Iterable[str]) -> str:
    """``rows`` one per line, each made printable as a single line (a line break or an
    escape sequence inside a row is shown escaped).

    >>> print(lines(["name", "evil\\n  signature  verified\\x1b[2K"]))
    name
    evil\\n  signature  verified\\x1b[2K
    """
    return "\n".join(printable(row) for row in rows)


def out(line: str) -> None:
    """Print ``line`` on stdout, in whatever encoding it has; flushed, so errors show here.

    Its line breaks and tabs are kept, every other control, format or separator
    character is shown escaped (the fields in it are, one by one: :func:`lines`)."""
    _write(printable(line, lines=True))


def out_json(data: Any, *, sort_keys: bool = True) -> None:
    """Print ``data`` as JSON, exactly: ``json.dumps`` escapes every control and non-ASCII
    character (a lone surrogate too) itself; DEL, which it leaves, is written ``\\u007f``."""
    import json

    _write(json.dumps(data, indent=2, sort_keys=sort_keys, default=str
                      ).replace("\x7f", "\\u007f"))


def _write(line: str) -> None:
    stream = sys.stdout
    if stream is None:  # started with stdout closed (>&-)
        raise OutputError("standard output is closed")
    try:
        try:
            stream.write(line + "\n")
        except UnicodeEncodeError:
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write((line + "\n").encode(encoding, "backslashreplace").decode(encoding))
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(e.strerror or str(e)) from e
    flush()


def flush() -> None:
    """Flush stdout: :class:`BrokenPipeError` if the reader left, else :class:`OutputError`."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as e:  # ValueError: stdout was closed
        raise OutputError(getattr(e, "strerror", None) or str(e)) from e


def detach_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit has nowhere to fail."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def check(report: Any, line: fixes.CommandLine | None = None) -> str:
    why = (f"not a verdict: the network failed before anything decided: {report.why}"
           if report.outcome == "unknown" else report.why)
    rows = [f"{report.spec}: {report.outcome.upper()} ({why})"]
    if report.commit:
        rows.append(f"  commit   {report.commit}  ({report.proof})")
    if report.digest:
        rows.append(f"  digest   {report.digest} (cached, re-checked)")
    if report.signature and not report.signature.startswith("not checked (no policy"):
        rows.append(f"  signed   {report.signature}")
    if report.entrypoint_note:
        rows.append(f"  note     {report.entrypoint_note}")
    for reason in report.reasons:
        rows.append(f"  policy   {reason}")
    if report.fix:  # each field of the fix one line, then the fix's own layout
        rows += f"  fix      {fixes.render(report.fix, 'cli', printable, command_line=line)}".split(
            "\n")
    return lines(rows)


def verified(report: Any, keys: Sequence[str], issuer: str | None,
             identity: str | None) -> str:
    """A valid signature; for signers given on the command line, the policy lines that
    would require them at every load (``verify --key`` checks this once)."""
    line = f"valid: {report.target} signed by {report.signer} ({report.files} files)"
    import json  # a JSON string is a TOML string

    wanted = [f"keys = {json.dumps(list(keys))}"] if keys else []
    if identity:
        wanted.append(f"signers = [{{ issuer = {json.dumps(issuer)}, identity = "
                      f"{json.dumps(identity)} }}]")
    if not wanted:
        return lines([line])
    return lines([line, "  to require this signature at every load, set in the repo's "
                  "[[allow]] rule of your policy (`safehub policy show` lists them):",
                  '    signature = "required"', *(f"    {w}" for w in wanted)])


def lock_statuses(results: Sequence[Any], line: fixes.CommandLine | None = None) -> str:
    rows = []
    for r in results:
        rows.append(f"ok    {r.spec} {r.locked[:12]}" if r.ok else
                    f"MOVED {r.spec} locked {r.locked} now {r.now}" if r.now else
                    f"FAIL  {r.spec}: {r.error}")
        if r.fix:  # each field of the fix one line, then the fix's own layout
            rows += f"  fix: {fixes.render(r.fix, 'cli', printable, command_line=line)}".split(
                "\n")
    return lines(rows) or "(the lockfile is empty)"


def pin_statuses(files: Sequence[Any], line: fixes.CommandLine | None = None) -> str:
    """``lock --check``'s rows for pinned files (after the specs')."""
    rows = []
    for f in files:
        how = f" ({f.how})" if f.how else ""
        rows.append(f"ok    {f.url}{how}" if f.ok else
                    f"MOVED {f.url}: its revision is commit {f.now_commit} now, pinned at "
                    "another" if f.state == "moved" else
                    f"CHANGED {f.url}: sha256 {f.now_sha256} ({f.now_size} bytes), pinned "
                    f"{f.sha256} ({f.size} bytes){how}" if f.state == "changed" else
                    f"FAIL  {f.url}: {f.error}")
        if f.fix:
            rows += f"  fix: {fixes.render(f.fix, 'cli', printable, command_line=line)}".split(
                "\n")
    return lines(rows)


def entrypoint_pins(ran: Any) -> str:
    """What ``lock --entrypoint`` pinned."""
    rows = [f"pinned    {w.url} sha256 {w.sha256[:16]}... "
            + (f"{w.size:,} bytes" if w.size is not None else "") for w in ran.weights]
    return lines(rows or [
        f"{ran.entrypoint} of {ran.spec} fetched no file through a held path"])


def lock_changes(changes: Sequence[Any], path: object) -> str:
    rows = [f"{c.change:9} {c.spec} {c.commit}"
            + (f" (was {c.previous})" if c.previous and c.previous != c.commit else "")
            for c in changes]
    same = all(c.change in ("kept", "unchanged") for c in changes)
    return lines([*rows, f"{path}: nothing changed" if same else f"wrote {path}"])


def prefetched(rows: Sequence[Any]) -> str:
    return lines(f"{r.spec} {r.commit[:12]} {r.digest[:23]} -> {r.mirror or r.path}"
                 for r in rows)


def cache_rows(rows: Sequence[Any], root: object, chosen_by: str = "") -> str:
    where = f"cache {root}" + (f" ({chosen_by})" if chosen_by else "")
    if not rows:
        return lines([f"{where}: empty"])
    table: list[list[str]] = [["COMMIT", "REPO", "SPECS", "FILES", "SIZE", "LAST LOAD",
                               "DIGEST", "LEVEL"]]
    table += [[printable(cell) for cell in (  # escaped first: the widths are as shown
        r.commit[:12], r.repo or ",".join(r.repos) or "(unknown)", ",".join(r.specs) or "-",
        str(r.files), size(r.bytes), r.last_used.replace("T", " ").rstrip("Z")[:16] or "-",
        r.digest[:23], r.level)] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    shown = ["  ".join(cell.rjust(w) if i in (3, 4) else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
             for row in table]
    total = sum(r.bytes for r in rows)
    return lines([f"{where}:", *shown, f"{len(rows)} cached tree{'s' if len(rows) != 1 else ''}"
                  f", {size(total)}; LAST LOAD: the last load in your audit log (UTC), - if "
                  "none (prefetched, or another user's); SPECS: the lockfile's"])


def size(n: int) -> str:
    """``n`` bytes as a person reads them: ``12.3 MiB``."""
    from safehub._internal.progress import size as shown

    return shown(n)


def cache_checks(results: Sequence[Any]) -> str:
    return lines(
        f"{'ok  ' if r.ok else 'FAIL'} {r.commit}" + ("" if r.ok else f": {r.error}")
        for r in results) or "(nothing to verify)"


def policy(data: dict[str, Any], searched: Sequence[Any]) -> str:
    rows = ["policy files looked for, in merge order:"]
    for c in searched:
        rows.append(f"  {'found  ' if c.exists else 'absent '} {c.origin:8} {c.path}")
    rows.append("merged settings:")
    for name, info in data["settings"].items():
        if info["from"] == "default" and name not in ("mode", "unknown_repos", "runtime"):
            continue
        final = ", final" if info["final"] else ""
        rows.append(f"  {name} = {info['value']!r}  (from {info['from']}{final})")
    if "cache" in data:
        rows.append(f"  the cache: {data['cache']['path']}  (chosen by "
                    f"{data['cache']['chosen_by']})")
    for held in data.get("local_dirs", ()):
        dirs = "no local folder" if held["value"] is None else held["value"]
        rows.append(f"  local_dirs = {dirs!r}  (from {held['from']})")
    for name, merged in data.get("confine", {}).items():
        if merged["from"] != "default" or merged["notes"]:
            final = ", final" if merged["final"] else ""
            rows.append(f"  [confine] {name} = {merged['value']!r}  (from {merged['from']}"
                        f"{final})")
            rows += [f"    note: {note}" for note in merged["notes"]]
    for table in data.get("oci", ()):
        who = [*(f"{x['identity']} ({x['issuer']})" for x in table.get("signers", ())),
               *(f"key {k}" for k in table.get("keys", ()))]
        rows.append(f"  [oci] signature = {table.get('signature', 'none')!r}"
                    + (f" by one of: {', '.join(who)}" if who else "")
                    + f"  (from {table['from']})")
    hook = data.get("environment_hook")
    if hook:
        rows.append(f"environment hook: {hook['state']} ({hook['path']})")
    for item in data.get("ignored", ()):
        rows.append(f"  IGNORED {item['given']}: {item['by']} sets {item['key']} = "
                    f"{item['held']!r} ({item['why']})")
    rows.append("rules:" if data["rules"] else "rules: (none)")
    for rule in data["rules"]:
        extra = {k: v for k, v in rule.items()
                 if k not in ("kind", "from", "index", "admits", "repo")}
        note = "" if rule["admits"] in (None, True) else \
            "  [after a final file: adds requirements only]"
        rows.append(f"  [[{rule['kind']}]] {rule['repo']}  {extra or ''}  "
                    f"({rule['from']} #{rule['index']}){note}")
    return lines(rows)


def runtime(report: dict[str, Any]) -> str:
    """What the repo's code did while it ran (``load --report``)."""
    rows = [f"runtime guard ({report['mode']}) for {report['repo']}:"]
    refused = {r.get("target") for r in report["refused"]}  # tried, not done: listed below
    for key, label in (("hosts", "connected to"), ("lookups", "looked up"),
                       ("programs", "started"), ("writes", "wrote outside its tree"),
                       ("libraries", "loaded native code"), ("environ", "changed environment"),
                       ("kernel", "the kernel refuses"),
                       ("leftovers", "left imported"),
                       ("fetched", "safehub fetched")):
        done = [item for item in report.get(key, ()) if item not in refused]
        rows.append(f"  {label:22} {', '.join(done) or '-'}")
    for shadow in report["shadowing"]:
        rows.append(f"  {'shadows':22} {shadow['name']} ({shadow['shadows']})")
    for refusal in report["refused"]:
        rows.append(f"  {'REFUSED':22} {refusal['message']}")
    return lines(rows)


def confined_failure(code: int, ruleset: Any) -> str:
    """What ``safehub run --confine`` adds when the job fails: what the kernel refused it
    may be (docs/confine.md), and where to grant more."""
    def listed(grants: Sequence[Any]) -> str:
        return ", ".join(printable(g.path) for g in grants) or "none"

    return (f"safehub run: the job exited with {code} under --confine. The kernel refuses "
            "what [confine] does not grant with EACCES (\"Permission denied\", "
            "PermissionError in Python; a torch.save outside the writes folders is one): "
            f"writes beneath {listed(ruleset.writes)} (and the job's temp dir), programs "
            f"{listed(ruleset.exec)}, TCP ports "
            f"{', '.join(map(str, ruleset.connect_ports)) or 'none'}.\n"
            "  fix: if the job needs more, add it to writes, exec or connect_ports in the "
            "[confine] table of your policy file (see `safehub docs confine`; "
            "`safehub run --confine --dry-run -- COMMAND` shows what is granted)\n")


#: The packages whose versions ``safehub --version`` shows beside safehub's own.
_PACKAGES = ("torch", "sigstore", "model-signing", "requests")


def versions() -> str:
    """``safehub --version``: safehub's version, then each package it works with and its
    version (or that it is not installed), one a line, read from the installed metadata
    (nothing is imported)."""
    from importlib import metadata

    from safehub import __version__

    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    return "\n".join([f"safehub {__version__} (Python {sys.version.split()[0]})",
                      *(f"  {p} {version(p)}" for p in _PACKAGES)])
