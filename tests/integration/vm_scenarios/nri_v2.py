"""Run inside the cgroup v2 VM (test_nri_v2_vm.py): the NRI plugin with a private containerd 1.7.

``python nri_v2.py INPUT.json RESULTS.json``. Uses the same harness as the v1 tests
(tests/integration/containerd.py, cri.py, cri_kube.py, images.py; the containerd binaries come
from the host's cache, visible in the VM). Each step's exact values go into the results file,
rewritten after every step, so the test on the host can say which step failed and why.

Under emulation everything is slow (a Python start takes seconds), so containerd's NRI request
timeout is raised (the plugin answers well inside 2 s on real hardware; here its first answers
can take longer) and every wait is generous. containerd's directory is under /run (tmpfs):
the VM's /tmp is an overlay, which overlayfs does not accept as an upper layer.

Steps: env, containerd, plugin, create (app mixed + env; sibling untouched), update (kubelet's
cpuset rewrite twice and a resize, watched), plugin_kill (an update while no plugin runs reaches
the cgroup), plugin_restart (resync back to mixed, pod raised once), containerd_restart (the
plugin reconnects, a new container is mixed), stop_remove (the pod's share back), fail_policy
(a bad annotation fails CreateContainer), then issue 14's stale checkpoint (``stale_checkpoint``):
a plugin that reads kubelet's checkpoint, no periodic reconcile (only an event can move a
container): ``checkpoint_move`` (the checkpoint moves a running mixed container from X to Y;
kubelet's cpuset-only update is answered Y + shared), ``checkpoint_resize`` (moved back to X; a
resize that carries no cpuset is answered X + shared), ``checkpoint_create`` (moved to Y again
and X given to a new container, created before the first one's update comes: the CreateContainer
reply moves the first one off X), ``checkpoint_update_after``.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import v2_lifecycle  # noqa: E402 (the v2 hook scenario beside this file: stdlib only)


class Results(v2_lifecycle.Results):
    """v2_lifecycle's results file (rewritten atomically after every step), with named steps."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.doc = {"done": False, "error": None, "env": {}, "steps": {}, "order": [], "elapsed": 0.0}
        self.save()

    def step(self, name: str, **values) -> None:
        values["t"] = round(time.monotonic() - v2_lifecycle._started, 2)
        self.doc["steps"][name] = values
        self.doc["order"].append(name)
        self.save()


def remove_cgroups(top: str) -> list:
    """``top`` and everything below it in every cgroup hierarchy, deepest first."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        roots = [line.split(" ")[4] for line in f if line.split(" - ")[1].split()[0] in ("cgroup", "cgroup2")]
    return [problem for root in roots for problem in v2_lifecycle.rmdir_tree(root + top)]


Phase = collections.namedtuple("Phase", "kube plugin watched records res inp")


def write_checkpoint(path: str, entries: dict, online: str) -> None:
    """kubelet's CPU manager checkpoint (V2, kubelet's checksum), replaced by rename as kubelet does."""
    from mixed_cpus_hook.testing.fakenode import format_checkpoint  # noqa: PLC0415 (the venv's package)

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(format_checkpoint(entries, online=online))
    os.replace(path + ".tmp", path)


def stale_checkpoint(ph: Phase, online: str) -> None:
    """Issue 14, "Fresh facts": kubelet's checkpoint moves a running mixed container; every answer
    follows the checkpoint as it is at that event, never the one the plugin read before.

    The plugin runs without its periodic reconcile (``--reconcile-interval 0``): a cgroup value
    that changes here is the runtime writing an NRI answer. Exclusive sets X and Y beside the
    shared CPUs; quota 100000 for one exclusive CPU.
    """
    from cri_kube import Watcher  # noqa: PLC0415 (the harness; main put its directory on sys.path)

    kube, inp, res = ph.kube, ph.inp, ph.res
    x, y, period = inp["move_from"], inp["move_to"], inp["period"]
    ckpt = os.path.join(inp["base_dir"], "kubelet", "cpu_manager_state")
    pod = kube.pod(name="mv", quota=inp["pod_quota"])
    write_checkpoint(ckpt, {pod.uid: {"app": x}}, online)
    p = ph.plugin(checkpoint=ckpt, reconcile_interval=0)
    cid = kube.container(pod, "app", cpus=x, quota=100000, period=period)
    created = kube.values(pod, cid)
    res.step("stale_checkpoint", seconds=p.started_in, cid=cid, created=created, inside=kube.inside(cid),
             records=ph.records())

    # kubelet restarts (or resizes) and moves the container: X -> Y; the CPU manager's update
    # carries the cpuset only
    write_checkpoint(ckpt, {pod.uid: {"app": y}}, online)
    w = ph.watched(pod, cid, [{"cpus": y}])
    res.step("checkpoint_move", rewrite=w, after=kube.values(pod, cid), inside=kube.inside(cid),
             record=read_record(inp, cid), plugin_log=p.log()[-3000:])

    # moved back to X; kubelet's next update is a resize (kubelet's resize carries no cpuset)
    write_checkpoint(ckpt, {pod.uid: {"app": x}}, online)
    w = ph.watched(pod, cid, [{"cpus": "", "quota": 200000, "period": period}])
    res.step("checkpoint_resize", rewrite=w, after=kube.values(pod, cid), inside=kube.inside(cid),
             record=read_record(inp, cid))

    # moved to Y again and X handed to a new pod's container, which kubelet creates before the
    # first one's update comes: the CreateContainer reply carries the first one's move
    pod2 = kube.pod(name="mv2", quota=inp["pod_quota"])
    write_checkpoint(ckpt, {pod.uid: {"app": y}, pod2.uid: {"app": x}}, online)
    with Watcher(kube.cgroup(pod, cid, "cpuset") + "/cpuset.cpus", pause=0.001) as wa:
        cid2 = kube.container(pod2, "app", cpus=x, quota=100000, period=period, start=False)
        first_when_created = kube.values(pod, cid)  # CreateContainer returned; the new one not started
        kube.cri.start(cid2)
    res.step("checkpoint_create", cid2=cid2, first_seen=sorted(wa.values()), first_when_created=first_when_created,
             first=kube.values(pod, cid), first_inside=kube.inside(cid), new=kube.values(pod2, cid2),
             new_inside=kube.inside(cid2), records=ph.records(), plugin_log=p.log()[-3000:])

    # the first one's update arrives after all: nothing moves
    w = ph.watched(pod, cid, [{"cpus": y}])
    res.step("checkpoint_update_after", rewrite=w, first=kube.values(pod, cid), new=kube.values(pod2, cid2))


def read_record(inp: dict, cid: str) -> dict:
    path = os.path.join(inp["base_dir"], "state", "containers", cid + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}


def main(argv) -> int:
    with open(argv[1], encoding="utf-8") as f:
        inp = json.load(f)
    res = Results(argv[2])
    sys.path.insert(0, inp["integration_dir"])
    import containerd as ctd_mod  # noqa: PLC0415 (the harness, from the host's checkout)
    from cri import CriError  # noqa: PLC0415
    from cri_kube import Kube, Plugin, Watcher, wait_for  # noqa: PLC0415

    excl, shared = inp["exclusive"], inp["shared"]
    quota, pod_quota, period = inp["quota"], inp["pod_quota"], inp["period"]
    base = inp["base_dir"]
    os.makedirs(base, exist_ok=True)
    ctd = ctd_mod.Containerd(owned_cgroups=[inp["top"]], request_timeout=inp["request_timeout"], parent_dir=base,
                             cache=inp["containerd_cache"], fetch=False)
    ctd.cri_timeout, ctd.start_timeout = inp["cri_timeout"], inp["start_timeout"]
    kube = None
    plugins = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [line.split(" - ")[1].split()[0] for line in f if " /sys/fs/cgroup " in line]
        controllers = []
        if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):  # (the scenario also runs on v1, for development)
            with open("/sys/fs/cgroup/cgroup.controllers", encoding="ascii") as f:
                controllers = f.read().split()
        with open("/sys/devices/system/cpu/online", encoding="ascii") as f:
            online = f.read().strip()
        res.doc["env"] = {"cgroup_fs": mounts, "controllers": controllers, "online": online,
                          "containerd": ctd_mod.version(inp["containerd_cache"])}
        res.save()

        t0 = time.monotonic()
        ctd.start()
        names = ctd.import_images()
        res.step("containerd", seconds=round(time.monotonic() - t0, 2), images=names, version=ctd.cri.version())

        kube = Kube(ctd, inp["top"], os.path.join(base, "pod-logs"))
        kube.exec_timeout = inp["exec_timeout"]
        state = os.path.join(base, "state")

        def plugin(policy: str = "fail", checkpoint: str = "", reconcile_interval=None) -> Plugin:
            path = os.path.join(base, f"nri-{len(plugins)}.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(f'shared_cpus: "{shared}"\nstate_dir: {state}\nfailure_policy: {policy}\n'
                        "allowed_namespaces: [mixed-ns]\n"
                        f"kubelet_state_file: {checkpoint or base + '/none/cpu_manager_state'}\n")
            p = Plugin(path, ctd.nri_sock, os.path.join(base, f"plugin-{len(plugins)}.log"), ctd,
                       env={"MIXED_CPUS_HOOK_CACHE_DIR": os.path.join(base, "cache")},
                       reconcile_interval=inp["reconcile_interval"] if reconcile_interval is None else reconcile_interval)
            p.ready_timeout = inp["plugin_timeout"]
            plugins.append(p)
            t = time.monotonic()
            p.start()
            p.started_in = round(time.monotonic() - t, 2)
            return p

        def records():
            d = os.path.join(state, "containers")
            return sorted(e[:-5] for e in os.listdir(d) if e.endswith(".json")) if os.path.isdir(d) else []

        def watched(pod, cid, updates, settle=0.0):
            with Watcher(kube.cgroup(pod, cid, "cpuset") + "/cpuset.cpus", pause=0.001) as wc, \
                    Watcher(kube.quota_file(pod, cid), pause=0.001) as wq:
                for u in updates:
                    kube.update(cid, **u)
                time.sleep(settle)  # the plugin's periodic reconcile acts meanwhile
            return {"cpus_seen": sorted(wc.values()), "cpus_events": wc.events, "cpus_samples": wc.samples,
                    "quota_seen": sorted(wq.values())}

        p = plugin()
        res.step("plugin", seconds=p.started_in)

        pod = kube.pod(quota=pod_quota)
        cid = kube.container(pod, "app", cpus=excl, quota=quota, period=period)
        side = kube.container(pod, "side", cpus=shared, quota=100000, period=period)
        res.step("create", cid=cid, values=kube.values(pod, cid), inside=kube.inside(cid),
                 side_values=kube.values(pod, side), side_inside=kube.inside(side), records=records())

        w = watched(pod, cid, [{"cpus": excl}, {"cpus": excl}], settle=2.5 * inp["reconcile_interval"])
        after = kube.values(pod, cid)
        w2 = watched(pod, cid, [{"cpus": excl, "quota": quota + 100000, "period": period}])
        after_resize = kube.values(pod, cid)
        kube.update(cid, cpus=excl, quota=quota, period=period)  # and resized back
        res.step("update", rewrite=w, after=after, resize=w2, after_resize=after_resize,
                 after_resize_back=kube.values(pod, cid), inside=kube.inside(cid))

        p.kill()
        w = watched(pod, cid, [{"cpus": excl}])
        res.step("plugin_kill", rewrite=w, values=kube.values(pod, cid))

        p = plugin()
        mixed = wait_for(lambda: kube.values(pod, cid)["cpus"], inp["mixed"], inp["settle"])
        res.step("plugin_restart", seconds=p.started_in, cpus=mixed, values=kube.values(pod, cid), records=records())

        mark = ctd.log_mark()
        t0 = time.monotonic()
        ctd.restart()
        p.wait_synchronized(mark)
        reconnect = round(time.monotonic() - t0, 2)
        old = kube.values(pod, cid)
        # kubelet hands exclusive CPUs on once their container is gone, never to two at once (without
        # its checkpoint the plugin refuses a cpuset another tracked container holds)
        kube.cri.stop(cid, timeout=0)
        kube.cri.remove(cid)
        wait_for(lambda: cid in records(), False, inp["settle"])
        pod2 = kube.pod(name="du2", quota=pod_quota)
        cid2 = kube.container(pod2, "app", cpus=excl, quota=quota, period=period)
        res.step("containerd_restart", seconds=reconnect, plugin_running=p.running(), old=old,
                 old_pod_quota=pod.quota(), new=kube.values(pod2, cid2), new_inside=kube.inside(cid2),
                 records=records())

        kube.cri.stop(cid2, timeout=0)
        pod_after_stop = wait_for(pod2.quota, pod_quota, inp["settle"])
        kube.cri.remove(cid2)
        left = wait_for(lambda: cid2 in records(), False, inp["settle"])
        res.step("stop_remove", pod_quota_after_stop=pod_after_stop, still_recorded=left, records=records())

        pod3 = kube.pod(name="du3", quota=pod_quota, value="yes")
        try:
            kube.container(pod3, "app", cpus=excl, quota=quota, period=period)
            error = None
        except CriError as exc:
            error = exc.details
        res.step("fail_policy", error=error, pod_quota=pod3.quota(), plugin_running=p.running())

        p.stop()
        stale_checkpoint(Phase(kube, plugin, watched, records, res, inp), online)
        res.doc["done"] = True
    except Exception:
        res.doc["error"] = traceback.format_exc()
        res.doc["containerd_log"] = ctd.log_tail(60)
    finally:
        problems = kube.cleanup() if kube is not None and ctd.proc is not None else []
        codes = [p.stop() for p in plugins]
        res.doc["plugin_logs"] = [p.log() for p in plugins]  # read before their directory goes
        problems += ctd.cleanup()
        problems += remove_cgroups(inp["top"])
        shutil.rmtree(base, ignore_errors=True)
        res.doc["cleanup"] = {"problems": problems, "plugin_exit_codes": codes}
        res.save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
