"""Settings a policy file holds: what a variable or ``Hub(...)`` argument cannot change.

A ``final = true`` file holds its keys against later files and the environment; a file's
``offline``, ``noninteractive`` or ``confine`` cannot be turned off later, nor its
``tree_fallback = false`` on, nor its ``runtime`` made weaker. A value given that way has no
effect, and safehub says so (:func:`say_ignored`, once per process; ``policy show``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from safehub._internal.frozen import Frozen
from safehub.policy.keys import KEYS
from safehub.policy.model import Policy

__all__ = ["Ignored", "held_back", "ignored_variables", "say_ignored"]


class Ignored(Frozen):
    """A variable or ``Hub(...)`` argument that a policy file overrides: it has no effect,
    and safehub says so (a warning on first use, ``safehub policy show``)."""

    given: str
    """What was set: ``SAFEHUB_CACHE_DIR=/x`` or ``Hub(runtime='off')``."""
    key: str
    held: Any
    """The value in force."""
    by: str
    """The file that holds it."""
    why: str

    @property
    def message(self) -> str:
        return (f"{self.given} is ignored: {self.by} sets {self.key} = {self.held!r} "
                f"({self.why})")

    def to_json(self) -> dict[str, Any]:
        return {"given": self.given, "key": self.key, "held": _plain(self.held),
                "by": self.by, "why": self.why}


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, frozenset)):
        return sorted(str(v) for v in value) if isinstance(value, frozenset) else list(value)
    return value if value is None or isinstance(value, (bool, int, str)) else str(value)


# Settings fields that a policy key sets too (``Hub(field=...)`` is a later layer).
_FIELD_KEYS = {"cache_dir": "cache_dir", "lockfile": "lockfile", "audit_log": "audit_log",
               "offline": "offline", "noninteractive": "noninteractive",
               "api_url": "github_api_url", "web_url": "github_url",
               "extra_hosts": "allowed_hosts", "tree_fallback": "tree_fallback",
               "runtime": "runtime", "confine": "confine", "locked": "locked"}


def held_back(policy: Policy, field_name: str, value: Any) -> Ignored | None:
    """Why ``Hub(field_name=value)`` cannot change what the policy files set, if so: a
    ``final = true`` file holds the key, or the value would loosen what a file set (turn
    off ``offline``, ``noninteractive``, ``confine``; turn on ``tree_fallback``; a weaker
    ``runtime``). Values that only tighten always apply."""
    name = _FIELD_KEYS.get(field_name)
    if name is None:
        return None
    key, setting = KEYS["safehub"][name], policy.setting(name)
    if setting.source == "default":
        return None
    given = f"Hub({field_name}={value!r})"
    if key.merge == "any-true":
        loosens, why = bool(setting.value) and not value, "a later setting cannot turn it off"
    elif key.merge == "any-false":
        loosens, why = (not setting.value) and bool(value), "a later setting cannot turn it on"
    elif key.merge == "strictest" and name == "runtime":
        order = ("off", "observe", "enforce")
        loosens = value in order and order.index(value) < order.index(setting.value)
        why = "a later setting may only make the runtime guard stricter"
    else:
        loosens = setting.final and _plain(_as_setting(value)) != _plain(setting.value)
        why = "final = true: later settings cannot change it"
    return Ignored(given, name, setting.value, setting.source, why) if loosens else None


def _as_setting(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, frozenset):
        return tuple(sorted(value))
    return value


def ignored_variables(policy: Policy, environ: Mapping[str, str]) -> tuple[Ignored, ...]:
    found = []
    for name, key in KEYS["safehub"].items():
        setting = policy.setting(name)
        raw = environ.get(key.env or "")
        if key.env and raw and key.merge != "any-true" and setting.final \
                and raw != str(setting.value):
            found.append(Ignored(f"{key.env}={raw}", name, setting.value, setting.source,
                                 "final = true: later settings cannot change it"))
    return tuple(found)


_SAID: set[str] = set()


def say_ignored(ignored: tuple[Ignored, ...]) -> None:
    """Warn once per process about each setting that has no effect."""
    from safehub._internal.warn import warn

    for item in ignored:
        if item.message not in _SAID:
            _SAID.add(item.message)
            warn(item.message)
