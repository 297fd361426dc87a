#!/usr/bin/env python3
"""`make demo`: both modes on throwaway fake nodes, no root, nothing logged to the host's journal.

Hook mode: a fake node (cgroup v1, systemd driver, CPUs 0-3 online, shared CPUs 0-1) gets the
shipped example bundle (examples/config.json) and state (examples/state.json); the demo runs what
CRI-O and kubelet would: apply, a kubelet rewrite, reconcile, status and release, showing the
cgroup files after each step.

NRI mode: the real plugin, `mixed-cpus-hook nri --socket PATH`, as a process, and
examples/nri_runtime.py playing containerd's side of the socket: registration, Configure,
Synchronize, CreateContainer (the adjustment: the mixed set, the raised quota, the
OPENSHIFT_* variables, the pod's quota raised first), kubelet's exclusive-only
UpdateContainer rewritten in flight, StopContainer giving the pod its share back. The demo
plays runc: it writes what the plugin answered into the fake cgroups.

Every line fits 100 columns: container ids are shortened to 12 characters and cgroup
directories to <pod> and <ctr>. `--keep` keeps the fake nodes and prints where they are.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hook"))
sys.path.insert(0, HERE)

from mixed_cpus_hook.testing.fakenode import FakeNode, container_rel  # noqa: E402

WIDTH = 100
SHARED = "0-1"


class Screen:
    """Prints lines that fit WIDTH columns: long names replaced by short ones, the rest wrapped."""

    def __init__(self) -> None:
        self.names: Dict[str, str] = {}

    def name(self, long: str, short: str) -> None:
        self.names[long] = short

    def shorten(self, text: str) -> str:
        for long in sorted(self.names, key=len, reverse=True):
            text = text.replace(long, self.names[long])
        return text

    def say(self, text: str = "") -> None:
        for line in self.shorten(text).splitlines() or [""]:
            print("\n".join(textwrap.wrap(line, WIDTH, subsequent_indent="      ", break_on_hyphens=False)) or "")
        sys.stdout.flush()

    def state(self, values: str, title: str) -> None:
        """Cgroup values and what they show: on one line when it fits, else the title below."""
        line = f"  {values}   ({title})"
        self.say(line if len(self.shorten(line)) <= WIDTH else f"  {values}\n    ({title})")


def name_cgroups(screen: Screen, node: FakeNode, pod: str, ctr: str, cid: str) -> None:
    for hier in ("cpuset", "cpu,cpuacct", "cpu", ""):
        screen.name(os.path.join(node.cgroup_root, hier, ctr), "<ctr>")
        screen.name(os.path.join(node.cgroup_root, hier, pod), "<pod>")
    screen.name(cid, cid[:12])


def main(argv: List[str]) -> int:
    keep = "--keep" in argv
    tmp = tempfile.mkdtemp(prefix="mixed-cpus-demo-")
    screen = Screen()
    screen.say("mixed-cpus-hook demo: both modes on fake nodes (cgroup files in a temporary directory,\n"
               "removed at the end; `make demo DEMO_ARGS=--keep` keeps them). No root, no journal.")
    try:
        code = hook_mode(os.path.join(tmp, "hook-node"), screen)
        code = nri_mode(os.path.join(tmp, "nri-node"), screen) or code
    finally:
        if keep:
            print(f"\nKept: {tmp} (hook-node/, nri-node/); remove it when done.")
        else:
            shutil.rmtree(tmp)
    return code


def run_cli(screen: Screen, env: Dict[str, str], cfg: str, *args: str, stdin: str = "") -> int:
    screen.say(f"\n$ mixed-cpus-hook {' '.join(args)}" + ("   # the OCI state on stdin, as CRI-O sends it"
                                                         if stdin else ""))
    r = subprocess.run([sys.executable, "-m", "mixed_cpus_hook", *args, "--config", cfg], input=stdin,
                       universal_newlines=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if r.stdout.strip():
        screen.say(r.stdout.rstrip("\n"))
    if r.stderr:
        screen.say(r.stderr.rstrip("\n"))
    screen.say(f"  (exit {r.returncode})")
    return r.returncode


def demo_env(tmp: str) -> Dict[str, str]:
    # The fake node's configuration cache stays in it; MIXED_CPUS_HOOK_NO_SYSLOG keeps every line out
    # of the host's journal.
    return dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(tmp, "cache"), MIXED_CPUS_HOOK_NO_SYSLOG="1",
                PYTHONPATH=os.path.join(HERE, "..", "hook"))


def hook_mode(root: str, screen: Screen) -> int:
    with open(os.path.join(HERE, "state.json")) as f:
        state = json.load(f)
    with open(os.path.join(HERE, "config.json")) as f:
        spec = json.load(f)
    node = FakeNode(root, version=1, online="0-3")
    # Namespaces are opt-in: the admin lists those whose pods may ask (the example pod is in "ran").
    cfg = node.write_config(SHARED, extra={"allowed_namespaces": ["ran"]})
    ann = spec["annotations"]
    pod = f"kubepods.slice/kubepods-pod{ann['io.kubernetes.pod.uid'].replace('-', '_')}.slice"
    ctr = f"{pod}/crio-{state['id']}.scope"
    node.mkdir(pod)
    node.set_quota(pod, 200000)
    node.mkdir(ctr, spec["linux"]["resources"]["cpu"]["cpus"])
    node.set_quota(ctr, spec["linux"]["resources"]["cpu"]["quota"])
    bundle = os.path.join(root, "bundle")
    os.makedirs(bundle)
    shutil.copy(os.path.join(HERE, "config.json"), os.path.join(bundle, "config.json"))
    state["bundle"] = bundle
    state_text = json.dumps(state)
    env = demo_env(root)
    name_cgroups(screen, node, pod, ctr, state["id"])
    screen.name(node.root, "<hook-node>")

    def show(title: str) -> None:
        screen.state(f"<ctr> cpuset.cpus={node.read(ctr, 'cpuset.cpus')} cfs_quota_us="
                     f"{node.read(ctr, 'cpu.cfs_quota_us')}   <pod> cfs_quota_us={node.read(pod, 'cpu.cfs_quota_us')}",
                     title)

    screen.say("\n=== Hook mode: CRI-O (or podman) runs `mixed-cpus-hook apply` at createRuntime (hooks.d) ===")
    screen.say(f"Container du of pod ran/du-0, Guaranteed on exclusive CPUs 2-3 (quota 200000, the pod's\n"
               f"200000); shared CPUs {SHARED}. <pod> and <ctr>: their cgroup directories; {state['id'][:12]}: "
               "the container id.")
    show("before")
    code = run_cli(screen, env, cfg, "apply", "--dry-run", stdin=state_text)
    code |= run_cli(screen, env, cfg, "apply", stdin=state_text)
    show("after apply: exclusive 2-3 + shared 0-1, both quotas raised by 2 CPUs")
    code |= run_cli(screen, env, cfg, "apply", stdin=state_text)
    show("apply again: idempotent, nothing written")
    screen.say("\n# kubelet restarts and rewrites the container (runc update --cpuset-cpus 2-3 --cpu-quota 200000)")
    node.write(ctr, "cpuset.cpus", "2-3")
    node.write(ctr, "cpu.cfs_quota_us", "200000")
    show("after kubelet's rewrite")
    screen.say("# on a node, a systemd path unit sees the write and runs the reapply at once; here by hand:")
    code |= run_cli(screen, env, cfg, "reconcile")
    show("after reconcile")
    code |= run_cli(screen, env, cfg, "status")
    code |= run_cli(screen, env, cfg, "release", stdin=state_text)
    show("after release (poststop): the pod's quota is given back")
    return 1 if code else 0


def nri_mode(root: str, screen: Screen) -> int:
    from mixed_cpus_hook.frontends.nri.wire import api
    from nri_runtime import DemoRuntime, pod_and_container, subscribed

    node = FakeNode(root, version=1, online="0-3")
    cfg = node.write_config(SHARED, extra={"allowed_namespaces": ["ran"]})
    cid, uid = "9c7e1b2a" * 8, "5d4c3b2a-1f0e-4d9c-8b7a-695847362514"
    ctr = container_rel("cgroupfs", uid, cid)
    pod = os.path.dirname(ctr)
    node.mkdir(pod)  # the pod's cgroup exists at CreateContainer (the pause container lives in it)
    node.set_quota(pod, 200000)
    name_cgroups(screen, node, pod, ctr, cid)
    socket_path = os.path.join(root, "nri.sock")
    screen.name(node.root, "<nri-node>")
    env = demo_env(root)

    def show(title: str) -> None:
        mine = (f"<ctr> cpuset.cpus={node.read(ctr, 'cpuset.cpus')} cfs_quota_us={node.read(ctr, 'cpu.cfs_quota_us')}"
                if os.path.isdir(node.path(ctr, "")) else "<ctr> not created yet")
        screen.state(f"{mine}   <pod> cfs_quota_us={node.read(pod, 'cpu.cfs_quota_us')}", title)

    def runc(cpus: str, quota: int, title: str) -> None:
        """What runc does with the runtime's final values (here: write the fake cgroup files)."""
        if not os.path.isdir(node.path(ctr, "")):
            node.mkdir(ctr, cpus)
        node.write(ctr, "cpuset.cpus", cpus)
        node.set_quota(ctr, quota)
        show(title)

    screen.say("\n=== NRI mode: the plugin rewrites the container's resources before the runtime writes them ===")
    screen.say(f"Container du of pod ran/du-1, Guaranteed on exclusive CPUs 2-3 (quota 200000, the pod's\n"
               f"200000); shared CPUs {SHARED}. A small runtime (examples/nri_runtime.py) plays containerd.")
    screen.say(f"\n$ mixed-cpus-hook nri --socket {socket_path}   # in the background")
    runtime = DemoRuntime(socket_path)
    log = open(os.path.join(root, "plugin.log"), "w")
    plugin = subprocess.Popen([sys.executable, "-m", "mixed_cpus_hook", "--config", cfg, "nri", "--socket", socket_path,
                               "--reconcile-interval", "0"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        reg = runtime.accept()
        configured = runtime.handshake()
        screen.say(f"runtime: plugin {reg.plugin_idx}-{reg.plugin_name} registered; it subscribes to "
                   f"{', '.join(e.title().replace('_', '') for e in subscribed(configured))}")
        show("before")
        req_pod, req_ctr = pod_and_container(cid, "du", uid, "ran", "du-1", {"mixed-cpus.openshift.io/du": "enable"},
                                             "2-3", 200000)
        screen.say("\nruntime -> plugin: CreateContainer du (kubelet's resources: cpus 2-3, quota 200000)")
        adj = runtime.call("CreateContainer", api.CreateContainerRequest(pod=req_pod, container=req_ctr),
                           api.CreateContainerResponse).adjust
        cpu = adj.linux.resources.cpu
        screen.say(f"plugin -> runtime: adjust cpus {cpu.cpus}, quota {cpu.quota.value},\n"
                   "                   env " + " ".join(f"{kv.key}={kv.value}" for kv in adj.env))
        show("the plugin raised the pod's quota before answering")
        runc(cpu.cpus, cpu.quota.value, "runc created the container with the adjusted values")

        screen.say("\nruntime -> plugin: UpdateContainer du (kubelet's CPU manager after a restart: cpus 2-3, "
                   "quota 200000)")
        update = api.UpdateContainerRequest(pod=req_pod, container=req_ctr)
        update.linux_resources.cpu.cpus = "2-3"
        update.linux_resources.cpu.quota.value = 200000
        answer = runtime.call("UpdateContainer", update, api.UpdateContainerResponse)
        new = answer.update[0].linux.resources.cpu
        screen.say(f"plugin -> runtime: cpus {new.cpus}, quota {new.quota.value} (kubelet's update rewritten in "
                   "flight)")
        runc(new.cpus, new.quota.value, "the cgroup never held the exclusive-only set 2-3")
        code = run_cli(screen, env, cfg, "status")

        screen.say("\nruntime -> plugin: StopContainer du")
        runtime.call("StopContainer", api.StopContainerRequest(pod=req_pod, container=req_ctr),
                     api.StopContainerResponse)
        show("the plugin gave the pod its share back and forgot the container")
        code |= run_cli(screen, env, cfg, "status")
    finally:
        runtime.close()
        plugin.send_signal(signal.SIGTERM)
        plugin.wait(30)
        log.close()
    if plugin.returncode != 0:
        with open(os.path.join(root, "plugin.log")) as f:
            screen.say(f"the plugin exited {plugin.returncode}:\n{f.read()}")
        return 1
    return 1 if code else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
