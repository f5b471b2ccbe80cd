"""The ``safehub`` command's arguments: every subcommand, with only the options that apply."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping

from safehub._internal.fixes import CommandLine

__all__ = ["JSON_FIELDS", "build", "command_line"]

Command = Callable[[argparse.Namespace], int]
_FORMAT = argparse.RawDescriptionHelpFormatter


# -- argument types: what the command line itself can get wrong is a usage error (exit 2) --

def _path(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("needs a path, not an empty string")
    return value


def _file(value: str) -> str:
    """An existing file (its content is checked where it is read)."""
    _path(value)
    if os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value} is a folder, not a file")
    if not os.path.isfile(value):
        raise argparse.ArgumentTypeError(f"{value}: no such file"
                                         + (" (a broken or looping link)"
                                            if os.path.islink(value) else ""))
    return value


def _folder(value: str) -> str:
    """An existing folder."""
    _path(value)
    if not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value} is a file, not a folder"
                                         if os.path.lexists(value) else
                                         f"{value}: no such folder")
    return value


def _makeable(value: str) -> None:
    """The nearest existing folder above ``value`` is a folder (so ``value`` can be made)."""
    parent = os.path.dirname(os.path.normpath(value))
    while parent and not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if parent and not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"{parent} is a file, so {value} cannot be made")


def _file_to_be(value: str) -> str:
    """A file that may not exist yet: not a folder, in a folder that exists or can be made."""
    _path(value)
    if os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value} is a folder; name a file (in it)")
    _makeable(value)
    return value


def _folder_to_be(value: str) -> str:
    """A folder that may not exist yet, but is not a file."""
    _path(value)
    if os.path.lexists(os.path.normpath(value)) and not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value} is a file, not a folder")
    _makeable(value)
    return value


def _commit_prefix(value: str) -> str:
    if not 4 <= len(value) <= 40 or value.strip("0123456789abcdef"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a commit sha or a prefix of one (4 to 40 lowercase hex digits; "
            "`safehub cache ls` lists the cached commits)")
    return value


def _entrypoint(value: str) -> str:
    if not value.isidentifier():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an entrypoint name: entrypoints are Python function names in "
            "the repo's hubconf.py, such as resnet18 (`safehub list SPEC` lists them)")
    return value


#: The fields of each command's ``--json`` object, as its ``--help`` names them (an error is
#: one object too: error, message, hint, fix, exit). A field in brackets is there only with the
#: option it names; after ``|``: the object with that option instead.
ENV_HOOK = "safehub-torchhub.pth"  # safehub.run.environment.FILE_NAME (a test holds them equal)

JSON_FIELDS: dict[str, str] = {
    "load": "spec, entrypoint, result, [--report] runtime",
    "list": "spec, entrypoints",
    "help": "spec, entrypoint, signature, doc",
    "check": "spec, repo, entrypoint, policy_files, outcome, why, fix, error, ref, commit, "
             "proof, policy, reasons, requirements, violations, cached, digest, "
             "entrypoint_found, entrypoint_note, signature",
    "trust": "repo, ref, commit, digest | --list: consents",
    "untrust": "removed",
    "lock": "lockfile, changes, [--entrypoint] fetched | --check: lockfile, ok, entries, "
            "weights",
    "prefetch": "cache, mirror, entries, [--oci] published",
    "oci export": "folder, entries",
    "oci import": "target, entries",
    "verify": "target, signer, files, uncovered, commit, digest, valid",
    "sign": "signature",
    "keygen": "private_key, public_key",
    "env": "versions, policy_files, lockfile, cache_dir, data_dir, torch_hub_dir, "
           "environment_hook, kernel, settings",
    "policy show": "files, mode, warn_files, unknown_repos, settings, local_dirs, confine, "
                   "oci, rules, searched, cache, ignored, environment_hook",
    "policy validate": "ok, files",
    "policy init": "written, path, flavour, machine_wide, [not written] refuses, "
                   "[not written] policy, [not written] install",
    "cache ls": "cache, chosen_by, entries",
    "cache verify": "cache, ok, entries",
    "cache clear": "cleared, removed",
    "run": "command, confine, [after COMMAND ends (not --dry-run)] exit",
    "install": "path, state",
    "uninstall": "path, state, removed",
    "docs": "pages | TOPIC: topic, text",
}


def _json_help(key: str) -> str:
    return ("print one JSON object for scripts and CI, with: " + JSON_FIELDS[key]
            + " (an error: error, message, hint, fix, exit)")


def _options(p: argparse.ArgumentParser, *names: str, key: str = "") -> None:
    """Add the shared options ``names`` (only where they apply)."""
    if "json" in names:
        p.add_argument("--json", action="store_true", help=_json_help(key))
    if "cache" in names:
        p.add_argument("--cache-dir", metavar="DIR", type=_folder_to_be,
                       help="cache root (default: SAFEHUB_CACHE_DIR, the policy's cache_dir, "
                       "safehub/ beneath torch's hub dir if you moved it, or the user "
                       "cache dir)")
    if "lockfile" in names:
        p.add_argument("--lockfile", metavar="FILE", type=_file_to_be,
                       help="lockfile (default: SAFEHUB_LOCKFILE, the policy's lockfile, or "
                       "./safehub.lock if present)")
    if "trust" in names:
        p.add_argument("--trust", action="store_true",
                       help="trust this exact content if the policy lets users decide "
                       "(trust_repo=True)")
    if "locked" in names:
        p.add_argument("--locked", action="store_true",
                       help="refuse whatever the lockfile does not pin: the code, nested hub "
                       "repos and every file their code fetches through a held path "
                       "(SAFEHUB_LOCKED=1)")
    if "reload" in names:
        p.add_argument("--force-reload", action="store_true",
                       help="resolve, fetch and verify again instead of using the cache")


def build(parser_class: type[argparse.ArgumentParser],
          commands: Mapping[str, Command]) -> argparse.ArgumentParser:
    from safehub import __version__

    p = parser_class(
        prog="safehub", formatter_class=_FORMAT,
        description="Load torch.hub repos only after policy, pin, signature and trust "
        "checks.\nExit codes: 0 ok, 1 refused or failed, 2 usage error.",
        epilog="A first pinned, policy-checked load (when a step refuses, its fix line says what "
        "to do):\n"
        "  safehub policy init --for team   # a starter policy; in a CI job: --for ci\n"
        "  safehub check owner/repo:v1.0    # would it load, and why\n"
        "  safehub lock owner/repo:v1.0     # pin its commit and content in ./safehub.lock\n"
        "  safehub list owner/repo:v1.0     # its entrypoints (imports its hubconf.py)\n"
        "  safehub load owner/repo:v1.0 ENTRYPOINT\n"
        "To try every command first on a loopback hub (no network): safehub demo --serve\n"
        "More: safehub docs TOPIC; safehub docs env (every environment variable), safehub "
        "docs cli (every command and option); safehub COMMAND --help")
    p.add_argument("--version", action="version", version=f"safehub {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=parser_class)
    add = _Adder(commands, sub)
    _loading(add)
    _pinning(add)
    _signing(add)
    _admin(add, sub, parser_class)
    p.set_defaults(command_options=add.takes,  # for the fixes: see command_line()
                   root_parser=p)  # for `safehub docs cli` (cli.reference.commands)
    return p


SPEC_HELP = "owner/name[:ref]; ref is a branch, a tag or a commit sha (4-40 hex digits)"


class _Adder:
    """Adds a subcommand with its shared options and its function."""

    def __init__(self, commands: Mapping[str, Command],
                 sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        self.commands, self.sub = commands, sub
        self.takes: dict[str, frozenset[str]] = {}
        """Command words (``cache clear``) to the shared path options the command takes."""

    def __call__(self, name: str, help_text: str, description: str = "", *options: str,
                 parent: argparse._SubParsersAction[argparse.ArgumentParser] | None = None,
                 key: str = "") -> argparse.ArgumentParser:
        cmd = (parent or self.sub).add_parser(name, help=help_text,
                                              description=description or help_text,
                                              formatter_class=_FORMAT)
        _options(cmd, *options, key=(key or name) if key != "cache" else f"cache {name}")
        self.takes[cmd.prog.split(" ", 1)[1]] = frozenset(
            flag for option, flag in (("cache", "--cache-dir"), ("lockfile", "--lockfile"))
            if option in options)
        cmd.set_defaults(func=self.commands[key or name], prog=cmd.prog)
        return cmd


def _loading(add: _Adder) -> None:
    spec_help = SPEC_HELP

    load = add("load", "load an entrypoint, like torch.hub.load",
               "Check, fetch and verify SPEC, then run ENTRYPOINT through torch's loader.\n"
               "Example: safehub load pytorch/vision:v0.19.0 resnet18 --kwargs "
               "'{\"weights\": null}'\nPositional arguments, as a JSON list: "
               "safehub load demo/tiny-hub:v1.0 tiny_mlp --args '[16]'", "json", "cache",
               "lockfile", "trust", "reload", "locked")
    load.add_argument("spec", help=spec_help + "; a folder with --source local")
    load.add_argument("entrypoint", type=_entrypoint,
                      help="a callable in the repo's hubconf.py")
    load.add_argument("--source", default="github", choices=["github", "local"],
                      help="github (default) or local (a folder on this machine: nothing "
                      "fetched or hashed, as torch.hub, but the policy's local_dirs apply; "
                      "its code runs without the runtime guard)")
    load.add_argument("--args", dest="positional", metavar="JSON",
                      help="positional arguments for the entrypoint, as a JSON list, e.g. "
                      "--args '[8]'")
    load.add_argument("--kwargs", metavar="JSON",
                      help="keyword arguments for the entrypoint, as a JSON object")
    load.add_argument("-q", "--quiet", action="store_true", help="no download messages")
    load.add_argument("--report", action="store_true",
                      help="print what the repo's code did (hosts, programs, writes)")

    lst = add("list", "list a repo's entrypoints, like torch.hub.list",
              "Check, fetch and verify SPEC, then import its hubconf.py (same rules as a load) "
              "and print its entrypoints.", "json", "cache", "lockfile", "trust", "reload",
              "locked")
    lst.add_argument("spec", help=spec_help)
    hlp = add("help", "show an entrypoint's docstring, like torch.hub.help",
              "Check, fetch and verify SPEC, then import its hubconf.py (same rules as a load) "
              "and print ENTRYPOINT's docstring.", "json", "cache", "lockfile", "trust",
              "reload", "locked")
    hlp.add_argument("spec", help=spec_help)
    hlp.add_argument("entrypoint", type=_entrypoint,
                     help="a callable in the repo's hubconf.py")

    check = add("check", "dry run: would SPEC load, and why (exit 0 yes, 1 no, 3 unknown: the "
                "network failed)",
                "Decide on SPEC as a load would (policy, pin, provenance, consent) without "
                "downloading the archive or running any code. With --entrypoint, hubconf.py's "
                "syntax tree says whether it defines it.", "json", "cache", "lockfile")
    check.add_argument("spec", help=spec_help)
    check.add_argument("--entrypoint", type=_entrypoint,
                       help="the entrypoint a load would ask for")


def _pinning(add: _Adder) -> None:
    spec_help = SPEC_HELP

    trust = add("trust", "fetch, verify and trust SPEC's exact content (runs nothing)",
                "Record consent for (repo, commit, content digest) where the policy lets users "
                "decide; a policy denial or requirement still wins.", "json", "cache",
                "lockfile", "reload")
    trust.add_argument("spec", nargs="?", help=spec_help)
    trust.add_argument("--list", action="store_true", help="list what was trusted on this "
                       "machine (of SPEC's repo, if given), fetching nothing")
    untrust = add("untrust", "forget consent for a repo (all its commits, or one)",
                  "", "json", "cache", "lockfile")
    untrust.add_argument("spec", help="owner/name (every commit) or owner/name:ref (one)")

    lock = add("lock", "pin specs to commits and content digests in the lockfile",
               "Resolve, fetch and verify each SPEC and write its commit, tree and digest "
               "to the lockfile (./safehub.lock). Locked loads need no API call and refuse "
               "other content.", "json", "cache", "lockfile")
    lock.add_argument("specs", nargs="*", metavar="SPEC", help=spec_help)
    lock.add_argument("--from", dest="from_file", metavar="FILE", type=_file,
                      help="read specs from FILE, one per line (# comments)")
    lock.add_argument("--upgrade", action="store_true",
                      help="re-resolve these specs (all, if none given) and move their pins")
    lock.add_argument("--rewrite", action="store_true",
                      help="write the lockfile afresh with only these specs, without reading "
                      "it (the fix for an invalid one)")
    lock.add_argument("--check", action="store_true",
                      help="ask GitHub whether every locked ref still names its commit, and "
                      "every pinned file whether it still answers with its size and digest")
    lock.add_argument("--entrypoint", type=_entrypoint, metavar="NAME",
                      help="run NAME once, as `safehub load` would (in a child process, "
                      "confined where the kernel allows), and pin every file it fetched: URL, "
                      "size and sha256")
    lock.add_argument("--kwargs", metavar="JSON",
                      help="with --entrypoint: its keyword arguments, a JSON object")
    lock.add_argument("--trust", action="store_true",
                      help="with --entrypoint: trust this exact content if the policy lets "
                      "users decide (trust_repo=True)")

    for name in ("prefetch", "fetch"):
        pre = add(name, "fill a cache or a mirror folder for offline nodes"
                  if name == "prefetch" else "same as prefetch",
                  "Fetch and verify each SPEC (default: every lockfile entry) into the cache, "
                  "and optionally into a mirror any static HTTPS server can serve as "
                  "SAFEHUB_GITHUB_URL.", "json", "cache", "lockfile", key="prefetch")
        pre.add_argument("specs", nargs="*", metavar="SPEC", help=spec_help)
        pre.add_argument("--from", dest="from_file", metavar="FILE", type=_file,
                         help="read specs from FILE, one per line (# comments)")
        pre.add_argument("--mirror", metavar="DIR", type=_folder_to_be,
                         help="also write archives laid out like GitHub's archive endpoint")
        pre.add_argument("--read-only", action="store_true",
                         help="seal the cache afterwards so many nodes can share it")
        pre.add_argument("--oci", metavar="REGISTRY/REPOSITORY",
                         help="also push one verified OCI snapshot per spec there and record "
                         "its manifest digest in the lockfile (locking unlocked specs); nodes "
                         "load it with SAFEHUB_OCI")
        _fleet_signing(pre, "with --oci: ")


def _fleet_signing(parser: argparse.ArgumentParser, when: str) -> None:
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--sign-key", metavar="PEM", type=_file,
                     help=f"{when}sign each snapshot's manifest digest with this EC private "
                     "key, attached as an OCI referrer and under the sha256-<hex> tag (what "
                     "a node's [oci] signature = \"required\" checks)")
    how.add_argument("--sign-keyless", action="store_true",
                     help=f"{when}sign keyless with Sigstore instead (the ambient OIDC "
                     "identity of a CI job, or SIGSTORE_IDENTITY_TOKEN; needs the network)")


def _signing(add: _Adder) -> None:
    spec_help = SPEC_HELP

    verify = add("verify", "verify the signature of a folder or a repo (exit 0 valid)",
                 "Verify an OpenSSF Model Signing signature over every file of a folder (with "
                 "model.sig) or of SPEC's verified tree.", "json", "cache", "lockfile")
    verify.add_argument("target", help="a folder with model.sig, or " + spec_help)
    verify.add_argument("--key", action="append", default=[], metavar="PEM", type=_file,
                        help="a public key whose signature counts (repeatable)")
    verify.add_argument("--identity", "--certificate-identity", metavar="IDENTITY",
                        help="keyless signer identity (exact or glob; cosign's name for it "
                        "works too)")
    verify.add_argument("--issuer", "--certificate-oidc-issuer", metavar="URL",
                        help="OIDC issuer of the keyless signer (or cosign's name for it)")
    verify.add_argument("--trust-config", metavar="JSON", type=_file,
                        help="Sigstore ClientTrustConfig for a private Sigstore")
    sign = add("sign", "sign a folder with an EC key (OpenSSF Model Signing)", "", "json")
    sign.add_argument("directory", type=_folder, help="the folder to sign (every file)")
    sign.add_argument("--key", required=True, metavar="PEM", type=_file,
                      help="PEM EC private key")
    sign.add_argument("--out", metavar="FILE", type=_file_to_be,
                      help="signature path (default: DIRECTORY/model.sig)")
    sign.add_argument("--allow-symlinks", action="store_true", help="sign a link to a file "
                      "inside DIRECTORY as that file (model_signing's --allow_symlinks)")
    keygen = add("keygen", "make an EC P-256 key pair for safehub sign (no openssl needed)",
                 "Write a new EC P-256 private key (PEM, PKCS#8, readable by you only) and its "
                 "public key, as cosign generate-key-pair does; an existing file is never "
                 "overwritten.", "json")
    keygen.add_argument("private", metavar="PRIVATE", type=_file_to_be,
                        help="the private key to write (keep it secret), e.g. ~/signing.pem")
    keygen.add_argument("--public", metavar="FILE", type=_file_to_be,
                        help="the public key to write (default: PRIVATE with the suffix .pub)")


def _admin(add: _Adder, sub: argparse._SubParsersAction[argparse.ArgumentParser],
           parser_class: type[argparse.ArgumentParser]) -> None:
    from safehub.cli.admin import init_description

    policy = sub.add_parser("policy", help="show, check or start policy files",
                            description="Policy files decide what may load on this machine.")
    psub = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION",
                                 parser_class=parser_class)
    add("show", "every path searched, which exist, and the merged policy", "", "json",
        parent=psub, key="policy show")
    validate = add("validate", "check policy files (exit 1 names every fault)", "", "json",
                   parent=psub, key="policy validate")
    validate.add_argument("files", nargs="+", metavar="FILE", type=_path,
                          help="a policy file (TOML); every fault of each is listed")
    validate.add_argument("--as", dest="role", choices=("project", "site", "user", "extra"),
                          help="validate by the rules of this role (default: the role the "
                          "file has where safehub looks for it; a file named safehub.toml "
                          "is a project's: only the keys a project may set, paths inside "
                          "its folder)")
    init = add("init", "write a commented starter policy (never overwrites)",
               init_description(), "json", parent=psub, key="policy init")
    init.add_argument("--for", dest="flavour", choices=sorted(
        ("admin", "team", "ci")), default="team", help="which starter (default: team)")
    init.add_argument("--path", type=_file_to_be,
                      help="write here instead of the usual place")
    init.add_argument("--yes", action="store_true",
                      help="write the machine-wide (site) policy without asking")

    cache = sub.add_parser("cache", help="list, re-hash or clear the cache")
    csub = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION",
                                parser_class=parser_class)
    add("ls", "list cached commits: size, last load (your audit log's), lockfile specs", "",
        "json", "cache", parent=csub, key="cache")
    for name, what in (("verify", "re-hash cached trees fully"),
                       ("clear", "remove cached trees (and your compiled modules)")):
        action = add(name, what, "", "json", "cache", parent=csub, key="cache")
        action.add_argument("commit", nargs="*", type=_commit_prefix,
                            help="commit sha prefixes (default: all)")
    action.add_argument("--yes", action="store_true", help="with no commit: clear them all "
                        "without asking (asked on a terminal; refused without one)")

    for verb, what in (("install", "write"), ("uninstall", "remove")):
        hook = add(verb, f"{what} the environment hook (--environment)",
                   f"--environment: {what} {ENV_HOOK} in the active environment's site-"
                   f"packages. {'With it' if verb == 'install' else 'Until then'}, every "
                   "Python process of that environment routes torch.hub.load/list/help "
                   "through safehub, with -E, -I or a scrubbed environment too (not -S). In a "
                   "script, safehub.install() routes that one process.", "json")
        hook.add_argument("--environment", action="store_true", required=True,
                          help=f"{what} the .pth hook in this environment's site-packages")

    oci = sub.add_parser("oci", help="carry locked snapshots in OCI image layouts",
                         description="Air gaps: an OCI image layout folder holds the "
                         "lockfile's snapshots (skopeo and oras copy it); nodes load from "
                         "it with SAFEHUB_OCI=oci:DIR, or after `oci import` to a registry.")
    osub = oci.add_subparsers(dest="oci_command", required=True, metavar="ACTION",
                              parser_class=parser_class)
    export = add("export", "write the lockfile's snapshots into an OCI image layout",
                 "Each snapshot is rebuilt with every check of a load (from SAFEHUB_OCI if "
                 "set, else GitHub) and must equal the lockfile entry's oci digest; an entry "
                 "without one gets it written, for nodes with SAFEHUB_OCI=oci:DIR.", "json",
                 "cache", "lockfile", parent=osub, key="oci export")
    export.add_argument("folder", metavar="DIR", type=_folder_to_be, help="the layout folder")
    _fleet_signing(export, "")
    imp = add("import", "push an OCI image layout's snapshots to a registry", "", "json",
              "cache", parent=osub, key="oci import")
    imp.add_argument("folder", metavar="DIR", type=_folder, help="the layout folder")
    imp.add_argument("target", metavar="REGISTRY/REPOSITORY", help="where to push")

    run = add("run", "run a program with torch.hub routed through safehub",
              "Every Python process COMMAND starts routes torch.hub.load/list/help through "
              "safehub, through PYTHONPATH: children started with python -E or -I, or with "
              "an environment that drops PYTHONPATH, are not covered; `safehub install "
              "--environment` covers every process of the environment. With --confine (or "
              "SAFEHUB_CONFINE=1, or a policy's [safehub] confine = true), the kernel's "
              "Landlock holds COMMAND and every process it starts to the policy's [confine] "
              "table: writes only below its folders and safehub's, only its programs, TCP "
              "only to its ports (`safehub docs confine`).\n"
              "Example: safehub run --confine -- python train.py", "json", "locked")
    run.add_argument("--confine", action="store_true",
                     help="hold COMMAND to the [confine] rules with Landlock (Linux)")
    run.add_argument("--dry-run", action="store_true",
                     help="print the ruleset --confine would apply, and run nothing")
    run.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    demo = add("demo", "run the whole pipeline on a shipped example (no network)",
               "Without --serve: load a shipped example from a loopback GitHub of its own, "
               "then show four refusals, and stop.\nWith --serve: keep a loopback hub with "
               "the demo's repos up until Ctrl-C (one signed, one whose tag moved, a fork's "
               "commit, one that phones home), and print the export lines that point "
               "safehub at it (its own cache and policy: no file of yours changes), so the "
               "README's Quickstart and any command can be tried against it; when it "
               "stops, it prints the unset line that undoes them.")
    demo.add_argument("--serve", action="store_true",
                      help="serve the demo's repos until Ctrl-C, for trying commands")
    demo.add_argument("--port", type=_port, help="with --serve: the port (default: any free)")
    completion = add("completion", "print a shell completion script made from this parser",
                     'Add to ~/.bashrc: eval "$(safehub completion bash)" (zsh: run '
                     "`autoload -U bashcompinit && bashcompinit` first)")
    completion.add_argument("shell", choices=["bash"], help="the shell (bash; zsh through "
                            "its bashcompinit)")
    add("env", "check this environment: versions, policy files, folders, hook, kernel",
        "One read-only self-check (no network), as `hf env`: versions of safehub and what it "
        "works with, each policy file searched and whether it parses, the lockfile, the "
        "cache, data and torch hub folders (writable?), the environment hook, what the "
        "kernel offers --confine (Landlock ABI, libseccomp), and offline, locked and "
        "noninteractive with where each came from.", "json")
    docs = add("docs", "print a page of safehub's documentation", "", "json")
    docs.add_argument("topic", nargs="?", help="policy, ci, pinning, fleet, signing, ...; "
                      "env: every environment variable; cli: every command and option")


def _port(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TCP port (1 to 65535)")
    return int(value)


def command_line(args: argparse.Namespace) -> CommandLine:
    """What :func:`safehub._internal.fixes.render` needs to write a fix for this command
    line: the ``--cache-dir`` and ``--lockfile`` it was given (a command the fix names
    carries them, else the fix acts on other files) and which commands take them (recorded
    by :func:`build` as it adds them)."""
    given = tuple((flag, str(value)) for flag, value in (
        ("--cache-dir", getattr(args, "cache_dir", None)),
        ("--lockfile", getattr(args, "lockfile", None))) if value)
    return CommandLine(given, getattr(args, "command_options", {}))

