"""Records declared by subclassing Frozen or Mutable behave as the dataclasses they replace."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from pathlib import Path
from typing import ClassVar, NamedTuple

import pytest

import safehub
from safehub._internal.frozen import Frozen, Mutable, asdict, field, fields, replace


class Pin(Frozen):
    url: str
    sha256: str
    size: int | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)
    token: str = field(default="", repr=False)
    KIND: ClassVar[str] = "pin"


class Report(Mutable):
    repo: str
    hosts: list[str] = field(default_factory=list)
    pins: dict[str, Pin] = field(default_factory=dict)
    truncated: int = 0


class Checked(Frozen):
    pattern: str
    _compiled: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(self.pattern.split("/")))


class Identity(Frozen, eq=False):
    name: str


class Base(Frozen):
    a: int
    b: str = ""


class Derived(Base):
    c: tuple[int, ...] = ()


# -- the same records as dataclasses, to compare with ----------------------------------------

@dataclasses.dataclass(frozen=True)
class _DataPin:
    url: str
    sha256: str
    size: int | None = None
    notes: tuple[str, ...] = dataclasses.field(default=(), compare=False)
    token: str = dataclasses.field(default="", repr=False)


@dataclasses.dataclass
class _DataReport:
    repo: str
    hosts: list[str] = dataclasses.field(default_factory=list)
    pins: dict[str, _DataPin] = dataclasses.field(default_factory=dict)
    truncated: int = 0


def _shown(value: object) -> str:
    return repr(value).split("(", 1)[1]


def test_arguments_by_position_or_keyword_in_the_fields_order_with_defaults() -> None:
    assert Pin("u", "s") == Pin(url="u", sha256="s") == Pin("u", sha256="s", size=None)
    assert Pin("u", "s", 3).size == 3
    assert fields(Pin) == ("url", "sha256", "size", "notes", "token")  # not the ClassVar
    assert Pin.KIND == "pin" and Pin.size is None  # a default stays on the class
    with pytest.raises(TypeError, match="missing 'sha256'"):
        Pin("u")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected or repeated 'url'"):
        Pin("u", "s", url="v")  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected or repeated 'colour'"):
        Pin("u", "s", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 5 arguments"):
        Pin("u", "s", 1, (), "t", "x")  # type: ignore[call-arg]


def test_repr_eq_and_hash_are_the_dataclass_s() -> None:
    for args in [("u", "s"), ("u", "s", 3, ("a",), "secret")]:
        ours, theirs = Pin(*args), _DataPin(*args)  # type: ignore[arg-type]
        assert _shown(ours) == _shown(theirs) and "secret" not in repr(ours)
    assert Pin("u", "s", notes=("a",)) == Pin("u", "s", notes=("b",))  # compare=False
    assert hash(Pin("u", "s", notes=("a",))) == hash(Pin("u", "s"))
    assert Pin("u", "s") != Pin("u", "t") and Pin("u", "s", token="x") != Pin("u", "s")
    assert Pin("u", "s") != _DataPin("u", "s")  # the same class only
    assert Base(1) != Derived(1) and Derived(1) == Derived(1, "", ())
    assert _shown(Report("r", ["h"])) == _shown(_DataReport("r", ["h"]))


def test_a_frozen_record_refuses_any_assignment_a_mutable_one_takes_them() -> None:
    pin = Pin("u", "s")
    with pytest.raises(AttributeError, match="Pin is immutable: cannot set 'url'"):
        pin.url = "v"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete 'url'"):
        del pin.url
    report = Report("r")
    report.truncated = 2
    report.hosts.append("h")
    assert report == Report("r", ["h"], truncated=2)


def test_a_mutable_record_is_unhashable_as_a_dataclass_that_is_not_frozen() -> None:
    with pytest.raises(TypeError, match="unhashable"):
        hash(Report("r"))
    with pytest.raises(TypeError, match="unhashable"):
        hash(_DataReport("r"))


def test_a_default_factory_makes_one_value_per_record() -> None:
    one, two = Report("a"), Report("b")
    one.hosts.append("h")
    assert two.hosts == [] and one.pins is not two.pins
    assert "hosts" not in Report.__dict__  # a factory's field is no class attribute


def test_a_field_init_does_not_take_is_set_by_post_init() -> None:
    checked = Checked("a/b")
    assert checked._compiled == ("a", "b") and repr(checked) == "Checked(pattern='a/b')"
    assert checked == Checked("a/b") and hash(checked) == hash(Checked("a/b"))
    with pytest.raises(TypeError, match="unexpected or repeated '_compiled'"):
        Checked("a", _compiled=())  # type: ignore[call-arg]
    assert replace(checked, pattern="c")._compiled == ("c",)  # made anew, not copied


def test_eq_false_keeps_identity() -> None:
    one = Identity("x")
    assert one == one and one != Identity("x") and len({one, Identity("x")}) == 2


def test_a_subclass_adds_its_fields_after_its_base_s() -> None:
    assert fields(Derived) == ("a", "b", "c") and Derived(1, "x", (2,)).c == (2,)
    assert repr(Derived(1)) == "Derived(a=1, b='', c=())"


def test_a_class_that_a_dataclass_would_refuse_is_refused() -> None:
    with pytest.raises(TypeError, match="mutable default is shared"):
        class Shared(Mutable):
            items: list[str] = []  # noqa: RUF012
    with pytest.raises(TypeError, match="without a default follows one with"):
        class Order(Frozen):
            a: int = 0
            b: int  # type: ignore[misc]
    with pytest.raises(TypeError, match="not both"):
        field(default=(), default_factory=tuple)


def test_replace_and_asdict_as_dataclasses_do() -> None:
    class Pair(NamedTuple):
        left: Pin
        right: int

    pin = Pin("u", "s", notes=("n",))
    assert replace(pin, size=4) == Pin("u", "s", 4, ("n",))
    report = Report("r", ["h"], {"k": pin})
    ours = asdict(report)
    theirs = _DataReport("r", ["h"], {"k": _DataPin("u", "s", notes=("n",))})
    assert ours == dataclasses.asdict(theirs)
    assert ours["hosts"] is not report.hosts
    assert asdict(Derived(1, c=(2,))) == {"a": 1, "b": "", "c": (2,)}

    class Holder(Frozen):
        pair: Pair

    held = asdict(Holder(Pair(pin, 1)))["pair"]
    assert type(held) is Pair and held.left["url"] == "u"  # type: ignore[index]


def test_records_copy_and_pickle() -> None:
    for value in (Pin("u", "s", 1, ("n",), "t"), Report("r", ["h"]), Derived(1), Checked("a/b")):
        assert copy.copy(value) == value == copy.deepcopy(value)
        assert pickle.loads(pickle.dumps(value)) == value
    assert pickle.loads(pickle.dumps(Checked("a/b")))._compiled == ("a", "b")


def test_safehub_declares_every_record_one_way() -> None:
    """No module of the package makes a dataclass (each compiles its methods at import)."""
    root = Path(safehub.__file__).parent
    maker = re.compile(r"@(dataclasses\.)?dataclass\b|^(from dataclasses |import dataclasses)",
                       re.M)
    makers = [str(p.relative_to(root)) for p in root.rglob("*.py") if maker.search(p.read_text())]
    assert makers == []
