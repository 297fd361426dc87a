"""Inside the throwaway cgroup v2 VM (4 vCPUs): kubelet's checkpoint is the truth, with runc.

Run by tests/integration/test_kubelet_checkpoint.py (one VM boot)::

    python kubelet_checkpoint_v2.py INPUT.json RESULTS.json

Shared CPU "0"; the container's config.json says cpus "2" and kubelet's checkpoint (a file in
the VM's /run, ``kubelet_state_file``, kubelet's format and checksum) gives it "2". Steps,
each recording exact values (cgroup files, Cpus_allowed_list inside, records, CLI output):

1. ``create``: the container runs on 0,2.
2. ``foreign_write``: ``echo 0-3 > cpuset.cpus``; ``status_drift``; ``reconcile`` brings it back to 0,2.
3. ``checkpoint_removed`` (kubelet restart): reconcile writes nothing.
4. ``checkpoint_new_entry``: the checkpoint gives it "3": reconcile moves it to 0,3.
5. ``delete``.

Performs and records only; the host test asserts. v2_lifecycle's helpers and main (stdlib only).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import v2_lifecycle as v2  # noqa: E402 (the v2 hook scenario beside this file)


def write_checkpoint(path: str, entries: dict) -> None:
    from mixed_cpus_hook.testing.fakenode import format_checkpoint

    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(format_checkpoint(entries, online=v2.read("/sys/devices/system/cpu/online") or ""))
    os.replace(path + ".tmp", path)


def scenario(ctx: v2.Ctx, rt: v2.Runtime) -> None:
    step = ctx.results.step
    ckpt = ctx.inp["kubelet_state_file"]
    os.makedirs(os.path.dirname(ckpt), exist_ok=True)
    R = rt.name
    pod = v2.Pod(ctx, ctx.pod_quota)
    write_checkpoint(ckpt, {pod.uid: {"app": "2"}})
    c = v2.Container(ctx, rt, "ckpt", pod, "app")
    r = c.create()
    step(R, "create", run=r, inside=c.inside_cpus_allowed(), **c.snapshot())

    v2.write(f"{c.cgroup}/cpuset.cpus", "0-3")
    step(R, "foreign_write", inside=c.inside_cpus_allowed(), container=v2.cgroup_files(c.cgroup))
    step(R, "status_drift", status=ctx.cli("status", "--json"))
    r = ctx.cli("reconcile")
    step(R, "reconcile", reconcile=r, inside=c.inside_cpus_allowed(), **c.snapshot())

    os.unlink(ckpt)
    mtimes = v2.record_mtimes(ctx.state_dir)
    r = ctx.cli("reconcile")
    step(R, "checkpoint_removed", reconcile=r, records_unchanged=mtimes == v2.record_mtimes(ctx.state_dir),
         container=v2.cgroup_files(c.cgroup))

    write_checkpoint(ckpt, {pod.uid: {"app": "3"}})
    r = ctx.cli("reconcile")
    step(R, "checkpoint_new_entry", reconcile=r, inside=c.inside_cpus_allowed(), **c.snapshot())
    step(R, "status_after", status=ctx.cli("status", "--json"))

    stop = rt.stop(c.id)
    r = rt.cmd("delete", c.id)
    step(R, "delete", stop=stop, delete=r, records=ctx.records(), pod=pod.files(),
         pod_removed=v2.rmdir_tree(pod.dir))


if __name__ == "__main__":
    # v2_lifecycle's main (setup, results, per-runtime cleanup) with this scenario as the lifecycle
    v2.lifecycle = scenario
    sys.exit(v2.main(sys.argv))
