"""A lean stand-in for ``typing.NamedTuple`` on the hook's start path.

Importing ``typing`` costs several milliseconds on every container start. Modules on the
hook path import ``typing`` only for type checkers (``if TYPE_CHECKING:``) and build their
record classes with this ``NamedTuple``, which accepts the same class syntax and produces a
class that behaves as ``collections.namedtuple``'s (``build_namedtuple``).

Why not ``collections.namedtuple`` itself: it compiles a ``__new__`` from source for every class
(``eval``) and formats a docstring per field; the hook path defines 26 record classes, which took
1.5 ms of every container start that way. Here a class is built without compiling anything: its
constructor takes the fields by position directly and binds names and defaults in Python
(``_bind``, with the interpreter's TypeErrors); a resident process calls ``compile_constructors``
once at start, which gives every class a constructor compiled once per field count and copied with
the class's field names (``_new_code``): collections' argument binding, in C. Same behaviour, checked against
collections.namedtuple on a table (tests/unit/test_compat.py): construction by position and by
name, defaults, the TypeErrors, ``_make``, ``_replace``, ``_asdict``, ``_fields``,
``_field_defaults``, ``repr``, equality, hashing, pickling and copying.
"""

from __future__ import annotations

from _collections import _tuplegetter  # type: ignore[import-not-found]  # collections.namedtuple's field accessor
from collections import namedtuple
from sys import version_info
from types import CodeType, FunctionType

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


_MATCH_ARGS = version_info >= (3, 10)

_MISSING = object()
_BUILT: List[Any] = []  # the classes build_namedtuple made that compile_constructors has not done yet


def _bind(name: str, fields: Tuple[str, ...], defaults: Dict[str, Any], args: Tuple[Any, ...],
          kwargs: Dict[str, Any]) -> List[Any]:
    """The values of a call by position and by name, or the TypeError (and text) the interpreter
    raises for collections.namedtuple's compiled constructor, checked in the same order."""
    where = f"{name}.__new__()"
    given = len(args)
    values = list(args) + [_MISSING] * (len(fields) - given) if given <= len(fields) else list(args)
    for key, value in kwargs.items():
        try:
            index = fields.index(key)
        except ValueError:
            raise TypeError(f"{where} got an unexpected keyword argument '{key}'") from None
        if index < given:
            raise TypeError(f"{where} got multiple values for argument '{key}'")
        values[index] = value
    if given > len(fields):
        low = len(fields) - len(defaults) + 1
        takes = f"from {low} to {len(fields) + 1}" if defaults else str(len(fields) + 1)
        raise TypeError(f"{where} takes {takes} positional arguments but {given + 1} were given")
    missing = []
    for index, field in enumerate(fields):
        if values[index] is _MISSING:
            if field in defaults:
                values[index] = defaults[field]
            else:
                missing.append(repr(field))
    if missing:
        names = missing[0] if len(missing) == 1 else (
            f"{missing[0]} and {missing[1]}" if len(missing) == 2 else ", ".join(missing[:-1]) + f", and {missing[-1]}")
        raise TypeError(f"{where} missing {len(missing)} required positional argument"
                        f"{'s' if len(missing) > 1 else ''}: {names}")
    return values


# field count -> the code of ``def __new__(_cls, _0, _1, ...): return _tuple_new(_cls, (_0, _1, ...))``:
# compiled once per count; each class takes a copy with its own field names (code.replace), so that
# the interpreter binds arguments by position and by name, with its own TypeErrors, as fast as
# collections.namedtuple's compiled constructor.
_NEW_CODE: Dict[int, CodeType] = {}


def _new_code(count: int) -> CodeType:
    code = _NEW_CODE.get(count)
    if code is None:
        names = ", ".join(f"_{i}" for i in range(count))
        scope: Dict[str, Any] = {}
        exec(f"def __new__(_cls, {names}): return _tuple_new(_cls, ({names}{',' if count == 1 else ''}))",  # noqa: S102
             {}, scope)
        code = _NEW_CODE[count] = scope["__new__"].__code__
    return code


def build_namedtuple(name: str, fields: Iterable[str], defaults: Iterable[Any] = (),
                     module: Optional[str] = None) -> Any:
    """A class as ``collections.namedtuple(name, fields, defaults=defaults, module=module)`` makes it,
    without compiling source (the module docstring says why)."""
    fields = tuple(fields)
    defaults = tuple(defaults)
    n = len(fields)
    field_defaults = dict(zip(fields[n - len(defaults):], defaults)) if defaults else {}
    tuple_new = tuple.__new__

    def __new__(_cls: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - the class's constructor
        if len(args) == n and not kwargs:
            return tuple_new(_cls, args)
        return tuple_new(_cls, _bind(name, fields, field_defaults, args, kwargs))

    def _make(cls: type, iterable: Iterable[Any]) -> Any:
        result: Tuple[Any, ...] = tuple_new(cls, iterable)
        if len(result) != n:
            raise TypeError(f"Expected {n} arguments, got {len(result)}")
        return result

    def _replace(self: Any, **kwds: Any) -> Any:
        result = tuple_new(type(self), map(kwds.pop, fields, self))  # _make's, without its call
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
                          "__getnewargs__": __getnewargs__}
    if _MATCH_ARGS:  # collections' namedtuple has them from Python 3.10
        ns["__match_args__"] = fields
    for index, field in enumerate(fields):
        ns[field] = _tuplegetter(index, f"Alias for field number {index}")
    ns["__module__"] = module or __name__
    cls = type(name, (tuple,), ns)
    _BUILT.append(cls)
    return cls


def compile_constructors() -> int:
    """Give every class built so far the compiled constructor (collections.namedtuple's, argument
    binding in C: about 0.35 us a call by name, against a few us for ``_bind``). For a resident
    process (the NRI plugin), once at start; the hook's start never pays the compiles. Returns
    how many classes got one."""
    done = 0
    while _BUILT:  # each class once: taken off the list as it gets its constructor
        cls = _BUILT.pop()
        fields = cls._fields
        defaults = tuple(cls._field_defaults[f] for f in fields if f in cls._field_defaults)
        new = FunctionType(_new_code(len(fields)).replace(co_varnames=("_cls",) + fields),
                           {"_tuple_new": tuple.__new__}, "__new__", defaults or None)
        new.__qualname__ = f"{cls.__name__}.__new__"
        cls.__new__ = staticmethod(new)
        done += 1
    return done


class _Base(metaclass=_NamedTupleMeta):
    _root = True


def NamedTuple(typename: str, fields: Optional[Iterable[Tuple[str, Any]]] = None) -> type:  # noqa: N802 - mirrors typing.NamedTuple
    """Functional form, ``NamedTuple("P", [("x", int)])``, like typing's."""
    return namedtuple(typename, [f for f, _ in fields or ()])


# A function's attribute, as typing.NamedTuple's: `class P(NamedTuple)` makes a _Base subclass.
NamedTuple.__mro_entries__ = lambda bases: (_Base,)  # type: ignore[attr-defined]
