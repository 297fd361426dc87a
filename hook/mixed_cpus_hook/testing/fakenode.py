"""A throwaway fake node on disk: cgroup trees (v1 or v2, systemd or cgroupfs driver),
/sys CPU files, a config and a bundle, so the hook can be tried and tested without root.

Used by the README's quick start and by the unit tests. It writes plain files shaped like
cgroupfs; it does not emulate the kernel's rules (a real kernel refuses some writes and
computes ``cpuset.cpus.effective``), which is why the integration tests use real cgroups.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Dict, Optional

V1_CPUSET_FILES = {"cpuset.cpus": "", "cpuset.mems": "0", "cpuset.effective_cpus": "", "tasks": "",
                   "cgroup.procs": ""}
V1_CPU_FILES = {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000", "cpu.shares": "1024", "tasks": "",
                "cgroup.procs": ""}
V2_FILES = {"cpuset.cpus": "", "cpuset.cpus.effective": "", "cpuset.mems": "", "cpu.max": "max 100000",
            "cpu.weight": "100", "cgroup.procs": "", "cgroup.controllers": "cpuset cpu io memory pids",
            "cgroup.subtree_control": "cpuset cpu"}


def _write(path: str, text: str) -> None:
    """Write ``text`` as a cgroup file changes: a reader sees the old value or the new, never half.

    A kernel cgroup file takes its value in one write; a plain file opened with truncation is
    empty for a moment, and a reader in that moment (a settle pass, the plugin) would report an
    unreadable quota no real node can show. So an existing regular file is replaced by rename,
    keeping its mode; anything else (new, a symlink or a directory a test planted) is opened.
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = text + ("\n" if text and not text.endswith("\n") else "")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        with open(path, "w", encoding="ascii") as f:
            f.write(data)
        return
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.fakenode-new")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(data)
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    os.replace(tmp, path)


def container_rel(driver: str, pod_uid: str, cid: str, qos: str = "") -> str:
    """The cgroup path kubelet + CRI-O use for a container, per driver and QoS class."""
    if driver == "systemd":
        uid = pod_uid.replace("-", "_")
        if qos:
            return f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice/crio-{cid}.scope"
        return f"kubepods.slice/kubepods-pod{uid}.slice/crio-{cid}.scope"
    return f"kubepods/{qos + '/' if qos else ''}pod{pod_uid}/crio-{cid}"


def cgroups_path(driver: str, pod_uid: str, cid: str, qos: str = "") -> str:
    """config.json's linux.cgroupsPath for that container."""
    if driver == "systemd":
        uid = pod_uid.replace("-", "_")
        pod_slice = f"kubepods-{qos}-pod{uid}.slice" if qos else f"kubepods-pod{uid}.slice"
        return f"{pod_slice}:crio:{cid}"
    return "/" + container_rel(driver, pod_uid, cid, qos)


def format_cdi_claim_spec(uid: str, cpus: str) -> Dict[str, Any]:
    """The CDI spec the CPU DRA driver writes for one claim at prepare (kubernetes-sigs/dra-driver-cpu
    pkg/driver/cdi.go): kind dra.k8s.io/cpu, one device claim-<uid> whose only edit is the variable."""
    return {"cdiVersion": "0.8.0", "kind": "dra.k8s.io/cpu",
            "devices": [{"name": f"claim-{uid}", "containerEdits": {"env": [f"DRA_CPUSET_{uid}={cpus}"]}}]}


def format_checkpoint(entries: Dict[str, Any], default: Optional[str] = None, policy: str = "static",
                      checksum: Optional[int] = None, online: str = "") -> str:
    """kubelet's CPU manager checkpoint as kubelet writes it (Go's json.Marshal, kubelet's checksum).

    ``entries``: V2 ``{pod uid: {container name: cpulist}}`` or V1 ``{container id: cpulist}``.
    ``default`` None: ``online`` minus every CPU an entry holds. ``checksum`` None: kubelet's own
    (fnv32a over go-spew's rendering of the struct).
    """
    from ..core.cpuset import format_cpulist, parse_cpulist
    from ..node.kubelet import compute_fnv32a, format_spew

    if default is None:
        taken: set = set()
        for value in entries.values():
            for cpus in (value.values() if isinstance(value, dict) else (value,)):
                taken |= parse_cpulist(cpus)
        default = format_cpulist(parse_cpulist(online) - taken)
    v1 = any(isinstance(v, str) for v in entries.values())
    if checksum is None:
        checksum = compute_fnv32a(format_spew(policy, default, entries, v1).encode("utf-8"))
    doc: Dict[str, Any] = {"policyName": policy, "defaultCpuSet": default}
    if entries:  # `json:"entries,omitempty"`
        doc["entries"] = entries
    doc["checksum"] = checksum
    return json.dumps(doc, separators=(",", ":"))


class FakeNode:
    """A fake node rooted at ``root``: ``cgroup_root``, ``sys_root``, ``proc_root``, ``state_dir``."""

    def __init__(self, root: str, version: int = 1, online: str = "0-3") -> None:
        self.root = os.path.abspath(root)
        self.version = version
        self.cgroup_root = os.path.join(self.root, "sys/fs/cgroup")
        self.sys_root = os.path.join(self.root, "sys")
        self.proc_root = os.path.join(self.root, "proc")
        self.state_dir = os.path.join(self.root, "run/mixed-cpus-hook")
        self.etc = os.path.join(self.root, "etc/mixed-cpus-hook")
        # kubelet's CPU manager checkpoint lives in the fake tree: no test reads the host's.
        self.kubelet_state = os.path.join(self.root, "var/lib/kubelet/cpu_manager_state")
        # The runtime's CDI spec directories (static, generated), in the fake tree too.
        self.cdi_dirs = (os.path.join(self.root, "etc/cdi"), os.path.join(self.root, "var/run/cdi"))
        self.online = online
        _write(os.path.join(self.sys_root, "devices/system/cpu/online"), online)
        os.makedirs(self.proc_root, exist_ok=True)
        if version == 1:
            self._mkdir_v1("")
            os.symlink("cpu,cpuacct", os.path.join(self.cgroup_root, "cpu"))
            os.symlink("cpu,cpuacct", os.path.join(self.cgroup_root, "cpuacct"))
            os.makedirs(os.path.join(self.cgroup_root, "unified"), exist_ok=True)
            _write(os.path.join(self.cgroup_root, "unified/cgroup.controllers"), "")
        else:
            self._mkdir_v2("")

    def _mkdir_v1(self, rel: str, cpus: Optional[str] = None) -> None:
        for hier, files in (("cpuset", V1_CPUSET_FILES), ("cpu,cpuacct", V1_CPU_FILES)):
            d = os.path.join(self.cgroup_root, hier, rel)
            os.makedirs(d, exist_ok=True)
            for name, value in files.items():
                if not os.path.exists(os.path.join(d, name)):
                    if name in ("cpuset.cpus", "cpuset.effective_cpus"):
                        value = cpus if cpus is not None else self.online
                    _write(os.path.join(d, name), value)

    def _mkdir_v2(self, rel: str) -> None:
        d = os.path.join(self.cgroup_root, rel)
        os.makedirs(d, exist_ok=True)
        for name, value in V2_FILES.items():
            if not os.path.exists(os.path.join(d, name)):
                if name == "cpuset.cpus.effective":
                    value = self.online
                _write(os.path.join(d, name), value)

    def mkdir(self, rel: str, cpus: Optional[str] = None) -> None:
        """Create a cgroup and its missing ancestors in every hierarchy."""
        parts = [p for p in rel.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if self.version == 1:
                self._mkdir_v1(sub, cpus if i == len(parts) else None)
            else:
                self._mkdir_v2(sub)
                if i == len(parts) and cpus is not None:
                    self.write(sub, "cpuset.cpus", cpus)
                    self.write(sub, "cpuset.cpus.effective", cpus)

    def path(self, rel: str, name: str) -> str:
        """The file ``name`` of cgroup ``rel`` (picking the v1 hierarchy that holds it)."""
        if self.version == 1:
            hier = "cpuset" if name.startswith("cpuset.") else "cpu"
            return os.path.join(self.cgroup_root, hier, rel, name)
        return os.path.join(self.cgroup_root, rel, name)

    def read(self, rel: str, name: str) -> str:
        with open(self.path(rel, name), encoding="ascii") as f:
            return f.read().strip()

    def write(self, rel: str, name: str, value: str) -> None:
        _write(self.path(rel, name), value)

    def set_quota(self, rel: str, quota: Optional[int], period: int = 100000) -> None:
        if self.version == 1:
            self.write(rel, "cpu.cfs_quota_us", "-1" if quota is None else str(quota))
            self.write(rel, "cpu.cfs_period_us", str(period))
        else:
            self.write(rel, "cpu.max", f"{'max' if quota is None else quota} {period}")

    def write_config(self, shared: str = "0-1", extra: Optional[Dict[str, object]] = None) -> str:
        """A config.yaml pointing every root at this fake node, and the shared-CPU file."""
        shared_file = os.path.join(self.etc, "shared-cpus")
        _write(shared_file, f"# the node's shared CPUs (kubelet reservedSystemCPUs covers them)\n{shared}")
        doc: Dict[str, object] = {"shared_cpus_file": shared_file, "cgroup_root": self.cgroup_root,
                                  "state_dir": self.state_dir, "proc_root": self.proc_root,
                                  "sys_root": self.sys_root, "kubelet_state_file": self.kubelet_state,
                                  "cdi_spec_dirs": list(self.cdi_dirs), "allowed_namespaces": ["ran"]}
        doc.update(extra or {})
        path = os.path.join(self.etc, "config.yaml")
        _write(path, "".join(f"{k}: {json.dumps(v)}\n" for k, v in doc.items()))
        return path

    def write_checkpoint(self, entries: Optional[Dict[str, Any]] = None, default: Optional[str] = None,
                         policy: str = "static", checksum: Optional[int] = None, path: Optional[str] = None) -> str:
        """kubelet's CPU manager checkpoint (format_checkpoint), replaced atomically like kubelet does.

        ``default`` (defaultCpuSet) defaults to the online CPUs no entry holds, as kubelet computes it.
        """
        return self.write_kubelet_state(format_checkpoint(entries or {}, default, policy, checksum, self.online),
                                        path)

    def write_kubelet_state(self, text: str, path: Optional[str] = None) -> str:
        """Any content at the checkpoint's place, replaced atomically like kubelet does."""
        path = path or self.kubelet_state
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        return path

    def write_cdi_claim(self, uid: str, cpus: str) -> str:
        """The CPU DRA driver's prepare of a claim: its spec (format_cdi_claim_spec) in the generated CDI
        directory, named as the driver names it and written atomically as CDI writes it."""
        path = os.path.join(self.cdi_dirs[1], f"dra.k8s.io-cpu_claim-{uid}.json")
        os.makedirs(self.cdi_dirs[1], exist_ok=True)
        tmp = os.path.join(self.cdi_dirs[1], f".claim-{uid}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(format_cdi_claim_spec(uid, cpus), f, indent=2)
        os.replace(tmp, path)
        return path

    def remove_cgroup(self, rel: str) -> None:
        """A cgroup goes (the runtime removed its container): in every hierarchy."""
        import shutil

        for hier in (("cpuset", "cpu,cpuacct") if self.version == 1 else ("",)):
            shutil.rmtree(os.path.join(self.cgroup_root, hier, rel), ignore_errors=True)

    def remove_checkpoint(self) -> None:
        """What OpenShift's kubelet.service ExecStartPre does at every kubelet start."""
        if os.path.lexists(self.kubelet_state):
            os.unlink(self.kubelet_state)

    def add_container(self, cid: str, name: str = "app", pod_uid: str = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
                      driver: str = "cgroupfs", cpus: str = "2-3", quota: Optional[int] = None,
                      pod_quota: Optional[int] = None, ask: Optional[str] = "enable", qos: str = "",
                      namespace: str = "ran", pod: str = "du-0", pid: int = 0, crun_subgroup: bool = False,
                      prefix: str = "mixed-cpus.openshift.io") -> Dict[str, str]:
        """A pod cgroup, a container cgroup, a bundle and a state file; returns their paths."""
        rel = container_rel(driver, pod_uid, cid, qos)
        pod_rel = os.path.dirname(rel)
        self.mkdir(pod_rel)
        self.set_quota(pod_rel, pod_quota)
        self.mkdir(rel, cpus)
        self.set_quota(rel, quota)
        if crun_subgroup:
            self.mkdir(rel + "/container")
        annotations = {"io.kubernetes.container.name": name, "io.kubernetes.pod.namespace": namespace,
                       "io.kubernetes.pod.name": pod, "io.kubernetes.pod.uid": pod_uid}
        if ask is not None:
            annotations[f"{prefix}/{name}"] = ask
        bundle = os.path.join(self.root, "bundles", cid)
        cpu: Dict[str, object] = {"cpus": cpus, "period": 100000}
        if quota is not None:
            cpu["quota"] = quota
        spec = {"ociVersion": "1.0.2", "annotations": annotations,
                "linux": {"cgroupsPath": cgroups_path(driver, pod_uid, cid, qos), "resources": {"cpu": cpu}}}
        _write(os.path.join(bundle, "config.json"), json.dumps(spec, indent=1))
        state = {"ociVersion": "1.0.2-dev", "id": cid, "status": "creating", "pid": pid, "bundle": bundle,
                 "annotations": annotations}
        state_file = os.path.join(self.root, "states", f"{cid}.json")
        _write(state_file, json.dumps(state, indent=1))
        return {"rel": rel, "pod_rel": pod_rel, "bundle": bundle, "state": state_file}
