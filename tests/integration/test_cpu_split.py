"""examples/cpu-split.sh in a real runc container on this machine's cgroup v1.

How a mixed container learns its CPU split in hook mode (docs/openshift.md): the node's shared-CPU
file is bind-mounted read-only into the container, and the script takes exclusive = its own
Cpus_allowed_list minus shared. The container asks (annotation), kubelet-like resources give it
cpus "1" (exclusive), the node's shared CPUs are "0", and the hook (createRuntime) applies the
mixed set "0-1" before the script runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "cpu-split.sh"
SHARED_FILE = "/etc/mixed-cpus-hook/shared-cpus"
EXCLUSIVE, SHARED, MIXED = "1", "0", "0-1"
# The busybox applets the script runs, as commands on PATH (the rootfs has /bin/busybox and /bin/sh).
APPLETS = ("awk", "grep", "sed", "sort", "tr", "cat")


def annotations(pod_uid: str, asks: bool) -> dict:
    """CRI-O's OCI annotations: kube names (the pod's uid is its cgroup's) plus the pod's annotation."""
    ann = {"io.kubernetes.container.name": "du", "io.kubernetes.pod.namespace": "it-ns",
           "io.kubernetes.pod.name": "du-0", "io.kubernetes.pod.uid": pod_uid}
    if asks:
        ann["mixed-cpus.openshift.io/du"] = "enable"
    return ann


def with_split_mounts(bundle: str, shared_file: str) -> None:
    """The bundle's config.json with the shared-CPU file (read-only) and the script mounted, applets linked."""
    rootfs = os.path.join(bundle, "rootfs")
    for applet in APPLETS:
        os.symlink("busybox", os.path.join(rootfs, "bin", applet))
    for dest in (SHARED_FILE, "/cpu-split.sh"):  # mount points in the read-only rootfs
        os.makedirs(os.path.dirname(rootfs + dest), exist_ok=True)
        open(rootfs + dest, "w").close()
    path = os.path.join(bundle, "config.json")
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    spec["mounts"] += [
        {"destination": SHARED_FILE, "type": "bind", "source": shared_file, "options": ["rbind", "ro"]},
        {"destination": "/cpu-split.sh", "type": "bind", "source": str(SCRIPT), "options": ["rbind", "ro"]},
    ]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=1)


@pytest.mark.parametrize("asks,allowed,isolated", [
    pytest.param(True, MIXED, EXCLUSIVE, id="mixed-container"),
    # Not asking: kubelet's cpuset only; the script still reports the split (nothing shared in it).
    pytest.param(False, EXCLUSIVE, EXCLUSIVE, id="exclusive-only-container"),
])
def test_cpu_split_in_a_runc_container(mch_node, mch_runc, asks: bool, allowed: str, isolated: str) -> None:
    node, runc = mch_node, mch_runc
    pod = node.make_pod(quota=200000)
    cid = runc.new_id("split")
    shared_file = os.path.join(node.tmp, "shared-cpus")
    with open(shared_file, "w", encoding="ascii") as f:
        f.write(f"# the node's shared CPUs\n\n{SHARED}\n")
    bundle = runc.bundle(cid, pod.container_path(f"crio-{cid}"), annotations(pod.uid, asks), cpus=EXCLUSIVE)
    with_split_mounts(bundle, shared_file)
    proc = runc.run(bundle, cid)
    assert proc.returncode == 0, proc.stderr
    assert node.cpus_allowed(runc.pid(cid)) == allowed

    out = runc.cmd("exec", cid, "/bin/sh", "/cpu-split.sh", check=True).stdout
    assert out == f"OPENSHIFT_ISOLATED_CPUS={isolated}\nOPENSHIFT_SHARED_CPUS={SHARED}\n"
    # As the script's header says: eval its output.
    out = runc.cmd("exec", cid, "/bin/sh", "-c", 'eval "$(sh /cpu-split.sh)"; '
                   'echo "$OPENSHIFT_ISOLATED_CPUS|$OPENSHIFT_SHARED_CPUS"', check=True).stdout
    assert out == f"{isolated}|{SHARED}\n"
    # The file the script reads is the node's, read-only in the container.
    proc = runc.cmd("exec", cid, "/bin/sh", "-c", f"echo 1 > {SHARED_FILE}")
    assert proc.returncode != 0 and "Read-only file system" in proc.stderr, proc.stderr
    assert Path(shared_file).read_text() == f"# the node's shared CPUs\n\n{SHARED}\n"

    runc.stop(cid)
    assert runc.cmd("delete", cid).returncode == 0
    assert node.records() == []
