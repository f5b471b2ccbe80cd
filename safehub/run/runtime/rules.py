"""What a repo's code may do while it runs: the runtime keys of a policy, merged, as values.

:class:`RuntimeRules` is what the policy layer hands the guard for one load. Entries are
parsed once, here, into small matchers; the guard only asks them yes/no questions.

>>> rules = RuntimeRules(mode="observe", network=("download.pytorch.org", "*.hf.co:443"))
>>> rules.host_allowed("download.pytorch.org", 443), rules.host_allowed("cdn.hf.co", 443)
(True, True)
>>> rules.host_allowed("hf.co", 443), rules.host_allowed("cdn.hf.co", 80)
(False, False)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Literal

from safehub._internal import fixes
from safehub._internal.fixes import Fix
from safehub._internal.frozen import Frozen, field
from safehub._internal.fsutil import within, within_any
from safehub._internal.hosts import HostPattern, local_name, normalise_host, parse_ip
from safehub._internal.programs import check_entry
from safehub.errors import PolicyError
from safehub.run.runtime._events import Action

__all__ = ["Mode", "OwnWork", "RuntimeRules", "toml_list"]

Mode = Literal["observe", "enforce", "off"]
_MODES = ("observe", "enforce", "off")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def toml_list(values: Iterable[str]) -> str:
    """A TOML inline array of strings, as a hint shows it."""
    return "[" + ", ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                           for v in values) + "]"


class RuntimeRules(Frozen):
    """The merged runtime keys for one load.

    * ``mode``: ``"observe"`` records everything and refuses only what a key below forbids;
      ``"enforce"`` also refuses what no key allows; ``"off"`` does nothing.
    * ``network``: hosts the code may connect to (``None``: no rule sets the key).
    * ``subprocess``: ``True`` any program, ``False`` none, or the names of programs
      allowed (``None``: unset).
    * ``writes``: absolute paths (``~`` expanded) writable besides the repo's tree, torch's
      hub dir and the temp dir (``None``: unset).
    * ``weights_hosts``: hosts of the policy's ``weights`` URLs, always allowed.
    * ``shadows``: top-level module names the repo may shadow (standard library or an
      installed distribution) under ``enforce``.
    * ``source``: where these came from (policy file and rule), for messages.
    """

    mode: Mode = "observe"
    network: tuple[str, ...] | None = None
    subprocess: bool | tuple[str, ...] | None = None
    writes: tuple[str, ...] | None = None
    weights_hosts: tuple[str, ...] = ()
    shadows: tuple[str, ...] = ()
    shadowing: str = "refuse"
    """``refuse``: a repo module that would replace a standard-library or installed module
    refuses the load (``observe`` and ``enforce``); ``warn``: it is recorded and warned
    about."""
    pickles: bool = True
    """Whether the repo's code may deserialise pickles (every matching rule's
    ``weights_format`` lists ``pickle``); false: ``torch.load(weights_only=False)`` and
    ``pickle.load`` are refused as they name their first global."""
    source: str = ""
    edit: tuple[str, str] = ("", "")
    """(policy file, table) an admin would change to allow an action; no table: a new
    ``[[allow]]`` rule for the repo, added to that file."""
    repo_key: str = ""
    user_policy: str = "your user policy file"
    """The user's own policy file (where a write outside a project's folder is allowed)."""
    _hosts: tuple[HostPattern, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"{self.source}: " if self.source else ""
        if self.mode not in _MODES:
            raise PolicyError(f"{where}runtime = {self.mode!r} is not one of {_MODES}",
                              fix=fixes.say('set runtime = "observe", "enforce" or "off"'))
        patterns: list[HostPattern] = []
        for entry in (*(self.network or ()), *self.weights_hosts):
            try:
                patterns.append(HostPattern.parse(entry))
            except ValueError as e:
                raise PolicyError(f"{where}network entry {entry!r} is invalid: {e}",
                                  fix=fixes.say('write "host", "host:port", "*.domain" or '
                                                '"unix:/path"')) from e
        object.__setattr__(self, "_hosts", tuple(patterns))
        for name in self.subprocess if isinstance(self.subprocess, tuple) else ():
            try:
                check_entry(name)
            except ValueError as e:
                raise PolicyError(f"{where}subprocess entry: {e}",
                                  fix=fixes.say('write a program name such as "git", or an '
                                                "absolute path")) from e
        for path in self.writes or ():
            if not os.path.isabs(os.path.expanduser(path)):
                raise PolicyError(f"{where}writes entry {path!r} is not an absolute path",
                                  fix=fixes.say("write an absolute path (~ is expanded)"))

    # -- questions the guard asks -------------------------------------------------------

    @property
    def network_restricted(self) -> bool:
        return self.mode == "enforce" or self.network is not None

    @property
    def processes_restricted(self) -> bool:
        return self.subprocess is not True and (
            self.mode == "enforce" or self.subprocess is not None)

    @property
    def writes_restricted(self) -> bool:
        return self.mode == "enforce" or self.writes is not None

    def host_allowed(self, host: str, port: int | None) -> bool:
        """``host`` (a name or an address) on ``port`` is named by an entry."""
        host = normalise_host(host)
        return any(p.matches(host, port) for p in self._hosts)

    def named_hosts(self) -> list[str]:
        """The entries that name one host (no wildcard, not an address or socket)."""
        return [p.host for p in self._hosts
                if not p.wildcard and parse_ip(p.host) is None and not p.host.startswith("unix:")]

    def program_allowed(self, name: str) -> bool:
        """``name`` (a basename) or ``path`` (absolute, resolved) is in ``subprocess``."""
        if self.subprocess is True:
            return True
        if not isinstance(self.subprocess, tuple):
            return False
        base = os.path.basename(name)
        for entry in self.subprocess:
            if os.path.isabs(entry):
                if os.path.isabs(name) and os.path.realpath(entry) == os.path.realpath(name):
                    return True
            elif entry == base or (entry == "python" and _PYTHON.match(base)):
                return True
        return False

    def write_paths(self) -> list[str]:
        return [os.path.expanduser(p) for p in self.writes or ()]

    def fix(self, line: str) -> Fix:
        """The complete edit that makes ``line`` (``network = [...]``) part of the policy."""
        path, table = self.edit
        if table and line.startswith("writes") and os.path.basename(path) == "safehub.toml":
            # A project's file may only name paths inside its folder: a write elsewhere is
            # for the user to allow, in the user's own policy.
            add = fixes.add(self.user_policy, ["[[allow]]", f'repo = "{self.repo_key}"', line])
            if self.writes is None:
                return add
            return fixes.both(add, fixes.say(f"remove the writes key from {table} of {path} "
                                             "(a project names only paths inside it)"))
        if table:
            return fixes.change(path, table, [line])
        return fixes.add(path or "your policy file",
                         ["[[allow]]", f'repo = "{self.repo_key}"', line])

    def key_text(self, key: str) -> str:
        """How a key reads now, for messages: ``network = ["a"]`` or ``no network key``."""
        value = getattr(self, key)
        if value is None:
            return f"no {key} key"
        if isinstance(value, bool):
            return f"{key} = {'true' if value else 'false'}"
        return f"{key} = {toml_list(value)}"


class OwnWork(Frozen):
    """What safehub's own work may touch while a repo's code runs (a nested load's fetch
    and checks, a weights download, the audit line): connect to ``hosts`` (None: any, as
    weights patterns that name no host allow), write under ``roots`` (its cache, data and
    log folders) but never under ``denied`` (consent records), and never start a process.
    Anything else it does is decided by the guard like the repo's own actions. (A file
    opened by a relative name is its archive writer's, relative to the staging folder's
    descriptor, which the audit event does not carry.)"""

    hosts: tuple[str, ...] | Callable[[], tuple[str, ...] | None] | None = ()
    """The hosts, or a function that works them out (called on the first connection:
    reading the environment's proxies imports urllib.request, which must not be needed to
    decide on an import made halfway through another)."""
    roots: tuple[str, ...] = ()
    denied: tuple[str, ...] = ()

    def host_list(self) -> tuple[str, ...] | None:
        return self.hosts() if callable(self.hosts) else self.hosts

    def allows(self, action: Action, names_of: Callable[[str], set[str]]) -> bool:
        kind = action.kind
        if kind == "process":
            return False
        if kind == "write":
            if action.relative:
                return True
            return all((within_any(p, self.roots) and not within_any(p, self.denied))
                       or (action.op == "os.mkdir" and any(within(r, p) for r in self.roots))
                       for p in action.paths)
        hosts = self.host_list() if kind in ("lookup", "connect") else None
        if hosts is not None:
            host = normalise_host(action.host)
            own = set(hosts)
            return host in own or local_name(host) or bool(names_of(host) & own)
        return True
