"""Every policy key, declared once.

Each :class:`Key` says what a key is called, in which table it lives, its type and
default, who may set it (a project's ``./safehub.toml`` only where ``project`` is true;
the environment only where it names an ``env`` variable) and how files merge it. The
validator and the pydantic model (:mod:`safehub.policy.schema`), the merge
(:mod:`safehub.policy.model`), ``safehub policy show``, the key tables of docs/policy.md
and the error messages all read this one table.

>>> KEYS["safehub"]["unknown_repos"].type.describe()
"'deny', 'prompt' or 'allow'"
>>> KEYS["safehub"]["cache_dir"].project, KEYS["safehub"]["cache_dir"].env
(False, 'SAFEHUB_CACHE_DIR')
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from safehub._internal.globs import Glob
from safehub._internal.hosts import HostPattern
from safehub._internal.programs import check_entry

__all__ = ["KEYS", "LAYERS", "Choice", "Fault", "Key", "ValueType", "layers_table",
           "markdown_table"]


class Fault(ValueError):
    """One thing wrong with one value (the validator collects them all)."""


# -- value types -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueType:
    """A kind of value: how to check it, how to describe it, its pydantic annotation."""

    name: str

    def check(self, value: Any) -> Any:
        """The value as used internally; raise :class:`Fault` if it is not of this type."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


def _need_str(value: Any, what: str = "a string") -> str:
    if type(value) is not str:
        raise Fault(f"must be {what}, not {_kind(value)}")
    return value


def _need_list(value: Any, what: str) -> list[Any]:
    if type(value) is not list:
        raise Fault(f"must be a list of {what}, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "a table"}
    return names.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Bool(ValueType):
    name: str = "true or false"

    def check(self, value: Any) -> bool:
        if type(value) is not bool:
            raise Fault(f"must be true or false (a TOML boolean), not {_kind(value)}")
        return value


@dataclass(frozen=True)
class Version(ValueType):
    name: str = "1"

    def check(self, value: Any) -> int:
        if type(value) is not int or value != 1:
            raise Fault("must be 1 (the only format version)")
        return value


@dataclass(frozen=True)
class Choice(ValueType):
    """One of ``values``, listed from the loosest to the strictest."""

    name: str = "choice"
    values: tuple[str, ...] = ()
    order: tuple[str, ...] = ()
    """The values from the loosest to the strictest (default: as listed)."""

    def check(self, value: Any) -> str:
        if type(value) is not str or value not in self.values:
            raise Fault(f"must be {self.describe()}")
        return value

    def describe(self) -> str:
        quoted = [repr(v) for v in self.values]
        return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]

    def strictness(self, value: str) -> int:
        return (self.order or self.values).index(value)


@dataclass(frozen=True)
class Text(ValueType):
    name: str = "text"
    nonempty: bool = False

    def check(self, value: Any) -> str:
        text = _need_str(value)
        if self.nonempty and not text:
            raise Fault("must not be empty")
        return text


@dataclass(frozen=True)
class PathValue(ValueType):
    """A path, relative to the policy file's folder. ``exists`` files are checked when the
    file is read (fail closed); ``pem`` ones must hold a PEM public key or certificate."""

    name: str = "path"
    exists: bool = False
    pem: str = ""
    absolute: bool = False
    """Must be absolute once ``~`` is expanded (never relative to the policy file)."""

    def check(self, value: Any) -> str:
        text = _need_str(value, "a path (a string)")
        if not text or "\0" in text:
            raise Fault("must be a non-empty path")
        if self.absolute and not os.path.isabs(os.path.expanduser(text)):
            raise Fault(f"{text!r} is not an absolute path (~ is expanded)")
        return text


@dataclass(frozen=True)
class PathList(ValueType):
    name: str = "list of paths"
    item: PathValue = PathValue()

    def check(self, value: Any) -> tuple[str, ...]:
        return tuple(self.item.check(v) for v in _need_list(value, "paths"))


@dataclass(frozen=True)
class HttpsUrl(ValueType):
    name: str = "https:// URL"

    def check(self, value: Any) -> str:
        text = _need_str(value)
        parts = urlsplit(text)
        if parts.scheme != "https" or not parts.hostname:
            raise Fault(f"must be an https:// URL with a host (got {text!r})")
        return text


@dataclass(frozen=True)
class Hosts(ValueType):
    """Host names (``allowed_hosts``); with ``network``, every entry form of the runtime
    guard's ``network`` key (:class:`safehub._internal.hosts.HostPattern`, the one
    grammar): ``host``, ``host:port``, ``*.domain``, an IP address, ``[v6]:port``,
    ``unix:/path``."""

    name: str = "list of host names"
    network: bool = False

    def check(self, value: Any) -> tuple[str, ...]:
        items = _need_list(value, "host names")
        for item in items:
            text = _need_str(item, "a host name")
            try:
                HostPattern.parse(text, names_only=not self.network)
            except ValueError as e:
                raise Fault(f"{text!r}: {e}") from None
        return tuple(items)


@dataclass(frozen=True)
class GlobValue(ValueType):
    """One glob of the policy dialect (see :mod:`safehub._internal.globs`)."""

    name: str = "glob"
    https: bool = False
    repo: bool = False

    def check(self, value: Any) -> str:
        text = _need_str(value, "a pattern (a string)")
        if not text or not text.isascii():
            raise Fault(f"patterns must be non-empty ASCII (got {text!r})")
        if self.https and not text.startswith("https://"):
            raise Fault(f"{text!r}: weights are only ever fetched over https://; start the "
                        "pattern with https://")
        if self.repo and not _REPO_GLOB.fullmatch(text):
            raise Fault(f"must be 'owner/name' in GitHub's ASCII characters, with * ? [ ] "
                        f"globs (got {text!r})")
        try:
            Glob(text, fold=self.repo)
        except ValueError as e:
            raise Fault(str(e)) from None
        return text


_REPO_GLOB = re.compile(r"[A-Za-z0-9*?\[\]!-]+/[A-Za-z0-9._*?\[\]!-]+")


@dataclass(frozen=True)
class Globs(ValueType):
    name: str = "list of globs"
    item: GlobValue = GlobValue()

    def check(self, value: Any) -> tuple[str, ...]:
        return tuple(self.item.check(v) for v in _need_list(value, "patterns"))

    def describe(self) -> str:
        return "list of https:// URL globs" if self.item.https else self.name


@dataclass(frozen=True)
class Programs(ValueType):
    """``false`` (no process), ``true`` (any), or the programs that may start (names or
    absolute paths: :func:`safehub._internal.programs.check_entry`, the one rule)."""

    name: str = "false, true or a list of program names"

    def check(self, value: Any) -> bool | tuple[str, ...]:
        if type(value) is bool:
            return value
        items = _need_list(value, "program names") if type(value) is list else None
        if items is None:
            raise Fault(f"must be true, false or a list of program names, not {_kind(value)}")
        for v in items:
            try:
                check_entry(_need_str(v, "a program name"))
            except ValueError as e:
                raise Fault(str(e)) from None
        return tuple(items)


@dataclass(frozen=True)
class ProgramList(ValueType):
    """Program names or absolute paths (``[confine] exec``)."""

    name: str = "list of program names or absolute paths"

    def check(self, value: Any) -> tuple[str, ...]:
        items = _need_list(value, "program names")
        for v in items:
            try:
                check_entry(_need_str(v, "a program name"))
            except ValueError as e:
                raise Fault(str(e)) from None
        return tuple(items)


@dataclass(frozen=True)
class Ports(ValueType):
    """TCP port numbers, 1 to 65535."""

    name: str = "list of port numbers"

    def check(self, value: Any) -> tuple[int, ...]:
        items = _need_list(value, "port numbers")
        for v in items:
            if type(v) is not int or not 0 < v < 65536:
                raise Fault(f"{v!r} is not a port number from 1 to 65535")
        return tuple(items)


@dataclass(frozen=True)
class Tables(ValueType):
    """A list of tables whose keys are declared in another scope (``[[allow.signers]]``)."""

    name: str = "list of tables"
    scope: str = ""

    def check(self, value: Any) -> Any:
        return _need_list(value, "tables")  # each table is checked by the validator


# -- the declaration --------------------------------------------------------------------------

#: How a [safehub] setting merges across files, as what a later file (user, project,
#: ``SAFEHUB_POLICY``) may do to it and what it cannot (docs/policy.md: :func:`layers_table`).
#: ``own`` is ``mode``'s: it softens only its own file's refusals (the value shown merged is
#: the strictest); ``each``: see ``Policy.decide_local``. None loosens another's refusal.
LAYERS: Mapping[str, tuple[str, str]] = {
    "strictest": ("set a stricter value ({order})", "loosen it: a value looser than an "
                  "earlier file's is ignored, and so is a project's value looser than the "
                  "default; a `final = true` file that leaves the key unset, where no "
                  "earlier file set it, holds the default"),
    "own": ("say `warn` for its own rules: their refusals only warn",
            "soften another file's rules: their refusals still refuse"),
    "any-true": ("turn it on", "turn it off once a file or the environment turned it on"),
    "any-false": ("set it to `false`", "set it back to `true`"),
    "latest": ("override it (as the environment does)",
               "change it once a `final = true` file set it (nor can the environment)"),
    "per-file": ("set its own", "change another file's"),
    "each": ("set its own list: a folder must be in every file's list",
             "widen an earlier file's list")}
#: ``narrow`` ([confine]): the first file that sets a key bounds it; a later file may only
#: narrow it (see ``Policy.confine``).
#: How matching [[allow]] rules combine: ``each`` (every rule's list must allow it),
#: ``strictest``, ``signer-set`` (each rule that asks for a signature adds a signer set
#: that must accept it), ``match`` (selects the rule), ``note`` (for humans).
MERGES = (*LAYERS, "signer-set", "match", "note", "narrow")


@dataclass(frozen=True)
class Key:
    scope: str
    name: str
    type: ValueType
    default: Any
    doc: str
    merge: str
    project: bool = True
    env: str | None = None
    required: bool = False
    values_doc: str = ""

    def __post_init__(self) -> None:
        assert self.merge in MERGES, self.merge

    @property
    def path(self) -> bool:
        return isinstance(self.type, PathValue | PathList)


_MODE = Choice(values=("enforce", "warn"), order=("warn", "enforce"))
_UNKNOWN = Choice(values=("deny", "prompt", "allow"), order=("allow", "prompt", "deny"))
_RUNTIME = Choice(values=("observe", "enforce", "off"), order=("off", "observe", "enforce"))
_SHADOWING = Choice(values=("refuse", "warn"), order=("warn", "refuse"))
_PIN = Choice(values=("none", "commit"))
_SIGNATURE = Choice(values=("none", "if-present", "required"))

_DECLARED: tuple[Key, ...] = (
    # [safehub]
    Key("safehub", "version", Version(), 1, "format version", "per-file"),
    Key("safehub", "mode", _MODE, "enforce", "`warn`: a violation of this file's own rules "
        "(its deny rules, requirements and `unknown_repos`) is logged and warned about, and "
        "the load continues (it still needs the user's consent); other files' refusals "
        "still refuse", "own"),
    Key("safehub", "unknown_repos", _UNKNOWN, "prompt",
        "what happens to a repo no `[[allow]]` rule admits", "strictest"),
    Key("safehub", "final", Bool(), False, "later files and the environment can only "
        "tighten this file", "per-file"),
    Key("safehub", "cache_dir", PathValue(), None, "cache root, as `SAFEHUB_CACHE_DIR`",
        "latest", project=False, env="SAFEHUB_CACHE_DIR", values_doc="path"),
    Key("safehub", "lockfile", PathValue(), None, "the lockfile, as `SAFEHUB_LOCKFILE` "
        "(default `./safehub.lock` if present)", "latest", env="SAFEHUB_LOCKFILE"),
    Key("safehub", "audit_log", PathValue(), None, "where decisions are logged (default "
        "`audit.jsonl` in the user log dir); a log named here must be writable (fail "
        "closed)", "latest"),
    Key("safehub", "offline", Bool(), False, "as `SAFEHUB_OFFLINE=1`: never open a "
        "socket", "any-true", env="SAFEHUB_OFFLINE"),
    Key("safehub", "noninteractive", Bool(), False, "as `SAFEHUB_NONINTERACTIVE=1`: "
        "never prompt", "any-true", env="SAFEHUB_NONINTERACTIVE"),
    Key("safehub", "github_api_url", HttpsUrl(), None, "REST API base, as "
        "`SAFEHUB_GITHUB_API_URL`", "latest", project=False, env="SAFEHUB_GITHUB_API_URL"),
    Key("safehub", "github_url", HttpsUrl(), None, "web and archive base (or a mirror), "
        "as `SAFEHUB_GITHUB_URL`", "latest", project=False, env="SAFEHUB_GITHUB_URL"),
    Key("safehub", "allowed_hosts", Hosts(), None, "extra hosts downloads may be "
        "redirected to, as `SAFEHUB_ALLOWED_HOSTS`", "latest", project=False,
        env="SAFEHUB_ALLOWED_HOSTS"),
    Key("safehub", "tree_fallback", Bool(), True, "`false` forbids the per-file check "
        "used when `.gitattributes` makes an archive differ from the commit's tree",
        "any-false"),
    Key("safehub", "runtime", _RUNTIME, "observe", "the runtime guard while hubconf runs: "
        "`observe` records and refuses what a rule's keys forbid; `enforce` also refuses "
        "what no key allows; `off`", "strictest"),
    Key("safehub", "local_dirs", PathList(), None, "folders `source=\"local\"` loads may "
        "come from (subfolders included, symlinks resolved); unset: any folder, unless "
        "`unknown_repos = \"deny\"`; every file that sets it must admit the folder",
        "each", project=False),
    Key("safehub", "confine", Bool(), False, "`safehub run` confines its command with the "
        "kernel's Landlock (as `--confine`) and refuses to start it unconfined; as "
        "`SAFEHUB_CONFINE=1`", "any-true", env="SAFEHUB_CONFINE"),
    # [confine]: what `safehub run --confine` lets its command do (docs/confine.md)
    Key("confine", "writes", PathList(item=PathValue(absolute=True)), (), "folders the "
        "command may change (create, write, truncate, remove, rename into), besides "
        "safehub's cache, data and log folders, torch's hub dir and the temp dir; absolute "
        "(`~` expanded); a later file may only narrow it", "narrow"),
    Key("confine", "exec", ProgramList(), (), "programs the command may run (names looked "
        "up on `PATH` once, or absolute paths), besides its own interpreter; a later file "
        "may only narrow it", "narrow"),
    Key("confine", "connect_ports", Ports(), (443,), "TCP ports the command may connect "
        "to (Landlock ABI 4); a later file may only narrow it", "narrow"),
    # [[allow]]
    Key("allow", "repo", GlobValue(repo=True), None, "which repos the rule covers; ASCII, "
        "compared case-insensitively", "match", required=True,
        values_doc='`"owner/name"` glob (required)'),
    Key("allow", "refs", Globs(), None, "only these refs may be asked for (a load without "
        "a ref is checked against the default branch's name)", "each"),
    Key("allow", "entrypoints", Globs(), None, "only these entrypoints may be loaded",
        "each"),
    Key("allow", "pin", _PIN, "none", "`commit`: the spec must be a 40-hex sha or locked "
        "in the lockfile", "strictest"),
    Key("allow", "signature", _SIGNATURE, "none", "`required`: a missing or invalid "
        "signature refuses; `if-present`: an invalid one refuses", "strictest"),
    Key("allow", "signers", Tables(scope="signer"), (), "Sigstore keyless identities whose "
        "signature counts", "signer-set",
        values_doc="list of `{issuer, identity, repository?, ref?, workflow?, trigger?}`"),
    Key("allow", "keys", PathList(item=PathValue(exists=True, pem="public key")), (),
        "public key files whose signature counts (relative to the policy file)",
        "signer-set"),
    Key("allow", "certificates", PathList(item=PathValue(exists=True, pem="certificate")),
        (), "trust anchors of a private PKI (PEM certificates)", "signer-set"),
    Key("allow", "signature_url", Text(nonempty=True), None, "where the signature is, if "
        "not `model.sig` in the repo: `release:ASSET`, an `https://` URL template or a "
        "local path; placeholders `{owner}` `{name}` `{repo}` `{ref}` `{commit}`",
        "signer-set"),
    Key("allow", "trust_config", PathValue(exists=True), None, "a Sigstore ClientTrustConfig "
        "or trusted root JSON for a private Sigstore", "signer-set"),
    Key("allow", "weights", Globs(item=GlobValue(https=True)), None, "URLs hubconf may "
        "download weights from while it runs", "each"),
    Key("allow", "weights_only", Bool(), True, "`load_state_dict_from_url` loads with "
        "`weights_only=True` unless every matching rule says `false`", "strictest"),
    Key("allow", "network", Hosts(network=True), None, "hosts hubconf code may connect to "
        "(`host`, `host:port`, `*.domain`), besides the weights hosts (runtime guard)",
        "each"),
    Key("allow", "subprocess", Programs(), None, "`false`, or the program names hubconf "
        "code may start (runtime guard)", "each"),
    Key("allow", "writes", PathList(), None, "paths hubconf code may write outside its "
        "tree, torch's hub dir and the temp dir (runtime guard)", "each"),
    Key("allow", "shadowing", _SHADOWING, "refuse", "a repo module that shadows the "
        "standard library or an installed package: `refuse` or `warn`", "strictest"),
    Key("allow", "reason", Text(), None, "a note for humans", "note"),
    # [[deny]]
    Key("deny", "repo", GlobValue(repo=True), None, "which repos are refused", "match",
        required=True, values_doc='`"owner/name"` glob (required)'),
    Key("deny", "refs", Globs(), None, "refuse only these refs (default: all)", "match"),
    Key("deny", "reason", Text(), "", "shown to the user in the error", "note"),
    # [[allow.signers]]
    Key("signer", "issuer", Text(nonempty=True), None, "OIDC issuer, exact", "match",
        required=True),
    Key("signer", "identity", GlobValue(), None, "certificate identity, exact or glob",
        "match", required=True),
    Key("signer", "repository", GlobValue(), None, "GitHub Actions claim: repository",
        "match"),
    Key("signer", "ref", GlobValue(), None, "GitHub Actions claim: git ref", "match"),
    Key("signer", "workflow", GlobValue(), None, "GitHub Actions claim: workflow file",
        "match"),
    Key("signer", "trigger", GlobValue(), None, "GitHub Actions claim: event", "match"),
)

SCOPES = ("safehub", "confine", "allow", "deny", "signer")
KEYS: Mapping[str, Mapping[str, Key]] = {
    scope: {k.name: k for k in _DECLARED if k.scope == scope} for scope in SCOPES
}
#: Where each scope sits in a file, for error messages.
TABLE_NAMES = {"safehub": "[safehub]", "confine": "[confine]", "allow": "[[allow]]",
               "deny": "[[deny]]", "signer": "[[allow.signers]]"}


def markdown_table(scope: str, *, with_default: bool = True) -> str:
    """The key table of docs/policy.md for one scope (tested equal to the docs)."""
    rows = ["| key | values | default | project file | meaning |",
            "|---|---|---|---|---|"]
    for key in KEYS[scope].values():
        values = key.values_doc or key.type.describe()
        default = "" if key.default in (None, ()) else f"`{_toml(key.default)}`"
        project = "yes" if key.project else "no"
        rows.append(f"| `{key.name}` | {values} | {default} | {project} | {key.doc} |")
    if not with_default:
        rows = [r.replace(" default |", "", 1) for r in rows]
    return "\n".join(rows)


def layers_table() -> str:
    """Who may tighten or loosen each [safehub] key: docs/policy.md, "How files merge"."""
    rows = ["| key | a later file may | it cannot | project file | environment |",
            "|---|---|---|---|---|"]
    for key in KEYS["safehub"].values():
        may, cannot = LAYERS[key.merge]
        if isinstance(key.type, Choice):
            order = key.type.order or key.type.values
            may = may.format(order=" < ".join(f"`{v}`" for v in order))
        rows.append(f"| `{key.name}` | {may} | {cannot} | {'yes' if key.project else 'no'} | "
                    + (f"`{key.env}` |" if key.env else " |"))
    return "\n".join(rows)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Sequence):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)
