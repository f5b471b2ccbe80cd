"""``safehub docs env``, ``safehub docs cli`` and ``safehub completion``: reference pages and
a shell completion script made from safehub's own declarations (the environment variables
in :mod:`safehub.config` and the policy keys, the command's parser), so they cannot drift
from what the program does."""

from __future__ import annotations

import argparse

__all__ = ["commands", "completion", "environment"]


def environment() -> str:
    """Every environment variable safehub reads, as a Markdown table."""
    from safehub.config import environment as declared

    rows = ["# Environment variables", "",
            "Each `[safehub]` policy key named here sets the same thing in a policy file; the "
            "environment wins unless that file is `final = true`.", "",
            "| variable | policy key | meaning |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {f'`{v.policy_key}`' if v.policy_key else '-'} | "
             f"{_own_words(v.name, v.meaning)} |" for v in declared()]
    return "\n".join(rows)


def _own_words(name: str, meaning: str) -> str:
    """A policy key's meaning said for its variable: without "as ``NAME``", which there
    would name the variable itself.

    >>> _own_words("SAFEHUB_OFFLINE", "as `SAFEHUB_OFFLINE=1`: safehub opens no socket")
    '`1`: safehub opens no socket'
    >>> _own_words("SAFEHUB_CACHE_DIR", "cache root, as `SAFEHUB_CACHE_DIR`")
    'cache root'
    >>> _own_words("CI", "never prompt, as `SAFEHUB_NONINTERACTIVE=1`")
    'never prompt, as `SAFEHUB_NONINTERACTIVE=1`'
    """
    import re

    said = re.sub(rf"^as `{re.escape(name)}=1`: ", "`1`: ", meaning)
    said = re.sub(rf"[,;]? as `{re.escape(name)}(=1)?`", "", said)
    return said.strip()


def commands(root: argparse.ArgumentParser) -> str:
    """Every command, subcommand and option of ``safehub``, from its parser ``root``."""
    lines = ["# The safehub command", "", root.description or "", ""]
    for name, parser in _verbs(root):
        lines += [f"## safehub {name}", "", parser.description or "", "",
                  f"    {parser.format_usage().strip().removeprefix('usage: ')}", ""]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            names = ", ".join(action.option_strings) or (action.metavar or action.dest)
            lines.append(f"- `{names}`: {action.help or ''}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _verbs(parser: argparse.ArgumentParser, prefix: str = ""
           ) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix}{name}"
                nested = _verbs(sub, f"{full} ")
                found += nested or [(full, sub)]
    return found


def completion(shell: str, root: argparse.ArgumentParser) -> str:
    """A completion script for ``shell`` (bash; zsh through its ``bashcompinit``), made
    from the parser: each command's subcommands, or its options, for the words typed so far
    (the words after a command's own are its arguments; files are completed for them)."""
    if shell != "bash":  # pragma: no cover - the parser allows bash only
        raise ValueError(shell)
    cases = [f'        "") words="{_words(root)}" ;;']
    for path, parser in sorted(_parsers(root), key=lambda p: -len(p[0])):
        nested = any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
        pattern = f'"{path}"' if nested else f'"{path}"|"{path} "*'
        cases.append(f'        {pattern}) words="{_words(parser)}" ;;')
    return "\n".join([
        "# safehub completion (bash): eval \"$(safehub completion bash)\"",
        "_safehub() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" typed="" w words',
        '    for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do',
        '        typed="${typed:+$typed }$w"',
        "    done",
        '    case "$typed" in',
        *cases,
        '        *) words="" ;;',
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -o default -F _safehub safehub", ""])


def _parsers(parser: argparse.ArgumentParser, prefix: str = ""
             ) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command and subcommand: (its words, its parser)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{prefix}{name}", sub), *_parsers(sub, f"{prefix}{name} ")]
    return found


def _words(parser: argparse.ArgumentParser) -> str:
    """What may come next after ``parser``'s command: its subcommands, else the choices of
    its arguments (``bash``) and its options."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return " ".join(action.choices)
    chosen = [str(c) for a in parser._actions if not a.option_strings for c in a.choices or ()]
    return " ".join([*chosen, *(o for a in parser._actions for o in a.option_strings
                                if o.startswith("--"))])
