"""Reading the docs' code blocks, and running their shell lines as a user would type them.

A *block* is a fenced code block of README.md or docs/*.md, with the language of its fence
(``""`` for an untagged one, which the docs use for output) and the one-line HTML comment
right before the fence, if any (``<!-- not run: why -->`` marks a block no test can run).

:class:`Shell` runs a small, strict subset of ``sh``: ``#`` comments, ``\\`` line
continuations, ``&&``, quoting, ``~/`` at the start of a word, ``NAME=value cmd`` and
``export NAME=value...``. Anything else (pipes, redirections, ``$VAR``, globs, ``;``) fails
the test, so a doc cannot quietly show what the runner does not understand. ``safehub`` runs
in this process through ``safehub.cli.main``; a few other programs run as subprocesses.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import run_git

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^```([\w+-]*)\s*$")
_NOTE = re.compile(r"^<!--\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  # "README.md", "docs/ci.md"
    index: int  # its place among the page's blocks, from 0
    line: int  # the line of its opening fence, from 1
    lang: str  # the fence's tag; "" for untagged (output in these docs)
    text: str  # what is between the fences
    note: str = ""  # the HTML comment right before the fence, if any

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} (block {self.index}, {self.lang or 'untagged'})"


def pages() -> list[str]:
    """README.md and every page of docs/, relative to the repository root."""
    return ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page``, in order."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"{page}:{i + 1}: a code block that never closes"
        note = _NOTE.match(lines[i - 1].strip()) if i else None
        found.append(Block(page, len(found), i + 1, m.group(1),
                           "\n".join(lines[i + 1:end]) + "\n", note.group(1) if note else ""))
        i = end + 1
    return found


# -- output blocks ------------------------------------------------------------------------------

_ELISION = re.compile(r"[0-9a-f]{4,39}\.\.\.|\.\.\.")


def pattern(shown: str) -> re.Pattern[str]:
    """A regular expression for output the docs show.

    ``9f2c...`` (hex digits, then ``...``) stands for any hash; any other ``...`` for any text
    within a line; every other word must be there as written, in this order. Spacing and line
    breaks do not count (the docs wrap long lines).
    """
    words = []
    for word in shown.split():
        parts, last = [], 0
        for m in _ELISION.finditer(word):
            parts.append(re.escape(word[last:m.start()]))
            parts.append(r"[^\n]*?" if m.group() == "..." else r"[0-9a-f]+")
            last = m.end()
        words.append("".join(parts) + re.escape(word[last:]))
    return re.compile(r"\s+".join(words))


def assert_shows(shown: str, actual: str, where: str, *, whole: bool = False) -> None:
    """The doc's output block ``shown`` appears in ``actual`` (see :func:`pattern`), or is
    the whole of it."""
    found = pattern(shown)
    if (found.fullmatch if whole else found.search)(actual):
        return
    raise AssertionError(f"{where}: the block does not match what safehub prints.\n"
                         f"--- the block:\n{shown}\n--- safehub printed:\n{actual}")


# -- shell -----------------------------------------------------------------------------------------

_UNSUPPORTED = re.compile(r"[|;<>$`*?]|(?<!&)&(?!&)")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def command_lines(text: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments and blank lines out."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        words = shlex.split(line, comments=True)
        if words:
            out.append(shlex.join(words).replace("'&&'", "&&"))
    return out


@dataclass(frozen=True)
class Result:
    """What one command did."""

    command: str
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"$ {self.command}\n(exit {self.code})\n{self.out}{self.err}"


Program = Callable[["Shell", list[str], dict[str, str]], Result]


@dataclass
class Shell:
    """A user's shell on one machine: a working directory and environment variables."""

    cwd: Path
    env: dict[str, str]
    programs: Mapping[str, Program]
    #: Commands (as written in the doc) that are not run, each with why.
    skipped: Mapping[str, str] = field(default_factory=dict)

    def run(self, command: str) -> list[Result]:
        """Run one line (with ``&&``); return the result of each command that ran."""
        assert not _UNSUPPORTED.search(re.sub(r"'[^']*'|\"[^\"]*\"|#.*", "", command)), (
            f"`{command}`: shell syntax the doc runner does not support")
        results: list[Result] = []
        words = shlex.split(command, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            part, words = words[:cut], words[cut + 1:]
            result = self._one(part)
            results.append(result)
            if result.code != 0:
                break
        return results

    def _one(self, words: list[str]) -> Result:
        text = shlex.join(words)
        for prefix, why in self.skipped.items():
            if text.startswith(prefix):
                return Result(text, 0, "", f"(not run: {why})\n")
        home = self.env["HOME"]
        words = [home + w[1:] if w == "~" or w.startswith("~/") else w for w in words]
        if words[0] == "export":
            for item in words[1:]:
                assert _ASSIGN.match(item), f"`{text}`: export takes NAME=value"
                name, value = item.split("=", 1)
                self.env[name] = value
            return Result(text, 0, "", "")
        env = dict(self.env)
        while words and _ASSIGN.match(words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        program = self.programs.get(words[0])
        assert program is not None, (
            f"`{text}`: the doc runner has no program {words[0]!r}; add it to the programs "
            "it may run, or to the skipped commands with the reason")
        return program(self, words, env)


@contextlib.contextmanager
def environment(env: Mapping[str, str], cwd: Path) -> Iterator[None]:
    """Make ``env`` the whole of os.environ and ``cwd`` the working directory, then restore."""
    saved, here = dict(os.environ), Path.cwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        os.chdir(here)


def run_safehub(shell: Shell, words: list[str], env: dict[str, str]) -> Result:
    """``safehub ...`` through ``safehub.cli.main``, in this process."""
    from safehub.cli import main

    out, err = io.StringIO(), io.StringIO()
    with environment(env, shell.cwd), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        code = main(words[1:])
    return Result(shlex.join(words), code, out.getvalue(), err.getvalue())


def run_process(shell: Shell, words: list[str], env: dict[str, str]) -> Result:
    """Any other program, as a subprocess (``python`` is this interpreter)."""
    argv = [sys.executable, *words[1:]] if words[0] == "python" else words
    proc = subprocess.run(argv, cwd=shell.cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)
    return Result(shlex.join(words), proc.returncode, proc.stdout, proc.stderr)


def run_git_command(shell: Shell, words: list[str], env: dict[str, str]) -> Result:
    """``git ...`` with the tests' fixed identity and no user or system git configuration."""
    proc = run_git(words[1:], cwd=shell.cwd, check=False)
    return Result(shlex.join(words), proc.returncode, proc.stdout.decode(),
                  proc.stderr.decode())


PROGRAMS: Mapping[str, Program] = {
    "safehub": run_safehub,
    "git": run_git_command,
    "python": run_process,
    "openssl": run_process,
    "model_signing": run_process,
}


def run_block(shell: Shell, block: Block, expect: Mapping[str, int] | None = None,
              before: Mapping[str, Callable[[], None]] | None = None) -> list[Result]:
    """Run each line of a shell block; each must exit 0, or as ``expect`` says for it.

    ``before`` maps a line (as :func:`command_lines` writes it) to a step to take first, such
    as moving a tag; ``expect`` maps a line to its exit code.
    """
    expect, before = dict(expect or {}), dict(before or {})
    results = []
    for line in command_lines(block.text):
        if line in before:
            before.pop(line)()
        wanted = expect.pop(line, 0)
        ran = shell.run(line)
        results += ran
        assert ran[-1].code == wanted, (
            f"{block.where}: `{line}` exited {ran[-1].code}, expected {wanted}\n{ran[-1]}")
    assert not expect and not before, (
        f"{block.where}: lines named by the test are not in the block: {[*expect, *before]}")
    return results


def pythonpath(env: Mapping[str, str], *more: str | os.PathLike[str]) -> str:
    """PYTHONPATH with this checkout first (not an installed safehub)."""
    return os.pathsep.join([str(ROOT), *map(str, more), *filter(None, [env.get("PYTHONPATH")])])



# -- safehub demo --serve, as a newcomer runs it -----------------------------------------------


def in_the_foreground() -> None:
    """A child's SIGINT and SIGHUP as a terminal's foreground job has them (Ctrl-C stops
    it), even when the test run itself ignores them (a background job: ``nohup pytest
    &``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)



@dataclass
class DemoServe:
    """``safehub demo --serve`` in a process of its own, and what it printed."""

    process: subprocess.Popen[str]
    printed: list[str]

    @property
    def exports(self) -> dict[str, str]:
        """The ``export NAME=value`` lines it printed, read as ``sh`` reads them."""
        found = {}
        for line in self.printed:
            if line.startswith("export "):
                name, _, value = line[len("export "):].partition("=")
                found[name] = shlex.split(value)[0] if value else ""
        return found

    def stop(self) -> str:
        """Ctrl-C, as the user stops it; the rest of what it printed."""
        import signal

        self.process.send_signal(signal.SIGINT)
        rest, _ = self.process.communicate(timeout=60)
        return rest


@contextlib.contextmanager
def demo_serve(env: Mapping[str, str], cwd: Path, *args: str) -> Iterator[DemoServe]:
    """Start ``safehub demo --serve ARGS`` and read its output up to "Ctrl-C stops it."
    (it prints that once the hub answers)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "safehub", "demo", "--serve", *args], cwd=cwd,
        env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, preexec_fn=in_the_foreground)
    served = DemoServe(process, [])
    try:
        assert process.stdout is not None
        for line in process.stdout:
            served.printed.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops it."):
                break
        else:
            raise AssertionError("safehub demo --serve ended:\n" + "\n".join(served.printed))
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
