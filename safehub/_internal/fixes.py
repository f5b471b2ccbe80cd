"""The fixes a refusal suggests, written so that they work when applied as written.

Every hint is made of alternatives, each one complete on its own:

* ``run(command)``: a command to run, on its own line (``safehub trust org/repo:<sha>``);
* ``add(path, lines)``: lines to add at the end of a policy file;
* ``change(path, table, lines)``: keys to set in one table of a policy file
  (``[[allow]] #2 (org/*)``: the second ``[[allow]]`` of that file);
* ``say(text)``: anything else (an API argument, a command-line flag).

``either`` joins alternatives. Tests apply each kind mechanically and check that the next
attempt gets past the refusal (tests/test_fixes.py).

>>> print(either(run("safehub trust a/b:v1"), add("p.toml", ["[[allow]]", 'repo = "a/b"'])))
run:
      safehub trust a/b:v1
    or add to p.toml:
      [[allow]]
      repo = "a/b"
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["add", "both", "change", "clear_cache", "either", "remove", "run", "say"]

_INDENT = "      "


def run(command: str, where: str = "") -> str:
    """A command to run (``where``: a condition, such as "on a machine with network")."""
    return f"run{' ' + where if where else ''}:\n{_INDENT}{command}"


def add(path: object, lines: Sequence[str]) -> str:
    """Lines to add at the end of the policy file ``path``."""
    return f"add to {path}:\n" + "\n".join(_INDENT + line for line in lines)


def change(path: object, table: str, lines: Sequence[str]) -> str:
    """``key = value`` lines to set in ``table`` (``[[allow]] #N (repo)``) of ``path``."""
    return f"in {path}, set in {table}:\n" + "\n".join(_INDENT + line for line in lines)


def remove(path: object, table: str) -> str:
    """Remove ``table`` (``[[deny]] #N (repo)``) from the policy file ``path``."""
    return f"in {path}, remove {table}"


def say(text: str) -> str:
    return text


def clear_cache(path: object) -> str:
    """The fix for a cached file that changed: clear that commit (or load afresh)."""
    commit = next((part for part in str(path).split("/") if len(part) == 40
                   and all(c in "0123456789abcdef" for c in part)), "")
    return either(run(f"safehub cache clear {commit}".rstrip()),
                  say("load with force_reload=True (a fresh copy, fetched and verified)"))


def either(*alternatives: str) -> str:
    """Alternatives: any one of them is enough."""
    return "\n    or ".join(a for a in alternatives if a)


def both(*needed: str) -> str:
    """Fixes that are all needed (two requirements block)."""
    return "\n    and ".join(n for n in needed if n)
