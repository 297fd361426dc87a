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

from typing import Dict, List, Tuple

from google.protobuf import descriptor_pb2

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


def event_mask(*events: str) -> int:
    """ConfigureResponse.events for these event names (api.EventMask: bit ``event - 1``)."""
    mask = 0
    for name in events:
        mask |= 1 << (EVENTS[name] - 1)
    return mask
