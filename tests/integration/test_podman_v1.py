"""The shipped hooks.d files through podman (same containers/common hook matching as CRI-O).

podman runs with ``--hooks-dir`` at rendered copies of hooks.d/ (install path replaced by
this checkout's executable, ``--config`` added), runc as the runtime and the cgroupfs
manager. Without ``--cgroup-parent`` podman puts a container at
``/libpod_parent/libpod-<id>``: no pod cgroup, so only the container's quota is raised.
With ``--cgroup-parent=<pod cgroup>`` the pod's quota is raised too and given back at
poststop. podman writes the createRuntime hook into config.json (runc runs it) but runs
poststop hooks itself after deleting the container, with a state of its own making.
"""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.integration

PREFIX = "mixed-cpus.openshift.io"
MIXED = "0-1"


def asking(container: str = "app", value: str = "enable") -> list:
    return ["--annotation", f"io.kubernetes.container.name={container}",
            "--annotation", "io.kubernetes.pod.namespace=it-ns",  # namespaces are opt-in (allowed_namespaces)
            "--annotation", f"{PREFIX}/{container}={value}",
            "--cpuset-cpus", "1", "--cpus", "1"]


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_hooks_dir_under_libpod_parent(mch_node, mch_podman):
    node, podman = mch_node, mch_podman
    name = f"{node.name}-pm"
    script = ("busybox grep Cpus_allowed_list /proc/self/status; "
              "busybox cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us; busybox grep :cpuset: /proc/self/cgroup")
    proc = podman.run(name, ["--rm", *asking()], ["/bin/busybox", "sh", "-c", script])
    assert proc.returncode == 0, proc.stderr
    allowed, quota, cgroup = proc.stdout.splitlines()
    assert allowed.split() == ["Cpus_allowed_list:", MIXED]
    assert int(quota) == 200000  # --cpus 1 (100000) + 1 shared CPU x period; no pod cgroup to raise
    assert cgroup.split(":")[2].startswith("/libpod_parent/libpod-"), cgroup
    # --rm: poststop ran `release` when podman removed the container.
    assert wait_for(lambda: node.records() == []), node.records()


def test_hooks_dir_with_pod_cgroup_parent(mch_node, mch_podman):
    node, podman = mch_node, mch_podman
    pod = node.make_pod(quota=200000)
    name = f"{node.name}-pm"
    proc = podman.run(name, ["-d", f"--cgroup-parent={pod.rel}", *asking()], ["/bin/busybox", "sleep", "600"])
    assert proc.returncode == 0, proc.stderr
    cid = proc.stdout.strip().splitlines()[-1]
    pid = int(podman.cmd("inspect", "--format", "{{.State.Pid}}", name, check=True).stdout)

    rel = f"{pod.rel}/libpod-{cid}"
    with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
        assert f"cpuset:{rel}\n" in f.read()
    assert node.cpus_allowed(pid) == MIXED
    inside = podman.cmd("exec", name, "/bin/busybox", "grep", "Cpus_allowed_list", "/proc/self/status", check=True)
    assert inside.stdout.split() == ["Cpus_allowed_list:", MIXED]
    assert node.read(f"{node.cgroup_dir('cpuset', rel)}/cpuset.cpus") == MIXED
    assert int(node.read(f"{node.cgroup_dir('cpu', rel)}/cpu.cfs_quota_us")) == 200000
    assert pod.quota() == 300000
    assert node.records() == [cid]
    assert node.record(cid)["pod_key"] == f"pod{pod.uid}"
    status = node.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr

    proc = podman.cmd("rm", "-f", "-t", "0", name)
    assert proc.returncode == 0, proc.stderr
    assert wait_for(lambda: node.records() == [] and pod.quota() == 200000), (node.records(), pod.quota())
    assert node.records("pods") == []


def injected_hooks(podman, name: str) -> dict:
    """The hooks podman wrote into the container's config.json, by stage (only ours)."""
    path = podman.cmd("inspect", "--format", "{{.OCIConfigPath}}", name, check=True).stdout.strip()
    with open(path, encoding="utf-8") as f:
        hooks = json.load(f).get("hooks") or {}
    exe = podman.node.exe
    return {stage: [h["args"][-1] for h in entries if h["path"] == exe] for stage, entries in hooks.items()
            if any(h["path"] == exe for h in entries)}


def test_hooks_d_when_annotations(mch_node, mch_podman):
    """No mixed-cpus annotation: no hook at all. Another container asks: injected, writes nothing."""
    node, podman = mch_node, mch_podman
    plain, sibling = f"{node.name}-plain", f"{node.name}-sibling"
    common = ["-d", "--annotation", "io.kubernetes.container.name=app", "--cpuset-cpus", "1", "--cpus", "1"]
    proc = podman.run(plain, common, ["/bin/busybox", "sleep", "600"])
    assert proc.returncode == 0, proc.stderr
    assert injected_hooks(podman, plain) == {}

    proc = podman.run(sibling, [*common, "--annotation", f"{PREFIX}/sidecar=enable"], ["/bin/busybox", "sleep", "600"])
    assert proc.returncode == 0, proc.stderr
    # podman keeps poststop hooks out of config.json and runs them itself after `runc delete`.
    assert injected_hooks(podman, sibling) == {"createRuntime": ["apply"]}
    pid = int(podman.cmd("inspect", "--format", "{{.State.Pid}}", sibling, check=True).stdout)
    assert node.cpus_allowed(pid) == "1"
    assert node.records() == []


def test_invalid_value_reaches_the_hook_and_fails(mch_node, mch_podman):
    """hooks.d matches any value, so "yes" is refused by the hook instead of silently ignored."""
    node, podman = mch_node, mch_podman
    name = f"{node.name}-pm"
    proc = podman.run(name, ["--rm", *asking(value="yes")], ["/bin/busybox", "true"])
    assert proc.returncode != 0
    assert f"annotation {PREFIX}/app: value 'yes' is not 'enable'" in proc.stderr, proc.stderr
    assert node.records() == []
