"""Reading one policy file against the declaration in :mod:`safehub.policy.keys`.

:func:`validate` checks a parsed TOML document and names *every* fault at once (file, key,
value, the allowed form); types are strict (a string is never a boolean). It imports
nothing heavy, and it is the only validator of a policy file: what it accepts is what a
load obeys.

Files that arrive with a project (``./safehub.toml``, ``origin="project"``) may set only
the keys the declaration allows them, and every path they name must resolve inside the
project folder (symlinks followed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from safehub._internal import fixes
from safehub._internal.frozen import Frozen
from safehub._internal.fsutil import within
from safehub._internal.text import did_you_mean
from safehub.errors import PolicyError
from safehub.policy.keys import KEYS, TABLE_NAMES, Key
from safehub.policy.values import Fault, PathList, PathValue, Tables

__all__ = ["FileSpec", "Table", "parse_text", "validate"]



def _fix(source: str, origin: str) -> str:
    """The fix of an invalid file: the command that lists its faults by the rules of its
    role (a file named safehub.toml is validated as a project's unless told otherwise)."""
    import shlex

    project = Path(source).name == "safehub.toml"
    role = f" --as {origin}" if (origin == "project") != project else ""
    return (f"fix the file (`safehub policy validate {shlex.quote(source)}{role}` lists every "
            "fault); until then no repo loads on this machine (fail closed)")


class Table(Frozen):
    """A validated table: every declared key of its scope, given or defaulted.

    Read a key as ``table.pin`` or ``table["pin"]``.
    """

    scope: str
    values: Mapping[str, Any]
    given: frozenset[str] = frozenset()

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __hash__(self) -> int:
        return hash((self.scope, tuple(sorted(self.values.items(), key=lambda kv: kv[0]))))

    def set_values(self) -> dict[str, Any]:
        """The keys given in the file, for ``safehub policy show``."""
        return {k: self.values[k] for k in KEYS[self.scope] if k in self.given}


class FileSpec(Frozen):
    """One policy file as validated: its ``[safehub]`` table and its rules."""

    source: str
    origin: str
    safehub: Table
    allow: tuple[Table, ...] = ()
    deny: tuple[Table, ...] = ()
    confine: Table | None = None
    """The ``[confine]`` table, if the file has one."""
    oci: Table | None = None
    """The ``[oci]`` table (the fleet signature), if the file has one."""

    @property
    def warns(self) -> bool:
        """The file says ``mode = "warn"``: its own refusals only warn, no other file's.

        >>> parse_text('[safehub]\\nmode = "warn"\\n', "rollout.toml").warns
        True
        """
        return bool(self.safehub.mode == "warn")


class _Faults:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")


def _table(scope: str, raw: Any, where: str, faults: _Faults,
           resolve: Callable[[Key, str, str], Any]) -> Table | None:
    keys = KEYS[scope]
    if type(raw) is not dict:
        faults.add(where, f"must be a table ({TABLE_NAMES[scope]}), not {type(raw).__name__}")
        return None
    values: dict[str, Any] = {}
    ok = True
    for name, value in raw.items():
        key = keys.get(name)
        here = f"{where}.{name}"
        if key is None:
            faults.add(here, f"unknown key{did_you_mean(name, list(keys))}; allowed keys "
                       f"in {TABLE_NAMES[scope]}: " + ", ".join(keys))
            ok = False
            continue
        try:
            checked = key.type.check(value)
            if isinstance(key.type, Tables):
                checked = _tables(key.type.scope, checked, here, faults, resolve)
            values[name] = resolve(key, checked, here)
        except _Nested:
            ok = False
        except Fault as e:
            shown = ("" if isinstance(value, list | dict) or "(got " in str(e)
                     else f" (got {value!r})")
            faults.add(here, f"{e}{shown}")
            ok = False
    for key in keys.values():
        if key.required and key.name not in raw:
            faults.add(f"{where}.{key.name}", "required key is missing")
            ok = False
    # Checks across keys see what was given (raw where a key itself failed), so every
    # fault of the table is named at once.
    view = Table(scope, {k.name: values.get(k.name, raw.get(k.name, k.default))
                         for k in keys.values()}, frozenset(raw))
    for check in _TABLE_CHECKS.get(scope, ()):
        try:
            check(view)
        except Fault as e:
            faults.add(where, str(e))
            ok = False
    if not ok:
        return None
    return Table(scope, {k.name: values.get(k.name, k.default) for k in keys.values()},
                 frozenset(raw))


def _tables(scope: str, items: list[Any], where: str, faults: _Faults,
            resolve: Callable[[Key, str, str], Any]) -> tuple[Table, ...]:
    before = len(faults.items)
    tables = [_table(scope, item, f"{where}[{i}]", faults, resolve)
              for i, item in enumerate(items)]
    if len(faults.items) != before:
        raise _Nested
    return tuple(t for t in tables if t is not None)


class _Nested(Fault):
    """Faults inside nested tables were already recorded."""


def _signature_needs_someone(rule: Table) -> None:
    anyone = rule.signers or rule.keys or rule.certificates
    if rule.signature == "none" and anyone:
        raise Fault("signers, keys or certificates are given but signature = 'none'; set "
                    "signature = 'required' or 'if-present'")
    if rule.signature != "none" and not anyone:
        raise Fault(f"signature = {rule.signature!r} needs at least one entry in signers, "
                    "keys or certificates, to say whose signature counts")


def _fleet_signature_needs_someone(table: Table) -> None:
    anyone = table.signers or table.keys
    if table.signature == "none" and anyone:
        raise Fault("signers or keys are given but signature = 'none'; set "
                    "signature = 'required'")
    if table.signature != "none" and not anyone:
        raise Fault("signature = 'required' needs at least one entry in signers or keys, "
                    "to say whose fleet signature counts")


_TABLE_CHECKS: dict[str, tuple[Callable[[Table], None], ...]] = {
    "allow": (_signature_needs_someone,),
    "oci": (_fleet_signature_needs_someone,),
}


def validate(data: Any, source: str, *, origin: str = "user") -> FileSpec:
    """Check a parsed policy document; raise :class:`PolicyError` naming every fault.

    Relative paths are resolved against the folder of ``source``; files a key says must
    exist are checked now (fail closed). ``origin`` is ``site``, ``user``, ``project`` or
    ``extra`` (``SAFEHUB_POLICY``).
    """
    faults = _Faults()
    base = Path(source).parent
    project = origin == "project"

    def resolve(key: Key, value: Any, where: str) -> Any:
        if project and not key.project:
            raise Fault(f"cannot be set in a project's ./{Path(source).name}: it would decide "
                        f"where code comes from (set it in the user or site policy"
                        + (f", or with {key.env})" if key.env else ")"))
        if isinstance(key.type, PathValue):
            return _path(key.type, value, base, project)
        if isinstance(key.type, PathList):
            return tuple(_path(key.type.item, v, base, project) for v in value)
        return value

    section: Table | None = Table("safehub", {k.name: k.default for k in KEYS["safehub"].values()})
    single: dict[str, Table | None] = {"confine": None, "oci": None}
    rules: dict[str, list[Table]] = {"allow": [], "deny": []}
    if type(data) is not dict:
        faults.add("(top level)", "must be a TOML document")
    else:
        for name in data:
            if name not in ("safehub", "confine", "oci", "allow", "deny"):
                faults.add(name, "unknown table; allowed: [safehub], [confine], [oci], "
                           "[[allow]], [[deny]]")
        if "safehub" in data:
            section = _table("safehub", data["safehub"], "safehub", faults, resolve)
        for name in single:
            if name in data:
                single[name] = _table(name, data[name], name, faults, resolve)
        for scope in ("allow", "deny"):
            raw = data.get(scope, [])
            if type(raw) is not list:
                faults.add(scope, f"must be a list of tables ({TABLE_NAMES[scope]}), "
                           f"not {type(raw).__name__}")
                continue
            for i, item in enumerate(raw):
                table = _table(scope, item, f"{scope}[{i}]", faults, resolve)
                if table is not None:
                    rules[scope].append(table)
    if faults.items or section is None:
        error = PolicyError(f"policy file {source} is invalid:", details=faults.items,
                            fix=fixes.say(_fix(source, origin)))
        error.faults = tuple(faults.items)
        raise error
    return FileSpec(source, origin, section, tuple(rules["allow"]), tuple(rules["deny"]),
                    single["confine"], single["oci"])


def _path(kind: PathValue, value: str, base: Path, project: bool) -> str:
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = base / path
    if project:
        real, root = os.path.realpath(path), os.path.realpath(base)
        if not within(real, root):
            raise Fault(f"{value!r} leads outside the project folder {root}; a project's "
                        "policy may only name files inside it")
    if kind.exists:
        if not path.is_file():
            raise Fault(f"file {str(path)!r} does not exist (relative paths are relative to "
                        "the policy file)")
        if kind.pem:
            _check_pem(path, kind.pem)
    return str(path)


def _check_pem(path: Path, what: str) -> None:
    try:
        data = path.read_bytes()
        if what == "certificate":
            from cryptography import x509

            x509.load_pem_x509_certificates(data)
        else:  # a key: x509 not imported (about 10 ms a fleet node's signed load would pay)
            from cryptography.hazmat.primitives import serialization

            serialization.load_pem_public_key(data)
    except (OSError, ValueError, TypeError) as e:
        raise Fault(f"{str(path)!r} is not a PEM {what} ({str(e).splitlines()[0]})") from None


def parse_text(text: str, source: str, *, origin: str = "user") -> FileSpec:
    """Parse TOML ``text`` and :func:`validate` it."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as e:  # or nested beyond any use
        raise PolicyError(f"policy file {source}: not valid TOML ({e})",
                          fix=fixes.say(_fix(source, origin))) from e
    return validate(data, source, origin=origin)
