"""The fixes a refusal suggests, as data, written so that they work when applied as written.

A fix is a small frozen value; an error carries one (:attr:`safehub.SafehubError.fix`),
its hint is the fix rendered as text (:func:`render`, the one place that writes it), and
the command line's ``--json`` error object shows it as data too (:func:`to_json`):

* :class:`Run`: a command to run, on its own line (``safehub trust org/repo:<sha>``);
* :class:`AddLines`: lines to add at the end of a policy file;
* :class:`SetKeys`: keys to set in one rule of a policy file
  (``[[allow]] #2 (org/*)``: the second ``[[allow]]`` of that file);
* :class:`RemoveRule`: a rule to remove from a policy file;
* :class:`Say`: anything else (an API argument, a command-line flag);
* :class:`AnyOf`: alternatives, any one of them enough; :class:`AllOf`: fixes that are all
  needed (two requirements block); :class:`Noted`: a fix with words around it.

Tests apply each kind mechanically and check that the next attempt gets past the refusal
(tests/test_fixes.py).

>>> fix = either(run("safehub trust a/b:v1"), add("p.toml", ["[[allow]]", 'repo = "a/b"']))
>>> fix.options[0]
Run(command='safehub trust a/b:v1', where='')
>>> print(render(fix))
run:
      safehub trust a/b:v1
    or add to p.toml:
      [[allow]]
      repo = "a/b"
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["AddLines", "AllOf", "AnyOf", "Fix", "Noted", "RemoveRule", "Run", "Say",
           "SetKeys", "add", "both", "change", "clear_cache", "either", "noted", "remove",
           "render", "reworded", "run", "say", "to_json"]

_INDENT = "      "


@dataclass(frozen=True)
class Run:
    """A command to run (``where``: a condition, such as "on a machine with network")."""

    command: str
    where: str = ""


@dataclass(frozen=True)
class AddLines:
    """Lines to add at the end of the policy file ``file``."""

    file: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class SetKeys:
    """``key = value`` lines to set in ``rule`` (``[[allow]] #N (repo)``) of ``file``."""

    file: str
    rule: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class RemoveRule:
    """Remove ``rule`` (``[[deny]] #N (repo)``) from the policy file ``file``."""

    file: str
    rule: str


@dataclass(frozen=True)
class Say:
    """Anything that is not applied mechanically: an API argument, a flag, advice."""

    text: str


@dataclass(frozen=True)
class AnyOf:
    """Alternatives: any one of them is enough."""

    options: tuple[Fix, ...]


@dataclass(frozen=True)
class AllOf:
    """Fixes that are all needed (two requirements block)."""

    needed: tuple[Fix, ...]


@dataclass(frozen=True)
class Noted:
    """``fix`` with words before and after it (why, or what to check first)."""

    fix: Fix
    before: str = ""
    after: str = ""


Fix = Run | AddLines | SetKeys | RemoveRule | Say | AnyOf | AllOf | Noted


def run(command: str, where: str = "") -> Run:
    return Run(command, where)


def add(path: object, lines: Sequence[str]) -> AddLines:
    return AddLines(str(path), tuple(lines))


def change(path: object, table: str, lines: Sequence[str]) -> SetKeys:
    return SetKeys(str(path), table, tuple(lines))


def remove(path: object, table: str) -> RemoveRule:
    return RemoveRule(str(path), table)


def say(text: str) -> Say:
    return Say(text)


def noted(fix: Fix, before: str = "", after: str = "") -> Noted:
    return Noted(fix, before, after)


def either(*alternatives: Fix | None) -> Fix:
    """Alternatives (those given); one alone is itself."""
    given = tuple(a for a in alternatives if a is not None)
    return given[0] if len(given) == 1 else AnyOf(given)


def both(*needed: Fix | None) -> Fix:
    """Fixes that are all needed (those given); one alone is itself."""
    given = tuple(n for n in needed if n is not None)
    return given[0] if len(given) == 1 else AllOf(given)


def clear_cache(path: object) -> Fix:
    """The fix for a cached file that changed: clear that commit (or load afresh)."""
    commit = next((part for part in str(path).split("/") if len(part) == 40
                   and all(c in "0123456789abcdef" for c in part)), "")
    return either(run(f"safehub cache clear {commit}".rstrip()),
                  say("load with force_reload=True (a fresh copy, fetched and verified)"))


def render(fix: Fix, field: Callable[[str], str] | None = None) -> str:
    """The fix as the hint's text: each alternative complete on its own.

    ``field``: applied to each text of the fix (a command, a file, a line) before the
    layout is added; a terminal passes :func:`safehub._internal.text.printable`, so that
    only the line breaks written here reach it.
    """
    if field is not None:
        fix = reworded(fix, field)
    if isinstance(fix, Run):
        return f"run{' ' + fix.where if fix.where else ''}:\n{_INDENT}{fix.command}"
    if isinstance(fix, AddLines):
        return f"add to {fix.file}:\n" + "\n".join(_INDENT + line for line in fix.lines)
    if isinstance(fix, SetKeys):
        return (f"in {fix.file}, set in {fix.rule}:\n"
                + "\n".join(_INDENT + line for line in fix.keys))
    if isinstance(fix, RemoveRule):
        return f"in {fix.file}, remove {fix.rule}"
    if isinstance(fix, Say):
        return fix.text
    if isinstance(fix, AnyOf):
        return "\n    or ".join(render(o) for o in fix.options)
    if isinstance(fix, AllOf):
        return "\n    and ".join(render(n) for n in fix.needed)
    return fix.before + render(fix.fix) + fix.after


def to_json(fix: Fix) -> dict[str, Any]:
    """The fix as JSON data: ``kind`` (``run``, ``add_lines``, ``set_keys``,
    ``remove_rule``, ``say``, ``any_of``, ``all_of``, ``noted``) and its fields."""
    kind = {Run: "run", AddLines: "add_lines", SetKeys: "set_keys", RemoveRule: "remove_rule",
            Say: "say", AnyOf: "any_of", AllOf: "all_of", Noted: "noted"}[type(fix)]
    data: dict[str, Any] = {"kind": kind}
    for f in fields(fix):
        value = getattr(fix, f.name)
        if isinstance(value, tuple):
            value = [to_json(v) if not isinstance(v, str) else v for v in value]
        elif not isinstance(value, str):
            value = to_json(value)
        data[f.name] = value
    return data


def reworded(fix: Fix, change: Callable[[str], str]) -> Fix:
    """``fix`` with ``change`` applied to each of its texts (a command, a line, a file...)."""
    values: dict[str, Any] = {}
    for f in fields(fix):
        value = getattr(fix, f.name)
        if isinstance(value, str):
            values[f.name] = change(value)
        elif isinstance(value, tuple):
            values[f.name] = tuple(change(v) if isinstance(v, str) else reworded(v, change)
                                   for v in value)
        else:
            values[f.name] = reworded(value, change)
    return replace(fix, **values)
