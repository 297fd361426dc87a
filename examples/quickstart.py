#!/usr/bin/env python3
"""Run the hook by hand on the shipped example against a throwaway fake node (no root).

Builds a fake node in a temporary directory (cgroup v1 with the systemd driver, CPUs 0-3
online, shared CPUs 0-1), lays the example bundle (examples/config.json) and state
(examples/state.json) into it, then runs what CRI-O and kubelet would: apply, a kubelet
rewrite, reconcile, status and release, showing the cgroup files after each step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hook"))

from mixed_cpus_hook.testing.fakenode import FakeNode  # noqa: E402


def main() -> int:
    keep = "--keep" in sys.argv
    tmp = tempfile.mkdtemp(prefix="mixed-cpus-demo-")
    try:
        return demo(tmp)
    finally:
        if keep:
            print(f"\n(fake node kept at {tmp})")
        else:
            shutil.rmtree(tmp)


def demo(tmp: str) -> int:
    with open(os.path.join(HERE, "state.json")) as f:
        state = json.load(f)
    with open(os.path.join(HERE, "config.json")) as f:
        spec = json.load(f)
    node = FakeNode(os.path.join(tmp, "node"), version=1, online="0-3")
    # Namespaces are opt-in: the admin lists those whose pods may ask (the example pod is in "ran").
    cfg = node.write_config("0-1", extra={"allowed_namespaces": ["ran"]})
    ann = spec["annotations"]
    pod = f"kubepods.slice/kubepods-pod{ann['io.kubernetes.pod.uid'].replace('-', '_')}.slice"
    ctr = f"{pod}/crio-{state['id']}.scope"
    node.mkdir(pod)
    node.set_quota(pod, 200000)
    node.mkdir(ctr, spec["linux"]["resources"]["cpu"]["cpus"])
    node.set_quota(ctr, spec["linux"]["resources"]["cpu"]["quota"])
    bundle = os.path.join(tmp, "bundle")
    os.makedirs(bundle)
    shutil.copy(os.path.join(HERE, "config.json"), os.path.join(bundle, "config.json"))
    state["bundle"] = bundle
    state_text = json.dumps(state)
    env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(tmp, "cache"),
               PYTHONPATH=os.path.join(HERE, "..", "hook"))
    hook = [sys.executable, "-m", "mixed_cpus_hook", "--config", cfg]

    def show(title: str) -> None:
        print(f"  container cpuset.cpus={node.read(ctr, 'cpuset.cpus')} "
              f"cfs_quota_us={node.read(ctr, 'cpu.cfs_quota_us')}   pod cfs_quota_us={node.read(pod, 'cpu.cfs_quota_us')}"
              f"   ({title})")

    def run(*args: str, stdin: str = "") -> None:
        print(f"\n$ mixed-cpus-hook {' '.join(args)}" + ("   # state JSON on stdin, as CRI-O sends it" if stdin else ""))
        r = subprocess.run(hook + list(args), input=stdin, text=True, capture_output=True, env=env)
        sys.stdout.write(r.stdout.replace(node.cgroup_root, "<cgroup_root>"))
        sys.stderr.write(r.stderr)
        print(f"  (exit {r.returncode})")

    print(f"Fake node in {tmp}: CPUs 0-3 online, shared CPUs 0-1 ({cfg}),")
    print("a Guaranteed container on exclusive CPUs 2-3 with quota 200000 in a pod with quota 200000.")
    show("before")
    run("apply", "--dry-run", stdin=state_text)
    run("apply", stdin=state_text)
    show("after apply: exclusive 2-3 + shared 0-1, both quotas raised by 2 CPUs")
    run("apply", stdin=state_text)
    show("apply again: idempotent, nothing written")
    print("\n# kubelet restarts and rewrites the container (runc update --cpuset-cpus 2-3 --cpu-quota 200000)")
    node.write(ctr, "cpuset.cpus", "2-3")
    node.write(ctr, "cpu.cfs_quota_us", "200000")
    show("after kubelet's rewrite")
    run("reconcile")
    show("after reconcile")
    run("status")
    run("release", stdin=state_text)
    show("after release (poststop): the pod's quota is given back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
