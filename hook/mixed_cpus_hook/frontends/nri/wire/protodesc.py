"""Protobuf message classes from a table of messages, built at import time (no protoc, no generated code).

A table maps a message name to its fields ``(name, number, kind)``. A kind is a scalar name of
SCALARS, a message or enum of the same table, or "map" (``map<string, string>``); a leading
"*" means repeated. ``api.py`` (NRI's messages) and ``ttrpc.py`` (ttrpc's envelope) declare
theirs; ``stubgen.py`` writes a ``.pyi`` from the same table so that type checkers see the fields.

Generated ``_pb2`` modules are tied to the protobuf release that made them, and RHEL 9 ships
protobuf 3.14 while the newest is several majors later. A ``FileDescriptorProto`` built here and
added to a private pool works with both.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor

# message name -> [(field name, number, kind)]
Table = Dict[str, List[Tuple[str, int, str]]]

_F = descriptor_pb2.FieldDescriptorProto
SCALARS = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "bool": _F.TYPE_BOOL, "int32": _F.TYPE_INT32,
           "int64": _F.TYPE_INT64, "uint32": _F.TYPE_UINT32, "uint64": _F.TYPE_UINT64}
MAP = "map"


def parse_kind(kind: str) -> Tuple[bool, str]:
    """(repeated, base kind) of a table kind: ``"*Container"`` -> ``(True, "Container")``."""
    return kind.startswith("*"), kind.lstrip("*")


def map_entry_name(field: str) -> str:
    """protoc's name for a map field's entry message: ``labels`` -> ``LabelsEntry``."""
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def _add_field(msg: descriptor_pb2.DescriptorProto, package: str, name: str, number: int, kind: str,
               enums: Sequence[str]) -> None:
    field = msg.field.add(name=name, number=number, json_name=name)
    repeated, kind = parse_kind(kind)
    field.label = _F.LABEL_REPEATED if repeated or kind == MAP else _F.LABEL_OPTIONAL
    if kind == MAP:
        entry = msg.nested_type.add(name=map_entry_name(name))
        entry.options.map_entry = True
        for key_name, key_number in (("key", 1), ("value", 2)):
            entry.field.add(name=key_name, number=key_number, json_name=key_name, label=_F.LABEL_OPTIONAL,
                            type=_F.TYPE_STRING)
        field.type = _F.TYPE_MESSAGE
        field.type_name = f".{package}.{msg.name}.{entry.name}"
    elif kind in SCALARS:
        field.type = SCALARS[kind]
    else:
        field.type = _F.TYPE_ENUM if kind in enums else _F.TYPE_MESSAGE
        field.type_name = f".{package}.{kind}"


def build_file(file_name: str, package: str, messages: Table,
               enums: Dict[str, Dict[str, int]]) -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file descriptor for ``messages`` and ``enums`` (pure: no pool, no classes)."""
    fdp = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    for enum_name, values in enums.items():
        enum = fdp.enum_type.add(name=enum_name)
        for value_name, number in sorted(values.items(), key=lambda kv: kv[1]):
            enum.value.add(name=value_name, number=number)
    for msg_name, fields in messages.items():
        msg = fdp.message_type.add(name=msg_name)
        for name, number, kind in fields:
            _add_field(msg, package, name, number, kind, tuple(enums))
    return fdp


def _class_maker(pool: descriptor_pool.DescriptorPool) -> Callable[[Descriptor], Any]:
    """protobuf >= 4.21: ``message_factory.GetMessageClass``; before (RHEL 9's 3.14): ``GetPrototype``."""
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is not None:
        return get_class
    factory: Any = message_factory.MessageFactory(pool)  # Any: GetPrototype left the stubs with protobuf 5
    return factory.GetPrototype


def load_classes(fdp: descriptor_pb2.FileDescriptorProto) -> Dict[str, Any]:
    """Message classes for a file descriptor, in a private pool (protobuf 3.14 to the newest).

    Any: each class has fields of its own, which the module's generated ``.pyi`` declares.
    """
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    make_class = _class_maker(pool)
    return {msg.name: make_class(pool.FindMessageTypeByName(f"{fdp.package}.{msg.name}"))
            for msg in fdp.message_type}
