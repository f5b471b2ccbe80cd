"""The ``safehub`` verbs that look after the machine rather than load: ``policy
show|validate|init``, ``install|uninstall --environment``, ``docs`` and ``demo``."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.text import printable
from safehub.cli import text
from safehub.cli.common import DATA, EXIT_OK, EXIT_REFUSED, Usage, emit, hub
from safehub.errors import CacheError, PolicyError, SafehubError
from safehub.run import environment

__all__ = ["FLAVOURS", "can_ask", "clear_all_agreed", "completion", "confirm", "demo", "docs",
           "environment_hook", "policy_init", "policy_show", "policy_validate", "trusted"]

#: ``policy init --for F``: (starter file in policies/, the role of the file it writes)
FLAVOURS = {"admin": ("strict-org.toml", "site"), "team": ("team-allowlist.toml", "user"),
            "ci": ("ci.toml", "project")}


def policy_show(args: argparse.Namespace) -> int:
    from safehub.policy import load_policy, searched
    from safehub.policy.files import describe

    places = searched()
    try:
        data = describe(load_policy())
    except PolicyError as e:  # one line and the fix (validate lists every fault)
        first, *faults = e.message.split("\n")
        more = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
        raise PolicyError(first + (f" {faults[0].strip()}{more}" if faults else ""),
                          fix=e.fix) from e
    data["searched"] = [{"path": str(c.path), "origin": c.origin, "exists": c.exists}
                        for c in places]
    settings = hub(args).settings
    data["cache"] = {"path": str(settings.cache_dir), "chosen_by": settings.cache_source}
    data["ignored"] = [i.to_json() for i in settings.ignored]  # what a final file overrides
    data["environment_hook"] = environment.hook().to_json()
    emit(args, data, text.policy(data, places))
    return EXIT_OK


def environment_hook(args: argparse.Namespace) -> int:
    """``safehub install --environment`` and ``safehub uninstall --environment``."""
    if args.command == "install":
        found = environment.install()
        emit(args, found.to_json(), text.lines([
            f"wrote {found.path}: every Python process of this environment now routes "
            "torch.hub through safehub (`safehub uninstall --environment` removes it)"]))
        return EXIT_OK
    removed = environment.uninstall()
    found = environment.hook()
    emit(args, {**found.to_json(), "removed": removed},
         text.lines([f"removed {found.path}" if removed else f"no environment hook at "
                     f"{found.path}"]))
    return EXIT_OK


def policy_validate(args: argparse.Namespace) -> int:
    from safehub.policy import validate_file
    from safehub.policy.keys import KEYS

    results, shown = [], []
    for name in args.files:
        role, in_force = _role(Path(name))
        role = args.role or role
        result: dict[str, Any] = {"file": name, "role": role, "in_force": in_force}
        try:
            policy = validate_file(Path(name), origin=role)
            # A project's or SAFEHUB_POLICY file only narrows [confine]: say what it cannot
            # grant on its own (valid all the same: a site or user file may grant it).
            notes = [note for key in KEYS["confine"] for note in policy.confine(key).notes]
            result.update(ok=True, rules=len(policy.rules), faults=[], fix=None, notes=notes)
            fix = None
        except PolicyError as e:
            faults = list(e.faults) or [e.message]
            fix = _validate_fix(name, in_force, e, role)
            result.update(ok=False, rules=None, faults=faults, fix=fixes.render(fix, 'cli'),
                          notes=[])
        results.append(result)
        shown.append(_validated(result, fix))
    ok = all(r["ok"] for r in results)
    emit(args, {"ok": ok, "files": results}, "\n".join(shown))
    return EXIT_OK if ok else EXIT_REFUSED


def _toml_position(error: PolicyError) -> str:
    """``line 2, column 8`` where TOML could not be parsed, as the parser said it; empty
    for any other error."""
    import re

    said = str(error.__cause__) if error.__cause__ is not None else ""
    found = re.search(r"\(at line (\d+), column (\d+)\)", said) if "TOML" in str(
        type(error.__cause__).__name__) else None
    return f"line {found.group(1)}, column {found.group(2)}" if found else ""


def _validated(r: dict[str, Any], fix: fixes.Fix | None) -> str:
    where = ("in force" if r["in_force"] else
             "not in force: safehub does not read it where it is")
    if r["ok"]:
        return text.lines([f"ok   {r['file']} ({r['rules']} rules; {r['role']} file, {where})",
                           *(f"    note: {note}" for note in r["notes"])])
    rows = [f"FAIL {r['file']} ({r['role']} file, {where}): "
            f"{len(r['faults'])} fault{'s' if len(r['faults']) != 1 else ''}"]
    rows += [f"    {fault}" for fault in r["faults"]]
    if fix is not None:  # each field of the fix one line, then the fix's own layout
        rows += f"  fix: {fixes.render(fix, 'cli', printable)}".split("\n")
    return text.lines(rows)


def _validate_fix(name: str, in_force: bool, error: PolicyError, role: str) -> fixes.Fix:
    if not error.faults and (at := _toml_position(error)):  # the place, not this command
        return fixes.say(f"edit {name} at {at}: the TOML there does not parse (tables are "
                         "[safehub] or [[allow]] lines, values key = \"text\")"
                         + ("; until it parses no repo loads on this machine (fail closed)"
                            if in_force else ""))
    if not error.faults:  # it could not be read at all: the reader's own fix
        return error.fix or fixes.say("fix the file")
    fix = "edit the file: each fault above names the key and what it takes"
    if in_force:
        return fixes.say(fix + "; until it is valid no repo loads on this machine (fail "
                         "closed)")
    return fixes.say(fix + f"; it is not in force ({_how_to_use(name, role)})")


def _how_to_use(name: str, role: str) -> str:
    """How a file validated as ``role`` comes into force: where that role's file is read
    (SAFEHUB_POLICY adds a file only as an extra one, which narrows and grants nothing)."""
    from safehub.policy import searched

    if role == "project":
        return "to use it, name it safehub.toml in the project's folder"
    place = next((p.path for p in searched() if p.origin == role), None)
    if role in ("site", "user") and place is not None:
        return f"to use it as the {role} file, copy it to {shlex.quote(str(place))}"
    return ("to use it, add it to SAFEHUB_POLICY, e.g. export "
            f"SAFEHUB_POLICY={shlex.quote(os.path.abspath(name))}")


def _role(path: Path) -> tuple[str, bool]:
    """(the role a policy file has where safehub looks for it, else by its name; whether
    safehub reads it now)."""
    from safehub.policy import searched

    for place in searched():
        with contextlib.suppress(OSError):
            if place.exists and place.path.samefile(path):
                return place.origin, True
    return ("project" if path.name == "safehub.toml" else "extra"), False


def init_target(flavour: str) -> Path:
    """Where ``policy init --for FLAVOUR`` writes without ``--path``."""
    from safehub.policy import searched

    origin = FLAVOURS[flavour][1]
    return next(c.path for c in searched() if c.origin == origin)


def init_description() -> str:
    """The paths ``policy init`` may write, as they are on this machine."""
    return ("Write a commented starter policy, never over an existing file:\n"
            f"  --for admin  {init_target('admin')}: the machine-wide (site) policy, a strict "
            "organisation's; every load by every user obeys it, so it is written only with "
            "--yes or after you confirm on a terminal (else it is printed, with the command "
            "that installs it)\n"
            f"  --for team   {init_target('team')}: your user policy (an allowlist)\n"
            f"  --for ci     {init_target('ci')}: the project's policy for a CI job\n"
            "  --path FILE  anywhere else instead")


def _machine_wide(target: Path) -> bool:
    from safehub.policy import searched

    real = os.path.realpath(target)
    return any(c.origin == "site" and os.path.realpath(c.path) == real for c in searched())


def _refuses(body: str, target: Path) -> str:
    """What a starter file refuses, in words (read from the file itself)."""
    from safehub.policy.schema import parse_text

    spec = parse_text(body, str(target), origin="site")
    said = []
    if spec.safehub.unknown_repos == "deny":
        said.append("every repo no [[allow]] rule names (unknown_repos = \"deny\")")
    for rule in spec.allow:
        needs = [f"pin = {rule.pin!r}"] if rule.pin != "none" else []
        needs += [f"signature = {rule.signature!r}"] if rule.signature == "required" else []
        if needs:
            said.append(f"{rule.repo} without {' and '.join(needs)}")
    said += [f"{rule.repo} (a [[deny]] rule)" for rule in spec.deny]
    final = ("; final = true: no user, project or SAFEHUB_POLICY file can loosen it"
             if spec.safehub.final else "")
    return "; ".join(said) + final


def can_ask() -> bool:
    """Whether a person can be asked: a terminal, and not CI, ``SAFEHUB_NONINTERACTIVE=1``
    or a policy's ``noninteractive = true`` (an unreadable policy or variable: never)."""
    from safehub.config import noninteractive
    from safehub.policy import load_policy

    try:
        return not noninteractive(load_policy(), os.environ)
    except SafehubError:
        return False


def confirm(said: Sequence[str], question: str) -> bool:
    """Say ``said`` and ask ``question`` on the terminal: whether the answer is yes (call
    only where :func:`can_ask`)."""
    sys.stderr.write(text.lines([*said, f"{question} [y/N] "]))
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in ("y", "yes")


def _confirmed(target: Path, refuses: str) -> bool:
    """Ask on a terminal (never in CI or without one) whether to write ``target``."""
    return can_ask() and confirm([
        f"safehub: this writes {target}, the machine-wide policy: every load by every user "
        f"of this machine obeys it from then on. It refuses {refuses}."], f"Write {target}?")


def policy_init(args: argparse.Namespace) -> int:
    name, _ = FLAVOURS[args.flavour]
    target = Path(args.path) if args.path else init_target(args.flavour)
    if os.path.lexists(target):
        raise PolicyError(f"{target} exists already; safehub policy init never overwrites",
                          fix=fixes.say("edit it, or write elsewhere with --path (then point "
                                        "SAFEHUB_POLICY at it)"))
    body = (DATA / "policies" / name).read_text(encoding="utf-8")
    if _machine_wide(target) and not args.yes:
        refuses = _refuses(body, target)
        if not _confirmed(target, refuses):
            install = (f"safehub policy init --for {args.flavour} --yes"
                       + (f" --path {shlex.quote(str(target))}" if args.path else ""))
            emit(args, {"written": None, "path": str(target), "flavour": args.flavour,
                        "machine_wide": True, "refuses": refuses, "policy": body,
                        "install": install},
                 f"{body}\n" + text.lines([
                     f"# Not written: {target} is the machine-wide policy (every load by "
                     f"every user obeys it; it refuses {refuses}).",
                     f"# Edit the lines above to your organisation, then install them with "
                     f"`{install}` (as an admin), or write them elsewhere with --path to try "
                     "them first."]))
            return EXIT_OK
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "x", encoding="utf-8") as f:  # never over a file made meanwhile
            f.write(body)
    except OSError as e:
        raise PolicyError(f"cannot write {target} ({e.strerror or e})", fix=fixes.say((
            "the site policy needs an admin (sudo), " if args.flavour == "admin" else "")
            + "or write elsewhere with --path")) from e
    emit(args, {"written": str(target), "path": str(target), "flavour": args.flavour,
                "machine_wide": _machine_wide(target)},
         text.lines([f"wrote {target} (from policies/{name}); edit it (`safehub check SPEC` "
                     f"says what a repo needs), then check it with `safehub policy validate "
                     f"{target}`"]))
    return EXIT_OK


def docs(args: argparse.Namespace) -> int:
    from safehub.cli import reference

    pages = sorted(p.stem for p in (DATA / "docs").glob("*.md"))
    def commands() -> str:  # every command of the parser this command line was read by
        return reference.commands(args.root_parser)

    generated: dict[str, Callable[[], str]] = {"env": reference.environment, "cli": commands}
    if args.topic is None:
        emit(args, {"pages": pages + sorted(generated)}, "safehub docs TOPIC prints one of: "
             + ", ".join(pages) + "; and, made from safehub itself: env (environment "
             "variables), cli (every command and option)")
        return EXIT_OK
    if args.topic in generated:
        page = generated[args.topic]()
    elif args.topic in pages:
        page = (DATA / "docs" / f"{args.topic}.md").read_text(encoding="utf-8")
    else:
        raise Usage(f"no page {args.topic!r}; pages: {', '.join(pages + sorted(generated))}",
                    "safehub docs")
    emit(args, {"topic": args.topic, "text": page}, page)
    return EXIT_OK


def demo(args: argparse.Namespace) -> int:
    import shutil

    if args.port is not None and not args.serve:
        raise Usage("--port goes with --serve: safehub demo --serve --port 8443",
                    "safehub demo")
    if shutil.which("git") is None:
        raise SafehubError("safehub demo builds its repos with git, which is not on PATH",
                           fix=fixes.say("install git (for example: apt-get install git), then run "
                                         "it again"))
    if args.serve:
        import errno

        from safehub.demo.serve import serve

        try:
            serve(args.port or 0)
        except OSError as e:
            if e.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            raise Usage(f"cannot serve on port {args.port}: {e.strerror}; pick another with "
                        "--port N, or leave --port out for any free port",
                        "safehub demo") from e
        return EXIT_OK
    from safehub.demo import run_demo

    return EXIT_OK if run_demo() else EXIT_REFUSED


def clear_all_agreed(hub: Any, args: argparse.Namespace) -> bool:
    """``cache clear`` with no commit removes every cached tree: asked on a terminal (as
    ``hf cache delete``); without one (a CI job, a script) refused unless ``--yes``, so a
    job neither hangs on a question nor empties a shared cache by accident. An empty cache
    needs no answer."""
    from safehub import operations

    rows = operations.cache_entries(hub)
    if not rows:
        return True
    what = (f"{len(rows)} cached tree{'s' if len(rows) != 1 else ''} "
            f"({text.size(sum(r.bytes for r in rows))}) in {hub.cache.root}: "
            + ", ".join(f"{r.repo or '(unknown)'}@{r.commit[:12]}" for r in rows[:5])
            + (f" and {len(rows) - 5} more" if len(rows) > 5 else ""))
    if can_ask() and not args.json:
        return confirm([f"safehub: this removes {what}; loads fetch and verify them "
                              "again"], "Remove them all?")
    raise CacheError(f"cache clear with no commit removes every cached tree, {what}; "
                     "nobody can be asked here (no terminal, or CI)",
                     fix=fixes.either(fixes.run("safehub cache clear --yes", "to remove them "
                                                "all"),
                                      fixes.say("name the commits to remove instead (`safehub "
                                                "cache ls` lists them)")))


def trusted(hub: Any, args: argparse.Namespace) -> int:
    """``safehub trust --list``: the consents recorded on this machine (those of SPEC's
    repo, if given), repo by repo; nothing is fetched."""
    from safehub.spec import RepoSpec

    consents = hub.consents
    if args.spec is not None:
        keys = [RepoSpec.parse(args.spec).key]
    else:  # one file per repo: <owner>/<name>.json, named by the repo's key
        keys = sorted(f"{p.parent.name}/{p.stem}" for p in consents.root.glob("*/*.json"))
    rows = [c for key in keys for c in consents.list(key)]
    emit(args, {"consents": [{"repo": c.repo, "commit": c.commit, "digest": c.digest,
                              "how": c.how, "at": c.at} for c in rows]},
         text.lines([f"{c.repo}  {c.commit}  {c.digest[:23]}  {c.at}  ({c.how})" for c in rows]
                    + [f"{len(rows)} trusted commit{'s' if len(rows) != 1 else ''} in "
                       f"{consents.root} (`safehub untrust SPEC` forgets one)"]))
    return EXIT_OK


def completion(args: argparse.Namespace) -> int:
    """``safehub completion bash``: the completion script, made from the parser."""
    from safehub.cli.reference import completion as script

    text.out(script(args.shell, args.root_parser).rstrip("\n"))
    return EXIT_OK


def keygen(args: argparse.Namespace) -> int:
    """``safehub keygen PRIVATE``: an EC P-256 key pair for ``safehub sign``, neither file
    overwritten; the private key is created readable by its owner only."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = Path(args.private).expanduser()
    public = (Path(args.public).expanduser() if args.public
              else private.with_suffix(".pub") if private.suffix in (".pem", ".key")
              else private.with_name(private.name + ".pub"))
    if public == private:
        raise Usage(f"the public key would be written over the private key {private}",
                    "safehub keygen")
    for path in (private, public):
        if os.path.lexists(path):
            raise Usage(f"{path} exists; safehub keygen never overwrites a key",
                        "safehub keygen")
    key = ec.generate_private_key(ec.SECP256R1())
    secret = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    shared = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    for path, body, mode in ((private, secret, 0o600), (public, shared, 0o644)):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
    emit(args, {"private_key": str(private), "public_key": str(public)},
         text.lines([f"wrote {private} (private: keep it secret, out of the repo)",
                     f"wrote {public} (public: publish it; consumers list it in "
                     "an [[allow]] rule's keys)"]))
    return EXIT_OK
