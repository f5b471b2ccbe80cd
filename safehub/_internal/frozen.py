"""Small records whose methods are written once, here, instead of per class.

A dataclass writes its ``__init__``, ``__repr__``, ``__eq__`` (and, frozen, ``__hash__``,
``__setattr__`` and ``__delattr__``) as source text and compiles each when its class is
defined: about half a millisecond a class, paid by every process that imports it. A load
imports dozens of such classes it mostly never instantiates (the policy's value types, the
fixes of every refusal, the records of a source it does not use), so safehub declares every
record by subclassing :class:`Frozen` (immutable) or :class:`Mutable` instead. A subclass
reads as a dataclass does (annotated fields, defaults, :func:`field` for a default factory
or a field left out of ``__init__``, ``repr`` or comparisons, ``__post_init__``; type
checkers treat it as one), and these methods, written once, do what the generated ones
would: keyword or positional arguments in the fields' order, equality by the compared fields
(of the same class only), ``repr``, and for :class:`Frozen` hashing by those fields and any
assignment after ``__init__`` refused; a :class:`Mutable` is unhashable, as a dataclass
that is not frozen is.

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
>>> class Bag(Mutable):
...     name: str
...     items: list[str] = field(default_factory=list)
...     secret: str = field(default="", repr=False, compare=False)
>>> bag = Bag("a")
>>> bag.items.append("x"); bag
Bag(name='a', items=['x'])
>>> bag == Bag("a", ["x"], secret="s"), asdict(bag)
(True, {'name': 'a', 'items': ['x'], 'secret': ''})

``class Name(Frozen, eq=False)`` keeps identity for ``==`` and ``hash`` (``eq=False``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

__all__ = ["Frozen", "Mutable", "asdict", "field", "fields", "replace"]

_F = TypeVar("_F", bound="_Record")
_MISSING: Any = object()


class _Field:
    """One field's options, as :func:`field` gave them (or its default alone)."""

    __slots__ = ("compare", "default", "factory", "init", "repr")

    def __init__(self, default: Any = _MISSING, factory: Callable[[], Any] | None = None,
                 init: bool = True, repr: bool = True, compare: bool = True) -> None:
        self.default, self.factory = default, factory
        self.init, self.repr, self.compare = init, repr, compare


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None,
          init: bool = True, repr: bool = True, compare: bool = True) -> Any:
    """A field's default, or a factory called for each instance (a list, a dict, the time
    now), and whether ``__init__`` takes it, ``repr`` shows it and ``==`` (and ``hash``)
    compare it: ``dataclasses.field``'s options of those names."""
    if default is not _MISSING and default_factory is not None:
        raise TypeError("field() takes a default or a default_factory, not both")
    return _Field(default, default_factory, init, repr, compare)


if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # it only informs type checkers
    def dataclass_transform(**_: object) -> Any:
        return lambda cls: cls


class _Record:
    """What :class:`Frozen` and :class:`Mutable` share: the fields, ``__init__``, ``==`` and
    ``repr``. Each subclass keeps its fields' names (all, then those ``__init__`` takes, those
    compared, those shown) and their defaults and factories, its bases' first."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _init: ClassVar[tuple[str, ...]] = ()
    _compared: ClassVar[tuple[str, ...]] = ()
    _shown: ClassVar[tuple[str, ...]] = ()
    _specs: ClassVar[dict[str, _Field]] = {}
    _filled: ClassVar[tuple[tuple[str, _Field], ...]] = ()  # fields with a default or factory
    _post_init: ClassVar[Callable[[Any], None] | None] = None

    def __init_subclass__(cls, eq: bool = True, **kwargs: Any) -> None:
        """The fields: the bases', then the names this class annotates (not ``ClassVar``);
        a default must be immutable, as a dataclass requires (an instance shares it)."""
        super().__init_subclass__(**kwargs)
        specs = dict(cls._specs)
        for name, kind in cls.__annotations__.items():  # its own (not its bases')
            if str(kind).startswith(("ClassVar", "typing.ClassVar")):
                continue
            spec = cls.__dict__.get(name, _MISSING)
            spec = spec if isinstance(spec, _Field) else _Field(spec)
            if spec.default is not _MISSING and type(spec.default).__hash__ is None:
                raise TypeError(f"{cls.__name__}.{name}: a mutable default is shared "
                                f"(use field(default_factory=...))")
            if spec.default is not _MISSING:
                setattr(cls, name, spec.default)  # as a dataclass leaves it
            elif name in cls.__dict__:
                delattr(cls, name)
            specs[name] = spec
        cls._specs = specs
        cls._fields = tuple(specs)
        cls._init = tuple(name for name, spec in specs.items() if spec.init)
        cls._compared = tuple(name for name, spec in specs.items() if spec.compare)
        cls._shown = tuple(name for name, spec in specs.items() if spec.repr)
        cls._filled = tuple((name, spec) for name, spec in specs.items()
                            if spec.default is not _MISSING or spec.factory is not None)
        filled = {name for name, _ in cls._filled}
        required = [name for name in cls._init if name not in filled]
        if required and cls._init.index(required[-1]) >= len(required):
            raise TypeError(f"{cls.__name__}: a field without a default follows one with")
        cls._post_init = getattr(cls, "__post_init__", None)
        if not eq:
            cls.__eq__ = object.__eq__  # type: ignore[method-assign]
            cls.__hash__ = object.__hash__  # type: ignore[method-assign]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        names = cls._init
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}() takes {len(names)} arguments")
        values = self.__dict__
        values.update(zip(names, args, strict=False))
        if kwargs:
            for name in kwargs:
                if name not in names or name in values:
                    raise TypeError(f"{cls.__name__}() got an unexpected or repeated {name!r}")
            values.update(kwargs)
        if len(values) < len(cls._fields):
            for name, spec in cls._filled:  # a field __init__ does not take is never given
                if name not in values:
                    values[name] = spec.default if spec.factory is None else spec.factory()
            for name in names if len(values) < len(cls._fields) else ():
                if name not in values:
                    raise TypeError(f"{cls.__name__}() is missing {name!r}")
        if cls._post_init is not None:
            cls._post_init(self)

    def _values(self) -> tuple[Any, ...]:
        return tuple(self.__dict__[name] for name in self._compared)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._shown)
        return f"{type(self).__qualname__}({shown})"


@dataclass_transform(eq_default=True, frozen_default=True, field_specifiers=(field,))
class Frozen(_Record):
    """The base of a small immutable value (see the module's docstring)."""

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete {name!r}")

    def __hash__(self) -> int:
        return hash(self._values())


@dataclass_transform(eq_default=True, field_specifiers=(field,))
class Mutable(_Record):
    """The base of a small record whose fields may be set again (see the module's
    docstring): unhashable, as a dataclass that is not frozen is."""

    __hash__ = None  # type: ignore[assignment]


def fields(value: _Record | type[_Record], /) -> tuple[str, ...]:
    """The names of the fields of a record or its class, in order (``dataclasses.fields``)."""
    return value._fields


def replace(value: _F, /, **changes: Any) -> _F:
    """A copy of ``value`` with some fields changed (``dataclasses.replace``): the fields
    ``__init__`` takes are passed again, the others made anew."""
    return type(value)(**{**{name: value.__dict__[name] for name in value._init}, **changes})


def asdict(value: _Record) -> dict[str, Any]:
    """The record's fields as a dict, records inside it (and inside its lists, tuples and
    dicts) as dicts too (``dataclasses.asdict``, whose other values it copies: a value here
    is shared)."""
    return {name: _plain(value.__dict__[name]) for name in value._fields}


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return asdict(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(_plain(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
