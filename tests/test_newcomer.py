"""A newcomer goes from ``safehub --help`` to a pinned, policy-checked load.

The test knows only what a newcomer knows: the repo they want (``acme/models:v1.0``, served
by the loopback stand-in), the model they came for (``tiny``) and whether they are in a CI
job. Every command it runs comes from what safehub printed: the steps in the epilog of
``safehub --help``, a command a success message tells them to run, and the fix of each
refusal, read from the printed text (:func:`read`: a newcomer has only that) and applied
mechanically as tests/test_fixes.py applies an error's fix data. A step that would need
anything else fails the test: then the printed text is what needs to improve.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from safehub._internal.fixes import AddLines, Fix, RemoveRule, Run, Say, SetKeys
from safehub.cli import main
from tests.conftest import HubRepo, needs_torch, runs
from tests.test_fixes import apply

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SPEC = "acme/models:v1.0"  # what the newcomer wants to load
MODEL = "tiny"  # ... and which of its entrypoints


@dataclass(frozen=True)
class Printed:
    code: int
    out: str
    err: str


def read(hint: str) -> list[list[Fix]]:
    """A printed fix as a newcomer reads it: each requirement (``and``), its alternatives
    (``or``), each one a run, an add, a set, a remove, or words."""
    needed = []
    for part in hint.split("\n    and "):
        options: list[Fix] = []
        for alt in part.split("\n    or "):
            body = tuple(line[6:] for line in alt.split("\n")[1:] if line.startswith("      "))
            head = alt.split("\n")[0]
            if m := re.search(r"\brun( [^:]*)?:$", head):
                options += [Run(command, (m.group(1) or "").strip()) for command in body]
            elif m := re.search(r"\badd to (.+):$", head):
                options.append(AddLines(m.group(1), body))
            elif m := re.search(r"\bin (.+), set in (\[\[\w+\]\] #\d+ \(.*\)):$", head):
                options.append(SetKeys(m.group(1), m.group(2), body))
            elif m := re.search(r"\bin (.+), remove (\[\[\w+\]\] #\d+ \(.*\))", head):
                options.append(RemoveRule(m.group(1), m.group(2)))
            else:
                options.append(Say(alt))
        needed.append(options)
    return needed


class Newcomer:
    """Runs ``safehub`` and does what it prints, nothing else."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.fixes: list[str] = []  # every fix applied, in order

    def run(self, words: list[str]) -> Printed:
        code = main(words)
        captured = self.capsys.readouterr()
        return Printed(code, captured.out, captured.err)

    def follow(self, words: list[str]) -> Printed:
        """Run a step; while it refuses, apply the fix it printed and run it again."""
        for _ in range(4):
            printed = self.run(words)
            if printed.code == 0:
                for command in backticked_commands(printed.out):
                    assert self.run(shlex.split(command)[1:]).code == 0, command
                return printed
            hint = printed_fix(printed)
            assert hint, f"`safehub {shlex.join(words)}` refused, with no fix:\n{printed}"
            for options in read(hint):
                mechanical = [fix for fix in options if not isinstance(fix, Say)]
                assert mechanical, f"this fix needs knowledge that was not printed:\n{hint}"
                apply(mechanical[0])
            self.capsys.readouterr()
            self.fixes.append(hint)
        raise AssertionError(f"`safehub {shlex.join(words)}` still refuses: {printed}")


def epilog_steps(help_text: str) -> list[tuple[str, str]]:
    """The (command, comment) steps that ``safehub --help`` ends with."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("A first pinned, policy-checked load"))
    steps = []
    for line in itertools.takewhile(lambda s: s.startswith("  safehub "), lines[start + 1:]):
        command, _, comment = line.partition("#")
        steps.append((command.strip(), comment.strip()))
    return steps


def printed_fix(printed: Printed) -> str | None:
    """A refusal's fix: ``  fix: ...`` on stderr, or the ``  fix  ...`` line of a report,
    with the lines that continue it."""
    for text in (printed.err, printed.out):
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if m := re.match(r"^  fix(?::| ) *(.+)$", line):
                more = itertools.takewhile(lambda s: s.startswith("    "), lines[i + 1:])
                return "\n".join([m.group(1), *more])
    return None


def backticked_commands(text: str) -> list[str]:
    """Commands a success message says to run next (those with no placeholder left)."""
    return [c for c in re.findall(r"`(safehub [^`]+)`", text)
            if not any(word.isupper() for word in c.split())]


@needs_torch
@pytest.mark.parametrize("in_ci", [False, True], ids=["laptop", "ci-job"])
def test_from_help_to_a_pinned_policy_checked_load(
    hub_repo: HubRepo, isolated: Path, canary: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, in_ci: bool,
) -> None:
    if in_ci:
        monkeypatch.setenv("CI", "true")
    # `pip install safehub` puts the command on PATH: the same main() this test calls.
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["safehub"] == "safehub.cli:main"
    newcomer = Newcomer(capsys)
    shown = newcomer.run(["--help"])
    assert shown.code == 0
    steps = epilog_steps(shown.out)
    assert [c.split()[1] for c, _ in steps] == ["policy", "check", "lock", "list", "load"]

    entrypoints: list[str] = []
    printed = Printed(1, "", "")
    for command, comment in steps:
        if in_ci and (m := re.search(r"in a CI job: (--\S+ \S+)", comment)):
            command = re.sub(m.group(1).split()[0] + r" \S+", m.group(1), command)
        command = command.replace("owner/repo:v1.0", SPEC)
        if "ENTRYPOINT" in command:
            assert MODEL in entrypoints, "ENTRYPOINT: a step before says which there are"
            command = command.replace("ENTRYPOINT", MODEL)
        words = shlex.split(command)[1:]
        if words[0] == "list":
            assert runs(canary) == 0  # nothing of the repo ran before the policy allowed it
        printed = newcomer.follow(words)
        if words[0] == "list":
            entrypoints = printed.out.split()

    # The load ran ...
    assert printed.out.startswith(f"loaded {SPEC} {MODEL}: torch.nn.modules.linear.Linear")
    assert runs(canary) == 2  # `list` and `load` imported hubconf.py; nothing else did
    # ... the policy allowed it (nobody was asked or passed --trust) ...
    assert not any("safehub trust" in fix or "--trust" in fix for fix in newcomer.fixes)
    # ... pinned by the lockfile.
    lock = tomllib.loads(Path("safehub.lock").read_text())
    entry = next(e for e in lock["repo"] if e["spec"] == SPEC)
    assert entry["commit"] == hub_repo.sha
    check = newcomer.run(["check", SPEC])
    assert check.code == 0 and "LOAD (the policy allows it)" in check.out
    assert f"locked in {Path.cwd() / 'safehub.lock'}" in check.out

    audit_log = Path("safehub-audit.jsonl") if in_ci else \
        isolated / "state/safehub/log/audit.jsonl"
    line = json.loads(audit_log.read_text().splitlines()[-1])
    policy_file = Path("safehub.toml").resolve() if in_ci else \
        isolated / "config/safehub/policy.toml"
    assert line["decision"] == "allow" and line["entrypoint"] == MODEL
    assert (line["commit"], line["digest"]) == (entry["commit"], entry["digest"])
    assert len(line["reasons"]) == 1
    assert re.fullmatch(rf"allowed by \[\[allow\]\] #\d+ \(acme/models\) in {policy_file}",
                        line["reasons"][0])
