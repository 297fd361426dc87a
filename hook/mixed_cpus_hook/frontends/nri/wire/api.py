"""The subset of NRI's protobuf messages the plugin uses, built from descriptors at import time.

Package ``nri.pkg.api.v1alpha1`` of containerd/nri ``pkg/api/api.proto``: the field numbers
below are the published ones (checked against NRI 0.6, what containerd 1.7.24 vendors, and
the newest release, whose runtimes bridge v1alpha1 plugins). Only the messages and fields
the plugin reads or writes are declared; protobuf skips the others on the wire, so a newer
runtime's extra fields do no harm.

There is no protoc-generated code (protodesc.py says why): the classes are built from the tables
below. ``api.pyi`` is generated from the same tables (``make stubs``; a unit test fails when it is
stale), so that mypy checks every field name and type the plugin uses.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from google.protobuf import descriptor_pb2
from google.protobuf import message as _pb_message

from .protodesc import build_file, load_classes

PACKAGE: str = "nri.pkg.api.v1alpha1"
PLUGIN_SERVICE: str = PACKAGE + ".Plugin"
RUNTIME_SERVICE: str = PACKAGE + ".Runtime"

# enum Event (api.proto); an event's bit in ConfigureResponse.events is 1 << (event - 1).
EVENTS: Dict[str, int] = {
    "UNKNOWN": 0, "RUN_POD_SANDBOX": 1, "STOP_POD_SANDBOX": 2, "REMOVE_POD_SANDBOX": 3,
    "CREATE_CONTAINER": 4, "POST_CREATE_CONTAINER": 5, "START_CONTAINER": 6, "POST_START_CONTAINER": 7,
    "UPDATE_CONTAINER": 8, "POST_UPDATE_CONTAINER": 9, "STOP_CONTAINER": 10, "REMOVE_CONTAINER": 11,
    "UPDATE_POD_SANDBOX": 12, "POST_UPDATE_POD_SANDBOX": 13, "VALIDATE_CONTAINER_ADJUSTMENT": 14,
}
CONTAINER_STATES: Dict[str, int] = {"CONTAINER_UNKNOWN": 0, "CONTAINER_CREATED": 1, "CONTAINER_PAUSED": 2,
                                    "CONTAINER_RUNNING": 3, "CONTAINER_STOPPED": 4}
ENUMS: Dict[str, Dict[str, int]] = {"Event": EVENTS, "ContainerState": CONTAINER_STATES}

# message -> fields (name, number, kind); kinds as protodesc.py says: a scalar name, a message or
# enum of this file, "map" (map<string, string>); a leading "*" means repeated.
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
    "StartContainerRequest": [("pod", 1, "PodSandbox"), ("container", 2, "Container")],
    "StartContainerResponse": [],
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

FILE: descriptor_pb2.FileDescriptorProto = build_file("mixed_cpus_hook/frontends/nri/api.proto", PACKAGE,
                                                     MESSAGES, ENUMS)
_CLASSES = load_classes(FILE)
# Every message of MESSAGES is an attribute of this module under its own name (api.Container, ...);
# api.pyi, generated from MESSAGES by `make stubs`, declares them and their fields for type checkers.
globals().update(_CLASSES)
ShutdownRequest = _CLASSES["Empty"]  # api.proto: rpc Shutdown(Empty) returns (Empty)

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
    "StartContainerRequest": ("pod", "container"),
    "PodSandbox": ("id", "name", "uid", "namespace", "annotations", "linux"),
    "LinuxPodSandbox": ("cgroup_parent",),
    "Container": ("id", "pod_sandbox_id", "name", "state", "annotations", "env", "linux"),
    "LinuxContainer": ("resources", "cgroups_path"),
    "LinuxResources": ("cpu",),
    "LinuxCPU": ("shares", "quota", "period", "cpus"),
    "OptionalInt64": ("value",),
    "OptionalUInt64": ("value",),
}


# The events that only name a container (every event of every container on the node, most of them
# not the plugin's): their pod and container decoded with the names only, as these messages (the
# annotations, environment and cgroup fields skipped unread). From cold caches, protobuf 3's C++
# build decoded containerd 1.7's StopContainerRequest in 16-18 us as Container, 8 us as ContainerRef.
REF_MESSAGES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "PodRef": ("PodSandbox", ("id", "name", "uid", "namespace")),
    "ContainerRef": ("Container", ("id", "pod_sandbox_id", "name", "state")),
}
BY_REF: Tuple[str, ...] = ("UpdateContainerRequest", "StopContainerRequest", "RemoveContainerRequest",
                           "StateChangeEvent", "StartContainerRequest")


def compute_read_view(messages: Dict[str, List[Tuple[str, int, str]]], read_fields: Dict[str, Tuple[str, ...]],
                      refs: Optional[Dict[str, Tuple[str, Tuple[str, ...]]]] = None, by_ref: Sequence[str] = ()
                      ) -> Dict[str, List[Tuple[str, int, str]]]:
    """The messages with only ``read_fields``, maps as repeated ``MapEntry`` messages; each message of
    ``refs`` is its source's named fields, and the messages named in ``by_ref`` hold those in place of
    their sources (pure)."""
    view: Dict[str, List[Tuple[str, int, str]]] = {"MapEntry": [("key", 1, "string"), ("value", 2, "string")]}
    for name, keep in read_fields.items():
        view[name] = [(f, n, "*MapEntry" if kind == "map" else kind) for f, n, kind in messages[name] if f in keep]
    as_ref = {}
    for ref, (source, keep) in (refs or {}).items():
        view[ref] = [(f, n, kind) for f, n, kind in messages[source] if f in keep]
        as_ref[source] = ref
    for name in by_ref:
        view[name] = [(f, n, as_ref.get(kind, kind)) for f, n, kind in view[name]]
    return view


READ: Dict[str, Any] = load_classes(build_file("mixed_cpus_hook/frontends/nri/api_read.proto", PACKAGE,
                                 compute_read_view(MESSAGES, READ_FIELDS, REF_MESSAGES, BY_REF), ENUMS))


def _varint(data: bytes, at: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _pb_message.DecodeError("truncated or overlong varint")
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
    (pure-Python protobuf, as PyPI's 3.14 for Python 3.9 is, decodes some 60,000 small messages a
    second). DecodeError for bytes that are not a message.
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
            raise _pb_message.DecodeError(f"wire type {wire} at the top level")
        if at > end:
            raise _pb_message.DecodeError("field past the end of the message")
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
