"""core.compat.build_namedtuple behaves as collections.namedtuple: one table of calls, both classes."""

from __future__ import annotations

import copy
import pickle
from collections import namedtuple
from typing import Any, Callable, Dict, List, Tuple

import pytest

from mixed_cpus_hook.core import compat
from mixed_cpus_hook.core.compat import NamedTuple, build_namedtuple

FIELDS = ("a", "b", "c")
DEFAULTS = (None, ())
Std = namedtuple("P", FIELDS, defaults=DEFAULTS, module=__name__)  # type: ignore[misc]

CALLS: List[Tuple[str, Callable[[Any], Any]]] = [
    ("all-positional", lambda C: C(1, 2, 3)),
    ("defaults", lambda C: C(1)),
    ("by-name", lambda C: C(c=3, a=1)),
    ("mixed", lambda C: C(1, c=[3])),
    ("missing-one", lambda C: C()),
    ("too-many", lambda C: C(1, 2, 3, 4)),
    ("twice", lambda C: C(1, a=2)),
    ("unknown-name", lambda C: C(1, d=4)),
    ("make", lambda C: C._make([1, 2, 3])),
    ("make-short", lambda C: C._make([1, 2])),
    ("replace", lambda C: C(1, 2, 3)._replace(b=5)),
    ("replace-unknown", lambda C: C(1)._replace(z=5)),
    ("asdict", lambda C: C(1, 2)._asdict()),
    ("fields", lambda C: (C._fields, C._field_defaults, C.__match_args__)),
    ("repr", lambda C: repr(C(1, "x", [2]))),
    ("attrs", lambda C: (C(1, 2, 3).a, C(1, 2, 3).c, C(1, 2, 3)[1], len(C(1)))),
    ("tuple", lambda C: (isinstance(C(1), tuple), C(1, 2, 3) == (1, 2, 3), hash(C(1, 2, 3)) == hash((1, 2, 3)))),
    ("pickle", lambda C: pickle.loads(pickle.dumps(C(1, 2, 3))) == C(1, 2, 3)),
    ("deepcopy", lambda C: copy.deepcopy(C(1, [2], {"c": 3}))),
    ("no-dict", lambda C: hasattr(C(1), "__dict__")),
    ("set-attr", lambda C: setattr(C(1), "a", 2)),
]


def outcome(call: Callable[[Any], Any], cls: Any) -> Tuple[str, Any]:
    try:
        value = call(cls)
    except Exception as exc:  # noqa: BLE001 - the kind of error is what is compared
        return "raises", type(exc)
    return "returns", tuple(value) if isinstance(value, tuple) and type(value) is not tuple else value


@pytest.mark.parametrize("compiled", [False, True], ids=["built", "compiled"])
@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=[i for i, _ in CALLS])
def test_lean_namedtuple_behaves_as_collections(call: Callable[[Any], Any], compiled: bool) -> None:
    lean = build_namedtuple("P", FIELDS, DEFAULTS, __name__)
    if compiled:
        compat.compile_constructors()
    assert outcome(call, lean) == outcome(call, Std)


def test_class_syntax_keeps_methods_docs_and_defaults() -> None:
    class Rec(NamedTuple):
        """A record."""

        x: int
        y: str = "y"

        def twice(self) -> int:
            return 2 * self.x

    assert Rec(2).twice() == 4 and Rec(2) == (2, "y") and Rec.__doc__ == "A record."
    assert Rec.__module__ == __name__ and Rec.__qualname__.endswith("Rec")
    assert repr(Rec(1, "z")) == "Rec(x=1, y='z')"


@pytest.mark.parametrize("args, kwargs", [
    ((), {}), ((1, 2, 3, 4), {}), ((1,), {"a": 1}), ((1,), {"zz": 1}), ((), {"b": 1}),
    ((1, 2, 3, 4, 5), {"zz": 1}),
], ids=["missing", "too-many", "twice", "unknown", "missing-by-name", "too-many-and-unknown"])
def test_messages_are_the_interpreters(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
    """The same TypeError text as collections' (past the function's name, which Pythons spell differently)."""
    def message(cls: Any) -> str:
        with pytest.raises(TypeError) as info:
            cls(*args, **kwargs)
        return str(info.value).split("()", 1)[1]

    assert message(build_namedtuple("Q", FIELDS, DEFAULTS)) == message(Std)
    compiled = build_namedtuple("Q", FIELDS, DEFAULTS)
    compat.compile_constructors()
    assert message(compiled) == message(Std)
    bare = ("a", "b", "c")
    assert message(build_namedtuple("Q", bare)) == message(namedtuple("Q", bare))


def test_building_compiles_nothing_and_a_resident_process_compiles_once() -> None:
    """The point of the lean builder: building a class compiles nothing (collections.namedtuple's
    cost on every hook start); compile_constructors gives every class the compiled constructor."""
    cls = build_namedtuple("R", ("x", "y"), (0,))
    generic = cls.__new__
    assert cls(1, 2) == (1, 2) and cls(x=1) == (1, 0) and cls.__new__ is generic
    compat.compile_constructors()
    assert cls.__new__ is not generic
    assert cls(1, 2) == (1, 2) and cls(y=3, x=2) == (2, 3) and cls(x=1) == (1, 0)
    assert copy.deepcopy(cls(1, [2])) == (1, [2])
    assert compat.compile_constructors() == 0  # once
