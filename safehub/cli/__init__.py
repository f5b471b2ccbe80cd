"""The ``safehub`` command: a thin layer that parses, calls the library and prints.

Exit codes: 0 ok, 1 refused or failed, 2 usage error; ``check`` exits 3 when the network failed
before anything decided (not a verdict: ask again). No traceback ever reaches a user:
every failure is one line of what failed and one of the fix (``--json``: one JSON object,
for errors too). ``SAFEHUB_DEBUG=1`` shows the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.text import error as _error_text
from safehub._internal.text import printable
from safehub.cli import admin, fleet, selfcheck, text
from safehub.cli.common import EXIT_OK, EXIT_REFUSED, EXIT_UNDECIDED, EXIT_USAGE, specs_from
from safehub.cli.common import Parser as _Parser
from safehub.cli.common import Usage as _Usage
from safehub.cli.common import emit as _emit
from safehub.cli.common import hub as _hub
from safehub.cli.parser import command_line
from safehub.errors import CacheError, SafehubError, SpecError

__all__ = ["main"]

def _repo_code(hub: Any, local: bool, spec: str, entrypoint: str | None,
               call: Callable[[], Any]) -> Any:
    """Run ``call``: a failure of the repo's own code (not safehub's) is named as such, and
    what the code prints goes to stderr (stdout carries the result, or its JSON, only)."""
    streams = sys.stdout, sys.stderr
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return call()
    except (SafehubError, KeyboardInterrupt):
        raise
    except BaseException as e:  # whatever the repo's code raises, SystemExit included
        if not local and hub.last_report is None:
            raise  # nothing of the repo's ran: this is safehub's own failure
        raise text.RepoCodeError(e, spec, entrypoint, local) from e
    finally:
        sys.stdout, sys.stderr = streams  # the repo's code may have replaced them


# -- loading ----------------------------------------------------------------------------------

def _describe(obj: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    params = getattr(obj, "parameters", None)
    if callable(params):
        with contextlib.suppress(Exception):  # only a summary
            info["parameters"] = sum(int(p.numel()) for p in params())
    return info


def _trust(args: argparse.Namespace) -> Any:
    return True if args.trust else "check"


def _positional(given: str | None) -> list[Any]:
    """``--args``: the entrypoint's positional arguments, a JSON list."""
    if given is None:
        return []
    try:
        values = json.loads(given)
    except (ValueError, RecursionError) as e:
        raise _Usage(f"--args is not JSON ({e}); e.g. --args '[16, \"relu\"]'",
                     "safehub load") from e
    if not isinstance(values, list):
        raise _Usage(f"--args must be a JSON list, e.g. --args '[{json.dumps(values)}]'",
                     "safehub load")
    return values


def _cmd_load(args: argparse.Namespace) -> int:
    try:
        kwargs = json.loads(args.kwargs) if args.kwargs is not None else {}
    except (ValueError, RecursionError) as e:
        raise _Usage(f"--kwargs is not JSON ({e}); e.g. --kwargs '{{\"pretrained\": false}}'",
                     "safehub load") from e
    if not isinstance(kwargs, dict):
        raise _Usage("--kwargs must be a JSON object, e.g. --kwargs '{\"n\": 2}'", "safehub load")
    positional = _positional(args.positional)
    reserved = sorted(set(kwargs) & {"source", "trust_repo", "force_reload", "verbose",
                                     "skip_validation", "repo_or_dir", "model"})
    if reserved:
        raise _Usage(f"--kwargs may not set {', '.join(reserved)}: those are safehub load's own "
                     "(use its options)", "safehub load")
    hub = _hub(args)
    try:
        obj = _repo_code(hub, args.source == "local", args.spec, args.entrypoint, lambda: hub.load(
            args.spec, args.entrypoint, *positional, source=args.source,
            trust_repo=_trust(args), force_reload=args.force_reload, verbose=not args.quiet,
            **kwargs))
    except (SafehubError, text.RepoCodeError):
        if args.report and hub.last_report is not None and not args.json:
            sys.stderr.write(text.runtime(hub.last_report.to_json()) + "\n")
        raise
    info = _describe(obj)
    data: dict[str, Any] = {"spec": args.spec, "entrypoint": args.entrypoint, "result": info}
    shown = text.lines([f"loaded {args.spec} {args.entrypoint}: {info['type']}" + (
        f" ({info['parameters']:,} parameters)" if "parameters" in info else "")])
    if args.report and args.source == "local":
        data["runtime"] = None
        shown += ("\nno runtime report: a local folder is your own code and runs without the "
                  "runtime guard (load it from a repo to have it held to the policy)")
    elif args.report and hub.last_report is not None:
        data["runtime"] = hub.last_report.to_json()
        shown += "\n" + text.runtime(data["runtime"])
    _emit(args, data, shown)
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    hub = _hub(args)
    names = _repo_code(hub, False, args.spec, None, lambda: hub.list(
        args.spec, force_reload=args.force_reload, trust_repo=_trust(args),
        verbose=not args.json))
    _emit(args, {"spec": args.spec, "entrypoints": names}, text.lines(names))
    return EXIT_OK


def _cmd_help(args: argparse.Namespace) -> int:
    import inspect

    from safehub.run import torchhub

    hub = _hub(args)  # as hub.help, with the signature line too (torch's help has none)
    line, doc = _repo_code(hub, False, args.spec, args.entrypoint, lambda: hub._run(
        args.spec, "github", args.entrypoint, _trust(args), args.force_reload, True,
        lambda path: torchhub.described(path, args.entrypoint)))
    _emit(args, {"spec": args.spec, "entrypoint": args.entrypoint, "signature": line,
                 "doc": doc}, text.lines([line, ""]) + "\n"  # the docstring: its lines kept
          + (printable(inspect.cleandoc(doc), lines=True) if doc else "(no docstring)"))
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from safehub import operations

    report = operations.check(_hub(args), args.spec, entrypoint=args.entrypoint)
    line = command_line(args)
    _emit(args, {**report.to_json(), "fix": fixes.render(report.fix, "cli", command_line=line)
                 if report.fix else None}, text.check(report, line))
    return {"load": EXIT_OK, "unknown": EXIT_UNDECIDED}.get(report.outcome, EXIT_REFUSED)


def _cmd_trust(args: argparse.Namespace) -> int:
    if args.list:
        return admin.trusted(_hub(args), args)
    if args.spec is None:
        raise _Usage("the following arguments are required: spec (or --list)", args.prog)
    prepared = _hub(args).trust(args.spec, force_reload=args.force_reload)
    r = prepared.resolved
    data = {"repo": r.spec.key, "ref": r.ref, "commit": r.commit, "digest": prepared.tree.digest}
    _emit(args, data, text.lines([f"trusted {r.spec.repo} at {r.commit} "
                                  f"({prepared.tree.digest})"]))
    return EXIT_OK


def _cmd_untrust(args: argparse.Namespace) -> int:
    removed = _hub(args).untrust(args.spec)
    _emit(args, {"removed": removed},
          text.lines([f"forgot {removed} consent record(s) for {args.spec}"]))
    return EXIT_OK


# -- lockfile and fleet --------------------------------------------------------------------

def _cmd_lock(args: argparse.Namespace) -> int:
    from safehub import operations

    hub = _hub(args)
    if args.check:
        if args.specs or args.upgrade or args.from_file or args.rewrite or args.entrypoint:
            raise _Usage("--check takes no specs, --from, --upgrade, --rewrite or --entrypoint",
                         "safehub lock")
        results = operations.lock_check(hub)
        files = operations.lock_check_weights(hub)
        ok = all(r.ok for r in results) and all(f.ok for f in files)
        line = command_line(args)
        _emit(args, {"lockfile": str(hub.lockfile_path), "ok": ok, "entries": [
            {**r.to_json(), "fix": fixes.render(r.fix, "cli", command_line=line)
             if r.fix else None} for r in results],
            "weights": [{**f.to_json(), "fix": fixes.render(f.fix, "cli", command_line=line)
                         if f.fix else None} for f in files]},
            "\n".join(t for t in (text.lock_statuses(results, line),
                                   text.pin_statuses(files, line)) if t))
        return EXIT_OK if ok else EXIT_REFUSED
    if args.entrypoint is not None:
        return _lock_entrypoint(args, hub)
    if args.kwargs is not None or args.trust:
        raise _Usage("--kwargs and --trust go with --entrypoint NAME", "safehub lock")
    changes = operations.lock(hub, specs_from(args), upgrade=args.upgrade,
                              rewrite=args.rewrite)
    _emit(args, {"lockfile": str(hub.lockfile_path), "changes": [c.to_json() for c in changes]},
          text.lock_changes(changes, hub.lockfile_path))
    return EXIT_OK


def _lock_entrypoint(args: argparse.Namespace, hub: Any) -> int:
    from safehub import operations

    specs = specs_from(args)
    if len(specs) != 1 or args.rewrite:
        raise _Usage("--entrypoint takes one SPEC (and no --rewrite)", "safehub lock")
    from safehub.run.autoinstall import launch

    changes, ran = operations.lock_entrypoint(hub, specs[0], args.entrypoint, args.kwargs,
                                              launch=launch, upgrade=args.upgrade,
                                              trust=args.trust)
    _emit(args, {"lockfile": str(hub.lockfile_path), "changes": [c.to_json() for c in changes],
                 "fetched": ran.to_json()},
          text.lock_changes(changes, hub.lockfile_path) + "\n" + text.entrypoint_pins(ran))
    return EXIT_OK


# -- signatures -------------------------------------------------------------------------------

def _cmd_verify(args: argparse.Namespace) -> int:
    from safehub import operations
    from safehub.verify.signatures import KeySigner, Signer, SignerSet

    if bool(args.identity) != bool(args.issuer):
        raise _Usage("--identity and --issuer go together, e.g. --identity "
                     "'https://github.com/org/*' --issuer "
                     "https://token.actions.githubusercontent.com", "safehub verify")
    _verify_target(args.target)
    sets = []
    if args.key or args.identity:
        signers = (Signer(args.issuer, args.identity),) if args.identity else ()
        keys = tuple(KeySigner(Path(k)) for k in args.key)
        sets.append(SignerSet("the command line", signers, keys,
                              Path(args.trust_config) if args.trust_config else None))
    report = operations.verify(_hub(args), args.target, sets)
    _emit(args, report.to_json(), text.verified(report, [str(Path(k).resolve()) for k in
                                                         args.key], args.issuer, args.identity))
    return EXIT_OK


def _verify_target(target: str) -> None:
    """A folder, or a spec: anything else is a usage error that says which it is not."""
    from safehub.spec import RepoSpec

    if os.path.isdir(target):
        return
    if os.path.lexists(target):
        raise _Usage(f"{target} is a file; verify takes a folder (with model.sig) or "
                     "owner/name[:ref]", "safehub verify")
    try:
        RepoSpec.parse(target)
    except SpecError as e:
        raise _Usage(f"{target} is no folder, nor a repo spec ({e.message})",
                     "safehub verify") from e


def _cmd_sign(args: argparse.Namespace) -> int:
    from safehub.verify.signatures import sign_directory

    out = sign_directory(Path(args.directory), Path(args.key),
                         out=Path(args.out) if args.out else None,
                         allow_symlinks=args.allow_symlinks)
    _emit(args, {"signature": str(out)}, text.lines([f"wrote {out}"]))
    return EXIT_OK


# -- the rest ----------------------------------------------------------------------------------

def _cmd_cache(args: argparse.Namespace) -> int:
    from safehub import operations

    hub = _hub(args)
    root = Path(hub.cache.root)
    if os.path.lexists(root) and not root.is_dir():
        raise CacheError(f"the cache {root} is a file, not a folder",
                         fix=fixes.say("point --cache-dir or SAFEHUB_CACHE_DIR at a folder"))
    if args.cache_command == "ls":
        rows = operations.cache_entries(hub)
        chosen = hub.settings.cache_source
        _emit(args, {"cache": str(hub.cache.root), "chosen_by": chosen,
                     "entries": [r.to_json() for r in rows]},
              text.cache_rows(rows, hub.cache.root, chosen))
        return EXIT_OK
    if args.cache_command == "verify":
        checks = operations.cache_verify(hub, args.commit)
        if args.commit and not checks:
            raise CacheError(f"no cached commit starts with {' or '.join(args.commit)}",
                             fix=fixes.run("safehub cache ls", "to list the cached commits"))
        ok = all(r.ok for r in checks)
        _emit(args, {"cache": str(hub.cache.root), "ok": ok,
                     "entries": [r.to_json() for r in checks]}, text.cache_checks(checks))
        return EXIT_OK if ok else EXIT_REFUSED
    if not args.commit and not args.yes and not admin.clear_all_agreed(hub, args):
        _emit(args, {"cleared": None, "removed": []}, "nothing removed")
        return EXIT_OK
    removed = operations.cache_clear(hub, args.commit)
    _emit(args, {"cleared": args.commit or "all", "removed": removed},
          text.lines([f"removed {len(removed)} cached tree{'s' if len(removed) != 1 else ''} "
                      f"from {hub.cache.root}", *(f"  {c}" for c in removed)]))
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from safehub.run.autoinstall import launch
    from safehub.run.confine.plan import confinement

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if not command:
        raise _Usage("safehub run needs a command, e.g. safehub run -- python train.py",
                     "safehub run")
    hub = _hub(args)
    ruleset = (confinement(hub, command, dry_run=args.dry_run)
               if args.confine or hub.settings.confine else None)
    if args.dry_run:
        _emit(args, {"command": command, "confine": ruleset and ruleset.to_json()},
              ruleset.text() if ruleset else text.lines([f"would run {command[0]} unconfined "
                                                         "(no --confine, SAFEHUB_CONFINE or "
                                                         "[safehub] confine = true)"]))
        return EXIT_OK
    from safehub.operations.job import serve

    code = launch(command, ruleset, broker=serve(hub) if ruleset is not None else None,
                  environment={"SAFEHUB_LOCKED": "1"} if hub.settings.locked else None)
    if ruleset is not None and code not in (0, 130):
        sys.stderr.write(text.confined_failure(code, ruleset))
    if args.json:  # after COMMAND's own output: how it ended
        _emit(args, {"command": command, "confine": ruleset and ruleset.to_json(),
                     "exit": code}, "")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    try:
        code = _main(list(sys.argv[1:] if argv is None else argv))
        text.flush()  # a failure to write shows here, not at exit
        return code
    except BrokenPipeError:  # `safehub ... | head`: the reader has gone, nothing to tell it
        text.detach_stdout()
        return EXIT_REFUSED
    except text.OutputError as e:
        text.detach_stdout()
        return _fail(False, "OutputError", f"cannot write the output ({e})",
                     "check where standard output goes (a full disk, a closed pipe)",
                     EXIT_REFUSED)


def _parse(argv: list[str]) -> argparse.Namespace:
    from safehub.cli.parser import build

    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        raise _Usage(f"{argv[0]} is not an option of safehub itself; options go after the "
                     f"command, e.g. safehub check owner/repo:v1.0 {argv[0]}")
    args, extra = build(_Parser, COMMANDS).parse_known_args(argv)
    if extra:  # named for the subcommand, whose --help shows what it takes
        raise _Usage(f"unrecognized arguments: {' '.join(extra)}", getattr(args, "prog", ""))
    return args


def _main(argv: list[str]) -> int:
    if not argv:  # a usage error (argparse's 2) whose fix is the three commands to start with
        return _fail(False, "usage", "no COMMAND given (usage: safehub COMMAND [options]; "
                     "`safehub --help` lists every command)", fixes.either(
                         fixes.run("safehub demo", "to see every check on a loopback hub, "
                                   "no network"),
                         fixes.run("safehub check owner/repo:v1.0", "to ask whether a repo "
                                   "would load, and why"),
                         fixes.run("safehub load owner/repo:v1.0 ENTRYPOINT", "to load one, "
                                   "as torch.hub.load does")), EXIT_USAGE)
    if argv == ["--version"]:
        text.out(text.versions())
        return EXIT_OK
    words = argv[:argv.index("--")] if "--" in argv else argv
    wants_json = "--json" in words
    try:
        args = _parse(argv)
    except SystemExit as e:  # --help and --version
        return e.code if isinstance(e.code, int) else EXIT_USAGE if e.code else EXIT_OK
    except _Usage as e:
        return _fail(wants_json, "usage", str(e), f"`{e.command or 'safehub'} --help` shows "
                     "how it is used", EXIT_USAGE)
    wants_json = bool(getattr(args, "json", False))
    try:
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except _Usage as e:
        return _fail(wants_json, "usage", str(e), f"`{e.command or 'safehub'} --help` shows "
                     "how it is used", EXIT_USAGE)
    except SpecError as e:
        return _fail(wants_json, type(e).__name__, e, e.fix, _spec_exit(args, e),
                     command_line(args))
    except SafehubError as e:
        return _fail(wants_json, type(e).__name__, e, e.fix, EXIT_REFUSED, command_line(args))
    except text.RepoCodeError as e:
        return _fail(wants_json, "RepoCodeError", e.message, e.fix, EXIT_REFUSED)
    except KeyboardInterrupt:
        return _fail(wants_json, "interrupted", "stopped by Ctrl-C", "nothing half-done "
                     "is kept (the cache installs atomically): run the command again", 130)
    except (BrokenPipeError, text.OutputError):
        raise
    except Exception as e:
        if os.environ.get("SAFEHUB_DEBUG"):
            raise
        return _fail(wants_json, type(e).__name__, f"failed: {type(e).__name__}: {text.said(e)}",
                     "this is a bug in safehub: run again with SAFEHUB_DEBUG=1 and report "
                     "the traceback", EXIT_REFUSED)


def _spec_exit(args: argparse.Namespace, error: SpecError) -> int:
    """A usage error's exit code; ``safehub run`` of a program that cannot be run exits
    as a shell does (127 not found, 126 not executable), so scripts read it the same."""
    cause = error.__cause__
    if getattr(args, "func", None) is _cmd_run and isinstance(cause, OSError):
        return 127 if isinstance(cause, FileNotFoundError) else 126
    return EXIT_USAGE


def _fail(wants_json: bool, kind: str, message: str | SafehubError,
          fix: fixes.Fix | str | None, code: int,
          line: fixes.CommandLine | None = None) -> int:
    """Say what failed (``message``, or a safehub error's message and details) and its fix
    (the ``--json`` object, exact: ``hint`` as text, ``fix`` as data, see
    :func:`safehub._internal.fixes.to_json`); the exit code.

    On stderr, what came from outside (a rule's reason, a path, a server's words, a
    repo's exception) is made printable field by field: :func:`safehub._internal.text.error`.
    """
    if isinstance(fix, str):
        fix = fixes.say(fix)
    exact, summary, details = ((message.message, message.summary, message.details)
                               if isinstance(message, SafehubError) else (message, message, ()))
    if wants_json:
        hint = fixes.render(fix, "cli", command_line=line) if fix is not None else None
        text.out_json({"error": kind, "message": exact, "hint": hint,
                       "fix": None if fix is None else fixes.to_json(fix, "cli", command_line=line),
                       "exit": code},
                      sort_keys=False)
    label = "usage error" if kind == "usage" else kind
    said = (f"safehub: {printable(label)}: "
            f"{_error_text(summary, fix, details, surface='cli', command_line=line)}\n")
    try:
        sys.stderr.write(said)
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # no stderr object, or the repo's code
        with contextlib.suppress(OSError):        # closed it: the descriptor, if there is one
            os.write(2, said.encode("utf-8", "backslashreplace"))
    return code


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "load": _cmd_load, "list": _cmd_list, "help": _cmd_help, "check": _cmd_check,
    "trust": _cmd_trust, "untrust": _cmd_untrust, "lock": _cmd_lock,
    "prefetch": fleet.cmd_prefetch, "verify": _cmd_verify, "sign": _cmd_sign,
    "keygen": admin.keygen, "env": selfcheck.env,
    "oci export": fleet.cmd_oci_export, "oci import": fleet.cmd_oci_import,
    "policy show": admin.policy_show, "policy validate": admin.policy_validate,
    "policy init": admin.policy_init, "cache": _cmd_cache, "run": _cmd_run,
    "demo": admin.demo, "docs": admin.docs, "completion": admin.completion,
    "install": admin.environment_hook,
    "uninstall": admin.environment_hook,
}
