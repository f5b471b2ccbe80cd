"""The lockfile: each spec pinned to one commit, its tree and its content digest.

``safehub lock SPEC...`` writes ``safehub.lock`` (or ``SAFEHUB_LOCKFILE``, or the policy's
``lockfile``). It is TOML, sorted, and meant to be read in code review::

    # safehub.lock: written by `safehub lock`; review changes like code.
    version = 1

    [[repo]]
    spec = "pytorch/vision:v0.10.0"
    repo = "pytorch/vision"
    commit = "..."
    tree = "..."
    digest = "sha256:..."
    proof = "tag v0.10.0 of pytorch/vision"

A locked spec resolves from the lockfile (no API call) and its content must match the
digest, byte for byte. A lockfile that cannot be read or parsed refuses every load (fail
closed), with an error that names every fault. The fields of an entry are declared once,
in :data:`FIELDS`: the reader, the writer and the error messages use that table.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.frozen import Frozen, field, fields, replace
from safehub._internal.fsutil import atomic_write
from safehub.errors import PinError
from safehub.spec import FULL_REF, FULL_SHA, RepoSpec

__all__ = ["FIELDS", "LockEntry", "Locked", "Lockfile", "WeightPin", "spec_key"]

_HEADER = "# safehub.lock: written by `safehub lock`; review changes like code.\n"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def spec_key(spec: RepoSpec) -> str:
    """How a spec is named in a lockfile: case-folded repo, ref as written."""
    return spec.key if spec.ref is None else f"{spec.key}:{spec.ref}"


class WeightPin(Frozen):
    """A file the repo's code fetched, with its full SHA-256 (and its size, once known).

    ``url`` is the HTTPS URL torch.hub's helpers were given, or, for a file from the
    Hugging Face Hub, ``hf://REPO_ID@REVISION/PATH`` (``datasets/`` or ``spaces/`` before
    the repo id for those kinds; the revision as the code asked for it, percent-encoded,
    as huggingface_hub's own ``hf://`` paths write it), with ``commit`` the 40-hex commit
    that revision resolved to when it was pinned.
    """

    url: str
    sha256: str
    size: int | None = None
    commit: str = ""

    def table(self) -> str:
        """This pin as a ``[[repo.weights]]`` table of the lockfile."""
        lines = [f"url = {_toml_str(self.url)}", f"sha256 = {_toml_str(self.sha256)}"]
        if self.size is not None:
            lines.append(f"size = {self.size}")
        if self.commit:
            lines.append(f"commit = {_toml_str(self.commit)}")
        return "\n[[repo.weights]]\n" + "\n".join(lines) + "\n"


class LockEntry(Frozen):
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
    repo: str = ""
    """``owner/name`` as GitHub spells it (requests keep that spelling)."""
    resolved_ref: str = ""
    """The branch or tag ``ref`` resolved to, in full (``refs/tags/v1.0``): what policy
    ``refs`` written in full are matched against on locked loads."""
    oci: str = ""
    """The manifest digest of the commit's OCI snapshot (``prefetch --oci``): the one
    artifact a load through ``SAFEHUB_OCI`` accepts."""

    @property
    def repo_key(self) -> str:
        return self.spec.partition(":")[0]

    def with_pins(self, seen: Mapping[str, WeightPin]) -> LockEntry:
        """This entry with the files ``seen`` (URL -> pin) pinned too; a URL it pins
        already keeps its pin."""
        known = {w.url for w in self.weights}
        new = tuple(pin for url, pin in sorted(seen.items()) if url not in known)
        return replace(self, weights=(*self.weights, *new)) if new else self


class Locked(Frozen):
    """A lock entry and the lockfile it came from: looked up once, passed on as one value
    (what the pipeline checks against the entry, its messages name the file by)."""

    entry: LockEntry
    file: Path


def _spec(value: str) -> str:
    parsed = RepoSpec.parse(value)
    if spec_key(parsed) != value:
        raise ValueError(f"must be written {spec_key(parsed)!r}")
    return value


def _repo(value: str) -> str:
    if value and RepoSpec.parse(value).repo != value:
        raise ValueError("must be 'owner/name'")
    return value


def _check(pattern: re.Pattern[str] | None, what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if pattern is not None and not pattern.fullmatch(value):
            raise ValueError(f"must be {what}")
        return value
    return check


#: Each entry field: (required, check of a string value). ``weights`` is a list of tables.
FIELDS: dict[str, tuple[bool, Callable[[str], str]]] = {
    "spec": (True, _spec),
    "repo": (False, _repo),
    "ref": (False, _check(None, "")),
    "commit": (True, _check(FULL_SHA, "a 40-hex commit sha")),
    "tree": (True, _check(FULL_SHA, "a 40-hex tree sha")),
    "digest": (True, _check(_DIGEST, "'sha256:' and 64 hex digits")),
    "level": (False, _check(re.compile("tree|per-file"), "'tree' or 'per-file'")),
    "proof": (False, _check(None, "")),
    "signer": (False, _check(None, "")),
    "resolved_ref": (False, _check(FULL_REF, "refs/heads/NAME or refs/tags/NAME")),
    "oci": (False, _check(_DIGEST, "'sha256:' and 64 hex digits (a manifest digest)")),
}
_ORDER = ("spec", "repo", "ref", "resolved_ref", "commit", "tree", "digest", "level", "proof",
          "signer", "oci")
assert set(_ORDER) == set(FIELDS)
assert set(fields(LockEntry)) == {*FIELDS, "weights"}


def _entry(item: Any, where: str, faults: list[str]) -> LockEntry | None:
    if type(item) is not dict:
        faults.append(f"{where}: must be a [[repo]] table")
        return None
    values: dict[str, Any] = {}
    for name, value in item.items():
        if name == "weights":
            values["weights"] = _weights(value, f"{where}.weights", faults)
            continue
        if name not in FIELDS:
            allowed = ", ".join((*_ORDER, "weights"))
            faults.append(f"{where}.{name}: unknown key; allowed: {allowed}")
            continue
        if type(value) is not str:
            faults.append(f"{where}.{name}: must be a string")
            continue
        try:
            values[name] = FIELDS[name][1](value)
        except ValueError as e:
            faults.append(f"{where}.{name}: {e} (got {value[:80]!r})")
    for name, (required, _) in FIELDS.items():
        if required and name not in item:
            faults.append(f"{where}.{name}: required key is missing")
    try:
        return LockEntry(**values)
    except TypeError:
        return None


def _weights(value: Any, where: str, faults: list[str]) -> tuple[WeightPin, ...]:
    if type(value) is not list:
        faults.append(f"{where}: must be a list of [[repo.weights]] tables")
        return ()
    pins = []
    for i, w in enumerate(value):
        fault = _weight_fault(w)
        if fault:
            faults.append(f"{where}[{i}]: {fault}")
            continue
        pins.append(WeightPin(w["url"], w["sha256"], w.get("size"), w.get("commit", "")))
    return tuple(pins)


def _weight_fault(w: Any) -> str:
    """What is wrong with one ``[[repo.weights]]`` table ("" if nothing)."""
    if (type(w) is not dict or not {"url", "sha256"} <= set(w) <= {"url", "sha256", "size",
                                                                     "commit"}):
        return ("must have url and sha256 (64 hex digits), and may have size and commit, "
                "nothing else")
    if type(w["url"]) is not str or not w["url"]:
        return "url must be a non-empty string"
    if type(w["sha256"]) is not str or not _HEX64.fullmatch(w["sha256"]):
        return "sha256 must be 64 hex digits"
    if "size" in w and (type(w["size"]) is not int or w["size"] < 0):
        return "size must be a whole number of bytes"
    hub = w["url"].startswith("hf://")
    if "commit" in w and not (type(w["commit"]) is str and FULL_SHA.fullmatch(w["commit"])):
        return "commit must be a 40-hex commit sha"
    if "commit" in w and not hub:
        return "commit is only for hf:// files (the commit their revision resolved to)"
    return ""


def parse(raw: Any, path: Path) -> list[LockEntry]:
    """The entries of a parsed lockfile; a :class:`PinError` naming every fault."""
    faults: list[str] = []
    entries: list[LockEntry] = []
    if type(raw) is not dict:
        faults.append("(top level): must be a TOML document")
    else:
        for name in raw:
            if name not in ("version", "repo"):
                faults.append(f"{name}: unknown key; allowed: version, repo")
        if "version" not in raw:
            faults.append("version: required key is missing (write version = 1)")
        elif type(raw.get("version")) is not int or raw.get("version") != 1:
            faults.append("version: must be 1")
        repos = raw.get("repo", [])
        if type(repos) is not list:
            faults.append("repo: must be a list of [[repo]] tables")
            repos = []
        seen: set[str] = set()
        for i, item in enumerate(repos):
            entry = _entry(item, f"repo[{i}]", faults)
            if entry is not None:
                if entry.spec in seen:
                    faults.append(f"repo[{i}].spec: {entry.spec!r} appears twice")
                seen.add(entry.spec)
                entries.append(entry)
    if faults:
        listed = [item["spec"] for item in (raw.get("repo") if type(raw) is dict else None)
                  or () if type(item) is dict and type(item.get("spec")) is str]
        raise PinError(f"lockfile {path} is invalid:", details=faults,
                       fix=rewrite_hint(path, listed))
    return entries


def rewrite_hint(path: Path, specs: Iterable[str], what: str = "the fields") -> fixes.Fix:
    """The fix of a lockfile that cannot be read as one: lock its specs afresh over it
    (``safehub lock --rewrite``), or mend the fields the message names by hand."""
    import shlex

    valid = []
    for text in specs:
        try:
            valid.append(spec_key(RepoSpec.parse(text)))
        except ValueError:  # SpecError is a ValueError too
            continue
    where = "" if path == Path.cwd() / "safehub.lock" else f" --lockfile {shlex.quote(str(path))}"
    if not valid:
        return fixes.say(f"write it afresh with `safehub lock --rewrite{where} SPEC...` "
                         f"(every spec you need), or mend {what} named above by hand; no "
                         "repo loads until then (fail closed)")
    return fixes.either(
        fixes.run(f"safehub lock --rewrite{where} " + " ".join(shlex.quote(v) for v in
                                                              dict.fromkeys(valid)),
                  "(writes it afresh, re-resolving what it pinned, so review the diff)"),
        fixes.say(f"mend {what} named above by hand"))


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
            missing = PinError(f"lockfile {path} does not exist",
                               fix=fixes.either(fixes.run("safehub lock SPEC", "to create it"),
                                                 fixes.say("fix SAFEHUB_LOCKFILE or the "
                                                           "policy's lockfile")))
            missing.missing_lockfile = True
            raise missing from None
        except (OSError, UnicodeDecodeError) as e:
            raise PinError(f"lockfile {path} cannot be read ({e})",
                           fix=fixes.say("it must be a readable UTF-8 file: fix its permissions, "
                           "or write it afresh with `safehub lock --rewrite SPEC...`; no repo "
                                         "loads until then (fail closed)")) from e
        try:
            raw = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as e:  # or nested beyond any use
            listed = re.findall(r'^\s*spec\s*=\s*"([^"\\]+)"', text, re.MULTILINE)
            raise PinError(f"lockfile {path} is not valid TOML ({e})",
                           fix=rewrite_hint(path, listed, "the line")) from e
        return cls(path, parse(raw, path))

    def get(self, spec: RepoSpec) -> LockEntry | None:
        return self.entries.get(spec_key(spec))

    def locked(self, spec: RepoSpec) -> Locked | None:
        """The entry of ``spec`` with this file, or None if it is not locked here."""
        entry = self.get(spec)
        return Locked(entry, self.path) if entry is not None else None

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
            for name in _ORDER:
                value = getattr(e, name)
                if value or FIELDS[name][0]:
                    out.append(f"{name} = {_toml_str(value)}\n")
            out.extend(w.table() for w in e.weights)
        return "".join(out)

    def save(self) -> None:
        try:
            atomic_write(self.path, self.dumps().encode())
        except OSError as e:
            raise PinError(f"cannot write the lockfile {self.path} ({e.strerror or e})",
                           fix=fixes.say("fix the folder's permissions, or choose another path "
                                         "with --lockfile or SAFEHUB_LOCKFILE")) from e


def _toml_str(value: str) -> str:
    # A JSON string with non-ASCII escaped is a valid TOML basic string.
    return json.dumps(value, ensure_ascii=True)
