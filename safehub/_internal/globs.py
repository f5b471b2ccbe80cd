"""The one glob dialect of policy files.

``*`` matches any run of characters except ``/``; ``**`` matches anything, ``/`` included;
``?`` matches one character except ``/``; ``[abc]``, ``[a-z]`` and ``[!abc]`` match one
character of a set (never ``/``, even where a range such as ``[.-9]`` spans it).
Everything else is literal. So ``myorg/*`` matches ``myorg/models`` but ``v0.*`` does not
match the branch ``v0.1/evil``, and ``https://host/models/*`` does not reach into
subfolders (write ``/**`` for that).

A pattern that is not plainly of this form is an error, never a literal: an unclosed
``[``, an empty or reversed set, a backslash (there are no escapes; write ``[*]`` for a
literal ``*``). A rule that silently never matches would be a deny rule that fails open.

>>> Glob("v0.*").match("v0.10"), Glob("v0.*").match("v0.1/evil")
(True, False)
>>> Glob("https://h/**").match("https://h/a/b.pth")
True
>>> Glob("org/[x*")
Traceback (most recent call last):
...
ValueError: invalid pattern 'org/[x*': '[' at 4 has no closing ']'
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["Glob"]


def _set(pattern: str, start: int) -> tuple[str, int]:
    """The regex for the set that opens at ``start``, and the index after its ``]``."""
    i = start + 1
    negate = pattern.startswith("!", i)
    if negate:
        i += 1
    end = pattern.find("]", i)
    if end == -1:
        raise ValueError(f"'[' at {start} has no closing ']'")
    body = pattern[i:end]
    if not body:
        raise ValueError(f"the set at {start} is empty")
    if "/" in body or "[" in body:
        raise ValueError(f"the set at {start} contains '/' or '['")
    out = []
    for j, c in enumerate(body):
        if c == "-" and 0 < j < len(body) - 1:
            out.append("-")  # a range between two characters
        else:
            out.append(re.escape(c))
    # A range may span '/' (``[.-9]`` covers 0x2E..0x39): the lookahead keeps '/' out of
    # every set, whatever its ranges, so a set never crosses a path or ref separator.
    return ("[^/" if negate else "(?!/)[") + "".join(out) + "]", end + 1


@lru_cache(maxsize=4096)
def _compile(pattern: str, fold: bool) -> re.Pattern[str]:
    if "\\" in pattern:
        raise ValueError(f"invalid pattern {pattern!r}: backslashes are not allowed "
                         "(there are no escapes; write [*] for a literal *)")
    out: list[str] = []
    i, n = 0, len(pattern)
    try:
        while i < n:
            c = pattern[i]
            if c == "*":
                if pattern.startswith("**", i):
                    out.append(".*")
                    i += 2
                    continue
                out.append("[^/]*")
            elif c == "?":
                out.append("[^/]")
            elif c == "[":
                regex, i = _set(pattern, i)
                out.append(regex)
                continue
            elif c == "]":
                raise ValueError(f"']' at {i} closes no set")
            else:
                out.append(re.escape(c))
            i += 1
        # ASCII: with Unicode case folding, the Kelvin sign would match "k".
        return re.compile("".join(out), (re.IGNORECASE | re.ASCII) if fold else re.ASCII)
    except ValueError as e:
        raise ValueError(f"invalid pattern {pattern!r}: {e}") from None
    except re.error as e:  # a reversed range such as [z-a]
        raise ValueError(f"invalid pattern {pattern!r}: {e}") from None


class Glob:
    """A compiled pattern; ``fold=True`` compares case-insensitively (repo names)."""

    __slots__ = ("_re", "fold", "pattern")

    def __init__(self, pattern: str, *, fold: bool = False) -> None:
        self.pattern = pattern
        self.fold = fold
        self._re = _compile(pattern, fold)

    def match(self, text: str) -> bool:
        return self._re.fullmatch(text) is not None

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Glob) and (self.pattern, self.fold) == (other.pattern, other.fold)

    def __hash__(self) -> int:
        return hash((self.pattern, self.fold))
