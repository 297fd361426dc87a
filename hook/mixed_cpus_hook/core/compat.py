"""A lean stand-in for ``typing.NamedTuple`` on the hook's start path.

Importing ``typing`` costs several milliseconds on every container start. Modules on the
hook path import ``typing`` only for type checkers (``if TYPE_CHECKING:``) and build their
record classes with this ``NamedTuple``, which accepts the same class syntax and produces a
plain ``collections.namedtuple`` (already loaded by ``json``'s own imports).
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, Optional, Tuple

_SPECIAL = ("__annotations__", "__module__", "__qualname__", "__doc__", "__orig_bases__")


class _NamedTupleMeta(type):
    def __new__(mcls, name: str, bases: Tuple[type, ...], ns: Dict[str, Any]) -> type:  # noqa: N804 - metaclass
        if ns.get("_root"):
            return super().__new__(mcls, name, bases, ns)
        fields = list(ns.get("__annotations__", {}))
        defaults = [ns[f] for f in fields if f in ns]
        # mypy wants literal arguments to namedtuple(); these come from the class body.
        cls = namedtuple(name, fields, defaults=defaults, module=ns.get("__module__"))  # type: ignore[misc]
        if ns.get("__doc__"):
            cls.__doc__ = ns["__doc__"]
        cls.__qualname__ = ns.get("__qualname__", name)
        for key, value in ns.items():
            if key not in _SPECIAL and key not in fields:
                setattr(cls, key, value)
        return cls


class _Base(metaclass=_NamedTupleMeta):
    _root = True


def NamedTuple(typename: str, fields: Optional[Iterable[Tuple[str, Any]]] = None) -> type:  # noqa: N802 - mirrors typing.NamedTuple
    """Functional form, ``NamedTuple("P", [("x", int)])``, like typing's."""
    return namedtuple(typename, [f for f, _ in fields or ()])


# A function's attribute, as typing.NamedTuple's: `class P(NamedTuple)` makes a _Base subclass.
NamedTuple.__mro_entries__ = lambda bases: (_Base,)  # type: ignore[attr-defined]
