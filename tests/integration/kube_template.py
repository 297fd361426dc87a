"""A rendered DaemonSet's pod template, run through CRI as kubelet would (kubelet's side of deploy/).

``kubectl kustomize`` renders an overlay; :func:`render` parses it. :class:`TemplatePod` turns
the template's single container into kubelet's CRI calls (pkg/kubelet/kuberuntime: RunPodSandbox
with the pod's cgroup parent, CreateContainer with the image's entrypoint and the template's
``args``, ``env``, ``volumeMounts`` over ``hostPath``/``configMap`` volumes and the container's
``securityContext`` as LinuxContainerSecurityContext (uid/gid, read-only root file system,
no_new_privs for ``allowPrivilegeEscalation: false``, the capabilities dropped, the runtime's
default seccomp profile, kubelet's default masked and read-only /proc paths), requests and
limits as cpu shares and a memory limit), then StartContainer; ``stop`` is kubelet's
StopContainer with the grace period, StopPodSandbox and RemovePodSandbox.

What differs from a node, and why: host paths are mapped to the test's own directories (the
NRI socket's, the state dir, a kubelet dir) except /sys/fs/cgroup, which is the real one; the
pod shares the host's network namespace (there is no CNI here), so the metrics address is moved
to a free loopback port; the configMap volume is a directory holding the ConfigMap's files.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from typing import Dict, List, Optional, Tuple

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBECTL_FETCH = os.path.join(REPO, "scripts", "fetch-kubectl.sh")
# kubelet's defaults for a container without procMount: Unmasked (pkg/securitycontext/util.go)
MASKED_PATHS = ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                "/sys/firmware", "/sys/devices/virtual/powercap"]
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
MEMORY_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9, "": 1}


def kubectl() -> str:
    """Debian sid's kubectl from the cache (scripts/fetch-kubectl.sh fetches it once)."""
    proc = subprocess.run(["sh", KUBECTL_FETCH], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{KUBECTL_FETCH} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def render(directory: str) -> List[dict]:
    """``kubectl kustomize DIR``, parsed."""
    proc = subprocess.run([kubectl(), "kustomize", directory], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory} exited {proc.returncode}: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def find(objects: List[dict], kind: str, name_prefix: str = "") -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name_prefix}*: {[o['metadata']['name'] for o in found]}"
    return found[0]


def parse_cpu_shares(quantity: str) -> int:
    """kubelet's MilliCPUToShares of a CPU request ("10m", "0.5", "2"): min 2."""
    milli = int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)
    return max(2, milli * 1024 // 1000)


def parse_memory(quantity: str) -> int:
    for suffix in ("Ki", "Mi", "Gi", "K", "M", "G"):
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * MEMORY_UNITS[suffix]
    return int(quantity)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TemplatePod:
    """One pod of the DaemonSet on the test's containerd: ``start``, ``stop``, ``pid``, ``port``."""

    def __init__(self, kube, daemonset: dict, configmaps: Dict[str, dict], host_paths: Dict[str, str],
                 image: str, work_dir: str, metrics_port: Optional[int] = None,
                 recursive_read_only: bool = False) -> None:
        """``recursive_read_only``: the runtime supports recursive read-only mounts (kubelet asks the
        runtime's handler features; containerd >= 2.0 with a runc that has "rro")."""
        self.kube, self.pb = kube, kube.cri.pb
        self.template = daemonset["spec"]["template"]
        self.namespace = daemonset["metadata"].get("namespace", "default")
        self.name = daemonset["metadata"]["name"] + "-" + uuid.uuid4().hex[:5]
        self.configmaps, self.host_paths, self.image, self.work_dir = configmaps, host_paths, image, work_dir
        self.port = metrics_port or free_port()
        self.rro = recursive_read_only
        self.pod = None
        self.cid = ""
        self.stopped_exit_code = None
        [self.container] = self.template["spec"]["containers"]

    # -- the CRI messages (what kubelet would send) -------------------------------------
    def compute_args(self) -> List[str]:
        """The template's args; the metrics address moved to 127.0.0.1:<free port> (host network here)."""
        args = list(self.container.get("args") or [])
        for i, a in enumerate(args[:-1]):
            if a == "--metrics-address":
                args[i + 1] = f"127.0.0.1:{self.port}"
        return args

    def compute_mounts(self) -> List[Tuple[str, str, bool, bool]]:
        """(host path, container path, read-only, recursively read-only) of every volumeMount, as
        kubelet maps ``recursiveReadOnly`` (Enabled: required, IfPossible: when the runtime can)."""
        volumes = {v["name"]: v for v in self.template["spec"].get("volumes", [])}
        out = []
        for m in self.container.get("volumeMounts", []):
            vol = volumes[m["name"]]
            if "hostPath" in vol:
                host = self.host_paths[vol["hostPath"]["path"]]
                if vol["hostPath"].get("type") == "DirectoryOrCreate":
                    os.makedirs(host, exist_ok=True)
            elif "configMap" in vol:
                host = self.write_configmap(vol["configMap"]["name"], m["name"])
            else:
                raise AssertionError(f"volume {m['name']}: only hostPath and configMap volumes are run here: {vol}")
            rro = m.get("recursiveReadOnly", "Disabled")
            if rro == "Enabled" and not self.rro:
                raise AssertionError(f"{m['name']}: recursiveReadOnly Enabled on a runtime without it (kubelet refuses)")
            out.append((host, m["mountPath"], bool(m.get("readOnly", False)), rro in ("Enabled", "IfPossible") and self.rro))
        return out

    def write_configmap(self, name: str, volume: str) -> str:
        d = os.path.join(self.work_dir, f"{self.name}-{volume}")
        os.makedirs(d, exist_ok=True)
        for key, text in self.configmaps[name].get("data", {}).items():
            with open(os.path.join(d, key), "w", encoding="utf-8") as f:
                f.write(text)
        return d

    def compute_security_context(self):
        pb, sc = self.pb, self.container.get("securityContext", {})
        out = pb.LinuxContainerSecurityContext(
            privileged=bool(sc.get("privileged", False)),
            readonly_rootfs=bool(sc.get("readOnlyRootFilesystem", False)),
            no_new_privs=sc.get("allowPrivilegeEscalation") is False,
            namespace_options=pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD),
            masked_paths=MASKED_PATHS, readonly_paths=READONLY_PATHS)
        if "runAsUser" in sc:
            out.run_as_user.value = sc["runAsUser"]
        if "runAsGroup" in sc:
            out.run_as_group.value = sc["runAsGroup"]
        caps = sc.get("capabilities", {})
        out.capabilities.drop_capabilities.extend(caps.get("drop", []))
        out.capabilities.add_capabilities.extend(caps.get("add", []))
        seccomp = sc.get("seccompProfile", {}).get("type")
        if seccomp == "RuntimeDefault":
            out.seccomp.profile_type = pb.SecurityProfile.RuntimeDefault
        elif seccomp is not None:
            raise AssertionError(f"seccompProfile {seccomp}: not run here")
        return out

    def compute_resources(self):
        res = self.container.get("resources", {})
        out = self.pb.LinuxContainerResources(cpu_shares=parse_cpu_shares(res.get("requests", {}).get("cpu", "0")))
        if "memory" in res.get("limits", {}):
            out.memory_limit_in_bytes = parse_memory(res["limits"]["memory"])
        if "cpu" in res.get("limits", {}):
            raise AssertionError("a CPU limit on the plugin: not expected (it would get a CFS quota)")
        return out

    def compute_container_config(self):
        pb = self.pb
        envs = []
        for e in self.container.get("env", []):
            assert "value" in e, f"env {e['name']}: only literal values are run here"
            envs.append(pb.KeyValue(key=e["name"], value=e["value"]))
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=self.container["name"], attempt=0),
            image=pb.ImageSpec(image=self.image), command=list(self.container.get("command") or []),
            args=self.compute_args(), envs=envs,
            mounts=[pb.Mount(host_path=h, container_path=c, readonly=ro, recursive_read_only=rro)
                    for h, c, ro, rro in self.compute_mounts()],
            labels={"io.kubernetes.container.name": self.container["name"]},
            annotations={"io.kubernetes.container.name": self.container["name"]},
            log_path=f"{self.container['name']}.log",
            linux=pb.LinuxContainerConfig(resources=self.compute_resources(),
                                          security_context=self.compute_security_context()))

    # -- kubelet's calls -----------------------------------------------------------------
    def start(self) -> str:
        """RunPodSandbox (a Burstable pod cgroup, no quota), CreateContainer, StartContainer."""
        rel, uid = self.kube.pod_cgroup(quota=-1)
        labels = dict(self.template["metadata"].get("labels", {}))
        config = self.kube.cri.sandbox_config(self.name, uid, self.namespace, rel,
                                              self.template["metadata"].get("annotations", {}),
                                              os.path.join(self.work_dir, f"{self.name}-logs"))
        config.labels.update(labels)
        pod_id = self.kube.cri.run_pod(config)
        from cri_kube import PodHandle  # noqa: PLC0415 - the sibling module, as collected

        self.pod = PodHandle(pod_id, config, rel, uid, self.kube.v2)
        req = self.pb.CreateContainerRequest(pod_sandbox_id=pod_id, config=self.compute_container_config(),
                                             sandbox_config=config)
        self.cid = self.kube.cri.call("CreateContainer", req).container_id
        self.kube.cri.start(self.cid)
        return self.cid

    def stop(self) -> None:
        """kubelet deleting the pod: StopContainer (SIGTERM, the grace period), then the sandbox."""
        if self.pod is None:
            return
        grace = int(self.template["spec"].get("terminationGracePeriodSeconds", 30))
        self.kube.cri.stop(self.cid, timeout=grace)
        self.stopped_exit_code = self.kube.cri.status(self.cid).status.exit_code
        self.kube.cri.remove(self.cid)
        self.kube.cri.stop_pod(self.pod.id)
        self.kube.cri.remove_pod(self.pod.id)
        self.pod = None

    def pid(self) -> int:
        return self.kube.pid(self.cid)
