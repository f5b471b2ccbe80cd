"""The runtime guard: what a repo's code does while safehub imports its hubconf and runs
its entrypoint, recorded, and held to the policy's ``network``, ``subprocess`` and
``writes`` keys.

A record and a seatbelt for code that is not hiding, not a sandbox: code that wants to get
past an audit hook can (docs/runtime.md). ``safehub run --confine`` holds a job to its
policy with the kernel's Landlock instead.

>>> import tempfile
>>> tree = Path(tempfile.mkdtemp())
>>> guard = RuntimeGuard(RuntimeRules(mode="enforce"), repo="org/repo", tree=tree)
>>> try:
...     with guard.active() as report:
...         with open(tree / "cache.txt", "w") as f:   # inside the tree: allowed
...             _ = f.write("ok")
...         try:
...             subprocess.run(["git", "--version"])   # no subprocess key: refused
...         except BaseException:
...             pass                                   # ...and swallowed by the repo
... except RuntimeGuardError as e:                     # the load still fails with it
...     print(e.message)
runtime guard: org/repo tried to start git (git --version); runtime = "enforce" and no ...
>>> report.programs
['git --version']
"""

from __future__ import annotations

import contextlib
import functools
import os
import site
import socket
import subprocess  # noqa: F401  (the doctest above)
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from safehub._internal import fixes
from safehub._internal.fsutil import within, within_any
from safehub._internal.hosts import local_name, normalise_host, parse_ip
from safehub._internal.torchdir import torch_hub_path
from safehub._internal.warn import warn
from safehub.errors import RuntimeGuardError
from safehub.run import hygiene
from safehub.run.hygiene import leftovers, shadowing
from safehub.run.runtime import _hook
from safehub.run.runtime._events import Action
from safehub.run.runtime.report import RuntimeReport
from safehub.run.runtime.rules import OwnWork, RuntimeRules, toml_list
from safehub.store.cache import warm

if TYPE_CHECKING:
    from safehub.run.confine.ruleset import Ruleset

__all__ = ["OwnWork", "RuntimeGuard", "RuntimeReport"]

_SYSTEM_LIBRARY_DIRS = ("/lib", "/lib32", "/lib64", "/usr", "/opt", "/System", "/Library")


def _real(path: os.PathLike[str] | str) -> str:
    return _realpath(os.path.expanduser(os.fspath(path)))


@functools.lru_cache(maxsize=256)
def _realpath(path: str) -> str:
    """``os.path.realpath`` of a folder the guard holds (the tree, the hub and temp dirs,
    the policy's paths), once per process: links there do not move under a running job."""
    return os.path.realpath(path)


#: Audit events of metadata changes, which ``safehub run --confine``'s seccomp filter
#: refuses on every path (it cannot see paths): shutil's copies that set modes included.
_METADATA_REFUSED = ("{0.target}: {0.op} is refused under safehub run --confine (seccomp: "
                     "no metadata changes)")
_METADATA = frozenset({"os.chmod", "os.chown", "os.utime", "os.chflags", "os.lchflags",
                       "os.setxattr", "os.removexattr", "shutil.copymode",
                       "shutil.copystat", "shutil.chown"})

class _AddressBook:
    """Which allowed names an address came from, for decisions at ``connect``.

    A lookup's answer is not in its audit event, so the names are resolved again here, once
    per guard and only when a connection goes to an address no entry names: the names the
    code looked up that an entry allows, and the entries' own names.
    """

    def __init__(self, entries: Sequence[str] | Callable[[], Sequence[str] | None]) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, set[str]] = {}   # address -> names it was resolved from
        self._resolved: set[str] = set()
        self._later = entries if callable(entries) else None  # worked out when first asked
        self._pending: set[str] = set() if callable(entries) else set(entries)

    def looked_up(self, name: str) -> None:
        with self._lock:
            if name not in self._resolved:
                self._pending.add(name)

    def names_of(self, address: str) -> set[str]:
        with self._lock:
            if self._later is not None:
                self._pending |= set(self._later() or ())
                self._later = None
            todo = []
            if address not in self._names:
                todo, self._pending = sorted(self._pending), set()
        for name in todo:
            try:
                infos = socket.getaddrinfo(name, None)
            except (OSError, UnicodeError):
                infos = []
            with self._lock:
                self._resolved.add(name)
                for info in infos:
                    ip = parse_ip(str(info[4][0]))
                    if ip is not None:
                        self._names.setdefault(str(ip), set()).add(name)
        with self._lock:
            return set(self._names.get(address, ()))

    def label(self, host: str, port: int | None, shown: str) -> str:
        """``name:port (address)`` if ``host`` is an address a known name resolved to."""
        ip = parse_ip(host)
        names = sorted(self._names.get(str(ip), ())) if ip is not None else []
        if not names:
            return shown
        return f"{names[0]}:{port} ({ip})" if port is not None else f"{names[0]} ({ip})"


@functools.lru_cache(maxsize=1)
def _install_roots() -> tuple[str, ...]:
    """Where this Python and its packages are installed (fixed for the process)."""
    roots = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             *site.getsitepackages(), site.getusersitepackages()}
    return tuple(sorted(_real(r) for r in roots if r))


class RuntimeGuard:
    """The runtime rules of one load, applied while :meth:`active` is entered.

    ``tree`` (the repo's verified folder), torch's hub dir, the temp dir, ``os.devnull``
    and ``write_roots`` are always writable; ``rules.writes`` adds more. ``own``: what
    safehub's own work during the load may touch (a callable: worked out when first
    needed, as most loads make none); None: nothing beyond the rules. ``confined``: the
    ruleset of ``safehub run --confine`` over the process (the kernel's refusals noted).
    """

    def __init__(self, rules: RuntimeRules, *, repo: str, tree: Path,
                 write_roots: Sequence[Path] = (), verified_ns: int | None = None,
                 tree_ident: tuple[int, int] | None = None, confined: Ruleset | None = None,
                 own: OwnWork | Callable[[], OwnWork] | None = None,
                 first_time: Callable[[str], bool] | None = None) -> None:
        self.rules = rules
        self._first_time = first_time  # a notice is new for the user: said (guards.once)
        self.repo = repo
        self.tree = Path(_real(tree))
        self.report = RuntimeReport(repo=repo, mode=rules.mode)
        self.verified_ns = verified_ns  # the tree's latest ctime (ns) when it was verified:
        # its files are checked against it as they are opened
        self.tree_ident = tree_ident  # the tree folder's (st_dev, st_ino): it must stay that
        self._own = own
        roots: list[str | os.PathLike[str]] = [tree, torch_hub_path(), tempfile.gettempdir(),
                                                *rules.write_paths(), *write_roots]
        self._roots = sorted({_real(p) for p in roots})
        self._tree = [str(self.tree)]
        self._devnull = _real(os.devnull)
        self._interpreter = {sys.executable, _real(sys.executable)} if sys.executable else set()
        self._installed = _install_roots()
        self._libraries = [*self._installed, *_SYSTEM_LIBRARY_DIRS]
        self._lock = threading.Lock()
        self._addresses = _AddressBook(rules.named_hosts())
        self._own_addresses: _AddressBook | None = None
        self._confined = confined  # safehub run --confine: the kernel's rules
        self._watch = tuple({str(tree).rstrip(os.sep) + os.sep, str(self.tree) + os.sep})

    # -- the guarded block ---------------------------------------------------------------

    @contextlib.contextmanager
    def active(self) -> Iterator[RuntimeReport]:
        """Guard this thread (and threads it starts) until the block ends; yield the report.

        On entry, a tree whose top-level names would replace a standard-library module or
        an installed distribution's (see :meth:`_refuse_shadowing`) is refused. On exit the
        first refusal is raised, even if the repo's code caught it; the report keeps
        everything for the audit line.
        """
        if self.rules.mode == "off":  # nothing recorded or refused; the cache's check stays
            self._watch_tree()
            yield self.report
            return
        _hook.install()
        self.report.shadowing = shadowing(self.tree, self.repo)
        self._refuse_shadowing()
        before = sys.modules.copy()  # a C copy: its keys are what was imported before
        if self.verified_ns is not None:
            _hook.watch(self._watch, self.verified_ns, self.repo, self.tree_ident)
        _hook.push(self)
        try:
            yield self.report
        except Exception as e:
            if self.report.refused and e not in self.report.refused:
                # the refusal is the root cause; `e` stays visible as its context
                raise self.report.refused[0]  # noqa: B904
            raise
        finally:
            _hook.pop(self)
            self.report.leftovers = leftovers(self.tree, before)
        self.report.raise_if_refused()

    def _watch_tree(self) -> None:
        """``runtime = "off"``: no guard, but the verified tree's files are still checked as
        they are opened (the cache's integrity, not the guard's rules; the warm load scanned
        only its folders). ``hubconf.py`` is checked here: torch's importer opens it before
        any of the tree's code is on the stack, when the hook alone would not look."""
        if self.verified_ns is None:
            return
        _hook.install()
        _hook.watch(self._watch, self.verified_ns, self.repo, self.tree_ident)
        refusal = warm.check_opened(str(self.tree / "hubconf.py"), self.repo)
        if refusal is not None:
            raise refusal

    def _refuse_shadowing(self) -> None:
        """A module of the tree that would replace the standard library's is refused; one
        that would replace an installed distribution's is refused unless the distribution
        names this repo as its source (then recorded and warned about); ``shadowing =
        "warn"`` or a name in ``rules.shadows`` warns for every one."""
        for s in self.report.shadowing:
            if not s.takes_effect or s.name in self.rules.shadows:
                continue
            if self.rules.shadowing == "warn" or s.own_distribution:
                if (self._first_time(f"shadowing {self.repo} {s.name}") if self._first_time
                        else hygiene.first_warning(self.repo, s)):  # per user, else process
                    warn(_said_once(self.repo, s, self.rules.shadowing))
                continue
            what = "the standard library's" if s.kind == "stdlib" else f"{s.shadows}'s"
            self._refuse_now(
                Action("module", "import", s.name), "shadows",
                f"runtime guard: {self.repo} would replace {what} module {s.name} with "
                f"{s.path} for the whole process (shadowing = \"refuse\"{self._src()})",
                fixes.noted(self.rules.fix('shadowing = "warn"'), "if that is intended: "))
        self.report.raise_if_refused()

    def _refuse_now(self, action: Action, key: str, message: str, fix: fixes.Fix) -> None:
        error = RuntimeGuardError(message, fix=fix, action=_ACTION.get(action.kind, "guard"),
                                  target=action.target, repo=self.repo, key=key)
        self.record(action, error)

    # -- what the hook asks --------------------------------------------------------------

    def decide(self, action: Action) -> RuntimeGuardError | None:
        """The refusal for ``action``, or None if the rules allow it."""
        kind = action.kind
        if kind == "write":
            return self._decide_write(action)
        if kind in ("lookup", "connect"):
            return self._decide_network(action)
        if kind == "process":
            return self._decide_process(action)
        if kind in ("library", "extension"):
            return self._decide_native(action)
        if kind == "unpickle" and not self.rules.pickles:
            return _unpickling(self.repo, self.rules, action)
        return None

    def own_allows(self, action: Action) -> bool:
        """safehub's own work during the load may do this (:class:`OwnWork`)."""
        if callable(self._own):
            self._own = self._own()
        if self._own is None:
            return False
        if self._own_addresses is None:  # its hosts worked out on the first connection
            self._own_addresses = _AddressBook(self._own.host_list)
        return self._own.allows(action, self._own_addresses.names_of)

    def record(self, action: Action, refusal: RuntimeGuardError | None) -> None:
        """Add ``action`` (and ``refusal``) to this guard's report."""
        report = self.report
        with self._lock:
            if refusal is not None and not any(refusal is r for r in report.refused):
                report.refused.append(refusal)
            kind = action.kind
            if kind == "write":
                for path in action.paths:
                    if path != self._devnull and not within_any(path, self._tree):
                        report.add_entry(report.writes, path)
            elif kind == "connect":
                report.add_entry(report.hosts, self._host_label(action))
            elif kind == "lookup":
                report.add_entry(report.lookups, action.host)
            elif kind == "process":
                report.add_entry(report.programs, action.target)
            elif kind == "environ":
                report.add_entry(report.environ, action.target)
            elif kind == "symbol":
                report.add_entry(report.libraries, f"{action.target} (ctypes symbol)")
            elif kind == "library" or (kind == "extension" and self._written(action.paths[0])):
                report.add_entry(report.libraries, action.target)
            if self._confined is not None:
                self._kernel_refuses(action)

    def _kernel_refuses(self, action: Action) -> None:
        """Note what the kernel will refuse of ``action`` (the record of a confined job)."""
        assert self._confined is not None
        checks: list[tuple[str, str | int]] = []
        if action.op in _METADATA:  # seccomp refuses these wherever the file is
            return self.report.add_entry(self.report.kernel, _METADATA_REFUSED.format(action))
        if action.kind == "write":
            checks = [("write", p) for p in action.paths]
        elif action.kind == "process" and action.real:
            checks = [("exec", action.real)]
        elif action.kind == "connect" and action.op == "socket.connect" and action.port:
            checks = [("connect", action.port)]
        for kind, target in checks:
            why = self._confined.refuses(kind, target)
            if why:
                self.report.add_entry(self.report.kernel, f"{action.target}: {why}")

    def _written(self, path: str) -> bool:
        """``path`` is in a place the guarded code may write (a Python installation in the
        temp dir counts as installed, not as written)."""
        return within_any(path, self._tree) or (within_any(path, self._roots)
                                                and not within_any(path, self._installed))

    def internal_error(self, event: str, error: Exception) -> RuntimeGuardError:
        return RuntimeGuardError(
            f"runtime guard: could not decide on {event} while {self.repo}'s code ran "
            f"({error!r}); refused (fail closed)",
            fix=fixes.say("report this as a safehub bug; runtime = \"off\" in [safehub] turns the "
                          "guard off"), action="guard", target=event, repo=self.repo, key="runtime")

    # -- decisions -----------------------------------------------------------------------

    def _src(self) -> str:
        return f", {self.rules.source}" if self.rules.source else ""

    def _why(self, key: str) -> str:
        rules = self.rules
        if getattr(rules, key) is None:
            return f'runtime = "enforce" and no {key} key allows it{self._src()}'
        return f'{rules.key_text(key)} does not allow it (runtime = "{rules.mode}"{self._src()})'

    def _refusal(self, action: Action, verb: str, key: str, hint_value: str,
                 why: str = "") -> RuntimeGuardError:
        rules = self.rules
        value = getattr(rules, key)
        current: tuple[str, ...] = value if isinstance(value, tuple) else ()
        line = f"{key} = {toml_list([*current, hint_value])}"
        return RuntimeGuardError(
            f"runtime guard: {self.repo} tried to {verb}; {why or self._why(key)}",
            fix=fixes.noted(rules.fix(line), f"if {self.repo} should do this: "),
            action=_ACTION[action.kind], target=action.target, repo=self.repo, key=key)

    def _decide_write(self, action: Action) -> RuntimeGuardError | None:
        if not self.rules.writes_restricted:
            return None
        for path in action.paths:
            if path == self._devnull or within_any(path, self._roots):
                continue
            if action.op == "os.mkdir" and any(within(root, path) for root in self._roots):
                continue  # a folder on the way to an allowed one (torch's hub dir, first use)
            verb = "write" if action.op in ("open", "sqlite3.connect") else f"change ({action.op})"
            return self._refusal(
                action, f"{verb} {path}", "writes", os.path.dirname(path) or path,
                f"it is outside its tree, torch's hub dir and the temp dir, and "
                f"{self._why('writes')}")
        return None

    def _decide_process(self, action: Action) -> RuntimeGuardError | None:
        rules = self.rules
        if not rules.processes_restricted:
            return None
        if action.shell and rules.program_allowed(action.shell):
            return None  # a shell allowed by name may run anything
        name = os.path.basename(action.program)
        verb = f"start {name} ({action.target})"
        if not rules.program_allowed(action.program):
            return self._refusal(action, verb, "subprocess", name)
        if not action.real or action.real in self._interpreter or not self._written(action.real):
            return None
        if any(os.path.isabs(e) and _real(e) == action.real for e in _names(rules.subprocess)):
            return None
        return self._refusal(action, verb, "subprocess", action.real,
                             f"{action.real} is in a place code can write (its tree, the temp "
                             "dir...), where a program name does not allow it")

    def _decide_native(self, action: Action) -> RuntimeGuardError | None:
        """Under ``enforce``: ``ctypes`` libraries outside the Python installation and the
        system's library folders, or in a writable place, and compiled modules imported
        from a writable place. (What a ``ctypes`` function does cannot be told from its
        name: symbol lookups are recorded, never decided.)"""
        if self.rules.mode != "enforce" or not action.paths:  # a bare name: the loader's
            return None
        path = action.paths[0]
        written = self._written(path)
        if not written and (action.kind == "extension" or within_any(path, self._libraries)):
            return None
        reason = ("it is in a place code can write (its tree, the temp dir...)" if written
                  else "it is not part of the Python installation or the system's libraries")
        return RuntimeGuardError(
            f"runtime guard: {self.repo} tried to load native code {action.target} "
            f"({action.op}); {reason} (runtime = \"enforce\"{self._src()})",
            fix=fixes.say('runtime = "observe" in [safehub] records '
                          'native code instead of refusing it'),
            action="library", target=action.target, repo=self.repo, key="runtime")

    def _decide_network(self, action: Action) -> RuntimeGuardError | None:
        rules = self.rules
        if not rules.network_restricted:
            return None
        host, port = normalise_host(action.host), action.port
        if action.kind == "lookup":
            ip = parse_ip(host)
            if ip is not None and action.op in _REVERSE:  # the address itself goes to DNS
                if ip.is_loopback or rules.host_allowed(host, None) or any(
                        rules.host_allowed(n, None) for n in self._addresses.names_of(host)):
                    return None
                return self._refusal(action, f"look up the name of {host}", "network", host)
            if ip is not None or local_name(host) or rules.host_allowed(host, None):
                if rules.host_allowed(host, None):
                    self._addresses.looked_up(host)
                return None
            return self._refusal(action, f"look up {host}", "network", host)
        if rules.host_allowed(host, port):
            return None
        ip = parse_ip(host)
        names = self._addresses.names_of(str(ip)) if ip is not None else set()
        if any(rules.host_allowed(n, port) for n in names):
            return None
        named = min(names) if names else (f"[{host}]" if ip is not None and ":" in host
                                          else host)
        entry = f"{named}:{port}" if port is not None else named
        return self._refusal(action, f"connect to {self._host_label(action)}", "network", entry)

    def _host_label(self, action: Action) -> str:
        return self._addresses.label(action.host, action.port, action.target)


_REVERSE = frozenset({"socket.gethostbyaddr", "socket.getnameinfo"})


def _unpickling(repo: str, rules: RuntimeRules, action: Action) -> RuntimeGuardError:
    """The refusal of a pickle the repo's code deserialises where ``weights_format`` allows
    only safetensors (refused as it names its first global, before that runs)."""
    where = f", {rules.source}" if rules.source else ""
    return RuntimeGuardError(
        f"runtime guard: {repo} tried to deserialise a pickle (it names {action.target}: "
        f"torch.load with weights_only=False, or pickle.load); weights_format allows only "
        f"safetensors for it{where}",
        fix=fixes.either(
            fixes.say("load the weights with weights_only=True or from safetensors"),
            fixes.noted(rules.fix('weights_format = ["safetensors", "pickle"]'),
                        f"if {repo} may unpickle: ")),
        action="pickle", target=action.target, repo=repo, key="weights_format")


_ACTION = {"write": "write", "lookup": "network", "connect": "network", "process": "process",
           "library": "library", "extension": "library", "symbol": "library",
           "module": "module", "guard": "guard", "probe": "guard", "read": "read",
           "unpickle": "pickle"}


def _names(value: bool | tuple[str, ...] | None) -> tuple[str, ...]:
    return value if isinstance(value, tuple) else ()


def _said_once(repo: str, s: hygiene.Shadow, shadowing: str) -> str:
    """The warning of a shadow that is allowed (said once per repo and module)."""
    why = ("its own distribution" if s.own_distribution and shadowing != "warn"
           else 'shadowing = "warn"')
    return (f"{repo}: its module {s.name} ({s.path}) shadows {s.shadows} for the whole "
            f"process ({why}); said once for this repo and module")
