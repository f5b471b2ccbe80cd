"""The ``safehub`` command: a thin layer that parses, calls the library and prints.

Exit codes: 0 ok, 1 refused or failed (a :class:`SafehubError`), 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from safehub.errors import SafehubError, SpecError

__all__ = ["main"]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2


def _hub(args: argparse.Namespace) -> Any:
    from safehub.hub import Hub

    overrides: dict[str, Any] = {}
    if getattr(args, "cache_dir", None):
        overrides["cache_dir"] = args.cache_dir
    if getattr(args, "lockfile", None):
        overrides["lockfile"] = args.lockfile
    return Hub(surface="cli", **overrides)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True))
    elif text:
        print(text)


# -- load ------------------------------------------------------------------------------

def _describe(obj: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    params = getattr(obj, "parameters", None)
    if callable(params):
        with contextlib.suppress(Exception):  # only a summary
            info["parameters"] = sum(int(p.numel()) for p in params())
    return info


def _cmd_load(args: argparse.Namespace) -> int:
    try:
        kwargs = json.loads(args.kwargs) if args.kwargs else {}
    except ValueError as e:
        raise SpecError(
            f"--kwargs is not JSON: {e}", hint='e.g. --kwargs \'{"pretrained": false}\''
        ) from e
    if not isinstance(kwargs, dict):
        raise SpecError("--kwargs must be a JSON object", hint='e.g. --kwargs \'{"n": 2}\'')
    hub = _hub(args)
    trust: Any = True if args.trust else "check"
    try:
        obj = hub.load(args.spec, args.entrypoint, source=args.source, trust_repo=trust,
                       force_reload=args.force_reload, verbose=not args.quiet, **kwargs)
    except SafehubError:
        if args.report and hub.last_report is not None and not args.json:
            print(_runtime_text(hub.last_report.to_json()), file=sys.stderr)
        raise
    info = _describe(obj)
    data: dict[str, Any] = {"spec": args.spec, "entrypoint": args.entrypoint, "result": info}
    text = (f"loaded {args.spec} {args.entrypoint}: {info['type']}"
            + (f" ({info['parameters']:,} parameters)" if "parameters" in info else ""))
    if args.report and hub.last_report is not None:
        data["runtime"] = hub.last_report.to_json()
        text += "\n" + _runtime_text(data["runtime"])
    _emit(args, data, text)
    return EXIT_OK


def _runtime_text(report: dict[str, Any]) -> str:
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


# -- cache -----------------------------------------------------------------------------

def _cmd_cache_ls(args: argparse.Namespace) -> int:
    from safehub import operations

    hub = _hub(args)
    rows = operations.cache_entries(hub)
    text = "\n".join(
        f"{r.commit[:12]}  {','.join(r.repos) or '-':30}  {r.files:6} files  "
        f"{r.digest[:23]}  {r.level}"
        for r in rows
    ) or f"(the cache at {hub.cache.root} is empty)"
    _emit(args, [r.to_json() for r in rows], text)
    return EXIT_OK


def _cmd_cache_verify(args: argparse.Namespace) -> int:
    from safehub import operations

    results = operations.cache_verify(_hub(args), args.commit)
    text = "\n".join(
        f"{'ok  ' if r.ok else 'FAIL'} {r.commit}" + ("" if r.ok else f": {r.error}")
        for r in results
    ) or "(nothing to verify)"
    _emit(args, [r.to_json() for r in results], text)
    return EXIT_OK if all(r.ok for r in results) else EXIT_REFUSED


def _cmd_cache_clear(args: argparse.Namespace) -> int:
    from safehub import operations

    hub = _hub(args)
    operations.cache_clear(hub, args.commit)
    _emit(args, {"cleared": args.commit or "all"}, f"cleared {hub.cache.root}")
    return EXIT_OK


# -- check, trust, untrust ----------------------------------------------------------------

def _cmd_check(args: argparse.Namespace) -> int:
    from safehub import operations

    report = operations.check(_hub(args), args.spec, entrypoint=args.entrypoint)
    lines = [f"{report.spec}: {report.outcome.upper()} ({report.why})"]
    if report.commit:
        lines.append(f"  commit   {report.commit}  ({report.proof})")
    if report.digest:
        lines.append(f"  digest   {report.digest} (cached, re-checked)")
    for reason in report.reasons:
        lines.append(f"  policy   {reason}")
    if report.fix:
        lines.append(f"  fix      {report.fix}")
    _emit(args, report.to_json(), "\n".join(lines))
    return EXIT_OK if report.outcome == "load" else EXIT_REFUSED


def _cmd_trust(args: argparse.Namespace) -> int:
    prepared = _hub(args).trust(args.spec, force_reload=args.force_reload)
    r = prepared.resolved
    data = {"repo": r.spec.key, "ref": r.ref, "commit": r.commit, "digest": prepared.tree.digest}
    _emit(args, data, f"trusted {r.spec.repo} at {r.commit} ({prepared.tree.digest})")
    return EXIT_OK


def _cmd_untrust(args: argparse.Namespace) -> int:
    removed = _hub(args).untrust(args.spec)
    _emit(args, {"removed": removed}, f"forgot {removed} consent record(s) for {args.spec}")
    return EXIT_OK


# -- lock and prefetch -----------------------------------------------------------------

def _specs_from(args: argparse.Namespace) -> list[str]:
    specs = list(args.specs)
    if getattr(args, "from_file", None):
        try:
            text = Path(args.from_file).read_text(encoding="utf-8")
        except OSError as e:
            raise SpecError(f"cannot read {args.from_file}: {e.strerror}",
                            hint="one spec per line; # starts a comment") from e
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                specs.append(line)
    return specs


def _cmd_lock(args: argparse.Namespace) -> int:
    from safehub import operations

    hub = _hub(args)
    if args.check:
        results = operations.lock_check(hub)
        text = "\n".join(
            f"ok    {r.spec} {r.locked[:12]}" if r.ok else
            f"MOVED {r.spec} locked {r.locked} now {r.now}" if r.now else
            f"FAIL  {r.spec}: {r.error}"
            for r in results
        )
        _emit(args, [r.to_json() for r in results], text or "(the lockfile is empty)")
        return EXIT_OK if all(r.ok for r in results) else EXIT_REFUSED
    changes = operations.lock(hub, _specs_from(args), upgrade=args.upgrade)
    text = "\n".join(
        f"{c.change:9} {c.spec} {c.commit}"
        + (f" (was {c.previous})" if c.previous and c.previous != c.commit else "")
        for c in changes
    )
    _emit(args, [c.to_json() for c in changes], text + f"\nwrote {hub.lockfile_path}")
    return EXIT_OK


def _cmd_prefetch(args: argparse.Namespace) -> int:
    from safehub import operations

    hub = _hub(args)
    mirror = Path(args.mirror) if args.mirror else None
    rows = operations.prefetch(hub, _specs_from(args), mirror=mirror, read_only=args.read_only)
    text = "\n".join(f"{r.spec} {r.commit[:12]} {r.digest[:23]} -> {r.mirror or r.path}"
                     for r in rows)
    _emit(args, [r.to_json() for r in rows], text)
    return EXIT_OK


# -- signatures ---------------------------------------------------------------------------

def _cmd_verify(args: argparse.Namespace) -> int:
    from safehub.signatures import KeySigner, Signer, SignerSet

    sets = []
    if args.key or args.identity:
        if args.identity and not args.issuer:
            raise SpecError("--identity needs --issuer",
                            hint="e.g. --issuer https://token.actions.githubusercontent.com")
        signers = (Signer(args.issuer, args.identity),) if args.identity else ()
        keys = tuple(KeySigner(Path(k)) for k in args.key)
        sets.append(SignerSet("the command line", signers, keys,
                              Path(args.trust_config) if args.trust_config else None))
    from safehub import operations

    report = operations.verify(_hub(args), args.target, sets)
    _emit(args, report.to_json(),
          f"valid: {report.target} signed by {report.signer} ({report.files} files)")
    return EXIT_OK


def _cmd_sign(args: argparse.Namespace) -> int:
    from safehub.signatures import sign_directory

    out = sign_directory(Path(args.directory), Path(args.key),
                         out=Path(args.out) if args.out else None)
    _emit(args, {"signature": str(out)}, f"wrote {out}")
    return EXIT_OK


# -- policy ----------------------------------------------------------------------------------

def _cmd_policy_show(args: argparse.Namespace) -> int:
    from safehub.policy import load_policy

    data = load_policy().describe()
    lines = [f"policy files (in order): {', '.join(data['files']) or '(none)'}"]
    for name, info in data["settings"].items():
        if info["from"] == "default" and name not in ("mode", "unknown_repos", "runtime"):
            continue
        final = ", final" if info["final"] else ""
        lines.append(f"{name} = {info['value']!r}  (from {info['from']}{final})")
    for rule in data["rules"]:
        extra = {k: v for k, v in rule.items()
                 if k not in ("kind", "from", "index", "admits", "repo")}
        note = "" if rule["admits"] in (None, True) else "  [after a final file: adds "\
            "requirements only]"
        lines.append(f"[[{rule['kind']}]] {rule['repo']}  {extra or ''}  "
                     f"({rule['from']} #{rule['index']}){note}")
    _emit(args, data, "\n".join(lines))
    return EXIT_OK


def _cmd_policy_validate(args: argparse.Namespace) -> int:
    from safehub.errors import PolicyError
    from safehub.policy import validate_file

    results = []
    for name in args.files:
        try:
            policy = validate_file(Path(name))
            results.append({"file": name, "ok": True, "rules": len(policy.rules)})
        except PolicyError as e:
            results.append({"file": name, "ok": False, "error": e.message})
    text = "\n".join(
        f"ok   {r['file']} ({r['rules']} rules)" if r["ok"] else f"FAIL {r['error']}"
        for r in results
    )
    _emit(args, results, text)
    return EXIT_OK if all(r["ok"] for r in results) else EXIT_REFUSED


# -- run ------------------------------------------------------------------------------------

def _cmd_run(args: argparse.Namespace) -> int:
    import os
    import subprocess

    from safehub._autoinstall import SITE_DIR

    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if not command:
        raise SpecError("safehub run needs a command", hint="safehub run -- python train.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SITE_DIR), env.get("PYTHONPATH", "")) if p
    )
    try:
        return subprocess.call(command, env=env)
    except FileNotFoundError as e:
        raise SpecError(f"cannot run {command[0]!r}: {e.strerror}",
                        hint="check the command") from e


def _cmd_demo(args: argparse.Namespace) -> int:
    from safehub._demo import run_demo

    return EXIT_OK if run_demo() else EXIT_REFUSED


# -- parser ----------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="safehub",
        description="Load torch.hub repos only after policy, pin, signature and trust checks.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts and CI")
    common.add_argument("--cache-dir", help="cache root (default: SAFEHUB_CACHE_DIR or the "
                        "user cache dir)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    load = sub.add_parser("load", parents=[common], help="load an entrypoint (like torch.hub.load)")
    load.add_argument("spec", help="owner/name[:ref], or a folder with --source local")
    load.add_argument("entrypoint", help="callable in hubconf.py")
    load.add_argument("--source", default="github", choices=["github", "local"])
    load.add_argument("--kwargs", help="JSON object of keyword arguments for the entrypoint")
    load.add_argument("--trust", action="store_true", help="trust this content (trust_repo=True)")
    load.add_argument("--force-reload", action="store_true", help="fetch and verify again")
    load.add_argument("-q", "--quiet", action="store_true", help="no cache messages")
    load.add_argument("--report", action="store_true",
                      help="print what the repo's code did (hosts, programs, writes)")
    load.set_defaults(func=_cmd_load)

    check = sub.add_parser("check", parents=[common],
                           help="dry run: would this load, and why (exit 0 yes, 1 no)")
    check.add_argument("spec", help="owner/name[:ref]")
    check.add_argument("--entrypoint", help="the entrypoint that would be loaded")
    check.set_defaults(func=_cmd_check)

    trust = sub.add_parser("trust", parents=[common],
                           help="fetch, verify and trust this exact content (no code runs)")
    trust.add_argument("spec", help="owner/name[:ref]")
    trust.add_argument("--force-reload", action="store_true", help="fetch and verify again")
    trust.set_defaults(func=_cmd_trust)

    untrust = sub.add_parser("untrust", parents=[common], help="forget consent for a repo")
    untrust.add_argument("spec", help="owner/name (all commits) or owner/name:ref (one)")
    untrust.set_defaults(func=_cmd_untrust)

    locking = argparse.ArgumentParser(add_help=False)
    locking.add_argument("--lockfile", help="lockfile path (default: SAFEHUB_LOCKFILE, the "
                         "policy's lockfile, or ./safehub.lock)")
    locking.add_argument("--from", dest="from_file", metavar="FILE",
                         help="read specs from FILE, one per line (# comments)")

    lock = sub.add_parser("lock", parents=[common, locking],
                          help="pin specs to commits and content digests in safehub.lock")
    lock.add_argument("specs", nargs="*", metavar="SPEC")
    lock.add_argument("--upgrade", action="store_true",
                      help="re-resolve these specs (all, if none given) and move their pins")
    lock.add_argument("--check", action="store_true",
                      help="ask GitHub whether every locked ref still names its commit")
    lock.set_defaults(func=_cmd_lock)

    for name in ("prefetch", "fetch"):
        pre = sub.add_parser(name, parents=[common, locking],
                             help="fill a cache or a mirror folder for offline nodes"
                             if name == "prefetch" else "same as prefetch")
        pre.add_argument("specs", nargs="*", metavar="SPEC",
                         help="specs to fetch (default: every lockfile entry)")
        pre.add_argument("--mirror", metavar="DIR",
                         help="also write archives laid out like GitHub's archive endpoint")
        pre.add_argument("--read-only", action="store_true",
                         help="seal the cache afterwards so many nodes can share it")
        pre.set_defaults(func=_cmd_prefetch)

    verify = sub.add_parser("verify", parents=[common],
                            help="verify the signature of a folder or a repo (exit 0 valid)")
    verify.add_argument("target", help="a folder with model.sig, or owner/name[:ref]")
    verify.add_argument("--key", action="append", default=[], help="public key file (PEM)")
    verify.add_argument("--identity", help="keyless signer identity (exact or glob)")
    verify.add_argument("--issuer", help="OIDC issuer of the keyless signer")
    verify.add_argument("--trust-config", help="Sigstore ClientTrustConfig JSON (private "
                        "Sigstore); default: the production root shipped with sigstore")
    verify.set_defaults(func=_cmd_verify)

    sign = sub.add_parser("sign", parents=[common],
                          help="sign a folder with an EC key (OpenSSF Model Signing)")
    sign.add_argument("directory")
    sign.add_argument("--key", required=True, help="PEM EC private key")
    sign.add_argument("--out", help="signature path (default: DIRECTORY/model.sig)")
    sign.set_defaults(func=_cmd_sign)

    policy = sub.add_parser("policy", help="show or validate policy files")
    psub = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    show = psub.add_parser("show", parents=[common], help="the merged policy, rule by rule")
    show.set_defaults(func=_cmd_policy_show)
    validate = psub.add_parser("validate", parents=[common], help="check policy files")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(func=_cmd_policy_validate)

    run = sub.add_parser("run", help="run a program with torch.hub routed through safehub")
    run.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    run.set_defaults(func=_cmd_run)

    demo = sub.add_parser("demo", help="run the pipeline on a shipped example (no network)")
    demo.set_defaults(func=_cmd_demo)

    cache = sub.add_parser("cache", help="inspect or clear the cache")
    csub = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    ls = csub.add_parser("ls", parents=[common], help="list cached commits")
    ls.set_defaults(func=_cmd_cache_ls)
    verify = csub.add_parser("verify", parents=[common], help="re-hash cached trees fully")
    verify.add_argument("commit", nargs="*", help="commit sha prefixes (default: all)")
    verify.set_defaults(func=_cmd_cache_verify)
    clear = csub.add_parser("clear", parents=[common], help="remove cached trees")
    clear.add_argument("commit", nargs="*", help="commit sha prefixes (default: everything)")
    clear.set_defaults(func=_cmd_cache_clear)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except SpecError as e:
        print(f"safehub: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SafehubError as e:
        if getattr(args, "json", False):
            print(json.dumps({"error": type(e).__name__, "message": e.message, "hint": e.hint},
                             indent=2))
        print(f"safehub: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_REFUSED
