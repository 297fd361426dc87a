"""A small CRI client, driving a runtime as kubelet does (grpcio, cri_api.proto compiled at run time).

``cri_api.proto`` (beside this file) is a subset of kubernetes cri-api's
``pkg/apis/runtime/v1/api.proto`` with its field numbers. :func:`load_api` compiles it with
grpcio-tools into a temporary directory once per process and imports the generated modules
from there; nothing generated lives in the tree.

:class:`CriClient` wraps the calls the tests make with kubelet's shapes: a pod sandbox with the
pod's annotations, host network (no CNI here) and a cgroupfs ``cgroup_parent``
(``/.../kubepods/pod<uid>``); containers with ``linux.resources`` (cpuset, quota, period) and
annotations and CDI devices (a DRA claim's); ``UpdateContainerResources`` as the CPU manager's rewrite.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "cri_api.proto")
TIMEOUT = 30.0  # seconds per call: image unpacking and runc under a loaded 2-CPU machine

_api: Optional[Tuple[object, object]] = None


class CriError(RuntimeError):
    """A CRI call failed: names the call and carries gRPC's status code and details."""

    def __init__(self, call: str, code: str, details: str) -> None:
        super().__init__(f"CRI {call}: {code}: {details}")
        self.call, self.code, self.details = call, code, details


def load_api():
    """(messages module, grpc stubs module) for cri_api.proto, compiled on first use."""
    global _api
    if _api is None:
        from grpc_tools import protoc  # noqa: PLC0415 (grpcio-tools is a test-only dependency)
        out = tempfile.mkdtemp(prefix="mch-cri-api-")
        atexit.register(shutil.rmtree, out, True)
        include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        rc = protoc.main(["protoc", f"-I{HERE}", f"-I{include}", f"--python_out={out}",
                          f"--grpc_python_out={out}", PROTO])
        if rc != 0:
            raise RuntimeError(f"protoc failed ({rc}) on {PROTO}")
        sys.path.insert(0, out)
        try:
            _api = (importlib.import_module("cri_api_pb2"), importlib.import_module("cri_api_pb2_grpc"))
        finally:
            sys.path.remove(out)
    return _api


class CriClient:
    """RuntimeService over a unix socket, one channel; every call has a deadline."""

    def __init__(self, socket_path: str, timeout: float = TIMEOUT) -> None:
        import grpc  # noqa: PLC0415

        self.grpc = grpc
        self.pb, stubs = load_api()
        self.timeout = timeout
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.stub = stubs.RuntimeServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def call(self, name: str, request, timeout: Optional[float] = None):
        try:
            return getattr(self.stub, name)(request, timeout=timeout or self.timeout)
        except self.grpc.RpcError as exc:
            raise CriError(name, exc.code().name, exc.details()) from None

    # requests ------------------------------------------------------------------------
    def resources(self, cpus: str = "", quota: int = 0, period: int = 0, shares: int = 0):
        return self.pb.LinuxContainerResources(cpuset_cpus=cpus, cpu_quota=quota, cpu_period=period,
                                               cpu_shares=shares)

    def sandbox_config(self, name: str, uid: str, namespace: str, cgroup_parent: str,
                       annotations: Dict[str, str], log_dir: str):
        pb = self.pb
        host = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            log_directory=log_dir, annotations=dict(annotations),  # no hostname: host network (as kubelet)
            labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace,
                    "io.kubernetes.pod.uid": uid},
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=host)))

    # calls ---------------------------------------------------------------------------
    def version(self) -> str:
        r = self.call("Version", self.pb.VersionRequest(version="v1"), timeout=5.0)
        return f"{r.runtime_name} {r.runtime_version} (CRI {r.runtime_api_version})"

    def ready(self) -> Tuple[bool, str]:
        """RuntimeReady from Status (NetworkReady is false here: no CNI, host-network pods only)."""
        r = self.call("Status", self.pb.StatusRequest(verbose=False), timeout=5.0)
        for c in r.status.conditions:
            if c.type == "RuntimeReady":
                return c.status, f"{c.reason} {c.message}".strip()
        return False, "no RuntimeReady condition"

    def run_pod(self, config) -> str:
        return self.call("RunPodSandbox", self.pb.RunPodSandboxRequest(config=config)).pod_sandbox_id

    def stop_pod(self, pod_id: str) -> None:
        self.call("StopPodSandbox", self.pb.StopPodSandboxRequest(pod_sandbox_id=pod_id))

    def remove_pod(self, pod_id: str) -> None:
        self.call("RemovePodSandbox", self.pb.RemovePodSandboxRequest(pod_sandbox_id=pod_id))

    def pods(self) -> List[str]:
        return [p.id for p in self.call("ListPodSandbox", self.pb.ListPodSandboxRequest()).items]

    def create(self, pod_id: str, sandbox_config, name: str, image: str, command: List[str],
               resources=None, annotations: Optional[Dict[str, str]] = None,
               mounts: Tuple[Tuple[str, str], ...] = (), envs: Optional[Dict[str, str]] = None,
               cdi_devices: Tuple[str, ...] = ()) -> str:
        """CreateContainer as kubelet sends it; ``cdi_devices``: fully qualified CDI device names (what kubelet
        passes for a DRA claim's prepared devices, ContainerConfig.CDI_devices)."""
        pb = self.pb
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=0), image=pb.ImageSpec(image=image),
            command=list(command), annotations=dict(annotations or {}), log_path=f"{name}.log",
            envs=[pb.KeyValue(key=k, value=v) for k, v in sorted((envs or {}).items())],
            mounts=[pb.Mount(host_path=h, container_path=c) for h, c in mounts],
            labels={"io.kubernetes.container.name": name},
            CDI_devices=[pb.CDIDevice(name=n) for n in cdi_devices],
            linux=pb.LinuxContainerConfig(
                resources=resources or self.resources(),
                security_context=pb.LinuxContainerSecurityContext(namespace_options=pb.NamespaceOption(
                    network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD))))
        req = pb.CreateContainerRequest(pod_sandbox_id=pod_id, config=config, sandbox_config=sandbox_config)
        return self.call("CreateContainer", req).container_id

    def start(self, cid: str) -> None:
        self.call("StartContainer", self.pb.StartContainerRequest(container_id=cid))

    def update(self, cid: str, resources) -> None:
        self.call("UpdateContainerResources",
                  self.pb.UpdateContainerResourcesRequest(container_id=cid, linux=resources))

    def stop(self, cid: str, timeout: int = 0) -> None:
        self.call("StopContainer", self.pb.StopContainerRequest(container_id=cid, timeout=timeout))

    def remove(self, cid: str) -> None:
        self.call("RemoveContainer", self.pb.RemoveContainerRequest(container_id=cid))

    def containers(self, pod_id: str = "") -> List[str]:
        flt = self.pb.ContainerFilter(pod_sandbox_id=pod_id)
        return [c.id for c in self.call("ListContainers", self.pb.ListContainersRequest(filter=flt)).containers]

    def status(self, cid: str, verbose: bool = False):
        return self.call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=cid, verbose=verbose))

    def exec_sync(self, cid: str, cmd: List[str], timeout: int = 20) -> Tuple[int, str, str]:
        r = self.call("ExecSync", self.pb.ExecSyncRequest(container_id=cid, cmd=list(cmd), timeout=timeout),
                      timeout=timeout + 10.0)
        return r.exit_code, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
