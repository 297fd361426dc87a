"""The subset of NRI's protobuf messages the plugin uses, built from descriptors at import time.

Package ``nri.pkg.api.v1alpha1`` of containerd/nri ``pkg/api/api.proto``: the field numbers
below are the published ones (checked against NRI 0.6, what containerd 1.7.24 vendors, and
the newest release, whose runtimes bridge v1alpha1 plugins). Only the messages and fields
the plugin reads or writes are declared; protobuf skips the others on the wire, so a newer
runtime's extra fields do no harm.

There is no protoc-generated code: generated modules are tied to the protobuf release that
made them, and RHEL 9 ships protobuf 3.14 while the newest is several majors later. A
``FileDescriptorProto`` built here and added to a private pool works with both.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

PACKAGE = "nri.pkg.api.v1alpha1"
PLUGIN_SERVICE = PACKAGE + ".Plugin"
RUNTIME_SERVICE = PACKAGE + ".Runtime"

# enum Event (api.proto); an event's bit in ConfigureResponse.events is 1 << (event - 1).
EVENTS = {
    "UNKNOWN": 0, "RUN_POD_SANDBOX": 1, "STOP_POD_SANDBOX": 2, "REMOVE_POD_SANDBOX": 3,
    "CREATE_CONTAINER": 4, "POST_CREATE_CONTAINER": 5, "START_CONTAINER": 6, "POST_START_CONTAINER": 7,
    "UPDATE_CONTAINER": 8, "POST_UPDATE_CONTAINER": 9, "STOP_CONTAINER": 10, "REMOVE_CONTAINER": 11,
    "UPDATE_POD_SANDBOX": 12, "POST_UPDATE_POD_SANDBOX": 13, "VALIDATE_CONTAINER_ADJUSTMENT": 14,
}
CONTAINER_STATES = {"CONTAINER_UNKNOWN": 0, "CONTAINER_CREATED": 1, "CONTAINER_PAUSED": 2,
                    "CONTAINER_RUNNING": 3, "CONTAINER_STOPPED": 4}
ENUMS = {"Event": EVENTS, "ContainerState": CONTAINER_STATES}

# message -> fields (name, number, type). A type is a scalar name, a message or enum of this
# file, "map" (map<string, string>); a leading "*" means repeated.
MESSAGES: Dict[str, List[Tuple[str, int, str]]] = {
    "Empty": [],
    "RegisterPluginRequest": [("plugin_name", 1, "string"), ("plugin_idx", 2, "string"),
                              ("NRI_version", 3, "string")],
    "ConfigureRequest": [("config", 1, "string"), ("runtime_name", 2, "string"), ("runtime_version", 3, "string"),
                         ("registration_timeout", 4, "int64"), ("request_timeout", 5, "int64"),
                         ("NRI_version", 6, "string")],
    "ConfigureResponse": [("events", 2, "int32"), ("request_timeout", 3, "int64")],
    "SynchronizeRequest": [("pods", 1, "*PodSandbox"), ("containers", 2, "*Container"), ("more", 3, "bool")],
    "SynchronizeResponse": [("update", 1, "*ContainerUpdate"), ("more", 2, "bool")],
    "CreateContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container")],
    "CreateContainerResponse": [("adjust", 1, "ContainerAdjustment"), ("update", 2, "*ContainerUpdate"),
                                ("evict", 3, "*ContainerEviction")],
    "UpdateContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container"),
                               ("linux_resources", 3, "LinuxResources")],
    "UpdateContainerResponse": [("update", 1, "*ContainerUpdate"), ("evict", 2, "*ContainerEviction")],
    "StopContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container")],
    "StopContainerResponse": [("update", 1, "*ContainerUpdate")],
    "RemoveContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container")],
    "RemoveContainerResponse": [],
    "StateChangeEvent": [("event", 1, "Event"), ("pod", 2, "PodSandbox"), ("container", 3, "Container")],
    "UpdateContainersRequest": [("update", 1, "*ContainerUpdate"), ("evict", 2, "*ContainerEviction")],
    "UpdateContainersResponse": [("failed", 1, "*ContainerUpdate")],
    "PodSandbox": [("id", 1, "string"), ("name", 2, "string"), ("uid", 3, "string"), ("namespace", 4, "string"),
                   ("labels", 5, "map"), ("annotations", 6, "map"), ("runtime_handler", 7, "string"),
                   ("linux", 8, "LinuxPodSandbox"), ("pid", 9, "uint32")],
    "LinuxPodSandbox": [("pod_overhead", 1, "LinuxResources"), ("pod_resources", 2, "LinuxResources"),
                        ("cgroup_parent", 3, "string"), ("cgroups_path", 4, "string"),
                        ("resources", 6, "LinuxResources")],
    "Container": [("id", 1, "string"), ("pod_sandbox_id", 2, "string"), ("name", 3, "string"),
                  ("state", 4, "ContainerState"), ("labels", 5, "map"), ("annotations", 6, "map"),
                  ("args", 7, "*string"), ("env", 8, "*string"), ("linux", 11, "LinuxContainer"),
                  ("pid", 12, "uint32")],
    "LinuxContainer": [("resources", 3, "LinuxResources"), ("cgroups_path", 5, "string")],
    "LinuxResources": [("cpu", 2, "LinuxCPU"), ("unified", 6, "map")],
    "LinuxCPU": [("shares", 1, "OptionalUInt64"), ("quota", 2, "OptionalInt64"), ("period", 3, "OptionalUInt64"),
                 ("realtime_runtime", 4, "OptionalInt64"), ("realtime_period", 5, "OptionalUInt64"),
                 ("cpus", 6, "string"), ("mems", 7, "string")],
    "ContainerAdjustment": [("annotations", 2, "map"), ("env", 4, "*KeyValue"),
                            ("linux", 6, "LinuxContainerAdjustment")],
    "LinuxContainerAdjustment": [("resources", 2, "LinuxResources"), ("cgroups_path", 3, "string")],
    "ContainerUpdate": [("container_id", 1, "string"), ("linux", 2, "LinuxContainerUpdate"),
                        ("ignore_failure", 3, "bool")],
    "LinuxContainerUpdate": [("resources", 1, "LinuxResources")],
    "ContainerEviction": [("container_id", 1, "string"), ("reason", 2, "string")],
    "KeyValue": [("key", 1, "string"), ("value", 2, "string")],
    "OptionalString": [("value", 1, "string")],
    "OptionalInt64": [("value", 1, "int64")],
    "OptionalUInt64": [("value", 1, "uint64")],
}

# What the plugin reads of the runtime's requests: the same messages on the wire, with only the
# fields it reads declared (the others are skipped as unknown fields, never decoded) and each map
# declared as what it is on the wire, repeated {key, value} entries. Decoding 300,000 annotations
# as a map takes upb a second; as repeated entries 26 ms, and their count is known before any is
# read (handlers.read_annotations). Requests are decoded into these classes (READ).
READ_FIELDS: Dict[str, Tuple[str, ...]] = {
    "Empty": (),
    "ConfigureRequest": ("config", "runtime_name", "runtime_version", "registration_timeout", "request_timeout",
                         "NRI_version"),
    "SynchronizeRequest": ("pods", "containers", "more"),
    "CreateContainerRequest": ("pod", "container"),
    "UpdateContainerRequest": ("pod", "container", "linux_resources"),
    "StopContainerRequest": ("pod", "container"),
    "RemoveContainerRequest": ("pod", "container"),
    "StateChangeEvent": ("event", "pod", "container"),
    "PodSandbox": ("id", "name", "uid", "namespace", "annotations", "linux"),
    "LinuxPodSandbox": ("cgroup_parent",),
    "Container": ("id", "pod_sandbox_id", "name", "state", "annotations", "linux"),
    "LinuxContainer": ("resources", "cgroups_path"),
    "LinuxResources": ("cpu",),
    "LinuxCPU": ("quota", "period", "cpus"),
    "OptionalInt64": ("value",),
    "OptionalUInt64": ("value",),
}


def compute_read_view(messages: Dict[str, List[Tuple[str, int, str]]],
                      read_fields: Dict[str, Tuple[str, ...]]) -> Dict[str, List[Tuple[str, int, str]]]:
    """The messages with only ``read_fields``, maps as repeated ``MapEntry`` messages (pure)."""
    view: Dict[str, List[Tuple[str, int, str]]] = {"MapEntry": [("key", 1, "string"), ("value", 2, "string")]}
    for name, keep in read_fields.items():
        view[name] = [(f, n, "*MapEntry" if kind == "map" else kind) for f, n, kind in messages[name] if f in keep]
    return view


_F = descriptor_pb2.FieldDescriptorProto
SCALARS = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "bool": _F.TYPE_BOOL, "int32": _F.TYPE_INT32,
           "int64": _F.TYPE_INT64, "uint32": _F.TYPE_UINT32, "uint64": _F.TYPE_UINT64}


def _map_entry_name(field: str) -> str:
    """protoc's name for a map field's entry message: ``labels`` -> ``LabelsEntry``."""
    return "".join(part[:1].upper() + part[1:] for part in field.split("_")) + "Entry"


def _add_field(msg: descriptor_pb2.DescriptorProto, package: str, name: str, number: int, kind: str,
               enums: Sequence[str]) -> None:
    field = msg.field.add(name=name, number=number, json_name=name)
    repeated = kind.startswith("*")
    kind = kind.lstrip("*")
    field.label = _F.LABEL_REPEATED if repeated or kind == "map" else _F.LABEL_OPTIONAL
    if kind == "map":
        entry = msg.nested_type.add(name=_map_entry_name(name))
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


def build_file(file_name: str, package: str, messages: Dict[str, List[Tuple[str, int, str]]],
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


def load_classes(fdp: descriptor_pb2.FileDescriptorProto) -> Dict[str, type]:
    """Message classes for a file descriptor, in a private pool (protobuf 3.14 to the newest)."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    get_class = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.21
    factory = None if get_class is not None else message_factory.MessageFactory(pool)
    classes = {}
    for msg in fdp.message_type:
        desc = pool.FindMessageTypeByName(f"{fdp.package}.{msg.name}")
        classes[msg.name] = get_class(desc) if get_class is not None else factory.GetPrototype(desc)
    return classes


FILE = build_file("mixed_cpus_hook/nri/api.proto", PACKAGE, MESSAGES, ENUMS)
_CLASSES = load_classes(FILE)

Empty = _CLASSES["Empty"]
RegisterPluginRequest = _CLASSES["RegisterPluginRequest"]
ConfigureRequest = _CLASSES["ConfigureRequest"]
ConfigureResponse = _CLASSES["ConfigureResponse"]
SynchronizeRequest = _CLASSES["SynchronizeRequest"]
SynchronizeResponse = _CLASSES["SynchronizeResponse"]
CreateContainerRequest = _CLASSES["CreateContainerRequest"]
CreateContainerResponse = _CLASSES["CreateContainerResponse"]
UpdateContainerRequest = _CLASSES["UpdateContainerRequest"]
UpdateContainerResponse = _CLASSES["UpdateContainerResponse"]
StopContainerRequest = _CLASSES["StopContainerRequest"]
StopContainerResponse = _CLASSES["StopContainerResponse"]
RemoveContainerRequest = _CLASSES["RemoveContainerRequest"]
RemoveContainerResponse = _CLASSES["RemoveContainerResponse"]
StateChangeEvent = _CLASSES["StateChangeEvent"]
UpdateContainersRequest = _CLASSES["UpdateContainersRequest"]
UpdateContainersResponse = _CLASSES["UpdateContainersResponse"]
PodSandbox = _CLASSES["PodSandbox"]
Container = _CLASSES["Container"]
LinuxResources = _CLASSES["LinuxResources"]
ContainerAdjustment = _CLASSES["ContainerAdjustment"]
ContainerUpdate = _CLASSES["ContainerUpdate"]
KeyValue = _CLASSES["KeyValue"]
ShutdownRequest = Empty  # api.proto: rpc Shutdown(Empty) returns (Empty)
READ = load_classes(build_file("mixed_cpus_hook/nri/api_read.proto", PACKAGE, compute_read_view(MESSAGES, READ_FIELDS),
                               ENUMS))


def _varint(data: bytes, at: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise DecodeError("truncated or overlong varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def cut_repeated(data: bytes, keep: Dict[int, int]) -> Tuple[bytes, Dict[int, int]]:
    """``data`` (a message's bytes) with only the first ``keep[n]`` occurrences of each top-level
    field ``n``, and how many of each were dropped.

    Only the top-level tags and lengths are read, so what is dropped is never decoded: a runtime
    that lists a million containers costs a walk over their lengths, not a million messages
    (pure-Python protobuf, RHEL 9's, decodes some 60,000 small messages a second). DecodeError
    for bytes that are not a message.
    """
    kept: List[bytes] = []
    dropped: Dict[int, int] = {}
    seen: Dict[int, int] = {}
    at, start, end = 0, 0, len(data)
    while at < end:
        field_at = at
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(data, at)
        elif wire == 1:
            at += 8
        elif wire == 2:
            length, at = _varint(data, at)
            at += length
        elif wire == 5:
            at += 4
        else:
            raise DecodeError(f"wire type {wire} at the top level")
        if at > end:
            raise DecodeError("field past the end of the message")
        if number in keep:
            seen[number] = seen.get(number, 0) + 1
            if seen[number] > keep[number]:
                dropped[number] = dropped.get(number, 0) + 1
                if start < field_at:
                    kept.append(data[start:field_at])
                start = at
    if not dropped:
        return data, dropped
    kept.append(data[start:])
    return b"".join(kept), dropped


def event_mask(*events: str) -> int:
    """ConfigureResponse.events for these event names (api.EventMask: bit ``event - 1``)."""
    mask = 0
    for name in events:
        mask |= 1 << (EVENTS[name] - 1)
    return mask
