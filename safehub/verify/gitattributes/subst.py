"""What ``export-subst`` may write: git's pretty formats, bounded by what safehub knows.

``git archive`` replaces each ``$Format:<fmt>$`` of a file marked ``export-subst`` (from
``$Format:`` to the next ``$``, archive.c ``format_subst``) with ``git log -1
--format=<fmt>`` of the archived commit. Those bytes cannot be compared with the blob, so
each expansion is held to what git could have written for THIS commit, from what safehub
knows when it checks (:class:`CommitFacts`: always the commit and tree ids; the API's
``git/commits`` answer, where fetched, for the parents, the people, the dates and the
message):

* ids (``%H %h %T %t %P %p``): the commit's own (an abbreviation is a prefix of at least 7);
  parents not known: full or abbreviated hex ids, space-separated;
* dates (``%ad %aD %ai %aI %at %as`` and the committer's): the commit's instant in that
  rendering, in the one zone offset it names (the API gives the instant, not the offset);
  not known: the strict shape of the rendering (digits, fixed names and punctuation);
  ``%ar`` only its shape (it depends on when the archive was made);
* decorations (``%d %D``): ``HEAD -> name``, ``tag: name`` or ``name``, joined by ``, ``.
  A name is held to letters, digits, non-ASCII and ``. _ - + / @ = ,``. git admits quotes,
  ``;``, ``#``, ``{``, ``(`` and ``$`` in ref names, which could end a string literal and
  start code: safehub prefers a false alarm on such an absurd tag name to running what
  whoever rewrote the archive put there;
* free text (``%an %ae %aN %aE %al %aL %s %b %B`` and the committer's): exactly the
  commit's (``%aN``/``%aE``/``%aL`` without a ``.mailmap``); not known: refused;
* ``%(describe...)`` (setuptools-scm's ``.git_archival.txt``): a tag name (held as a
  decoration's name is), optionally ``-<count>-g<abbreviated commit id>``, or the
  abbreviated commit id alone, or nothing, or the placeholder itself (git expands only
  the first ``%(describe)`` of an archive);
* ``%n``, ``%%``, ``%xNN`` and the literal text of the format: themselves.

Any other placeholder (``%N``, ``%e``, ``%G?``, ``%ah``, ``%w(...)``,
colours, ``%+x``...) is refused: safehub cannot bound what it writes. A refusal is a
difference no rule explains, like any other.

>>> facts = CommitFacts("ab" * 20, "cd" * 20)
>>> Template.of(b"v = '$Format:%h$'\\n").match(b"v = 'abababa'\\n", facts)
[('$Format:%h$', b'abababa')]
>>> try:
...     Template.of(b"v = '$Format:%h$'\\n").match(b"v = 'ababab'\\n", facts)
... except Unbounded as e:
...     print(str(e).split(": ")[1])
%h is the commit id or a prefix of it (at least 7)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

from safehub._internal.frozen import Frozen

__all__ = ["CommitFacts", "Person", "Template", "Unbounded"]

_DAYS = "Sun|Mon|Tue|Wed|Thu|Fri|Sat"
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_TIME = r"\d\d:\d\d:\d\d"
_TZ = r"[+-]\d{4}"
_DATE_SHAPES = {
    "d": rf"(?:{_DAYS}) (?:{_MONTHS}) [1-9]\d? {_TIME} \d{{4,6}} {_TZ}",
    "D": rf"(?:{_DAYS}), [1-9]\d? (?:{_MONTHS}) \d{{4,6}} {_TIME} {_TZ}",
    "i": rf"\d{{4,6}}-\d\d-\d\d {_TIME} {_TZ}",
    "I": rf"\d{{4,6}}-\d\d-\d\dT{_TIME}(?:Z|[+-]\d\d:\d\d)",
    "s": r"\d{4,6}-\d\d-\d\d",
    "t": r"\d{1,20}",
    "r": (r"(?:in the future|\d{1,10} (?:seconds?|minutes?|hours?|days?|weeks?|months?|"
          r"years?)(?:, \d{1,2} months?)? ago)"),
}
_NAME = rb"[A-Za-z0-9._+\-/@=,\x80-\xff]+"
_ITEM = rb"(?:HEAD -> " + _NAME + rb"|tag: " + _NAME + rb"|" + _NAME + rb")"
_REFS = _ITEM + rb"(?:, " + _ITEM + rb")*"
_DECORATIONS = {"d": rb"(?: \(" + _REFS + rb"\))?", "D": rb"(?:" + _REFS + rb")?"}
_HEX = rb"[0-9a-f]{7,40}"
_MAX_OFFSET = 99 * 60 + 59
"""The widest zone offset git writes (``+9959``), in minutes."""


class Unbounded(ValueError):
    """An expansion safehub cannot tie to what git writes for the commit."""


class Person(Frozen):
    """An author or committer, as the commit names them."""

    name: str
    email: str
    when: int
    """Seconds since the epoch."""
    offset: int | None = None
    """Minutes east of UTC; None where only the instant is known (GitHub's API)."""

    @classmethod
    def from_api(cls, name: str, email: str, date: str) -> Person:
        """From the API's ISO 8601 date; ``Z`` gives the instant only.

        >>> Person.from_api("A", "a@example.com", "2023-11-14T22:13:20Z").when
        1700000000
        """
        stamp = datetime.fromisoformat(date.replace("Z", "+00:00"))
        shift = stamp.utcoffset()
        if shift is None:
            raise ValueError(f"the date {date!r} has no zone")
        offset = None if date.endswith("Z") else int(shift.total_seconds()) // 60
        return cls(name, email, int(stamp.timestamp()), offset)


class CommitFacts(Frozen):
    """What safehub knows of the archived commit when it checks the archive."""

    sha: str
    tree: str
    parents: tuple[str, ...] | None = None
    author: Person | None = None
    committer: Person | None = None
    message: str | None = None
    """As the API gives it (GitHub drops the final newline)."""


class _Field(Frozen):
    """One placeholder: a pattern (no capturing group) and, if the pattern is only a shape,
    a check of the text it matched."""

    placeholder: str
    pattern: bytes
    why: str
    check: Callable[[bytes], bool] | None = None


def _exact(placeholder: str, values: Sequence[str], why: str) -> _Field:
    alternatives = sorted({v.encode() for v in values}, key=len, reverse=True)
    return _Field(placeholder, b"(?:" + b"|".join(map(re.escape, alternatives)) + b")", why)


def _abbrev(sha: str) -> list[str]:
    return [sha[:n] for n in range(7, len(sha) + 1)]


def _render(style: str, when: int, offset: int) -> str:
    """A date as git's ``show_date`` writes it in ``style`` at ``offset`` minutes."""
    t = datetime.fromtimestamp(when + offset * 60, tz=timezone.utc)
    sign = "-" if offset < 0 else "+"
    hh, mm = divmod(abs(offset), 60)
    day, month = _DAYS.split("|")[t.isoweekday() % 7], _MONTHS.split("|")[t.month - 1]
    date, clock = f"{t.year:04}-{t.month:02}-{t.day:02}", f"{t:%H:%M:%S}"
    return {"d": f"{day} {month} {t.day} {clock} {t.year} {sign}{hh:02}{mm:02}",
            "D": f"{day}, {t.day} {month} {t.year} {clock} {sign}{hh:02}{mm:02}",
            "i": f"{date} {clock} {sign}{hh:02}{mm:02}",
            "I": f"{date}T{clock}{sign}{hh:02}:{mm:02}",
            "s": date, "t": str(when)}[style]


def _offset_in(style: str, text: str) -> int | None:
    """The zone offset a rendering names (None for one that names none, or a bad one)."""
    if style == "I" and text.endswith("Z"):
        return 0
    m = re.search(r"([+-])(\d\d):?(\d\d)$", text) if style in "dDiI" else None
    if m is None or int(m.group(3)) >= 60:
        return None
    return (-1 if m.group(1) == "-" else 1) * (int(m.group(2)) * 60 + int(m.group(3)))


def _date(placeholder: str, style: str, who: Person | None) -> _Field:
    shape = _DATE_SHAPES[style].encode()
    what = f"{placeholder} is a date"
    if who is None or style == "r":
        return _Field(placeholder, shape, f"{what} (of the strict shape git writes)")
    when = who.when

    def check(found: bytes) -> bool:
        text = found.decode("ascii")
        if style == "t":
            return text == str(when)
        if style == "s" and who.offset is not None:
            return text == _render("s", when, who.offset)
        if style == "s":  # the day somewhere: between the widest offsets west and east
            return _render("s", when, -_MAX_OFFSET) <= text <= _render("s", when, _MAX_OFFSET)
        offset = _offset_in(style, text)
        if offset is None or (who.offset is not None and offset != who.offset):
            return False
        if style == "I" and text.endswith("Z"):  # git since 2.4x writes UTC so
            return text == _render("I", when, 0)[:-6] + "Z"
        return text == _render(style, when, offset)

    return _Field(placeholder, shape, f"{what}: the commit's, {_render('I', when, 0)}", check)


def _raw_messages(message: str) -> list[str]:
    return [message] if message.endswith("\n") or not message else [message, message + "\n"]


def _line_end(msg: str, i: int) -> int:
    end = msg.find("\n", i)
    return len(msg) if end < 0 else end + 1


def _skip_blank(msg: str, i: int) -> int:
    while i < len(msg) and not msg[i:_line_end(msg, i)].strip(" \t\n\r"):
        i = _line_end(msg, i)
    return i


def _subject_body(msg: str) -> tuple[str, str]:
    """``%s`` and ``%b`` of a raw message, as pretty.c splits it."""
    i, subject = _skip_blank(msg, 0), []
    while i < len(msg):
        line, i = msg[i:_line_end(msg, i)].rstrip(" \t\n\r"), _line_end(msg, i)
        if not line:
            break
        subject.append(line)
    return " ".join(subject), msg[_skip_blank(msg, i):]


def _person(placeholder: str, part: str, who: Person | None, role: str) -> _Field:
    if len(part) == 1 and part in "dDiIstr":
        return _date(placeholder, part, who)
    if len(part) != 1 or part not in "nNeElL":
        raise Unbounded(f"{placeholder} is not a placeholder safehub can bound")
    if who is None:
        raise Unbounded(f"{placeholder} (the {role}'s name or email) cannot be bounded: "
                        "safehub does not know the commit's details")
    value = {"n": who.name, "e": who.email, "l": who.email.partition("@")[0]}[part.lower()]
    return _exact(placeholder, [value], f"{placeholder} is the {role}'s, {value!r}")


def _field(letter: str, part: str, facts: CommitFacts) -> _Field:
    """The bound of ``%<letter><part>`` (``part`` only after ``a`` and ``c``)."""
    ph = f"%{letter}{part}" + (")" if letter == "(" else "")
    if letter in "Hh":
        return _exact(ph, [facts.sha] if letter == "H" else _abbrev(facts.sha),
                      f"{ph} is the commit id" + ("" if letter == "H" else
                                                   " or a prefix of it (at least 7)"))
    if letter in "Tt":
        return _exact(ph, [facts.tree] if letter == "T" else _abbrev(facts.tree),
                      f"{ph} is the tree id" + ("" if letter == "T" else
                                                 " or a prefix of it (at least 7)"))
    if letter in "Pp":
        one = rb"[0-9a-f]{40}" if letter == "P" else _HEX
        if facts.parents is None:
            return _Field(ph, b"(?:" + one + b"(?: " + one + b")*)?", f"{ph} are parent ids")
        choices = [[p] if letter == "P" else _abbrev(p) for p in facts.parents]
        pattern = b" ".join(_exact(ph, c, "").pattern for c in choices)
        return _Field(ph, pattern, f"{ph} are the parents {' '.join(facts.parents) or '(none)'}")
    if letter == "(":  # %(describe...)
        ids = _exact(ph, _abbrev(facts.sha), "").pattern
        return _Field(ph, b"(?:" + _NAME + b"(?:-[0-9]{1,10}-g" + ids + b")?|" + ids + b"|"
                      + re.escape(ph.encode("latin-1")) + b")?",
                      f"{ph} is a tag name, optionally -<count>-g<this commit's id> (or "
                      "itself: git expands one %(describe) per archive)")
    if letter in "dD":
        return _Field(ph, _DECORATIONS[letter],
                      f"{ph} are ref names (HEAD -> x, tag: y, z) of letters, digits and . _ "
                      "- + / @ = ,")
    if letter in "ac":
        role = "author" if letter == "a" else "committer"
        return _person(ph, part, facts.author if letter == "a" else facts.committer, role)
    if letter in "sbB":
        if facts.message is None:
            raise Unbounded(f"{ph} (the commit message) cannot be bounded: safehub does not "
                            "know the commit's message")
        raws = _raw_messages(facts.message)
        values = (raws if letter == "B" else
                  [_subject_body(m)[0 if letter == "s" else 1] for m in raws])
        return _exact(ph, values, f"{ph} is the commit message's")
    raise Unbounded(f"%{letter} is not a placeholder safehub can bound")


_WANTS_COMMIT = frozenset("PpacsbB")


def _parse(fmt: bytes) -> list[bytes | tuple[str, str]]:
    """The format's literal bytes and its placeholders (letter, part), in order."""
    out: list[bytes | tuple[str, str]] = []
    i = 0
    while (pc := fmt.find(b"%", i)) >= 0:
        out.append(fmt[i:pc])
        nxt = fmt[pc + 1:pc + 2].decode("latin-1")
        if nxt in ("n", "%"):
            out.append(b"\n" if nxt == "n" else b"%")
            i = pc + 2
        elif nxt == "x" and re.fullmatch(rb"[0-9a-fA-F]{2}", fmt[pc + 2:pc + 4]):
            out.append(bytes([int(fmt[pc + 2:pc + 4], 16)]))
            i = pc + 4
        elif nxt in ("a", "c"):
            out.append((nxt, fmt[pc + 2:pc + 3].decode("latin-1")))
            i = pc + 3
        elif nxt and nxt in "HhTtPpdDsbB":
            out.append((nxt, ""))
            i = pc + 2
        elif fmt.startswith(b"%(describe", pc) and fmt[pc + 10:pc + 11] in (b")", b":") \
                and (end := fmt.find(b")", pc)) > 0:
            out.append(("(", fmt[pc + 2:end].decode("latin-1")))
            i = end + 1
        else:
            shown = fmt[pc:pc + 2].decode("utf-8", "replace")
            raise Unbounded(f"{shown or '%'} is not a placeholder safehub can bound")
    out.append(fmt[i:])
    return out


class Template(Frozen):
    """A file's bytes before ``export-subst``: literal text and ``$Format:...$`` formats."""

    literals: tuple[bytes, ...]
    formats: tuple[bytes, ...]

    @classmethod
    def of(cls, template: bytes) -> Template:
        """Split as archive.c does: ``$Format:``, then the format up to the next ``$``."""
        literals, formats = [], []
        i = 0
        while (start := template.find(b"$Format:", i)) >= 0:
            end = template.find(b"$", start + 8)
            if end < 0:
                break
            literals.append(template[i:start])
            formats.append(template[start + 8:end])
            i = end + 1
        literals.append(template[i:])
        return cls(tuple(literals), tuple(formats))

    @property
    def wants_commit(self) -> bool:
        """True if a placeholder is bounded better (or at all) by the commit's details."""
        return any(isinstance(p, tuple) and p[0] in _WANTS_COMMIT
                   for f in self.formats for p in _safe_parse(f))

    def loose(self, data: bytes) -> list[tuple[str, bytes]] | None:
        """How ``data`` fills the placeholders, if only the text outside them counts."""
        if not data.startswith(self.literals[0]):
            return None
        pos, spans = len(self.literals[0]), []
        for lit in self.literals[1:-1]:
            found = data.find(lit, pos)
            if found < 0:
                return None
            spans.append((pos, found))
            pos = found + len(lit)
        tail = self.literals[-1]
        if len(data) - len(tail) < pos or not data.endswith(tail):
            return None
        spans.append((pos, len(data) - len(tail)))
        return [(_shown(f), data[a:b]) for f, (a, b) in zip(self.formats, spans, strict=True)]

    def match(self, data: bytes, facts: CommitFacts) -> list[tuple[str, bytes]] | None:
        """The ``(placeholder, expansion)`` pairs if ``data`` is what git can write for the
        commit; None if the text outside the placeholders differs; :class:`Unbounded`
        (naming the placeholder) if an expansion is not one git can have written."""
        if not self.formats:
            return [] if data == self.literals[0] else None
        loose = self.loose(data)
        if loose is None:
            return None
        fields = [[p if isinstance(p, bytes) else _field(*p, facts) for p in _parse(f)]
                  for f in self.formats]
        found = _fullmatch(self.literals, fields, data)
        if found is not None:
            template = self.literals[0] + b"".join(
                b"$Format:" + f + b"$" + lit
                for f, lit in zip(self.formats, self.literals[1:], strict=True))
            if _cookie(data) != _cookie(template):
                raise Unbounded("an expansion on the first two lines declares a source "
                                "encoding (a PEP 263 coding cookie), which changes what "
                                "Python reads in the whole file")
            return [(_shown(f), text) for f, text in zip(self.formats, found, strict=True)]
        for fmt, parts, (_, text) in zip(self.formats, fields, loose, strict=True):
            if _fullmatch([b"", b""], [parts], text) is None:
                why = "; ".join(p.why for p in parts if isinstance(p, _Field)) or "literal text"
                raise Unbounded(f"the expansion of {_shown(fmt)} is "
                                f"{text[:80].decode(errors='replace')!r}, which git cannot have "
                                f"written for commit {facts.sha[:12]}: {why}")
        raise Unbounded("the expansions of " + ", ".join(map(_shown, self.formats))
                        + f" do not fit together as git writes them for commit {facts.sha[:12]}")


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)


def _cookie(data: bytes) -> bytes | None:
    """The encoding a PEP 263 cookie on the first two lines names (what Python decodes)."""
    found = _COOKIE.search(b"\n".join(data.split(b"\n", 2)[:2]))
    return found[1] if found else None


def _shown(fmt: bytes) -> str:
    return "$Format:" + fmt.decode("utf-8", "replace") + "$"


def _safe_parse(fmt: bytes) -> list[bytes | tuple[str, str]]:
    try:
        return _parse(fmt)
    except Unbounded:
        return []


def _fullmatch(literals: Sequence[bytes], fields: Sequence[Sequence[bytes | _Field]],
               data: bytes) -> list[bytes] | None:
    """Each format's expansion if ``data`` is the literals with every format filled within
    its bounds, else None."""
    pattern = [re.escape(literals[0])]
    for k, parts in enumerate(fields):
        body = b"".join(re.escape(p) if isinstance(p, bytes) else
                        b"(" + p.pattern + b")" if p.check is not None else p.pattern
                        for p in parts)
        pattern += [b"(" + body + b")", re.escape(literals[k + 1])]
    m = re.fullmatch(b"".join(pattern), data)
    if m is None:
        return None
    out, k = [], 1
    for parts in fields:
        out.append(m.group(k))
        k += 1
        for p in parts:
            if isinstance(p, _Field) and p.check is not None:
                if not p.check(m.group(k)):
                    return None
                k += 1
    return out
