"""The attributes of a commit's paths, read from its ``.gitattributes`` files as git does.

``git archive`` reads the attributes from the tree it archives (never from a worktree),
and GitHub makes its archives with it. For a path, git consults the ``.gitattributes`` of
every folder above it, deepest first, and in each file the last matching line first; the
first value found for an attribute wins (gitattributes(5)). A folder or a submodule is
asked about as ``path/``, so a pattern ending in ``/`` matches folders only; a file's own
folder's ``.gitattributes`` does not apply to the folder itself. Setting a macro
(``binary``, or one defined by ``[attr]`` in the top-level file) sets the attributes of its
definition where those are still undecided. Every value remembers the line that set it.

>>> attrs = Attributes({".gitattributes": b"[attr]skip export-ignore\\n**/tests skip\\n",
...                     "a/.gitattributes": b"*.txt binary text\\n"})
>>> attrs.value("tests", "export-ignore", isdir=True), attrs.value("a/n.txt", "text")
(True, True)
>>> attrs.lookup("tests", isdir=True)["export-ignore"].where()
'.gitattributes:2: `**/tests skip` (through the macro skip)'
"""

from __future__ import annotations

from collections.abc import Mapping

from safehub._internal.frozen import Frozen
from safehub.verify.gitattributes._parse import BUILTIN, Line, State, Value, parse_file

__all__ = ["Assignment", "Attributes", "Line", "State", "Value", "parse_file"]

FILE = ".gitattributes"


class Assignment(Frozen):
    """An attribute's value for a path, and the line (and macro) that gave it."""

    value: Value
    line: Line
    macro: str | None = None

    def where(self) -> str:
        """The file, line number and text of the rule, for messages."""
        via = f" (through the macro {self.macro})" if self.macro else ""
        return self.line.where() + via


class Attributes:
    """Attributes of the paths of one tree.

    ``files`` maps the path of every ``.gitattributes`` blob of the tree to its bytes
    (the committed blob: ``git archive`` never reads a converted copy). ``legacy`` reads
    patterns as git did before 2.52 (see :mod:`safehub.verify.gitattributes._wildmatch`).
    """

    def __init__(self, files: Mapping[str, bytes], *, legacy: bool = False) -> None:
        self.legacy = legacy
        self._frames: dict[str, tuple[Line, ...]] = {}
        for path, data in files.items():
            folder, _, name = path.rpartition("/")
            if name == FILE:
                self._frames[folder] = parse_file(path, data, macros_ok=not folder)
        # The deepest definition wins; only the top-level file may define macros.
        self._macros: dict[str, Line] = {}
        for line in (*BUILTIN, *self._frames.get("", ())):
            if line.macro is not None:
                self._macros[line.macro] = line

    @property
    def version_sensitive(self) -> bool:
        """True if some pattern reads differently in git before 2.52 (``legacy``)."""
        return any(line.pattern is not None and line.pattern.version_sensitive
                   for lines in self._frames.values() for line in lines)

    def lookup(self, path: str, *, isdir: bool = False) -> dict[str, Assignment]:
        """Every attribute that is decided for ``path`` (``isdir``: a folder or submodule)."""
        if not self._frames:
            return {}
        raw = path.encode("utf-8", "surrogateescape")
        folders = [""]
        parts = path.split("/")[:-1]
        folders += ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        found: dict[str, Assignment] = {}
        for folder in reversed(folders):
            base = folder.encode("utf-8", "surrogateescape")
            for line in reversed(self._frames.get(folder, ())):
                if line.pattern is not None and line.pattern.matches(
                        raw, base=base, isdir=isdir, legacy=self.legacy):
                    self._fill(found, line)
        return found

    def _fill(self, found: dict[str, Assignment], line: Line) -> None:
        # The last state of a line first; a macro set to true pushes its definition,
        # which is then filled before the states left of it (attr.c fill_one).
        todo: list[tuple[State, str | None]] = [(s, None) for s in line.states]
        while todo:
            state, macro = todo.pop()
            if state.name in found:
                continue
            found[state.name] = Assignment(state.value, line, macro)
            definition = self._macros.get(state.name)
            if state.value is True and definition is not None:
                todo.extend((s, state.name) for s in definition.states)

    def value(self, path: str, name: str, *, isdir: bool = False) -> Value:
        """One attribute of ``path``: ``True``, ``False``, a string, or ``None`` (unspecified)."""
        found = self.lookup(path, isdir=isdir).get(name)
        return None if found is None else found.value
