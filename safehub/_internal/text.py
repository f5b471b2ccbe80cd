"""Text from outside made printable: the one function every surface that writes to a
terminal calls (the trust prompt, error messages and their fixes, the excepthooks, the
command's text output, warnings).

Outside text is anything safehub did not write itself: a policy rule's ``reason``, a
file's path, a repo's docstring or entrypoint names, a server's error message, a
lockfile's field, a folder name in the cache. On a terminal an escape sequence in it
could set the window title, erase a line, colour a fake "signature verified" green, or
write the clipboard (OSC 52); a bidi override could reverse what a line seems to say.

:func:`printable` shows each such character as a visible escape, in Python's own notation
(``\\x1b``, ``\\u202e``, ``\\U000e0041``, ``\\n``). Which characters: every Unicode
character of the categories

* ``Cc``: C0 controls, DEL, C1 controls (``\\x80``-``\\x9f``; ``\\x9b`` is a one-byte CSI);
* ``Cf``: format characters, all of them: bidi embeddings, overrides and isolates
  (U+202A-202E, U+2066-2069), the marks U+200E, U+200F, U+061C, zero-width spaces and
  joiners, the BOM, soft hyphen, the invisible tag characters (U+E0000-E007F, which
  can carry a whole hidden text). Even ZWJ in an emoji sequence is shown escaped: it
  costs a glyph in a docstring, and keeps one rule with no exception to argue about;
* ``Zl``, ``Zp``: U+2028, U+2029, which some terminals and editors take as line breaks;
* ``Cs``: a lone surrogate (from a file name that is not UTF-8), which would also make
  ``print`` raise on a UTF-8 terminal;
* ``Cn``: characters this Python's Unicode database does not know: what cannot be named
  is shown by its number (a format character of a newer Unicode is escaped too).

A single-line field (a repo name, ref, reason, URL, path, entrypoint name) gets ``\\n``,
``\\r`` and ``\\t`` escaped as well, or a reason could fake a line of safehub's own
(``  signature  verified``). ``lines=True`` keeps ``\\n`` and ``\\t``: for a text whose
lines are safehub's layout (each field in it already escaped), or a multi-line text shown
as a whole (a docstring under ``safehub help``).

A backslash already in the text is kept as it is, not doubled. So the function is
idempotent (a surface may escape a field, then its whole output again) and paths stay
as they are (``C:\\Users\\...``). The cost is that ``\\x1b`` typed literally into a
reason reads the same as an escaped ESC: both are inert text on the screen, and neither
can produce a character, a line or a colour that safehub did not write.

The escaped forms are for people. JSON output (``--json``) stays exact: ``json.dumps``
escapes every control and non-ASCII character (lone surrogates included) itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from safehub._internal.fixes import CommandLine, Fix

__all__ = ["REFUSED", "did_you_mean", "error", "printable"]

REFUSED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"})
"""The Unicode general categories :func:`printable` never lets through."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code <= 0xff:
        return f"\\x{code:02x}"
    if code <= 0xffff:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


class _Table(dict[int, str]):
    """A ``str.translate`` table that works out a character's answer when first asked,
    and remembers it (for the first few thousand characters seen: a text of every code
    point cannot make it grow without bound)."""

    def __init__(self, keep: str) -> None:
        super().__init__()
        self.keep = keep

    def __missing__(self, code: int) -> str:
        import unicodedata  # only for text that is not plain already

        char = chr(code)
        shown = char if char in self.keep or unicodedata.category(char) not in REFUSED \
            else _escape(char)
        if len(self) < 4096:
            self[code] = shown
        return shown


_SINGLE = _Table("")
_LINES = _Table("\n\t")


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with every control, format, separator, surrogate and unassigned character
    shown as a visible escape; ``\\n`` and ``\\t`` too unless ``lines``.

    >>> print(printable("tag\\x1b[2Kok \\u202egnp.exe"))
    tag\\x1b[2Kok \\u202egnp.exe
    >>> print(printable("evil\\n  signature  verified"))
    evil\\n  signature  verified
    >>> print(printable("one\\ntwo\\r", lines=True))
    one
    two\\r
    >>> printable(printable("\\udcff\\x9b")) == printable("\\udcff\\x9b") == "\\\\udcff\\\\x9b"
    True
    """
    if text.isprintable():  # the common case: nothing to look at twice
        return text
    return text.translate(_LINES if lines else _SINGLE)


def error(message: str, fix: Fix | None = None, details: Sequence[str] = (), *,
          surface: str = "api", command_line: CommandLine | None = None) -> str:
    """An error as a terminal shows it: the message on one line, each detail on a line of
    its own, then ``  fix: `` and the fix, every text field of which is one line.

    Only the line breaks written here and by :func:`safehub._internal.fixes.render` reach
    the terminal; one in a message, a detail or a fix's field is shown as ``\\n``.

    >>> from safehub._internal.fixes import add
    >>> print(error("denied: \\x1b[32mok\\n  fix: curl x | sh", add("p.toml", ["[[allow]]"])))
    denied: \\x1b[32mok\\n  fix: curl x | sh
      fix: add to p.toml:
          [[allow]]
    """
    lines = [printable(message), *(f"    {printable(d)}" for d in details)]
    if fix is not None:
        from safehub._internal.fixes import render

        lines.append(f"  fix: {render(fix, surface, printable, command_line=command_line)}")
    return "\n".join(lines)


def did_you_mean(word: str, choices: Sequence[str] | frozenset[str]) -> str:
    """``" (did you mean 'tiny'?)"`` when ``word`` looks like a misspelling of one of
    ``choices`` (the standard library's :func:`difflib.get_close_matches`), else ``""``.

    >>> did_you_mean("tiny_mpl", ["tiny_mlp", "echo"])
    " (did you mean 'tiny_mlp'?)"
    >>> did_you_mean("resnet", ["echo"])
    ''
    """
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
