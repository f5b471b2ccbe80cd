"""The fixes a refusal suggests, as data, written so that they work when applied as written.

A fix is a small frozen value; an error carries one (:attr:`safehub.SafehubError.fix`),
its hint is the fix rendered as text (:func:`render`, the one place that writes it), and
the command line's ``--json`` error object shows it as data too (:func:`to_json`):

* :class:`Run`: a command to run, on its own line (``safehub trust org/repo:<sha>``);
* :class:`AddLines`: lines to add at the end of a policy file;
* :class:`SetKeys`: keys to set in one rule of a policy file
  (``[[allow]] #2 (org/*)``: the second ``[[allow]]`` of that file);
* :class:`RemoveRule`: a rule to remove from a policy file;
* :class:`Call`: an argument of the Python call (``trust_repo=True``), which the command
  line writes as its flag (``--trust``) and code routed from torch.hub as ``torch.hub.load``;
* :class:`Say`: anything else (advice, what to check);
* :class:`AnyOf`: alternatives, any one of them enough; :class:`AllOf`: fixes that are all
  needed (two requirements block); :class:`Noted`: a fix with words around it.

:func:`render` writes a fix for one surface: ``api`` (a Python caller of ``safehub.load``),
``cli`` (the command words: ``--trust``, and the ``--cache-dir``/``--lockfile`` this command
was given carried to the commands a fix names: :class:`CommandLine`), ``torchhub`` (code that
called ``torch.hub.load``, routed through safehub) and ``json`` (the data, :func:`to_json`).
Nothing rewrites text once rendered: each surface is written from the data.

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from safehub._internal.frozen import Frozen, fields, replace

__all__ = ["SURFACES", "AddLines", "AllOf", "AnyOf", "Call", "CommandLine", "Fix", "Noted",
           "RemoveRule", "Run", "Say", "SetKeys", "add", "both", "call", "change",
           "clear_cache", "either", "from_json", "noted", "quote", "remove", "render", "reworded",
           "run", "say", "to_json"]

#: Where a fix is shown: a Python caller, the command line, torch.hub's routed calls, JSON.
SURFACES = ("api", "cli", "torchhub", "json")

_INDENT = "      "


class Run(Frozen):
    """A command to run (``where``: a condition, such as "on a machine with network")."""

    command: str
    where: str = ""


class AddLines(Frozen):
    """Lines to add at the end of the policy file ``file``."""

    file: str
    lines: tuple[str, ...]


class SetKeys(Frozen):
    """``key = value`` lines to set in ``rule`` (``[[allow]] #N (repo)``) of ``file``."""

    file: str
    rule: str
    keys: tuple[str, ...]


class RemoveRule(Frozen):
    """Remove ``rule`` (``[[deny]] #N (repo)``) from the policy file ``file``."""

    file: str
    rule: str


class Call(Frozen):
    """An argument of the Python call (``force_reload``), its value (``True``; empty: the
    argument named alone) and the function (``load``: "pass ... to safehub.load"; empty:
    the call that failed). The command line writes it as the flag for it (``--trust``),
    code routed from torch.hub as a call of ``torch.hub.load``; no argument: the function
    itself (``safehub.list``, ``safehub list``)."""

    argument: str = ""
    value: str = ""
    function: str = ""


class Say(Frozen):
    """Anything that is not applied mechanically: an API argument, a flag, advice."""

    text: str


class AnyOf(Frozen):
    """Alternatives: any one of them is enough."""

    options: tuple[Fix, ...]


class AllOf(Frozen):
    """Fixes that are all needed (two requirements block)."""

    needed: tuple[Fix, ...]


class Noted(Frozen):
    """``fix`` with words before and after it (why, or what to check first)."""

    fix: Fix
    before: str = ""
    after: str = ""


Fix = Run | AddLines | SetKeys | RemoveRule | Call | Say | AnyOf | AllOf | Noted


class CommandLine(Frozen):
    """What the command line's rendering needs from the command that failed: the shared
    options it was given (``("--cache-dir", DIR)``), which a command a fix names carries too
    where that command takes them (``takes``: command words, such as ``cache clear``, to
    its options), else the fix would act on other files."""

    given: tuple[tuple[str, str], ...] = ()
    takes: Mapping[str, frozenset[str]] | None = None


#: The command line's flag for an argument of the Python API (else ``--the-argument``).
_FLAGS = {"trust_repo": "--trust", "force_reload": "--force-reload"}


def run(command: str, where: str = "") -> Run:
    return Run(command, where)


def quote(word: object) -> str:
    """``word`` as one word of a fix's shell command (``shlex.quote``; imported when a fix
    is written, not with every module that can write one)."""
    import shlex

    return shlex.quote(str(word))


def add(path: object, lines: Sequence[str]) -> AddLines:
    return AddLines(str(path), tuple(lines))


def change(path: object, table: str, lines: Sequence[str]) -> SetKeys:
    return SetKeys(str(path), table, tuple(lines))


def remove(path: object, table: str) -> RemoveRule:
    return RemoveRule(str(path), table)


def call(argument: str = "", value: str = "", function: str = "") -> Call:
    return Call(argument, value, function)


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
                  noted(call("force_reload", "True"), "load with ",
                        " (a fresh copy, fetched and verified)"))


def render(fix: Fix, surface: str = "api", field: Callable[[str], str] | None = None, *,
           command_line: CommandLine | None = None) -> str:
    """The fix as the hint's text on ``surface`` (one of :data:`SURFACES`): each
    alternative complete on its own.

    ``field``: applied to each text of the fix (a command, a file, a line) before the
    layout is added; a terminal passes :func:`safehub._internal.text.printable`, so that
    only the line breaks written here reach it. ``command_line``: on ``cli``, the options
    the command was given that the commands a fix names carry too. ``json``: the data
    (:func:`to_json`) as JSON text.

    >>> fix = noted(call("force_reload", "True"), "retry with ")
    >>> render(fix), render(fix, "cli"), render(call("trust_repo", "True", "load"), "torchhub")
    ('retry with force_reload=True', 'retry with --force-reload', \
'pass trust_repo=True to torch.hub.load')
    """
    if surface not in SURFACES:
        raise ValueError(f"surface {surface!r} is not one of {', '.join(SURFACES)}")
    if surface == "json":
        import json

        return json.dumps(to_json(fix, command_line=command_line))
    if field is not None:
        fix = reworded(fix, field)
    return _written(fix, surface, command_line or CommandLine())


def _written(fix: Fix, surface: str, command_line: CommandLine) -> str:
    if isinstance(fix, Run):
        command = _with_options(fix.command, command_line) if surface == "cli" else fix.command
        return f"run{' ' + fix.where if fix.where else ''}:\n{_INDENT}{command}"
    if isinstance(fix, AddLines):
        return f"add to {fix.file}:\n" + "\n".join(_INDENT + line for line in fix.lines)
    if isinstance(fix, SetKeys):
        return (f"in {fix.file}, set in {fix.rule}:\n"
                + "\n".join(_INDENT + line for line in fix.keys))
    if isinstance(fix, RemoveRule):
        return f"in {fix.file}, remove {fix.rule}"
    if isinstance(fix, Call):
        return _call(fix, surface)
    if isinstance(fix, Say):
        return fix.text
    if isinstance(fix, AnyOf):
        return "\n    or ".join(_written(o, surface, command_line) for o in fix.options)
    if isinstance(fix, AllOf):
        return "\n    and ".join(_written(n, surface, command_line) for n in fix.needed)
    return fix.before + _written(fix.fix, surface, command_line) + fix.after


def _call(fix: Call, surface: str) -> str:
    if surface == "cli":
        if not fix.argument:
            return f"safehub {fix.function}"
        flag = _FLAGS.get(fix.argument, "--" + fix.argument.replace("_", "-"))
        if fix.value not in ("", "True"):
            flag += f" {fix.value}"
        return f"add {flag} to the command" if fix.function else flag
    prefix = "torch.hub." if surface == "torchhub" else "safehub."
    if not fix.argument:
        return prefix + fix.function
    argument = f"{fix.argument}={fix.value}" if fix.value else fix.argument
    return f"pass {argument} to {prefix}{fix.function}" if fix.function else argument


def _with_options(command: str, command_line: CommandLine) -> str:
    """``command`` with the options this command line was given that it takes."""
    import shlex

    words = command.split()
    if len(words) < 2 or words[0] != "safehub" or not command_line.given:
        return command
    options = command_line.takes or {}
    verb = " ".join(words[1:3]) if " ".join(words[1:3]) in options else words[1]
    takes = options.get(verb, frozenset())
    command, gap, note = command.partition("   (")  # a note after the command
    for flag, value in command_line.given:
        if flag in takes and flag not in words:
            command += f" {flag} {shlex.quote(value)}"
    return command + gap + note


def to_json(fix: Fix, surface: str = "api", *,
            command_line: CommandLine | None = None) -> dict[str, Any]:
    """The fix as JSON data: ``kind`` (``run``, ``add_lines``, ``set_keys``,
    ``remove_rule``, ``call``, ``say``, ``any_of``, ``all_of``, ``noted``) and its fields,
    as ``surface`` writes them: a ``call`` carries its ``text`` there (``add --trust to the
    command``), a ``run`` on ``cli`` its command with this command line's options.

    >>> to_json(call("trust_repo", "True", "load"), "cli")["text"]
    'add --trust to the command'
    """
    line = command_line or CommandLine()
    kind = next(name for name, cls in _KINDS.items() if cls is type(fix))
    data: dict[str, Any] = {"kind": kind}
    for name in fields(fix):
        value = getattr(fix, name)
        if isinstance(value, tuple):
            value = [to_json(v, surface, command_line=line) if not isinstance(v, str) else v
                     for v in value]
        elif not isinstance(value, str):
            value = to_json(value, surface, command_line=line)
        elif isinstance(fix, Run) and name == "command" and surface == "cli":
            value = _with_options(value, line)
        data[name] = value
    if isinstance(fix, Call):
        data["text"] = _call(fix, surface)
    return data


def from_json(data: Any) -> Fix:
    """The fix :func:`to_json` wrote (what a parent process sent a confined job); any other
    value is :class:`ValueError`.

    >>> fix = either(run("safehub trust a/b:v1"), noted(call("force_reload", "True"), "or "))
    >>> from_json(to_json(fix, "cli")) == fix
    True
    """
    if not isinstance(data, dict) or data.get("kind") not in _KINDS:
        raise ValueError(f"not a fix: {str(data)[:80]!r}")
    kind = _KINDS[data["kind"]]
    values: dict[str, Any] = {}
    for name in fields(kind):
        value = data.get(name, "")
        if name in ("options", "needed"):
            value = tuple(from_json(v) for v in value)
        elif name == "fix":
            value = from_json(value)
        elif name in ("lines", "keys"):
            value = tuple(str(v) for v in value)
        elif not isinstance(value, str):
            raise ValueError(f"not a fix: {name} is not text")
        values[name] = value
    fix: Fix = kind(**values)
    return fix


_KINDS: dict[str, Any] = {"run": Run, "add_lines": AddLines, "set_keys": SetKeys,
                          "remove_rule": RemoveRule, "call": Call, "say": Say, "any_of": AnyOf,
                          "all_of": AllOf, "noted": Noted}


def reworded(fix: Fix, change: Callable[[str], str]) -> Fix:
    """``fix`` with ``change`` applied to each of its texts (a command, a line, a file...)."""
    values: dict[str, Any] = {}
    for name in fields(fix):
        value = getattr(fix, name)
        if isinstance(value, str):
            values[name] = change(value)
        elif isinstance(value, tuple):
            values[name] = tuple(change(v) if isinstance(v, str) else reworded(v, change)
                                 for v in value)
        else:
            values[name] = reworded(value, change)
    return replace(fix, **values)
