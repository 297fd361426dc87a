# Generated from api.py's MESSAGES and ENUMS by stubgen.py (`make stubs`): do not edit.
# tests/unit/nri/test_stubs.py fails when it is stale.

from typing import Any, Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer, RepeatedScalarFieldContainer, ScalarMap
from google.protobuf.message import Message

from .protodesc import build_file as build_file, load_classes as load_classes

PACKAGE: str
PLUGIN_SERVICE: str
RUNTIME_SERVICE: str
EVENTS: Dict[str, int]
CONTAINER_STATES: Dict[str, int]
ENUMS: Dict[str, Dict[str, int]]
MESSAGES: Dict[str, List[Tuple[str, int, str]]]
FILE: descriptor_pb2.FileDescriptorProto
READ_FIELDS: Dict[str, Tuple[str, ...]]
REF_MESSAGES: Dict[str, Tuple[str, Tuple[str, ...]]]
BY_REF: Tuple[str, ...]
def compute_read_view(messages: Dict[str, List[Tuple[str, int, str]]], read_fields: Dict[str, Tuple[str, ...]], refs: Optional[Dict[str, Tuple[str, Tuple[str, ...]]]] = ..., by_ref: Sequence[str] = ...) -> Dict[str, List[Tuple[str, int, str]]]: ...
READ: Dict[str, Any]
def cut_repeated(data: bytes, keep: Dict[int, int]) -> Tuple[bytes, Dict[int, int]]: ...
def event_mask(*events: str) -> int: ...

class Empty(Message):
    DESCRIPTOR: Descriptor
    def __init__(self) -> None: ...

class RegisterPluginRequest(Message):
    DESCRIPTOR: Descriptor
    plugin_name: str
    plugin_idx: str
    NRI_version: str
    def __init__(
        self,
        *,
        plugin_name: Optional[str] = ...,
        plugin_idx: Optional[str] = ...,
        NRI_version: Optional[str] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["plugin_name", "plugin_idx", "NRI_version"]) -> None: ...

class ConfigureRequest(Message):
    DESCRIPTOR: Descriptor
    config: str
    runtime_name: str
    runtime_version: str
    registration_timeout: int
    request_timeout: int
    NRI_version: str
    def __init__(
        self,
        *,
        config: Optional[str] = ...,
        runtime_name: Optional[str] = ...,
        runtime_version: Optional[str] = ...,
        registration_timeout: Optional[int] = ...,
        request_timeout: Optional[int] = ...,
        NRI_version: Optional[str] = ...,
    ) -> None: ...
    def ClearField(
        self,
        field_name: Literal[
            "config", "runtime_name", "runtime_version", "registration_timeout", "request_timeout", "NRI_version"
        ],
    ) -> None: ...

class ConfigureResponse(Message):
    DESCRIPTOR: Descriptor
    events: int
    request_timeout: int
    def __init__(
        self,
        *,
        events: Optional[int] = ...,
        request_timeout: Optional[int] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["events", "request_timeout"]) -> None: ...

class SynchronizeRequest(Message):
    DESCRIPTOR: Descriptor
    @property
    def pods(self) -> RepeatedCompositeFieldContainer[PodSandbox]: ...
    @property
    def containers(self) -> RepeatedCompositeFieldContainer[Container]: ...
    more: bool
    def __init__(
        self,
        *,
        pods: Optional[Iterable[PodSandbox]] = ...,
        containers: Optional[Iterable[Container]] = ...,
        more: Optional[bool] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["pods", "containers", "more"]) -> None: ...

class SynchronizeResponse(Message):
    DESCRIPTOR: Descriptor
    @property
    def update(self) -> RepeatedCompositeFieldContainer[ContainerUpdate]: ...
    more: bool
    def __init__(
        self,
        *,
        update: Optional[Iterable[ContainerUpdate]] = ...,
        more: Optional[bool] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["update", "more"]) -> None: ...

class CreateContainerRequest(Message):
    DESCRIPTOR: Descriptor
    @property
    def pod(self) -> PodSandbox: ...
    @property
    def container(self) -> Container: ...
    def __init__(
        self,
        *,
        pod: Optional[PodSandbox] = ...,
        container: Optional[Container] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["pod", "container"]) -> bool: ...
    def ClearField(self, field_name: Literal["pod", "container"]) -> None: ...

class CreateContainerResponse(Message):
    DESCRIPTOR: Descriptor
    @property
    def adjust(self) -> ContainerAdjustment: ...
    @property
    def update(self) -> RepeatedCompositeFieldContainer[ContainerUpdate]: ...
    @property
    def evict(self) -> RepeatedCompositeFieldContainer[ContainerEviction]: ...
    def __init__(
        self,
        *,
        adjust: Optional[ContainerAdjustment] = ...,
        update: Optional[Iterable[ContainerUpdate]] = ...,
        evict: Optional[Iterable[ContainerEviction]] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["adjust"]) -> bool: ...
    def ClearField(self, field_name: Literal["adjust", "update", "evict"]) -> None: ...

class UpdateContainerRequest(Message):
    DESCRIPTOR: Descriptor
    @property
    def pod(self) -> PodSandbox: ...
    @property
    def container(self) -> Container: ...
    @property
    def linux_resources(self) -> LinuxResources: ...
    def __init__(
        self,
        *,
        pod: Optional[PodSandbox] = ...,
        container: Optional[Container] = ...,
        linux_resources: Optional[LinuxResources] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["pod", "container", "linux_resources"]) -> bool: ...
    def ClearField(self, field_name: Literal["pod", "container", "linux_resources"]) -> None: ...

class UpdateContainerResponse(Message):
    DESCRIPTOR: Descriptor
    @property
    def update(self) -> RepeatedCompositeFieldContainer[ContainerUpdate]: ...
    @property
    def evict(self) -> RepeatedCompositeFieldContainer[ContainerEviction]: ...
    def __init__(
        self,
        *,
        update: Optional[Iterable[ContainerUpdate]] = ...,
        evict: Optional[Iterable[ContainerEviction]] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["update", "evict"]) -> None: ...

class StopContainerRequest(Message):
    DESCRIPTOR: Descriptor
    @property
    def pod(self) -> PodSandbox: ...
    @property
    def container(self) -> Container: ...
    def __init__(
        self,
        *,
        pod: Optional[PodSandbox] = ...,
        container: Optional[Container] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["pod", "container"]) -> bool: ...
    def ClearField(self, field_name: Literal["pod", "container"]) -> None: ...

class StopContainerResponse(Message):
    DESCRIPTOR: Descriptor
    @property
    def update(self) -> RepeatedCompositeFieldContainer[ContainerUpdate]: ...
    def __init__(
        self,
        *,
        update: Optional[Iterable[ContainerUpdate]] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["update"]) -> None: ...

class RemoveContainerRequest(Message):
    DESCRIPTOR: Descriptor
    @property
    def pod(self) -> PodSandbox: ...
    @property
    def container(self) -> Container: ...
    def __init__(
        self,
        *,
        pod: Optional[PodSandbox] = ...,
        container: Optional[Container] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["pod", "container"]) -> bool: ...
    def ClearField(self, field_name: Literal["pod", "container"]) -> None: ...

class RemoveContainerResponse(Message):
    DESCRIPTOR: Descriptor
    def __init__(self) -> None: ...

class StateChangeEvent(Message):
    DESCRIPTOR: Descriptor
    event: int  # enum Event
    @property
    def pod(self) -> PodSandbox: ...
    @property
    def container(self) -> Container: ...
    def __init__(
        self,
        *,
        event: Optional[int] = ...,
        pod: Optional[PodSandbox] = ...,
        container: Optional[Container] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["pod", "container"]) -> bool: ...
    def ClearField(self, field_name: Literal["event", "pod", "container"]) -> None: ...

class StartContainerRequest(Message):
    DESCRIPTOR: Descriptor
    @property
    def pod(self) -> PodSandbox: ...
    @property
    def container(self) -> Container: ...
    def __init__(
        self,
        *,
        pod: Optional[PodSandbox] = ...,
        container: Optional[Container] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["pod", "container"]) -> bool: ...
    def ClearField(self, field_name: Literal["pod", "container"]) -> None: ...

class StartContainerResponse(Message):
    DESCRIPTOR: Descriptor
    def __init__(self) -> None: ...

class UpdateContainersRequest(Message):
    DESCRIPTOR: Descriptor
    @property
    def update(self) -> RepeatedCompositeFieldContainer[ContainerUpdate]: ...
    @property
    def evict(self) -> RepeatedCompositeFieldContainer[ContainerEviction]: ...
    def __init__(
        self,
        *,
        update: Optional[Iterable[ContainerUpdate]] = ...,
        evict: Optional[Iterable[ContainerEviction]] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["update", "evict"]) -> None: ...

class UpdateContainersResponse(Message):
    DESCRIPTOR: Descriptor
    @property
    def failed(self) -> RepeatedCompositeFieldContainer[ContainerUpdate]: ...
    def __init__(
        self,
        *,
        failed: Optional[Iterable[ContainerUpdate]] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["failed"]) -> None: ...

class PodSandbox(Message):
    DESCRIPTOR: Descriptor
    id: str
    name: str
    uid: str
    namespace: str
    @property
    def labels(self) -> ScalarMap[str, str]: ...
    @property
    def annotations(self) -> ScalarMap[str, str]: ...
    runtime_handler: str
    @property
    def linux(self) -> LinuxPodSandbox: ...
    pid: int
    def __init__(
        self,
        *,
        id: Optional[str] = ...,
        name: Optional[str] = ...,
        uid: Optional[str] = ...,
        namespace: Optional[str] = ...,
        labels: Optional[Mapping[str, str]] = ...,
        annotations: Optional[Mapping[str, str]] = ...,
        runtime_handler: Optional[str] = ...,
        linux: Optional[LinuxPodSandbox] = ...,
        pid: Optional[int] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["linux"]) -> bool: ...
    def ClearField(
        self,
        field_name: Literal[
            "id", "name", "uid", "namespace", "labels", "annotations", "runtime_handler", "linux", "pid"
        ],
    ) -> None: ...

class LinuxPodSandbox(Message):
    DESCRIPTOR: Descriptor
    @property
    def pod_overhead(self) -> LinuxResources: ...
    @property
    def pod_resources(self) -> LinuxResources: ...
    cgroup_parent: str
    cgroups_path: str
    @property
    def resources(self) -> LinuxResources: ...
    def __init__(
        self,
        *,
        pod_overhead: Optional[LinuxResources] = ...,
        pod_resources: Optional[LinuxResources] = ...,
        cgroup_parent: Optional[str] = ...,
        cgroups_path: Optional[str] = ...,
        resources: Optional[LinuxResources] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["pod_overhead", "pod_resources", "resources"]) -> bool: ...
    def ClearField(
        self,
        field_name: Literal[
            "pod_overhead", "pod_resources", "cgroup_parent", "cgroups_path", "resources"
        ],
    ) -> None: ...

class Container(Message):
    DESCRIPTOR: Descriptor
    id: str
    pod_sandbox_id: str
    name: str
    state: int  # enum ContainerState
    @property
    def labels(self) -> ScalarMap[str, str]: ...
    @property
    def annotations(self) -> ScalarMap[str, str]: ...
    @property
    def args(self) -> RepeatedScalarFieldContainer[str]: ...
    @property
    def env(self) -> RepeatedScalarFieldContainer[str]: ...
    @property
    def linux(self) -> LinuxContainer: ...
    pid: int
    def __init__(
        self,
        *,
        id: Optional[str] = ...,
        pod_sandbox_id: Optional[str] = ...,
        name: Optional[str] = ...,
        state: Optional[int] = ...,
        labels: Optional[Mapping[str, str]] = ...,
        annotations: Optional[Mapping[str, str]] = ...,
        args: Optional[Iterable[str]] = ...,
        env: Optional[Iterable[str]] = ...,
        linux: Optional[LinuxContainer] = ...,
        pid: Optional[int] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["linux"]) -> bool: ...
    def ClearField(
        self,
        field_name: Literal[
            "id", "pod_sandbox_id", "name", "state", "labels", "annotations", "args", "env", "linux", "pid"
        ],
    ) -> None: ...

class LinuxContainer(Message):
    DESCRIPTOR: Descriptor
    @property
    def resources(self) -> LinuxResources: ...
    cgroups_path: str
    def __init__(
        self,
        *,
        resources: Optional[LinuxResources] = ...,
        cgroups_path: Optional[str] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["resources"]) -> bool: ...
    def ClearField(self, field_name: Literal["resources", "cgroups_path"]) -> None: ...

class LinuxResources(Message):
    DESCRIPTOR: Descriptor
    @property
    def cpu(self) -> LinuxCPU: ...
    @property
    def unified(self) -> ScalarMap[str, str]: ...
    def __init__(
        self,
        *,
        cpu: Optional[LinuxCPU] = ...,
        unified: Optional[Mapping[str, str]] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["cpu"]) -> bool: ...
    def ClearField(self, field_name: Literal["cpu", "unified"]) -> None: ...

class LinuxCPU(Message):
    DESCRIPTOR: Descriptor
    @property
    def shares(self) -> OptionalUInt64: ...
    @property
    def quota(self) -> OptionalInt64: ...
    @property
    def period(self) -> OptionalUInt64: ...
    @property
    def realtime_runtime(self) -> OptionalInt64: ...
    @property
    def realtime_period(self) -> OptionalUInt64: ...
    cpus: str
    mems: str
    def __init__(
        self,
        *,
        shares: Optional[OptionalUInt64] = ...,
        quota: Optional[OptionalInt64] = ...,
        period: Optional[OptionalUInt64] = ...,
        realtime_runtime: Optional[OptionalInt64] = ...,
        realtime_period: Optional[OptionalUInt64] = ...,
        cpus: Optional[str] = ...,
        mems: Optional[str] = ...,
    ) -> None: ...
    def HasField(
        self,
        field_name: Literal[
            "shares", "quota", "period", "realtime_runtime", "realtime_period"
        ],
    ) -> bool: ...
    def ClearField(
        self,
        field_name: Literal[
            "shares", "quota", "period", "realtime_runtime", "realtime_period", "cpus", "mems"
        ],
    ) -> None: ...

class ContainerAdjustment(Message):
    DESCRIPTOR: Descriptor
    @property
    def annotations(self) -> ScalarMap[str, str]: ...
    @property
    def env(self) -> RepeatedCompositeFieldContainer[KeyValue]: ...
    @property
    def linux(self) -> LinuxContainerAdjustment: ...
    def __init__(
        self,
        *,
        annotations: Optional[Mapping[str, str]] = ...,
        env: Optional[Iterable[KeyValue]] = ...,
        linux: Optional[LinuxContainerAdjustment] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["linux"]) -> bool: ...
    def ClearField(self, field_name: Literal["annotations", "env", "linux"]) -> None: ...

class LinuxContainerAdjustment(Message):
    DESCRIPTOR: Descriptor
    @property
    def resources(self) -> LinuxResources: ...
    cgroups_path: str
    def __init__(
        self,
        *,
        resources: Optional[LinuxResources] = ...,
        cgroups_path: Optional[str] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["resources"]) -> bool: ...
    def ClearField(self, field_name: Literal["resources", "cgroups_path"]) -> None: ...

class ContainerUpdate(Message):
    DESCRIPTOR: Descriptor
    container_id: str
    @property
    def linux(self) -> LinuxContainerUpdate: ...
    ignore_failure: bool
    def __init__(
        self,
        *,
        container_id: Optional[str] = ...,
        linux: Optional[LinuxContainerUpdate] = ...,
        ignore_failure: Optional[bool] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["linux"]) -> bool: ...
    def ClearField(self, field_name: Literal["container_id", "linux", "ignore_failure"]) -> None: ...

class LinuxContainerUpdate(Message):
    DESCRIPTOR: Descriptor
    @property
    def resources(self) -> LinuxResources: ...
    def __init__(
        self,
        *,
        resources: Optional[LinuxResources] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["resources"]) -> bool: ...
    def ClearField(self, field_name: Literal["resources"]) -> None: ...

class ContainerEviction(Message):
    DESCRIPTOR: Descriptor
    container_id: str
    reason: str
    def __init__(
        self,
        *,
        container_id: Optional[str] = ...,
        reason: Optional[str] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["container_id", "reason"]) -> None: ...

class KeyValue(Message):
    DESCRIPTOR: Descriptor
    key: str
    value: str
    def __init__(
        self,
        *,
        key: Optional[str] = ...,
        value: Optional[str] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["key", "value"]) -> None: ...

class OptionalString(Message):
    DESCRIPTOR: Descriptor
    value: str
    def __init__(
        self,
        *,
        value: Optional[str] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["value"]) -> None: ...

class OptionalInt64(Message):
    DESCRIPTOR: Descriptor
    value: int
    def __init__(
        self,
        *,
        value: Optional[int] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["value"]) -> None: ...

class OptionalUInt64(Message):
    DESCRIPTOR: Descriptor
    value: int
    def __init__(
        self,
        *,
        value: Optional[int] = ...,
    ) -> None: ...
    def ClearField(self, field_name: Literal["value"]) -> None: ...

ShutdownRequest = Empty
