"""Paths matched against ``.gitattributes`` patterns exactly as git matches them.

git reads a pattern (gitattributes(5), gitignore(5) "PATTERN FORMAT") in two ways:

* without a ``/`` (a trailing one aside) it is matched against the last component only
  (``*.py`` matches ``a/b/c.py``);
* with one it is matched against the path relative to the folder of its ``.gitattributes``
  (a leading ``/`` only anchors).

In both, ``?`` is one byte and ``[...]`` one byte of a set (``!`` or ``^`` negates; ranges,
``\\`` escapes and ``[:class:]`` with git's ASCII classes), and neither matches ``/``; ``*``
is any run of bytes without ``/``; ``**`` between slashes (or at either end) is any run of
folders, zero included (``**/x`` also matches ``x``, ``a/**/b`` also ``a/b``, ``a/**`` all
below ``a``), elsewhere it is a ``*``. A malformed set (``[a``, ``[[:nope:]]``) or a trailing
``\\`` matches nothing. Comparisons are byte for byte (``core.ignoreCase`` is off on the
servers that make archives).

git compares a pattern's leading run of plain bytes by itself and hands the rest to its
matcher; before git 2.52 the rest started as if at the beginning of a path, so ``foo**/bar``
also matched ``foobar``. ``legacy=True`` asks for that older reading.

>>> Pattern(b"**/tests").matches(b"tests"), Pattern(b"docs/**/internal").matches(b"docs/internal")
(True, True)
>>> Pattern(b"foo**/bar").matches(b"foobar"), Pattern(b"foo**/bar").matches(b"foobar", legacy=True)
(False, True)
"""

from __future__ import annotations

import re

__all__ = ["Pattern", "byte_set"]

_SPECIAL = frozenset(b"*?[\\")
_NEVER = b"(?!)"
_ALL = frozenset(range(1, 256))  # a path never holds NUL
_CLASSES: dict[bytes, frozenset[int]] = {
    b"alnum": frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"alpha": frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"blank": frozenset(b" \t"),
    b"cntrl": frozenset([*range(0, 32), 127]),
    b"digit": frozenset(b"0123456789"),
    b"graph": frozenset(range(0x21, 0x7F)),
    b"lower": frozenset(b"abcdefghijklmnopqrstuvwxyz"),
    b"print": frozenset(range(0x20, 0x7F)),
    b"punct": frozenset(b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    b"space": frozenset(b" \t\n\r"),  # git's own ctype: no \v, no \f
    b"upper": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"xdigit": frozenset(b"0123456789abcdefABCDEF"),
}


def _at(p: bytes, i: int) -> int:
    """The byte at ``i``, or 0 past the end (git's patterns are C strings)."""
    return p[i] if i < len(p) else 0


def byte_set(p: bytes, i: int) -> tuple[frozenset[int] | None, int]:
    """The bytes the set starting at ``p[i] == '['`` accepts, and the index after it.

    ``None`` if the set is malformed (git then gives up on the whole pattern).

    >>> sorted(byte_set(b"[!a-y]", 0)[0] or ())[-2:], byte_set(b"[]]", 0)[1]
    ([254, 255], 3)
    >>> byte_set(b"[a", 0)[0] is None, sorted(byte_set(b"[[:x]", 0)[0] or ()) == sorted(b"[:x")
    (True, True)
    """
    j = i + 1
    c = _at(p, j)
    negated = c in (ord("!"), ord("^"))
    if negated:
        j += 1
        c = _at(p, j)
    accepted: set[int] = set()
    prev = 0
    while True:  # the first byte is a member even when it is ']'
        if c == 0:
            return None, -1
        if c == ord("\\"):
            j += 1
            c = _at(p, j)
            if c == 0:
                return None, -1
            accepted.add(c)
        elif c == ord("-") and prev and _at(p, j + 1) not in (0, ord("]")):
            j += 1
            c = _at(p, j)
            if c == ord("\\"):
                j += 1
                c = _at(p, j)
                if c == 0:
                    return None, -1
            accepted.update(range(prev, c + 1))
            c = 0  # a range cannot start another one
        elif c == ord("[") and _at(p, j + 1) == ord(":"):
            start = j + 2
            end = start
            while _at(p, end) not in (0, ord("]")):
                end += 1
            if _at(p, end) == 0:
                return None, -1
            if end - start - 1 < 0 or p[end - 1] != ord(":"):
                accepted.add(ord("["))  # not a class after all: '[' is a member
                c = ord("[")
            else:
                members = _CLASSES.get(p[start:end - 1])
                if members is None:
                    return None, -1
                accepted.update(members)
                j = end
                c = 0
        else:
            accepted.add(c)
        prev = c
        j += 1
        c = _at(p, j)
        if c == ord("]"):
            break
    result = frozenset(_ALL - accepted if negated else accepted & _ALL)
    return result, j + 1


def _byte_class(members: frozenset[int], pathname: bool) -> bytes:
    if pathname:
        members = members - {ord("/")}
    if not members:
        return _NEVER
    return b"[" + b"".join(b"\\x%02x" % m for m in sorted(members)) + b"]"


def _translate(p: bytes, pathname: bool) -> bytes:
    """A regular expression (bytes, DOTALL, full match) that matches what wildmatch does."""
    out: list[bytes] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == ord("\\"):
            if i + 1 >= n:
                return _NEVER  # a trailing backslash matches nothing
            out.append(re.escape(p[i + 1:i + 2]))
            i += 2
        elif c == ord("?"):
            out.append(b"[^/]" if pathname else b".")
            i += 1
        elif c == ord("["):
            members, end = byte_set(p, i)
            if members is None:
                return _NEVER
            out.append(_byte_class(members, pathname))
            i = end
        elif c == ord("*"):
            j = i
            while j < n and p[j] == ord("*"):
                j += 1
            if not pathname:
                out.append(b".*")
            elif j - i >= 2 and (i == 0 or p[i - 1] == ord("/")) and (
                    j == n or p[j] == ord("/") or p[j:j + 2] == b"\\/"):
                if j < n and p[j] == ord("/"):
                    out.append(b"(?:.*/)?")  # zero or more folders
                    j += 1
                else:
                    out.append(b".*")
            else:
                out.append(b"[^/]*")
            i = j
        else:
            out.append(re.escape(p[i:i + 1]))
            i += 1
    return b"".join(out)


def _plain_length(p: bytes) -> int:
    for i, c in enumerate(p):
        if c in _SPECIAL:
            return i
    return len(p)


class Pattern:
    """One pattern of a ``.gitattributes`` line, as git's ``parse_path_pattern`` reads it.

    ``pattern`` is the raw pattern (C-unquoted already), bytes up to any NUL.
    """

    __slots__ = ("_legacy", "_regex", "must_be_dir", "negative", "no_dir", "raw")

    def __init__(self, pattern: bytes) -> None:
        p = pattern.split(b"\0", 1)[0]
        self.negative = p.startswith(b"!")
        if self.negative:
            p = p[1:]
        self.raw = p
        self.must_be_dir = p.endswith(b"/")
        length = len(p) - 1 if self.must_be_dir else len(p)
        body = p[:length]
        self.no_dir = b"/" not in body
        plain = min(_plain_length(p), length)
        if self.no_dir:
            # Matched against the last component, without WM_PATHNAME.
            self._regex = self._legacy = re.compile(_translate(body, pathname=False), re.DOTALL)
            return
        if body.startswith(b"/"):
            body, plain = body[1:], plain - 1
        # git compares the plain prefix itself, then hands the rest to wildmatch: since
        # 2.52 with one byte of the prefix kept, so that a '**' there is not at a path's
        # start; before, without.
        keep = plain - 1 if plain else 0
        self._regex = re.compile(
            re.escape(body[:keep]) + _translate(body[keep:], pathname=True), re.DOTALL)
        legacy = re.escape(body[:plain]) + _translate(body[plain:], pathname=True)
        self._legacy = (self._regex if legacy == self._regex.pattern
                        else re.compile(legacy, re.DOTALL))

    @property
    def version_sensitive(self) -> bool:
        """True if git before and after 2.52 read this pattern differently."""
        return self._legacy is not self._regex

    def matches(self, path: bytes, *, base: bytes = b"", isdir: bool = False,
                legacy: bool = False) -> bool:
        """Whether the pattern (of a file in folder ``base``) matches ``path``.

        ``path`` is relative to the root of the tree; ``isdir`` says it names a folder
        (``git archive`` asks about folders and submodules as ``path/``); ``legacy`` asks
        for the reading of git before 2.52.
        """
        if self.must_be_dir and not isdir:
            return False
        regex = self._legacy if legacy else self._regex
        if self.no_dir:
            return regex.fullmatch(path.rpartition(b"/")[2]) is not None
        if base:
            if not path.startswith(base + b"/"):
                return False
            path = path[len(base) + 1:]
        return regex.fullmatch(path) is not None

    def __repr__(self) -> str:
        return f"Pattern({self.raw!r})"
