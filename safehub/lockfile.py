"""The lockfile: each spec pinned to one commit, its tree and its content digest.

``safehub lock SPEC...`` writes ``safehub.lock`` (or ``SAFEHUB_LOCKFILE``, or the policy's
``lockfile``). It is TOML, sorted, and meant to be read in code review::

    # safehub.lock: written by `safehub lock`; review changes like code.
    version = 1

    [[repo]]
    spec = "pytorch/vision:v0.10.0"
    commit = "..."
    tree = "..."
    digest = "sha256:..."
    proof = "v0.10.0 names it in pytorch/vision"

A locked spec resolves from the lockfile (no API call) and its content must match the
digest, byte for byte. A lockfile that cannot be read or parsed refuses every load (fail
closed).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from safehub._internal.fsutil import atomic_write
from safehub.errors import PinError
from safehub.spec import FULL_SHA, RepoSpec

__all__ = ["LockEntry", "Lockfile", "WeightPin", "spec_key"]

_HEADER = "# safehub.lock: written by `safehub lock`; review changes like code.\n"
_DIGEST = r"sha256:[0-9a-f]{64}"


def spec_key(spec: RepoSpec) -> str:
    """How a spec is named in a lockfile: case-folded repo, ref as written."""
    return spec.key if spec.ref is None else f"{spec.key}:{spec.ref}"


@dataclass(frozen=True)
class WeightPin:
    """A weight file hubconf downloaded, with its full SHA-256."""

    url: str
    sha256: str


@dataclass(frozen=True)
class LockEntry:
    """One locked spec."""

    spec: str
    commit: str
    tree: str
    digest: str
    ref: str = ""
    proof: str = ""
    level: str = "tree"
    signer: str = ""
    weights: tuple[WeightPin, ...] = field(default_factory=tuple)

    @property
    def repo_key(self) -> str:
        return self.spec.partition(":")[0]


_MODELS: dict[str, Any] = {}


def _model() -> Any:
    if _MODELS:
        return _MODELS["File"]
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    strict = ConfigDict(frozen=True, extra="forbid")

    class Weight(BaseModel):
        model_config = strict
        url: str = Field(min_length=1)
        sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    class Entry(BaseModel):
        model_config = strict
        spec: str
        commit: str = Field(pattern=f"^{FULL_SHA.pattern}$")
        tree: str = Field(pattern=f"^{FULL_SHA.pattern}$")
        digest: str = Field(pattern=f"^{_DIGEST}$")
        ref: str = ""
        proof: str = ""
        level: str = "tree"
        signer: str = ""
        weights: tuple[Weight, ...] = ()

        @field_validator("spec")
        @classmethod
        def _spec(cls, v: str) -> str:
            parsed = RepoSpec.parse(v)  # SpecError is a ValueError: pydantic reports it
            if spec_key(parsed) != v:
                raise ValueError(f"must be written {spec_key(parsed)!r}")
            return v

    class File(BaseModel):
        model_config = strict
        version: int = Field(ge=1, le=1)
        repo: tuple[Entry, ...] = ()

    _MODELS["File"] = File
    return File


class Lockfile:
    """A lockfile on disk (it may not exist yet)."""

    def __init__(self, path: Path, entries: Iterable[LockEntry] = ()) -> None:
        self.path = path
        self.entries: dict[str, LockEntry] = {e.spec: e for e in entries}

    @classmethod
    def load(cls, path: Path, *, missing_ok: bool = False) -> Lockfile:
        """Read and validate ``path``; a broken file is a :class:`PinError` (fail closed)."""
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if missing_ok:
                return cls(path)
            raise PinError(f"lockfile {path} does not exist",
                           hint="create it with `safehub lock SPEC`, or fix SAFEHUB_LOCKFILE"
                           ) from None
        except (OSError, UnicodeDecodeError) as e:
            raise PinError(f"lockfile {path} cannot be read ({e})",
                           hint="fix its permissions; no repo loads until then (fail closed)"
                           ) from e
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise PinError(f"lockfile {path} is not valid TOML ({e})",
                           hint="regenerate it with `safehub lock`; no repo loads until then "
                           "(fail closed)") from e
        # A file exactly as `safehub lock` writes it is read without importing pydantic
        # (~0.3 s per process); anything else goes through the model, which names the error.
        fast = _canonical_entries(raw)
        entries = fast if fast is not None else _validated_entries(raw, path)
        seen: set[str] = set()
        for entry in entries:
            if entry.spec in seen:
                raise PinError(f"lockfile {path} names {entry.spec!r} twice",
                               hint="regenerate it with `safehub lock`")
            seen.add(entry.spec)
        return cls(path, entries)

    def get(self, spec: RepoSpec) -> LockEntry | None:
        return self.entries.get(spec_key(spec))

    def put(self, entry: LockEntry) -> None:
        self.entries[entry.spec] = entry

    def add_weight(self, spec: RepoSpec, pin: WeightPin) -> None:
        entry = self.get(spec)
        if entry is None:
            return
        weights = {w.url: w for w in entry.weights}
        weights[pin.url] = pin
        self.put(replace(entry, weights=tuple(weights[u] for u in sorted(weights))))

    def dumps(self) -> str:
        """The file's text: deterministic, sorted, one table per spec."""
        out = [_HEADER, "version = 1\n"]
        for key in sorted(self.entries):
            e = self.entries[key]
            out.append("\n[[repo]]\n")
            fields = [("spec", e.spec), ("ref", e.ref), ("commit", e.commit), ("tree", e.tree),
                      ("digest", e.digest), ("level", e.level), ("proof", e.proof),
                      ("signer", e.signer)]
            for name, value in fields:
                if value or name in ("spec", "commit", "tree", "digest"):
                    out.append(f"{name} = {_toml_str(value)}\n")
            for w in e.weights:
                out.append(f"\n[[repo.weights]]\nurl = {_toml_str(w.url)}\n"
                           f"sha256 = {_toml_str(w.sha256)}\n")
        return "".join(out)

    def save(self) -> None:
        atomic_write(self.path, self.dumps().encode())


_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ENTRY_KEYS = frozenset({"spec", "commit", "tree", "digest", "ref", "proof", "level",
                         "signer", "weights"})
_REQUIRED = frozenset({"spec", "commit", "tree", "digest"})


def _canonical_entries(raw: Any) -> list[LockEntry] | None:
    """The entries of a lockfile in exactly the shape ``safehub lock`` writes, else None.

    Strictly narrower than the pydantic model (tests check that whatever this accepts,
    the model accepts with the same result), so it can skip the model's import cost.
    """
    if not isinstance(raw, dict) or set(raw) - {"version", "repo"}:
        return None
    if type(raw.get("version")) is not int or raw["version"] != 1:
        return None
    repos = raw.get("repo", [])
    if not isinstance(repos, list):
        return None
    out = []
    for item in repos:
        if not isinstance(item, dict) or set(item) - _ENTRY_KEYS or not set(item) >= _REQUIRED:
            return None
        fields = {k: v for k, v in item.items() if k != "weights"}
        if not all(type(v) is str for v in fields.values()):
            return None
        if not (_HEX40.fullmatch(item["commit"]) and _HEX40.fullmatch(item["tree"])
                and item["digest"].startswith("sha256:")
                and _HEX64.fullmatch(item["digest"][7:])):
            return None
        try:
            if spec_key(RepoSpec.parse(item["spec"])) != item["spec"]:
                return None
        except ValueError:
            return None
        weights = item.get("weights", [])
        if not isinstance(weights, list):
            return None
        pins = []
        for w in weights:
            if (not isinstance(w, dict) or set(w) != {"url", "sha256"}
                    or type(w["url"]) is not str or not w["url"]
                    or type(w["sha256"]) is not str or not _HEX64.fullmatch(w["sha256"])):
                return None
            pins.append(WeightPin(w["url"], w["sha256"]))
        out.append(LockEntry(item["spec"], item["commit"], item["tree"], item["digest"],
                             item.get("ref", ""), item.get("proof", ""),
                             item.get("level", "tree"), item.get("signer", ""), tuple(pins)))
    return out


def _validated_entries(raw: Any, path: Path) -> list[LockEntry]:
    """The entries, through the pydantic model; its errors name the key (fail closed)."""
    from pydantic import ValidationError

    try:
        data = _model().model_validate(raw)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            where = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{where.replace('.[', '[')}: {msg}")
        raise PinError(f"lockfile {path} is invalid:\n    " + "\n    ".join(problems),
                       hint="regenerate it with `safehub lock`; no repo loads until then "
                       "(fail closed)") from None
    return [LockEntry(item.spec, item.commit, item.tree, item.digest, item.ref, item.proof,
                      item.level, item.signer,
                      tuple(WeightPin(w.url, w.sha256) for w in item.weights))
            for item in data.repo]


def _toml_str(value: str) -> str:
    # A JSON string with non-ASCII escaped is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=True)
