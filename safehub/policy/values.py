"""The value types of policy keys: what each key's value may be, checked as it is read.

:mod:`safehub.policy.keys` declares every key with one of these types; the validator
(:mod:`safehub.policy.schema`) calls :meth:`ValueType.check` and the docs' key tables
:meth:`ValueType.describe`.
"""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar

from safehub._internal.frozen import Frozen
from safehub._internal.globs import Glob
from safehub._internal.hosts import HostPattern
from safehub._internal.ocirefs import split_place
from safehub._internal.programs import check_entry

__all__ = ["Bool", "Choice", "Choices", "Fault", "GlobValue", "Globs", "Hosts", "HttpsUrl",
           "OciPlaces", "PathList", "PathValue", "Ports", "ProgramList", "Programs", "Tables",
           "Text", "ValueType", "Version"]


class Fault(ValueError):
    """One thing wrong with one value (the validator collects them all)."""


# -- value types -----------------------------------------------------------------------------


class ValueType(Frozen):
    """A kind of value: how to check it, how to describe it."""

    name: ClassVar[str] = "value"

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


class Bool(ValueType):
    """``true`` or ``false``."""

    name = "true or false"

    def check(self, value: Any) -> bool:
        if type(value) is not bool:
            raise Fault(f"must be true or false (a TOML boolean), not {_kind(value)}")
        return value


class Version(ValueType):
    """The policy format's version: ``1``."""

    name = "1"

    def check(self, value: Any) -> int:
        if type(value) is not int or value != 1:
            raise Fault("must be 1 (the only format version)")
        return value


class Choice(ValueType):
    """One of ``values``, listed from the loosest to the strictest."""

    name = "choice"
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


class Choices(ValueType):
    """A non-empty list of ``values`` (``weights_format``), each listed once."""

    name = "list of choices"
    values: tuple[str, ...] = ()

    def check(self, value: Any) -> tuple[str, ...]:
        items = _need_list(value, "strings")
        if not items or any(type(v) is not str or v not in self.values for v in items):
            raise Fault(f"must be a non-empty list of these: {self.describe()}")
        return tuple(dict.fromkeys(items))

    def describe(self) -> str:
        return "list of " + ", ".join(f'`"{v}"`' for v in self.values)


class Text(ValueType):
    """A string (``nonempty``: not an empty one)."""

    name = "text"
    nonempty: bool = False

    def check(self, value: Any) -> str:
        text = _need_str(value)
        if self.nonempty and not text:
            raise Fault("must not be empty")
        return text


class PathValue(ValueType):
    """A path, relative to the policy file's folder. ``exists`` files are checked when the
    file is read (fail closed); ``pem`` ones must hold a PEM public key or certificate."""

    name = "path"
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


class PathList(ValueType):
    """A list of paths, each checked as ``item`` says."""

    name = "list of paths"
    item: PathValue = PathValue()

    def check(self, value: Any) -> tuple[str, ...]:
        return tuple(self.item.check(v) for v in _need_list(value, "paths"))


class HttpsUrl(ValueType):
    """An ``https://`` URL with a host."""

    name = "https:// URL"

    def check(self, value: Any) -> str:
        from safehub._internal.urls import UrlError, read_url

        text = _need_str(value)
        try:
            read_url(text)  # as the transport will read it
        except UrlError as e:
            raise Fault(f"must be a plain https:// URL with a host: {e}; {e.advice}") from None
        return text


class Hosts(ValueType):
    """Host names (``allowed_hosts``); with ``network``, every entry form of the runtime
    guard's ``network`` key (:class:`safehub._internal.hosts.HostPattern`, the one
    grammar): ``host``, ``host:port``, ``*.domain``, an IP address, ``[v6]:port``,
    ``unix:/path``."""

    name = "list of host names"
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


class OciPlaces(ValueType):
    """Where locked snapshots are read from (``oci``): ``REGISTRY/REPOSITORY`` or
    ``oci:DIR`` entries, in order (:mod:`safehub._internal.ocirefs`)."""

    name = "list of `REGISTRY/REPOSITORY` or `oci:DIR`"

    def check(self, value: Any) -> tuple[str, ...]:
        items = _need_list(value, "registries")
        for item in items:
            text = _need_str(item, "a registry")
            try:
                split_place(text)
            except ValueError as e:
                raise Fault(f"{text!r}: {e}") from None
        return tuple(items)


class GlobValue(ValueType):
    """One glob of the policy dialect (see :mod:`safehub._internal.globs`)."""

    name = "glob"
    https: bool = False
    repo: bool = False

    def check(self, value: Any) -> str:
        text = _need_str(value, "a pattern (a string)")
        if not text or not text.isascii():
            raise Fault(f"patterns must be non-empty ASCII (got {text!r})")
        if self.https and text.startswith("hf://"):  # a Hugging Face Hub repo (run/hfhub.py)
            if not re.fullmatch(_HF_GLOB, text):
                raise Fault(f"{text!r}: write a Hub repo as hf://org/name, hf://org/name/* "
                            "or hf://datasets/org/name (globs * ? [ ] allowed)")
        elif self.https and not text.startswith("https://"):
            raise Fault(f"{text!r}: weights are only ever fetched over https://; start the "
                        "pattern with https:// (or hf:// for a Hugging Face Hub repo)")
        elif self.https:
            from safehub._internal.urls import UrlError, pattern_authority

            try:
                pattern_authority(text)  # where the transport's reading puts the host
            except UrlError as e:
                raise Fault(f"{e}; no URL safehub fetches could match it: {e.advice}"
                            ) from None
        if self.repo and not re.fullmatch(_REPO_GLOB, text):
            raise Fault(f"must be 'owner/name' in GitHub's ASCII characters, with * ? [ ] "
                        f"globs (got {text!r})")
        try:
            Glob(text, fold=self.repo)
        except ValueError as e:
            raise Fault(str(e)) from None
        return text


# Compiled on first use (re's own cache), not by every process that reads the key table.
_HF_GLOB = (r"hf://(?:(?:datasets|spaces)/)?[A-Za-z0-9._*?\[\]!-]+/"
            r"[A-Za-z0-9._*?\[\]!-]+(?:/[A-Za-z0-9._~*?\[\]!/-]*)?")
_REPO_GLOB = r"[A-Za-z0-9*?\[\]!-]+/[A-Za-z0-9._*?\[\]!-]+"


class Globs(ValueType):
    """A list of globs, each checked as ``item`` says."""

    name = "list of globs"
    item: GlobValue = GlobValue()

    def check(self, value: Any) -> tuple[str, ...]:
        return tuple(self.item.check(v) for v in _need_list(value, "patterns"))

    def describe(self) -> str:
        return "list of https:// URL or hf:// repo globs" if self.item.https else self.name


class Programs(ValueType):
    """``false`` (no process), ``true`` (any), or the programs that may start (names or
    absolute paths: :func:`safehub._internal.programs.check_entry`, the one rule)."""

    name = "false, true or a list of program names"

    def check(self, value: Any) -> bool | tuple[str, ...]:
        if type(value) is bool:
            return value
        items = _need_list(value, "program names") if type(value) is list else None
        if items is None:
            raise Fault(f"must be true, false or a list of program names, not {_kind(value)}")
        return _programs(items)


class ProgramList(ValueType):
    """Program names or absolute paths (``[confine] exec``)."""

    name = "list of program names or absolute paths"

    def check(self, value: Any) -> tuple[str, ...]:
        return _programs(_need_list(value, "program names"))


def _programs(items: list[Any]) -> tuple[str, ...]:
    """Program entries by the one rule of ``safehub._internal.programs``."""
    for v in items:
        try:
            check_entry(_need_str(v, "a program name"))
        except ValueError as e:
            raise Fault(str(e)) from None
    return tuple(items)


class Ports(ValueType):
    """TCP port numbers, 1 to 65535."""

    name = "list of port numbers"

    def check(self, value: Any) -> tuple[int, ...]:
        items = _need_list(value, "port numbers")
        for v in items:
            if type(v) is not int or not 0 < v < 65536:
                raise Fault(f"{v!r} is not a port number from 1 to 65535")
        return tuple(items)


class Tables(ValueType):
    """A list of tables whose keys are declared in another scope (``[[allow.signers]]``)."""

    name = "list of tables"
    scope: str = ""

    def check(self, value: Any) -> Any:
        return _need_list(value, "tables")  # each table is checked by the validator
