"""A lean stand-in for ``typing.NamedTuple`` on the hook's start path.

Importing ``typing`` costs several milliseconds on every container start. Modules on the
hook path import ``typing`` only for type checkers (``if TYPE_CHECKING:``) and build their
record classes with this ``NamedTuple``, which accepts the same class syntax and produces a
class that behaves as ``collections.namedtuple``'s (``build_namedtuple``).

Why not ``collections.namedtuple`` itself: it compiles a ``__new__`` from source for every class
(``eval``) and formats a docstring per field; the hook path defines 26 record classes, which took
1.5 ms of every container start that way, and about 0.3 ms here. Same behaviour, checked against
collections.namedtuple on a table (tests/unit/test_compat.py): construction by position and by
name, defaults, the TypeErrors, ``_make``, ``_replace``, ``_asdict``, ``_fields``,
``_field_defaults``, ``repr``, equality, hashing, pickling and copying.
"""

from __future__ import annotations

from collections import namedtuple
from operator import itemgetter

try:  # the C accessor collections.namedtuple uses for its fields
    from _collections import _tuplegetter  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other interpreters
    def _tuplegetter(index: int, doc: str) -> Any:
        return property(itemgetter(index), doc=doc)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Tuple

_SPECIAL = ("__annotations__", "__module__", "__qualname__", "__doc__", "__orig_bases__")


class _NamedTupleMeta(type):
    def __new__(mcls, name: str, bases: Tuple[type, ...], ns: Dict[str, Any]) -> type:  # noqa: N804 - metaclass
        if ns.get("_root"):
            return super().__new__(mcls, name, bases, ns)
        fields = list(ns.get("__annotations__", {}))
        defaults = [ns[f] for f in fields if f in ns]
        cls = build_namedtuple(name, fields, defaults, ns.get("__module__"))
        if ns.get("__doc__"):
            cls.__doc__ = ns["__doc__"]
        cls.__qualname__ = ns.get("__qualname__", name)
        for key, value in ns.items():
            if key not in _SPECIAL and key not in fields:
                setattr(cls, key, value)
        return cls


def _bind(name: str, fields: Tuple[str, ...], defaults: Dict[str, Any], args: Tuple[Any, ...],
          kwargs: Dict[str, Any]) -> List[Any]:
    """The values of a call by position and by name, or the TypeError the compiled __new__ raises."""
    if len(args) > len(fields):
        raise TypeError(f"{name}.__new__() takes {len(fields) + 1} positional arguments but {len(args) + 1} were given")
    values = list(args)
    for field in fields[:len(args)]:
        if field in kwargs:
            raise TypeError(f"{name}.__new__() got multiple values for argument '{field}'")
    missing = []
    for field in fields[len(args):]:
        if field in kwargs:
            values.append(kwargs.pop(field))
        elif field in defaults:
            values.append(defaults[field])
        else:
            missing.append(field)
    if missing:
        raise TypeError(f"{name}.__new__() missing {len(missing)} required positional argument"
                        f"{'s' if len(missing) > 1 else ''}: " + " and ".join(repr(m) for m in missing))
    for key in kwargs:
        raise TypeError(f"{name}.__new__() got an unexpected keyword argument '{key}'")
    return values


def build_namedtuple(name: str, fields: Iterable[str], defaults: Iterable[Any] = (),
                     module: Optional[str] = None) -> Any:
    """A class as ``collections.namedtuple(name, fields, defaults=defaults, module=module)`` makes it,
    without compiling source (the module docstring says why)."""
    fields = tuple(fields)
    defaults = tuple(defaults)
    n = len(fields)
    field_defaults = dict(zip(fields[n - len(defaults):], defaults)) if defaults else {}
    tuple_new = tuple.__new__

    def __new__(_cls: type, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - the class's constructor
        if len(args) == n and not kwargs:
            return tuple_new(_cls, args)
        return tuple_new(_cls, _bind(name, fields, field_defaults, args, kwargs))

    def _make(cls: type, iterable: Iterable[Any]) -> Any:
        result: Tuple[Any, ...] = tuple_new(cls, iterable)
        if len(result) != n:
            raise TypeError(f"Expected {n} arguments, got {len(result)}")
        return result

    def _replace(self: Any, **kwds: Any) -> Any:
        result = self._make(map(kwds.pop, fields, self))
        if kwds:
            raise ValueError(f"Got unexpected field names: {list(kwds)!r}")
        return result

    def __repr__(self: Any) -> str:
        return f"{self.__class__.__name__}(" + ", ".join(f"{f}={v!r}" for f, v in zip(fields, self)) + ")"

    def _asdict(self: Any) -> Dict[str, Any]:
        return dict(zip(fields, self))

    def __getnewargs__(self: Any) -> Tuple[Any, ...]:
        return tuple(self)

    ns: Dict[str, Any] = {"__doc__": f"{name}({', '.join(fields)})", "__slots__": (), "_fields": fields,
                          "_field_defaults": field_defaults, "__new__": __new__, "_make": classmethod(_make),
                          "_replace": _replace, "__repr__": __repr__, "_asdict": _asdict,
                          "__getnewargs__": __getnewargs__, "__match_args__": fields}
    for index, field in enumerate(fields):
        ns[field] = _tuplegetter(index, f"Alias for field number {index}")
    ns["__module__"] = module or __name__
    cls = type(name, (tuple,), ns)
    __new__.__defaults__ = None
    return cls


class _Base(metaclass=_NamedTupleMeta):
    _root = True


def NamedTuple(typename: str, fields: Optional[Iterable[Tuple[str, Any]]] = None) -> type:  # noqa: N802 - mirrors typing.NamedTuple
    """Functional form, ``NamedTuple("P", [("x", int)])``, like typing's."""
    return namedtuple(typename, [f for f, _ in fields or ()])


# A function's attribute, as typing.NamedTuple's: `class P(NamedTuple)` makes a _Base subclass.
NamedTuple.__mro_entries__ = lambda bases: (_Base,)  # type: ignore[attr-defined]
