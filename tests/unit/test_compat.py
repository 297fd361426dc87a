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
Lean = build_namedtuple("P", FIELDS, DEFAULTS, __name__)
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


@pytest.mark.parametrize("call", [c for _, c in CALLS], ids=[i for i, _ in CALLS])
def test_lean_namedtuple_behaves_as_collections(call: Callable[[Any], Any]) -> None:
    assert outcome(call, Lean) == outcome(call, Std)


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


@pytest.mark.parametrize("args, kwargs, message", [
    ((), {}, "missing 1 required positional argument: 'a'"),
    ((1, 2, 3, 4), {}, "takes 4 positional arguments but 5 were given"),
    ((1,), {"a": 1}, "got multiple values for argument 'a'"),
    ((1,), {"zz": 1}, "got an unexpected keyword argument 'zz'"),
], ids=["missing", "too-many", "twice", "unknown"])
def test_messages_name_the_argument(args: Tuple[Any, ...], kwargs: Dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Lean(*args, **kwargs)


def test_the_hook_path_does_not_compile_a_constructor_per_class() -> None:
    """The point of the lean builder: no eval per class (collections.namedtuple's cost)."""
    assert "eval" not in compat.build_namedtuple.__code__.co_names
