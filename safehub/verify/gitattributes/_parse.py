"""The lines of a ``.gitattributes`` file, read exactly as git reads them (attr.c).

* A blob is read up to its first NUL byte; a file of 100 MiB or more is ignored whole.
  Lines end at ``\\n``; blanks are space, tab, CR and LF. A line that is blank or starts
  (after blanks) with ``#`` is skipped; a line of 2048 bytes or more is ignored.
* The pattern is the first blank-separated word, or a C-quoted string (``"a b.py"``, with
  ``\\t``, ``\\"``, ``\\ooo`` ... escapes; an invalid one leaves the word as it is).
* ``!pattern`` (a negative pattern) is not allowed: the line is ignored (``\\!`` is literal).
* ``[attr]name states...`` defines a macro, only in the top-level file (elsewhere the line
  is ignored).
* Each state is ``attr`` (set), ``-attr`` (unset), ``!attr`` (unspecified) or
  ``attr=value``; names are ``[-._A-Za-z0-9]`` not starting with ``-`` nor ``builtin_``.
  One invalid name drops the whole line.
"""

from __future__ import annotations

from safehub._internal.frozen import Frozen
from safehub.verify.gitattributes._wildmatch import Pattern

__all__ = ["BUILTIN", "MAX_FILE_SIZE", "Line", "State", "Value", "parse_file"]

Value = bool | str | None
"""``True`` set, ``False`` unset, ``None`` unspecified (``!attr``), or a string value."""

MAX_FILE_SIZE = 100 * 1024 * 1024
_MAX_LINE = 2048
_BLANK = b" \t\r\n"
_MACRO = b"[attr]"
_NAME_CHARS = frozenset(b"-._0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("f"): 12, ord("n"): 10, ord("r"): 13, ord("t"): 9,
            ord("v"): 11, ord("\\"): ord("\\"), ord('"'): ord('"')}


class State(Frozen):
    """One ``name``/``-name``/``!name``/``name=value`` of a line."""

    name: str
    value: Value


class Line(Frozen, eq=False):
    """A pattern line (``pattern`` set) or a macro definition (``macro`` set)."""

    source: str
    """The ``.gitattributes`` file it comes from (``[builtin]`` for git's own)."""
    number: int
    text: str
    states: tuple[State, ...]
    pattern: Pattern | None = None
    macro: str | None = None

    def where(self) -> str:
        """``path:line: `text```, for messages."""
        return f"{self.source}:{self.number}: `{self.text}`"


def _span(data: bytes, start: int, chars: bytes, *, inside: bool) -> int:
    """Index of the first byte from ``start`` that is (``inside=False``: is not) in ``chars``."""
    i = start
    while i < len(data) and (data[i] in chars) == inside:
        i += 1
    return i


def _unquote(line: bytes, start: int) -> tuple[bytes, int] | None:
    """git's ``unquote_c_style``: the string quoted at ``line[start]`` and the index after it."""
    out = bytearray()
    i = start + 1
    while i < len(line):
        c = line[i]
        i += 1
        if c == ord('"'):
            return bytes(out), i
        if c != ord("\\"):
            out.append(c)
            continue
        if i >= len(line):
            return None
        c = line[i]
        i += 1
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord("0") <= c <= ord("3"):
            digits = line[i:i + 2]
            if len(digits) < 2 or any(not ord("0") <= d <= ord("7") for d in digits):
                return None
            out.append(((c - 48) << 6) | ((digits[0] - 48) << 3) | (digits[1] - 48))
            i += 2
        else:
            return None
    return None


def _valid_name(name: bytes) -> bool:
    return (bool(name) and not name.startswith((b"-", b"builtin_"))
            and all(c in _NAME_CHARS for c in name))


def _states(line: bytes, i: int) -> tuple[State, ...] | None:
    states = []
    i = _span(line, i, _BLANK, inside=True)
    while i < len(line):
        end = _span(line, i, _BLANK, inside=False)
        token = line[i:end]
        name, eq, raw = token.partition(b"=")
        value: Value = raw.decode("utf-8", "surrogateescape") if eq else True
        if name[:1] in (b"-", b"!"):
            value = False if name[:1] == b"-" else None
            name = name[1:]
        if not _valid_name(name):
            return None
        states.append(State(name.decode("ascii"), value))
        i = _span(line, end, _BLANK, inside=True)
    return tuple(states)


def _parse_line(line: bytes, source: str, number: int, macros_ok: bool) -> Line | None:
    start = _span(line, 0, _BLANK, inside=True)
    if start == len(line) or line[start] == ord("#") or len(line) >= _MAX_LINE:
        return None
    quoted = _unquote(line, start) if line[start] == ord('"') else None
    if quoted is not None:
        word, after = quoted
    else:
        after = _span(line, start, _BLANK, inside=False)
        word = line[start:after]
    text = line.decode("utf-8", "replace").strip(" \t\r\n")
    if len(word) > len(_MACRO) and word.startswith(_MACRO):
        if not macros_ok:
            return None
        name = word[len(_MACRO):]
        name = name[:_span(name, 0, _BLANK + b"\0", inside=False)]
        states = _states(line, after)
        if not _valid_name(name) or states is None:
            return None
        return Line(source, number, text, states, macro=name.decode("ascii"))
    pattern = Pattern(word)
    states = _states(line, after)
    if pattern.negative or states is None:
        return None
    return Line(source, number, text, states, pattern=pattern)


def parse_file(source: str, data: bytes, *, macros_ok: bool) -> tuple[Line, ...]:
    """The lines git keeps from the ``.gitattributes`` blob ``data`` at ``source``.

    ``macros_ok`` is true only for the top-level file.

    >>> data = b"#x\\n*.py  text\\n!no a\\n"
    >>> [ln.text for ln in parse_file(".gitattributes", data, macros_ok=True)]
    ['*.py  text']
    """
    if len(data) >= MAX_FILE_SIZE:
        return ()
    data = data.split(b"\0", 1)[0]
    lines = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = _parse_line(raw, source, number, macros_ok)
        if line is not None:
            lines.append(line)
    return tuple(lines)


BUILTIN = parse_file("[builtin]", b"[attr]binary -diff -merge -text", macros_ok=True)
"""git's built-in macro: ``binary`` is ``-diff -merge -text``."""
