"""Small immutable values whose methods are written once, here, instead of per class.

A frozen dataclass writes its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as source text and compiles each when its class is
defined: about half a millisecond a class, paid by every process that imports it. A warm
load imports the policy's value types and the fixes of every refusal, dozens of classes it
mostly never instantiates, so those are :class:`Frozen` instead: each class lists its
fields in ``__slots__``, annotates them (in the order ``repr`` shows them) and sets them
in its own ``__init__`` with :meth:`Frozen._set`; equality, hashing, ``repr``, copying and
pickling are the methods below, by the fields of every class in its MRO, base first. Like
a frozen dataclass, an instance refuses any later assignment.

>>> class Point(Frozen):
...     __slots__ = ("x", "y")
...     x: int
...     y: int
...     def __init__(self, x: int, y: int = 0) -> None:
...         self._set(x=x, y=y)
>>> Point(1), Point(1) == Point(1, 0), hash(Point(1)) == hash(Point(1, 0))
(Point(x=1, y=0), True, True)
>>> Point(1).x = 2
Traceback (most recent call last):
...
AttributeError: Point is immutable: cannot set 'x'
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn, TypeVar

__all__ = ["Frozen", "fields", "replace"]

_F = TypeVar("_F", bound="Frozen")


class Frozen:
    """The base of a small immutable value (see the module's docstring)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class's fields are its slots, in the order its annotations declare them."""
        super().__init_subclass__(**kwargs)
        slots = cls.__dict__.get("__slots__", ())
        declared = [name for name in cls.__annotations__ if name in slots]  # its own only
        assert len(declared) == len(slots), f"{cls.__name__}: annotate each slot, in order"
        cls._fields = (*cls._fields, *declared)

    def _set(self, **values: object) -> None:
        """Set fields once, from ``__init__`` (every later assignment is refused)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles are built field by field, as :meth:`_set` does."""
        return _rebuilt, (type(self), dict(zip(self._fields, self._values(), strict=True)))


def fields(value: Frozen | type[Frozen], /) -> tuple[str, ...]:
    """The names of the fields of a value or class, base first (``dataclasses.fields``)."""
    return value._fields


def replace(value: _F, /, **changes: object) -> _F:
    """A copy of ``value`` with some fields changed (``dataclasses.replace``), built by its
    class's ``__init__`` as any other value is."""
    return type(value)(**{**dict(zip(value._fields, value._values(), strict=True)), **changes})


def _rebuilt(cls: type[Frozen], values: dict[str, object]) -> Frozen:
    value = cls.__new__(cls)
    value._set(**values)
    return value
