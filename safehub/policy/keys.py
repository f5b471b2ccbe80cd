"""Every policy key, declared once.

Each :class:`Key` says what a key is called, in which table it lives, its type and
default, who may set it (a project's ``./safehub.toml`` only where ``project`` is true;
the environment only where it names an ``env`` variable) and how files merge it. The
validator (:mod:`safehub.policy.schema`), the merge
(:mod:`safehub.policy.model`), ``safehub policy show``, the key tables of docs/policy.md
and the error messages all read this one table.

>>> KEYS["safehub"]["unknown_repos"].type.describe()
"'deny', 'prompt' or 'allow'"
>>> KEYS["safehub"]["cache_dir"].project, KEYS["safehub"]["cache_dir"].env
(False, 'SAFEHUB_CACHE_DIR')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from safehub._internal.frozen import Frozen
from safehub.policy.values import (
    Bool,
    Choice,
    Choices,
    Fault,
    Globs,
    GlobValue,
    Hosts,
    HttpsUrl,
    OciPlaces,
    PathList,
    PathValue,
    Ports,
    ProgramList,
    Programs,
    Tables,
    Text,
    ValueType,
    Version,
)

__all__ = ["KEYS", "LAYERS", "WEIGHT_FORMATS", "Choice", "Fault", "Key", "ValueType",
           "layers_table", "markdown_table"]


# -- the declaration --------------------------------------------------------------------------

#: How a [safehub] or [confine] key merges across files, as what a later file (user, project,
#: ``SAFEHUB_POLICY``) may do to it and what it cannot (docs/policy.md: :func:`layers_table`).
#: ``own`` is ``mode``'s: it softens only its own file's refusals (the value shown merged is
#: the strictest); ``each``: see ``Policy.decide_local``. None loosens another's refusal.
#: ``strictest``, ``own``, ``any-true``, ``any-false`` and ``narrow`` are one merge over an
#: order from loose to strict (``safehub.policy.model.merge_key``).
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
             "widen an earlier file's list"),
    "narrow": ("narrow it: {narrow}",
               "widen it; only a site or the user's file widens the default, where no "
               "earlier file set the key and no `final = true` file came before (one that "
               "leaves the key unset holds the default); a project's or `SAFEHUB_POLICY` "
               "file never does")}
#: How matching [[allow]] rules combine: ``each`` (every rule's list must allow it),
#: ``strictest``, ``signer-set`` (each rule that asks for a signature adds a signer set
#: that must accept it), ``match`` (selects the rule), ``note`` (for humans).
MERGES = (*LAYERS, "signer-set", "match", "note")


class Key(Frozen):
    """One policy key: its table, type, default, documentation and merge rule."""

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
    widened_by: tuple[str, ...] = ("site", "user", "extra")
    """The roles of file (``site``, ``user``, ``project``, ``extra``) whose value counts in
    full where no earlier file set the key, even if looser than the default; any other
    file's value is first narrowed to the default (a project's, always)."""

    def __post_init__(self) -> None:
        assert self.merge in MERGES, self.merge
        assert "project" not in self.widened_by, "a project's file never widens a default"

    @property
    def path(self) -> bool:
        return isinstance(self.type, PathValue | PathList)


#: The checkpoint formats ``weights_format`` names (safehub.run.weights tells them apart).
WEIGHT_FORMATS = ("safetensors", "pickle")
_MODE = Choice(values=("enforce", "warn"), order=("warn", "enforce"))
_UNKNOWN = Choice(values=("deny", "prompt", "allow"), order=("allow", "prompt", "deny"))
_RUNTIME = Choice(values=("observe", "enforce", "off"), order=("off", "observe", "enforce"))
_HOOK = Choice(values=("optional", "required"), order=("optional", "required"))
_SHADOWING = Choice(values=("refuse", "warn"), order=("warn", "refuse"))
_PIN = Choice(values=("none", "commit"))
_SIGNATURE = Choice(values=("none", "if-present", "required"))
_FLEET_SIGNATURE = Choice(values=("none", "required"))
#: [confine] keys widen the default only from an admin's or the user's own file: a
#: ``SAFEHUB_POLICY`` file (which a project's tooling can set) only narrows, as a project's.
_ADMIN = ("site", "user")

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
    Key("safehub", "offline", Bool(), False, "as `SAFEHUB_OFFLINE=1`: safehub opens no "
        "socket (the repo's own code is not held by it)", "any-true", env="SAFEHUB_OFFLINE"),
    Key("safehub", "noninteractive", Bool(), False, "as `SAFEHUB_NONINTERACTIVE=1`: "
        "never prompt", "any-true", env="SAFEHUB_NONINTERACTIVE"),
    Key("safehub", "github_api_url", HttpsUrl(), None, "REST API base, as "
        "`SAFEHUB_GITHUB_API_URL`", "latest", project=False, env="SAFEHUB_GITHUB_API_URL"),
    Key("safehub", "github_url", HttpsUrl(), None, "web and archive base (or a mirror), "
        "as `SAFEHUB_GITHUB_URL`", "latest", project=False, env="SAFEHUB_GITHUB_URL"),
    Key("safehub", "allowed_hosts", Hosts(), None, "extra hosts downloads may be "
        "redirected to, as `SAFEHUB_ALLOWED_HOSTS`", "latest", project=False,
        env="SAFEHUB_ALLOWED_HOSTS"),
    Key("safehub", "oci", OciPlaces(), None, "OCI registries (or `oci:DIR` layouts) locked "
        "specs load from by the lockfile's manifest digest, first that has it; GitHub is not "
        "asked, unlocked specs are refused; as `SAFEHUB_OCI`; only here may a loopback "
        "registry without TLS be named, `http://127.0.0.1:PORT/REPO`", "latest",
        project=False, env="SAFEHUB_OCI"),
    Key("safehub", "locked", Bool(), False, "as `SAFEHUB_LOCKED=1`: a load whose code, "
        "nested hub repos or any file its code fetches through a held path is not pinned in "
        "the lockfile is refused before it is fetched, and nothing is pinned on first use "
        "(also `--locked`)", "any-true", env="SAFEHUB_LOCKED"),
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
    Key("safehub", "environment_hook", _HOOK, "optional", "`required`: a load refuses in a "
        "Python environment without the hook `safehub install --environment` writes (then "
        "every Python process of it routes torch.hub, `-E` and `-I` included)", "strictest"),
    Key("safehub", "confine", Bool(), False, "`safehub run` confines its command with the "
        "kernel's Landlock (as `--confine`) and refuses to start it unconfined; as "
        "`SAFEHUB_CONFINE=1`", "any-true", env="SAFEHUB_CONFINE"),
    # [confine]: what `safehub run --confine` lets its command do (docs/confine.md)
    Key("confine", "writes", PathList(item=PathValue(absolute=True)), (), "folders the "
        "command may change (create, write, truncate, remove, rename into), besides "
        "safehub's cache, data and log folders, torch's hub dir and the temp dir; absolute "
        "(`~` expanded); a later file may only narrow it", "narrow", widened_by=_ADMIN),
    Key("confine", "exec", ProgramList(), (), "programs the command may run (names looked "
        "up on `PATH` once, or absolute paths), besides its own interpreter; a later file "
        "may only narrow it", "narrow", widened_by=_ADMIN),
    Key("confine", "connect_ports", Ports(), (443,), "TCP ports the command may connect "
        "to (Landlock ABI 4); a later file may only narrow it", "narrow", widened_by=_ADMIN),
    # [oci]: the fleet signature a snapshot from a registry must carry (docs/fleet.md)
    Key("oci", "signature", _FLEET_SIGNATURE, "none", "`required`: a snapshot "
        "loaded through `oci` / `SAFEHUB_OCI` must carry a signature over its manifest "
        "digest (an OCI referrer or the `sha256-<hex>` fallback tag) that these signers "
        "accept, on top of the lockfile's digest; each file's table is one more signer set "
        "that must accept it", "strictest", project=False),
    Key("oci", "signers", Tables(scope="signer"), (), "Sigstore keyless identities whose "
        "fleet signature counts", "signer-set", project=False,
        values_doc="list of `{issuer, identity, repository?, ref?, workflow?, trigger?}`"),
    Key("oci", "keys", PathList(item=PathValue(exists=True, pem="public key")), (),
        "public key files whose fleet signature counts (relative to the policy file)",
        "signer-set", project=False),
    Key("oci", "trust_config", PathValue(exists=True), None, "a Sigstore ClientTrustConfig "
        "or trusted root JSON for a private Sigstore", "signer-set", project=False),
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
    Key("allow", "weights_format", Choices(values=WEIGHT_FORMATS), WEIGHT_FORMATS,
        "the checkpoint formats a file fetched through a held path may have: "
        "`[\"safetensors\"]` refuses pickles (torch's zip or legacy format) before they "
        "are deserialised, and `torch.load(weights_only=False)` by the repo's code; a "
        "format must be in every matching rule's list", "each"),
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

SCOPES = ("safehub", "confine", "oci", "allow", "deny", "signer")
KEYS: Mapping[str, Mapping[str, Key]] = {
    scope: {k.name: k for k in _DECLARED if k.scope == scope} for scope in SCOPES
}
#: Where each scope sits in a file, for error messages.
TABLE_NAMES = {"safehub": "[safehub]", "confine": "[confine]", "oci": "[oci]",
               "allow": "[[allow]]", "deny": "[[deny]]", "signer": "[[allow.signers]]"}


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


def layers_table(scope: str = "safehub") -> str:
    """Who may tighten or loosen each key of ``scope`` ([safehub] or [confine]):
    docs/policy.md, "How files merge"."""
    rows = ["| key | a later file may | it cannot | project file | environment |",
            "|---|---|---|---|---|"]
    for key in KEYS[scope].values():
        may, cannot = LAYERS[key.merge]
        if isinstance(key.type, Choice):
            order = key.type.order or key.type.values
            may = may.format(order=" < ".join(f"`{v}`" for v in order))
        elif key.merge == "narrow":
            may = may.format(narrow="keep only the folders that lie inside a folder of the "
                             "bound (as written: a granted folder may not go through a "
                             "link; the deeper of two that nest)"
                             if key.path else "keep only what the bound lists too" + (
                                 " (names and paths compared by the program they find)"
                                 if isinstance(key.type, ProgramList) else ""))
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
