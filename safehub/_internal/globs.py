"""The one glob dialect of policy files.

``*`` matches any run of characters except ``/``; ``**`` matches anything, ``/`` included;
``?`` matches one character except ``/``; ``[abc]`` and ``[!abc]`` match one character of
a set. Everything else is literal. So ``myorg/*`` matches ``myorg/models`` but ``v0.*``
does not match the branch ``v0.1/evil``, and ``https://host/models/*`` does not reach into
subfolders (write ``/**`` for that).

>>> Glob("v0.*").match("v0.10"), Glob("v0.*").match("v0.1/evil")
(True, False)
>>> Glob("https://h/**").match("https://h/a/b.pth")
True
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["Glob"]


@lru_cache(maxsize=4096)
def _compile(pattern: str, fold: bool) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
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
            end = pattern.find("]", i + 2 if pattern.startswith("[!", i) else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end]
                if body.startswith("!"):
                    body = "^/" + body[1:]  # a negated set never matches '/'
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    # ASCII: with Unicode case folding, the Kelvin sign would match "k".
    try:
        return re.compile("".join(out), (re.IGNORECASE | re.ASCII) if fold else re.ASCII)
    except re.error as e:
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
