"""Small immutable values whose methods are written once, here, instead of per class.

A frozen dataclass writes its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as source text and compiles each when its class is
defined: about half a millisecond a class, paid by every process that imports it. A warm
load imports dozens of such classes it mostly never instantiates (the policy's value types,
the fixes of every refusal), so those subclass :class:`Frozen` instead. A subclass reads as
a frozen dataclass does (annotated fields, defaults, ``__post_init__``; type checkers treat
it as one), and these methods, written once, do what the generated ones would: keyword or
positional arguments in the fields' order, equality and hashing by the fields (of the same
class only), ``repr``, and any assignment after ``__init__`` refused.

>>> class Point(Frozen):
...     x: int
...     y: int = 0
>>> Point(1), Point(1) == Point(x=1, y=0), hash(Point(1)) == hash(Point(1, 0))
(Point(x=1, y=0), True, True)
>>> Point(1).x = 2
Traceback (most recent call last):
...
AttributeError: Point is immutable: cannot set 'x'
>>> replace(Point(1), y=3), fields(Point)
(Point(x=1, y=3), ('x', 'y'))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

__all__ = ["Frozen", "fields", "replace"]

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # it only informs type checkers
    def dataclass_transform(**_: object) -> Any:
        return lambda cls: cls

_F = TypeVar("_F", bound="Frozen")
_MISSING = object()


@dataclass_transform(eq_default=True, frozen_default=True)
class Frozen:
    """The base of a small immutable value (see the module's docstring)."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """The fields: the base's, then the names this class annotates (not ``ClassVar``);
        a default must be immutable, as a dataclass requires (an instance shares it)."""
        super().__init_subclass__(**kwargs)
        own = [name for name, kind in cls.__annotations__.items()  # its own, not its bases'
               if not str(kind).startswith(("ClassVar", "typing.ClassVar"))]
        cls._fields = (*cls._fields, *(name for name in own if name not in cls._fields))
        cls._defaults = {**cls._defaults, **{name: cls.__dict__[name] for name in own
                                             if name in cls.__dict__}}
        for name, default in cls._defaults.items():
            if type(default).__hash__ is None:
                raise TypeError(f"{cls.__name__}.{name}: a mutable default is shared")
        required = [name for name in cls._fields if name not in cls._defaults]
        if required and cls._fields.index(required[-1]) >= len(required):
            raise TypeError(f"{cls.__name__}: a field without a default follows one with")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        if len(args) > len(cls._fields):
            raise TypeError(f"{cls.__name__}() takes {len(cls._fields)} arguments")
        values = dict(zip(cls._fields[:len(args)], args, strict=True))
        for name, value in kwargs.items():
            if name not in cls._fields or name in values:
                raise TypeError(f"{cls.__name__}() got an unexpected or repeated {name!r}")
            values[name] = value
        for name in cls._fields:
            if name not in values:
                values[name] = cls._defaults.get(name, _MISSING)
                if values[name] is _MISSING:
                    raise TypeError(f"{cls.__name__}() is missing {name!r}")
        self.__dict__.update(values)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name in self._fields)

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
        shown = ", ".join(f"{name}={value!r}" for name, value in
                          zip(self._fields, self._values(), strict=True))
        return f"{type(self).__qualname__}({shown})"


def fields(value: Frozen | type[Frozen], /) -> tuple[str, ...]:
    """The names of the fields of a value or class, in order (``dataclasses.fields``)."""
    return value._fields


def replace(value: _F, /, **changes: Any) -> _F:
    """A copy of ``value`` with some fields changed (``dataclasses.replace``)."""
    return type(value)(**{**dict(zip(value._fields, value._values(), strict=True)), **changes})
