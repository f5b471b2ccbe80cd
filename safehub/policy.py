"""Admin policy files: what may load on this machine, and what it must satisfy.

Files are TOML, read in this order (each one that exists):

1. ``policy.toml`` in the site config dir for "safehub" (``/etc/xdg/safehub`` on Linux;
   every folder of ``XDG_CONFIG_DIRS``), written by admins;
2. ``policy.toml`` in the user config dir (``~/.config/safehub``);
3. ``./safehub.toml`` in the working directory;
4. each file in ``SAFEHUB_POLICY`` (``os.pathsep``-separated).

Merging (see docs/policy.md for the full reference):

* a matching ``[[deny]]`` rule in any file refuses; deny always wins;
* every matching ``[[allow]]`` rule's requirements must hold (refs, entrypoints, pin,
  signature, signers, keys, weights), so a later file can add requirements but never
  remove one;
* a repo no allow rule admits is handled by ``unknown_repos``; the strictest value any
  file sets wins (``deny`` > ``prompt`` > ``allow``), default ``prompt``; likewise
  ``mode`` (``enforce`` > ``warn``, default ``enforce``);
* after a file with ``final = true``, later files cannot admit new repos (their allow
  rules only add requirements) and cannot change its settings; the environment cannot
  either;
* an unreadable or invalid file refuses every load (fail closed) with an error naming the
  file, the key and the allowed values.

>>> p = Policy.from_text('''
... [safehub]
... unknown_repos = "deny"
... [[allow]]
... repo = "pytorch/*"
... refs = ["v*"]
... ''', "example.toml")
>>> p.decide(RepoSpec.parse("PyTorch/vision:v0.10.0")).verdict
'allow'
>>> p.decide(RepoSpec.parse("someone/else:v1")).verdict
'deny'
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from safehub._internal.globs import Glob
from safehub.errors import PolicyError
from safehub.signatures import KeySigner, Signer, SignerSet
from safehub.spec import RepoSpec, is_full_sha, ref_names

__all__ = ["Decision", "Policy", "Requirements", "discover", "load_policy"]

Verdict = Literal["allow", "prompt", "deny"]
_UNKNOWN_ORDER = {"allow": 0, "prompt": 1, "deny": 2}
_SIGNATURE_ORDER = {"none": 0, "if-present": 1, "required": 2}
_REPO_GLOB = re.compile(r"[A-Za-z0-9*?\[\]!-]+/[A-Za-z0-9._*?\[\]!-]+")
_PATH_SETTINGS = ("cache_dir", "lockfile", "audit_log")
_SETTINGS = ("cache_dir", "lockfile", "audit_log", "offline", "noninteractive",
             "github_api_url", "github_url", "allowed_hosts", "tree_fallback")
# Settings that only ever tighten, merged across all files: either side turning them on
# wins (offline, noninteractive); tree_fallback = false wins.
_ANY_TRUE = ("offline", "noninteractive")
_ANY_FALSE = ("tree_fallback",)
# Settings that decide where code comes from: a project's ./safehub.toml (which arrives
# with whatever was cloned) may not set them. Environment, site and user files may.
_NOT_FROM_PROJECT = ("cache_dir", "github_api_url", "github_url", "allowed_hosts")
PROJECT_FILE = "safehub.toml"


# -- the internal form: frozen dataclasses ------------------------------------------------


@dataclass(frozen=True)
class AllowSpec:
    """An ``[[allow]]`` rule as validated."""

    repo: str
    refs: tuple[str, ...] | None = None
    pin: str = "none"
    entrypoints: tuple[str, ...] | None = None
    signature: str = "none"
    signers: tuple[Signer, ...] = ()
    keys: tuple[str, ...] = ()
    certificates: tuple[str, ...] = ()
    signature_url: str | None = None
    trust_config: str | None = None
    weights: tuple[str, ...] | None = None
    weights_only: bool = True
    reason: str | None = None


@dataclass(frozen=True)
class DenySpec:
    """A ``[[deny]]`` rule as validated."""

    repo: str
    refs: tuple[str, ...] | None = None
    reason: str = ""


@dataclass(frozen=True)
class SectionSpec:
    """The ``[safehub]`` section as validated."""

    version: int = 1
    mode: str | None = None
    unknown_repos: str | None = None
    final: bool = False
    cache_dir: str | None = None
    lockfile: str | None = None
    audit_log: str | None = None
    offline: bool | None = None
    noninteractive: bool | None = None
    github_api_url: str | None = None
    github_url: str | None = None
    allowed_hosts: tuple[str, ...] | None = None
    tree_fallback: bool | None = None


@dataclass(frozen=True)
class FileSpec:
    """One policy file as validated."""

    safehub: SectionSpec = SectionSpec()
    allow: tuple[AllowSpec, ...] = ()
    deny: tuple[DenySpec, ...] = ()


def _nondefault(obj: Any) -> dict[str, Any]:
    """The fields of a spec that differ from their defaults (``safehub policy show``)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.default is dataclasses.MISSING or value != f.default:
            out[f.name] = [vars(v) for v in value] if f.name == "signers" else value
    return out


def _from_model(model: Any) -> FileSpec:
    """The internal form of a validated pydantic ``PolicyFile``."""
    def allow(a: Any) -> AllowSpec:
        data = a.model_dump()
        data["signers"] = tuple(Signer(**x) for x in data["signers"])
        return AllowSpec(**data)

    return FileSpec(SectionSpec(**model.safehub.model_dump()),
                    tuple(allow(a) for a in model.allow),
                    tuple(DenySpec(**d.model_dump()) for d in model.deny))


_SECTION_TYPES: dict[str, tuple[type, ...]] = {
    "version": (int,), "mode": (str,), "unknown_repos": (str,), "final": (bool,),
    "cache_dir": (str,), "lockfile": (str,), "audit_log": (str,), "offline": (bool,),
    "noninteractive": (bool,), "github_api_url": (str,), "github_url": (str,),
    "allowed_hosts": (list,), "tree_fallback": (bool,),
}
_ALLOW_KEYS = frozenset(f.name for f in dataclasses.fields(AllowSpec))
_SIGNER_KEYS = frozenset({"issuer", "identity", "repository", "ref", "workflow", "trigger"})


class _NotCanonical(Exception):
    """The fast reader is not sure: let the pydantic model decide (and name the error)."""


def _need(ok: bool) -> None:
    if not ok:
        raise _NotCanonical


def _str_list(value: Any, globs: bool = False) -> tuple[str, ...]:
    _need(type(value) is list and all(type(v) is str and v and v.isascii() for v in value))
    if globs:
        for v in value:
            try:
                Glob(v)
            except ValueError:
                raise _NotCanonical from None
    return tuple(value)


def _repo(value: Any) -> str:
    _need(type(value) is str and value.isascii() and _REPO_GLOB.fullmatch(value) is not None)
    try:
        Glob(value, fold=True)
    except ValueError:
        raise _NotCanonical from None
    return str(value)


def _canonical_file(data: Any) -> FileSpec | None:
    """A policy file read without pydantic (about 0.3 s of import per process), or None.

    Accepts only what is plainly valid; anything else returns None and goes through the
    pydantic model, which decides and names the error. Tests check that whatever this
    accepts, the model accepts with the same result.
    """
    try:
        _need(type(data) is dict and not set(data) - {"safehub", "allow", "deny"})
        section = data.get("safehub", {})
        _need(type(section) is dict and not set(section) - set(_SECTION_TYPES))
        for key, value in section.items():
            _need(type(value) in _SECTION_TYPES[key])
        _need(section.get("version", 1) == 1)
        _need(section.get("mode", "enforce") in ("enforce", "warn"))
        _need(section.get("unknown_repos", "prompt") in ("deny", "prompt", "allow"))
        for key in ("github_api_url", "github_url"):
            _need(str(section.get(key, "https://")).startswith("https://"))
        if "allowed_hosts" in section:
            section = {**section, "allowed_hosts": _str_list(section["allowed_hosts"])}
        allows = []
        raw_allow = data.get("allow", [])
        _need(type(raw_allow) is list)
        for a in raw_allow:
            _need(type(a) is dict and "repo" in a and not set(a) - _ALLOW_KEYS)
            rule: dict[str, Any] = {"repo": _repo(a["repo"])}
            for key in ("refs", "entrypoints", "weights"):
                if key in a:
                    rule[key] = _str_list(a[key], globs=True)
            for key in ("keys", "certificates"):
                if key in a:
                    _need(type(a[key]) is list and all(type(k) is str for k in a[key]))
                    rule[key] = tuple(a[key])
            for key in ("signature_url", "trust_config", "reason"):
                if key in a:
                    _need(type(a[key]) is str)
                    rule[key] = a[key]
            rule["pin"] = a.get("pin", "none")
            rule["signature"] = a.get("signature", "none")
            _need(rule["pin"] in ("none", "commit"))
            _need(rule["signature"] in ("none", "if-present", "required"))
            if "weights_only" in a:
                _need(type(a["weights_only"]) is bool)
                rule["weights_only"] = a["weights_only"]
            signers = a.get("signers", [])
            _need(type(signers) is list)
            parsed = []
            for x in signers:
                _need(type(x) is dict and {"issuer", "identity"} <= set(x)
                      and not set(x) - _SIGNER_KEYS)
                _need(all(type(v) is str for v in x.values()) and x["issuer"] and x["identity"])
                _str_list([v for k, v in x.items() if k != "issuer"], globs=True)
                parsed.append(Signer(**x))
            rule["signers"] = tuple(parsed)
            anyone = rule["signers"] or rule.get("keys") or rule.get("certificates")
            _need(bool(anyone) == (rule["signature"] != "none"))
            allows.append(AllowSpec(**rule))
        denies = []
        raw_deny = data.get("deny", [])
        _need(type(raw_deny) is list)
        for d in raw_deny:
            _need(type(d) is dict and "repo" in d and not set(d) - {"repo", "refs", "reason"})
            deny: dict[str, Any] = {"repo": _repo(d["repo"])}
            if "refs" in d:
                deny["refs"] = _str_list(d["refs"], globs=True)
            if "reason" in d:
                _need(type(d["reason"]) is str)
                deny["reason"] = d["reason"]
            denies.append(DenySpec(**deny))
        return FileSpec(SectionSpec(**section), tuple(allows), tuple(denies))
    except _NotCanonical:
        return None


# -- the file format (pydantic models, built on first use so `import safehub` stays cheap) --

_MODELS: dict[str, Any] = {}


def _models() -> dict[str, Any]:
    if _MODELS:
        return _MODELS
    from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

    strict = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)

    def _check_repo_glob(value: str) -> str:
        if not value.isascii() or not _REPO_GLOB.fullmatch(value):
            raise ValueError(
                "must be 'owner/name' in GitHub's ASCII characters, with * ? [ ] globs "
                f"(got {value!r})"
            )
        Glob(value, fold=True)  # a malformed [set] is an error here, naming the file
        return value

    def _check_globs(values: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if values is not None:
            for v in values:
                if not v or not v.isascii():
                    raise ValueError(f"patterns must be non-empty ASCII (got {v!r})")
                Glob(v)
        return values

    class Signer(BaseModel):
        """A Sigstore keyless identity: OIDC issuer plus certificate identity (glob)."""

        model_config = strict
        issuer: str = Field(min_length=1)
        identity: str = Field(min_length=1)
        repository: str | None = None
        ref: str | None = None
        workflow: str | None = None
        trigger: str | None = None

        @field_validator("identity", "repository", "ref", "workflow", "trigger")
        @classmethod
        def _glob(cls, v: str | None) -> str | None:
            if v is not None:
                Glob(v)
            return v

    class AllowRule(BaseModel):
        model_config = strict
        repo: str
        refs: tuple[str, ...] | None = None
        pin: Literal["none", "commit"] = "none"
        entrypoints: tuple[str, ...] | None = None
        signature: Literal["none", "if-present", "required"] = "none"
        signers: tuple[Signer, ...] = ()
        keys: tuple[str, ...] = ()
        certificates: tuple[str, ...] = ()
        signature_url: str | None = None
        trust_config: str | None = None
        weights: tuple[str, ...] | None = None
        weights_only: bool = True
        reason: str | None = None

        @field_validator("repo")
        @classmethod
        def _repo(cls, v: str) -> str:
            return _check_repo_glob(v)

        @field_validator("refs", "entrypoints", "weights")
        @classmethod
        def _globs(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
            return _check_globs(v)

        @model_validator(mode="after")
        def _signature_needs_someone(self) -> AllowRule:
            anyone = self.signers or self.keys or self.certificates
            if self.signature == "none" and anyone:
                raise ValueError(
                    "signers, keys or certificates are given but signature = 'none'; "
                    "set signature = 'required' or 'if-present'"
                )
            if self.signature != "none" and not anyone:
                raise ValueError(
                    f"signature = {self.signature!r} needs at least one entry in signers, "
                    "keys or certificates, to say whose signature counts"
                )
            return self

    class DenyRule(BaseModel):
        model_config = strict
        repo: str
        refs: tuple[str, ...] | None = None
        reason: str = ""

        @field_validator("repo")
        @classmethod
        def _repo(cls, v: str) -> str:
            return _check_repo_glob(v)

        @field_validator("refs")
        @classmethod
        def _globs(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
            return _check_globs(v)

    class Section(BaseModel):
        model_config = strict
        version: Literal[1] = 1
        mode: Literal["enforce", "warn"] | None = None
        unknown_repos: Literal["deny", "prompt", "allow"] | None = None
        final: bool = False
        cache_dir: str | None = None
        lockfile: str | None = None
        audit_log: str | None = None
        offline: bool | None = None
        noninteractive: bool | None = None
        github_api_url: str | None = None
        github_url: str | None = None
        allowed_hosts: tuple[str, ...] | None = None
        tree_fallback: bool | None = None

        @field_validator("github_api_url", "github_url")
        @classmethod
        def _https(cls, v: str | None) -> str | None:
            if v is not None and not v.startswith("https://"):
                raise ValueError(f"must be an https:// URL (got {v!r})")
            return v

    class PolicyFile(BaseModel):
        model_config = strict
        safehub: Section = Section()
        allow: tuple[AllowRule, ...] = ()
        deny: tuple[DenyRule, ...] = ()

    _MODELS.update(Signer=Signer, AllowRule=AllowRule, DenyRule=DenyRule, Section=Section,
                   PolicyFile=PolicyFile)
    return _MODELS


def _allowed_keys(model: Any, loc: Sequence[Any]) -> str:
    """The field names of the model that ``loc`` points into (for 'unknown key' errors)."""
    m = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field_info = m.model_fields.get(part)
        if field_info is None:
            break
        ann = field_info.annotation
        inner = getattr(ann, "__args__", (ann,))
        nested = [a for a in inner if isinstance(a, type) and hasattr(a, "model_fields")]
        if not nested:
            break
        m = nested[0]
    return ", ".join(m.model_fields)


def _loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _parse_file(text: str, source: str) -> FileSpec:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(
            f"policy file {source}: not valid TOML ({e})",
            hint="fix the file; until then no repo loads on this machine (fail closed)",
        ) from e
    fast = _canonical_file(data)  # plainly valid files need no pydantic
    if fast is not None:
        return fast
    from pydantic import ValidationError

    model = _models()["PolicyFile"]
    try:
        return _from_model(model.model_validate(data))
    except ValidationError as e:
        problems = []
        for err in e.errors():
            where = _loc(err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                problems.append(
                    f"{where}: unknown key; allowed keys here: {_allowed_keys(model, err['loc'])}"
                )
            else:
                msg = err["msg"].removeprefix("Value error, ")
                problems.append(f"{where}: {msg} (got {err.get('input')!r})"
                                if err["type"] == "literal_error" else f"{where}: {msg}")
        raise PolicyError(
            f"policy file {source} is invalid:\n    " + "\n    ".join(problems),
            hint="fix the file (see docs/policy.md); until then no repo loads on this "
            "machine (fail closed)",
        ) from None


# -- the merged policy --------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One allow or deny rule, with the file it came from and compiled patterns."""

    kind: Literal["allow", "deny"]
    source: str
    index: int
    model: Any
    admits: bool
    repo: Glob
    refs: tuple[Glob, ...] | None
    entrypoints: tuple[Glob, ...] | None

    @property
    def where(self) -> str:
        return f"[[{self.kind}]] #{self.index + 1} ({self.model.repo}) in {self.source}"

    def matches(self, key: str) -> bool:
        return self.repo.match(key)


@dataclass(frozen=True)
class Requirements:
    """What every matching allow rule asks of the content, merged (all must hold)."""

    pin: bool = False
    signature: str = "none"
    signer_sets: tuple[SignerSet, ...] = ()
    weights: tuple[tuple[Glob, ...], ...] = ()
    weights_only: bool = True


@dataclass(frozen=True)
class Decision:
    """The policy's answer for one spec (before or after the ref is resolved)."""

    verdict: Verdict
    reasons: tuple[str, ...]
    requirements: Requirements = Requirements()
    mode: str = "enforce"
    violations: tuple[str, ...] = ()
    fix: str = ""


@dataclass(frozen=True)
class Layer:
    source: str
    model: Any


@dataclass(frozen=True)
class Policy:
    """The merged policy of every file found, in order."""

    layers: tuple[Layer, ...] = ()
    rules: tuple[Rule, ...] = ()
    settings: Mapping[str, tuple[Any, str, bool]] = field(default_factory=dict)
    unknown_repos: tuple[str, str] = ("prompt", "default")
    mode: tuple[str, str] = ("enforce", "default")

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(layer.source for layer in self.layers)

    @classmethod
    def from_text(cls, text: str, source: str) -> Policy:
        return cls.from_layers([Layer(source, _parse_file(text, source))])

    @classmethod
    def from_layers(cls, layers: Sequence[Layer]) -> Policy:
        rules: list[Rule] = []
        settings: dict[str, tuple[Any, str, bool]] = {}
        unknown = ("prompt", "default")
        mode = ("enforce", "default")
        final_seen = False
        for layer in layers:
            section = layer.model.safehub
            for i, d in enumerate(layer.model.deny):
                rules.append(Rule("deny", layer.source, i, d, False, Glob(d.repo, fold=True),
                                  _globs(d.refs), None))
            for i, a in enumerate(layer.model.allow):
                files = (*a.keys, *a.certificates, *([a.trust_config] if a.trust_config else []))
                for k in files:
                    _key_path(k, layer.source)  # fail closed now, not at the first load
                rules.append(Rule("allow", layer.source, i, a, not final_seen,
                                  Glob(a.repo, fold=True), _globs(a.refs),
                                  _globs(a.entrypoints)))
            # Strictest wins, whatever the order: deny > prompt > allow; enforce > warn.
            value = section.unknown_repos
            if value is not None and (unknown[1] == "default"
                                      or _UNKNOWN_ORDER[value] > _UNKNOWN_ORDER[unknown[0]]):
                unknown = (value, layer.source)
            # After a final file, a later file can no longer switch to warn.
            if section.mode is not None and not (section.mode == "warn" and final_seen) and (
                mode[1] == "default" or (section.mode == "enforce" and mode[0] == "warn")
            ):
                mode = (section.mode, layer.source)
            if Path(layer.source).name == PROJECT_FILE and Path(layer.source).parent == Path.cwd():
                for name in _NOT_FROM_PROJECT:
                    if getattr(section, name) is not None:
                        raise PolicyError(
                            f"policy file {layer.source}: {name} cannot be set in a project's "
                            "./safehub.toml (it would decide where code comes from)",
                            hint=f"set it in the user or site policy, or with the environment "
                            f"(SAFEHUB_{name.upper()})",
                        )
            for name in _SETTINGS:
                setting = getattr(section, name)
                if setting is None:
                    continue
                held = settings.get(name)
                if name in _ANY_TRUE and held is not None and held[0] and not setting:
                    continue
                if name in _ANY_FALSE and held is not None and not held[0] and setting:
                    continue
                if held is not None and held[2] and name not in (*_ANY_TRUE, *_ANY_FALSE):
                    continue  # set by a final file: later files cannot change it
                settings[name] = (setting, layer.source, section.final)
            final_seen = final_seen or section.final
        return cls(tuple(layers), tuple(rules), settings, unknown, mode)

    # -- deciding -----------------------------------------------------------------------

    def decide(self, spec: RepoSpec, *, entrypoint: str | None = None,
               ref: str | None = None, locked: bool = False) -> Decision:
        """Decide on a spec. ``ref`` overrides ``spec.ref`` (the resolved default branch);
        ``locked`` says a lockfile pins this spec (which satisfies ``pin = "commit"``).
        """
        key = spec.key
        ref = spec.ref if ref is None else ref
        mode = self.mode[0]
        for rule in self.rules:
            if rule.kind != "deny" or not rule.matches(key):
                continue
            if rule.refs is not None and (ref is None or not _any_ref(rule.refs, ref)):
                continue
            why = f"denied by {rule.where}" + (f": {rule.model.reason}" if rule.model.reason
                                               else "")
            return self._refuse(mode, why, "this is an admin decision; ask whoever owns "
                                f"{rule.source}")
        allows = [r for r in self.rules if r.kind == "allow" and r.matches(key)]
        admitted = [r for r in allows if r.admits]
        reasons: list[str] = []
        if admitted:
            verdict: Verdict = "allow"
            reasons.append(f"allowed by {admitted[0].where}")
        else:
            value, source = self.unknown_repos
            where = "the default" if source == "default" else source
            if allows:
                reasons.append(
                    f"{allows[0].where} cannot admit a repo: it comes after a final = true file"
                )
            if value == "deny":
                return self._refuse(
                    mode, f"no allow rule admits {spec.repo} and unknown_repos = 'deny' "
                    f"({where})", f"an admin can allow it in {source}:\n"
                    f"      [[allow]]\n      repo = \"{spec.key}\"", reasons)
            verdict = "allow" if value == "allow" else "prompt"
            reasons.append(f"no allow rule covers {spec.repo}; unknown_repos = {value!r} ({where})")
        pin = False
        signature = "none"
        all_allow_pickles = True
        signer_sets: list[SignerSet] = []
        weights: list[tuple[Glob, ...]] = []
        violations: list[str] = []
        for rule in allows:
            m = rule.model
            if rule.refs is not None and ref is not None and not _any_ref(rule.refs, ref):
                violations.append(
                    f"ref {ref!r} is not one of {list(m.refs)} allowed by {rule.where}"
                )
            if rule.entrypoints is not None and entrypoint is not None and not _any(
                rule.entrypoints, entrypoint
            ):
                violations.append(f"entrypoint {entrypoint!r} is not one of "
                                  f"{list(m.entrypoints)} allowed by {rule.where}")
            if m.pin == "commit":
                pin = True
                if not locked and not (ref is not None and is_full_sha(ref)):
                    violations.append(
                        f"{rule.where} requires a pinned commit: use a 40-hex sha or lock "
                        "the spec with `safehub lock`"
                    )
            if _SIGNATURE_ORDER[m.signature] > _SIGNATURE_ORDER[signature]:
                signature = m.signature
            if m.signature != "none":
                signer_sets.append(SignerSet(
                    rule.where,
                    tuple(m.signers),
                    tuple(KeySigner(_key_path(k, rule.source)) for k in m.keys),
                    _key_path(m.trust_config, rule.source) if m.trust_config else None,
                    m.signature_url,
                    tuple(_key_path(c, rule.source) for c in m.certificates),
                ))
            if m.weights is not None:
                weights.append(tuple(Glob(w) for w in m.weights))
            # strictest wins: pickles only if every matching rule says weights_only = false
            all_allow_pickles = all_allow_pickles and not m.weights_only
        reqs = Requirements(pin, signature, tuple(signer_sets), tuple(weights),
                            weights_only=not (allows and all_allow_pickles))
        if violations:
            if mode == "warn":
                return Decision("prompt", (*reasons, *violations), reqs, mode, tuple(violations))
            return Decision("deny", (*reasons, *violations), reqs, mode, tuple(violations),
                            fix="ask for a ref, entrypoint or pin the policy allows")
        return Decision(verdict, tuple(reasons), reqs, mode)

    def names(self, key: str) -> bool:
        """True if an [[allow]] rule admits the repo ``key`` by name or glob (not merely
        ``unknown_repos = "allow"``), and no deny rule covers it."""
        if any(r.kind == "deny" and r.refs is None and r.matches(key) for r in self.rules):
            return False
        return any(r.kind == "allow" and r.admits and r.matches(key) for r in self.rules)

    def _refuse(self, mode: str, why: str, fix: str,
                reasons: Iterable[str] = ()) -> Decision:
        if mode == "warn":
            # Rollout: the violation is logged and the load goes on as if no rule applied;
            # it still needs the user's consent.
            return Decision("prompt", (*reasons, why, "mode = 'warn': loading anyway"),
                            Requirements(), mode, (why,))
        return Decision("deny", (*reasons, why), Requirements(), mode, (why,), fix=fix)

    def setting(self, name: str) -> tuple[Any, str, bool] | None:
        """(value, file, locked-by-final) for a ``[safehub]`` setting, or None.

        Relative paths (``cache_dir``, ``lockfile``, ``audit_log``) are taken relative to
        the folder of the file that sets them.
        """
        found = self.settings.get(name)
        if found is not None and name in _PATH_SETTINGS:
            value, source, final = found
            path = Path(value).expanduser()
            if not path.is_absolute():
                path = Path(source).parent / path
            return str(path), source, final
        return found

    def describe(self) -> dict[str, Any]:
        """The merged policy as data, each rule with its file (``safehub policy show``)."""
        return {
            "files": list(self.files),
            "mode": {"value": self.mode[0], "from": self.mode[1]},
            "unknown_repos": {"value": self.unknown_repos[0], "from": self.unknown_repos[1]},
            "settings": {k: {"value": v, "from": s, "final": f}
                         for k, (v, s, f) in sorted(self.settings.items())},
            "rules": [
                {"kind": r.kind, "from": r.source, "index": r.index + 1,
                 "admits": r.admits if r.kind == "allow" else None,
                 **_nondefault(r.model)}
                for r in self.rules
            ],
        }


def _globs(values: Iterable[str] | None) -> tuple[Glob, ...] | None:
    return None if values is None else tuple(Glob(v) for v in values)


def _any(globs: Iterable[Glob], text: str) -> bool:
    return any(g.match(text) for g in globs)


def _any_ref(globs: Iterable[Glob], ref: str) -> bool:
    """A ref matches if any way of writing it does (``tags/v2`` is ``v2``)."""
    globs = tuple(globs)
    return any(_any(globs, name) for name in ref_names(ref))


def _key_path(key: str, source: str) -> Path:
    """A key or trust config file named by a policy file (relative to it); must exist."""
    path = Path(key).expanduser()
    if not path.is_absolute():
        path = Path(source).parent / path
    if not path.is_file():
        raise PolicyError(
            f"policy file {source}: file {str(path)!r} (keys or trust_config) does not exist",
            hint="fix the path (relative paths are relative to the policy file)",
        )
    return path


# -- finding and caching the files ---------------------------------------------------------


def discover(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The policy files that apply, in merge order (only those that exist)."""
    import platformdirs

    env = os.environ if environ is None else environ
    dirs = platformdirs.PlatformDirs("safehub", appauthor=False, multipath=True)
    candidates = [Path(p) / "policy.toml" for p in dirs.site_config_dir.split(os.pathsep) if p]
    candidates.append(Path(platformdirs.user_config_dir("safehub", appauthor=False)) /
                      "policy.toml")
    candidates.append(Path.cwd() / "safehub.toml")
    found = [p for p in candidates if p.is_file()]
    for extra in env.get("SAFEHUB_POLICY", "").split(os.pathsep):
        if not extra:
            continue
        path = Path(extra).expanduser()
        if not path.is_file():
            raise PolicyError(
                f"SAFEHUB_POLICY names {extra!r}, which is not a readable file",
                hint="fix SAFEHUB_POLICY; a missing policy refuses every load (fail closed)",
            )
        found.append(path)
    return found


_FileKey = tuple[str, int, int, int, int]
_LAYERS: dict[_FileKey, Layer] = {}
_MERGED: dict[tuple[_FileKey, ...], Policy] = {}


def _file_key(path: Path) -> _FileKey:
    try:
        st = path.stat()
    except OSError as e:
        raise PolicyError(
            f"policy file {path} cannot be read ({e})",
            hint="fix its permissions; until then no repo loads (fail closed)",
        ) from e
    return (str(path), st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def _read_layer(path: Path, key: _FileKey) -> Layer:
    hit = _LAYERS.get(key)
    if hit is not None:
        return hit
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(
            f"policy file {path} cannot be read ({e})",
            hint="fix its permissions or encoding (UTF-8); until then no repo loads (fail "
            "closed)",
        ) from e
    layer = Layer(str(path), _parse_file(text, str(path)))
    if len(_LAYERS) > 64:
        _LAYERS.clear()
    _LAYERS[key] = layer
    return layer


def load_policy(environ: Mapping[str, str] | None = None,
                paths: Sequence[Path] | None = None) -> Policy:
    """Read and merge the policy files (``paths``, or :func:`discover`).

    Parsed files and the merged result are kept per process, keyed by each file's path,
    size, mtime, ctime and inode: an edited file is read again at the next load.
    """
    files = discover(environ) if paths is None else list(paths)
    if not files:
        return Policy()
    keys = tuple(_file_key(p) for p in files)
    merged = _MERGED.get(keys)
    if merged is None:
        merged = Policy.from_layers([_read_layer(p, k) for p, k in zip(files, keys, strict=True)])
        if len(_MERGED) > 16:
            _MERGED.clear()
        _MERGED[keys] = merged
    return merged


def validate_file(path: Path) -> Policy:
    """Parse one file on its own (``safehub policy validate``); raise PolicyError if bad."""
    return Policy.from_layers([_read_layer(path, _file_key(path))])

