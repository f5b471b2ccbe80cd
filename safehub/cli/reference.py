"""``safehub docs env`` and ``safehub docs cli``: reference pages made from safehub's own
declarations (the environment variables in :mod:`safehub.config` and the policy keys, the
command's parser), so they cannot drift from what the program does."""

from __future__ import annotations

import argparse

__all__ = ["commands", "environment"]


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


def commands() -> str:
    """Every command, subcommand and option of ``safehub``, from its parser."""
    from safehub.cli import COMMANDS
    from safehub.cli.common import Parser
    from safehub.cli.parser import build

    root = build(Parser, COMMANDS)
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
