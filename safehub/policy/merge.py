"""The one merge of a ``[safehub]`` or ``[confine]`` key across policy files.

Every such key merges by :func:`merge_key`, as its declaration says (``Key.merge``,
``Key.widened_by``; docs/policy.md, "How files merge"): what the files before one set is its
bound (where none sets the key: the default); a stricter value tightens it, a looser one is
ignored, a list keeps what the bound allows too; only the roles a key names may widen a
default, where no earlier file set it; a ``final = true`` file is a floor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from safehub._internal.frozen import Frozen, replace
from safehub._internal.fsutil import within
from safehub.policy.keys import KEYS, TABLE_NAMES, Choice, Key
from safehub.policy.schema import FileSpec, Table

__all__ = ["Meet", "Merged", "Setting", "meet_of", "merge_key", "merge_settings", "narrow"]


class Setting(NamedTuple):
    """A ``[safehub]`` setting's merged value, where it came from, and whether a final
    file holds it."""

    value: Any
    source: str
    final: bool = False


class Merged(Frozen):
    """A key merged across files (:func:`merge_key`): its value, where it came from
    (``default``, a file, or ``A, narrowed by B``), whether a final file holds it, and what
    files asked that it does not grant (``notes``: one line each, naming file, key, entry
    and bound)."""

    value: Any
    source: str
    final: bool = False
    notes: tuple[str, ...] = ()

    @property
    def setting(self) -> Setting:
        return Setting(self.value, self.source, self.final)


#: The merges over an order from loose to strict in which a ``final = true`` file that
#: leaves the key unset holds the default (``own``: ``mode``'s summary, FileSpec.warns).
_FLOORED = ("strictest", "own", "narrow")

Meet = Callable[[Any, Any], Any]
"""``meet(bound, value)``: what both allow, the stricter of two values of one key."""

_ROLES = {"site": "a site file", "user": "the user's file", "project": "a project's file",
          "extra": "a SAFEHUB_POLICY file"}


def narrow(bound: Iterable[Any], value: Iterable[Any], *, nested: bool = False,
           resolve: Callable[[Any], Any] | None = None) -> tuple[Any, ...]:
    """The entries of ``value`` that ``bound`` allows too, as ``value`` writes them, each
    compared by what ``resolve`` makes of it (a real path, the program a name finds).
    Folders (``nested``) are kept where they lie inside a folder of the bound, and a bound
    folder inside one of ``value``'s is kept in its place: the deeper of two that nest.

    >>> narrow((443, 8443), (8443, 22))
    (8443,)
    >>> narrow(("/data", "/srv/x"), ("/data/run", "/data2", "/srv"), nested=True)
    ('/data/run', '/srv/x')
    """
    same = resolve or (lambda v: v)
    theirs: dict[Any, Any] = {}
    for entry in bound:
        theirs.setdefault(same(entry), entry)
    ours: dict[Any, Any] = {}
    for entry in value:
        ours.setdefault(same(entry), entry)
    if not nested:
        return tuple(v for r, v in ours.items() if r in theirs)
    kept = {r: v for r, v in ours.items() if any(within(r, b) for b in theirs)}
    for r, b in theirs.items():
        if r not in kept and any(within(r, o) for o in ours):
            kept[r] = b
    return tuple(kept.values())


def meet_of(key: Key, resolve: Callable[[Any], Any] | None = None) -> Meet | None:
    """How ``key`` combines the bound with a later file's value; None where the later value
    overrides (``latest``: unless a ``final`` file set it). ``resolve`` (``narrow`` keys):
    what an entry is compared by."""
    if key.merge in ("strictest", "own"):
        choice = key.type
        assert isinstance(choice, Choice)
        return lambda bound, value: max((bound, value), key=choice.strictness)
    if key.merge == "any-true":
        return lambda bound, value: bool(bound or value)
    if key.merge == "any-false":
        return lambda bound, value: bool(bound and value)
    if key.merge == "narrow":
        return lambda bound, value: narrow(bound, value, nested=key.path, resolve=resolve)
    if key.merge == "latest":
        return None
    raise ValueError(f"{key.scope}.{key.name} is not merged across files ({key.merge})")


def merge_key(key: Key, files: Sequence[FileSpec],
              resolve: Callable[[Any], Any] | None = None) -> Merged:
    """A ``[safehub]`` or ``[confine]`` key merged across ``files`` (in merge order): the one
    merge of every table's keys (docs/policy.md, "How files merge").

    What the files before one set is its *bound* (where none set the key: the default). A
    file may widen the default only where no earlier file set the key and its role may
    (``key.widened_by``: never a project's); otherwise its value is met with the bound
    (:func:`meet_of`): a stricter value tightens, a looser one is ignored, a list keeps only
    what the bound allows too. A ``final = true`` file that leaves an ordered key unset,
    where no earlier file set it, holds the default: after it every file only tightens. What
    a file asked that the merge did not grant is in ``notes``.

    >>> from safehub.policy.schema import parse_text
    >>> site = parse_text("[safehub]\\nfinal = true\\n", "/etc/xdg/safehub/policy.toml")
    >>> project = parse_text('[confine]\\nexec = ["sh"]\\nconnect_ports = [443, 22]\\n',
    ...                      "/p/safehub.toml", origin="project")
    >>> merge_key(KEYS["confine"]["exec"], [site, project]).value
    ()
    >>> merge_key(KEYS["confine"]["connect_ports"], [project]).value
    (443,)
    """
    meet = meet_of(key, resolve)
    held: Merged | None = None
    notes: list[str] = []
    for spec in files:
        table: Table | None = getattr(spec, key.scope)
        final = bool(spec.safehub.final)
        if table is not None and key.name in table.given:
            value = table[key.name]
            if meet is None:  # latest: a later file overrides unless a final file set it
                if held is None or not held.final:
                    held = Merged(value, spec.source, final)
            elif held is None:
                widens = spec.origin in key.widened_by
                kept = value if widens else meet(key.default, value)
                notes += _not_granted(key, spec, value, kept, Merged(key.default, "default"),
                                      meet)
                if not (kept == key.default != value):  # a looser value than the default
                    held = Merged(kept, spec.source, final)  # is ignored: room stays
            else:
                kept = meet(held.value, value)
                notes += _not_granted(key, spec, value, kept, held, meet)
                if kept != held.value:
                    source = (spec.source if kept == value
                              else f"{held.source}, narrowed by {spec.source}")
                    held = Merged(kept, source,
                                   (held.final or final) if key.merge in _FLOORED else final)
        if final and held is None and key.merge in _FLOORED:
            held = Merged(key.default, spec.source, True)  # a floor
    if held is None:
        held = Merged(key.default, "default")
    return replace(held, notes=tuple(notes))


def _not_granted(key: Key, spec: FileSpec, value: Any, kept: Any, bound: Merged,
                 meet: Meet) -> list[str]:
    """What ``spec`` asked of ``key`` beyond ``bound`` (``kept``: what the merge granted of
    it), said once; empty if nothing."""
    if isinstance(value, tuple):
        left = [v for v in value if meet(kept, (v,)) != (v,)]
        if not left:
            return []
        asked = " ".join(repr(v) for v in dict.fromkeys(left))
    elif kept == value:
        return []
    else:
        asked = f"= {value!r}"
    name = f"{TABLE_NAMES[key.scope]} {key.name}" if key.scope != "safehub" else key.name
    if bound.source == "default":
        admins = " or ".join(_ROLES[r] for r in key.widened_by if r in _ROLES)
        why = (f"{_ROLES.get(spec.origin, 'this file')} only narrows {name}, and the bound "
               f"is the default {_plain(key.default)!r}; {admins} may widen it")
    elif bound.final and bound.value == key.default:
        why = (f"a later file only narrows {name}: the bound is the default "
               f"{_plain(key.default)!r}, held by {bound.source} (final = true)")
    else:
        held = " (final = true)" if bound.final else ""
        why = (f"a later file only narrows {name}: the bound is {_plain(bound.value)!r} "
               f"from {bound.source}{held}")
    return [f"{spec.source}: {name} {asked} is not granted ({why})"]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def merge_settings(files: Sequence[FileSpec]) -> dict[str, Setting]:
    """Every ``[safehub]`` key that merges across files, set by a file or held by a final
    one (per-file keys are read from each file where used: ``Policy.decide_local``)."""
    settings: dict[str, Setting] = {}
    for key in KEYS["safehub"].values():
        if key.merge not in ("per-file", "each"):
            merged = merge_key(key, files)
            if merged.source != "default":
                settings[key.name] = merged.setting
    return settings
