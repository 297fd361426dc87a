"""Run inside the cgroup v2 VM (test_nri_pool_v2_vm.py): the pool (shared_cpus: pool) on 4 vCPUs.

``python nri_pool_v2.py INPUT.json RESULTS.json``. The harness of the host tests
(containerd.py, cri.py, cri_kube.py, pool_kube.py; the containerd binaries from the host's caches,
copied into the shared dir) drives a private containerd over CRI as kubelet does. Each phase
(``INPUT["phases"]``: [name, containerd version]) starts its own containerd with CDI on and its
own plugin, and removes everything before the next; each step's exact values go into the results
file, rewritten after every step. reserved_cpus "0" everywhere: the pool starts as 1-3.

``dra`` (exclusive_source dra; the CPU DRA driver's claims as CDI specs): two standard containers
s1 and s2 (CPU shares 2 and 102), claim-only cA (claim 3), mixed M (claim 2, shares 512), while a
watcher reads every container's cpuset.cpus.effective. M's PID 1 is pinned to CPU 2 (as an
application pins its busy thread to its exclusive CPU) and a claim elsewhere changes the pool,
twice (cA goes: the pool grows; cC claims 3: it shrinks): what is left of the pin, each time.
Then the plugin is killed; while none runs, cC goes and cD claims CPU 1 (created unadjusted); the
plugin restarted: its Synchronize rebuilds the pool from the containers' variables. containerd
restarted: the plugin reconnects; cD goes, cE claims 1. Every claim's window is checked against
the watcher's history (pool_kube.find_violations), the plugin's absence excluded.

``kubelet`` (exclusive_source kubelet, kubelet's checkpoint in its real format): a mixed
container on exclusive 1 + the pool (defaultCpuSet less reserved: 2-3), quota + 1 CPU
(pool_quota_cpus); an exclusive container created after the checkpoint gave it CPU 2: the
reply to its CreateContainer shrinks the mixed one first; it goes and kubelet's entry is
removed: the time until the pool grows back, by the periodic reconcile (10 s, the default: phase
argument "reconcile") or by the next reply (another container's CreateContainer right after the
entry goes, no reconcile in reach: "next_reply").
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import v2_lifecycle  # noqa: E402 (the v2 hook scenario beside this file: stdlib only)
from nri_v2 import Results, remove_cgroups  # noqa: E402


class Runtime:
    """One private containerd (CDI on) for every phase of its version; ``cleanup`` removes it all."""

    def __init__(self, inp: dict, version: str, res: Results) -> None:
        import containerd as ctd_mod  # noqa: PLC0415 (the harness, from the host's checkout)

        self.version = version
        self.base = os.path.join(inp["base_dir"], f"containerd-{version}")
        os.makedirs(self.base, exist_ok=True)
        self.ctd = ctd_mod.Containerd(owned_cgroups=[inp["top"]], request_timeout=inp["request_timeout"],
                                      parent_dir=self.base, cache=inp["containerd_caches"][version], fetch=False,
                                      version=version, cdi=True)
        self.ctd.cri_timeout, self.ctd.start_timeout = inp["cri_timeout"], inp["start_timeout"]
        t0 = time.monotonic()
        self.ctd.start()
        t1 = time.monotonic()
        self.ctd.import_images(inp.get("image_archive", ""))
        res.step(f"containerd-{version}", start=round(t1 - t0, 2), images=round(time.monotonic() - t1, 2),
                 version=self.ctd.cri.version())

    def cleanup(self) -> list:
        problems = self.ctd.cleanup()
        shutil.rmtree(self.base, ignore_errors=True)
        return problems


class Phase:
    """One phase on a runtime: its kubelet calls and claims (its own top cgroup), its plugins; ``cleanup``
    removes its pods, plugins and cgroups (containerd stays for the next phase)."""

    def __init__(self, inp: dict, name: str, runtime: Runtime, res: Results) -> None:
        from cri_kube import Kube  # noqa: PLC0415
        from pool_kube import Claims, PoolKube  # noqa: PLC0415

        self.inp, self.name, self.res, self.ctd = inp, name, res, runtime.ctd
        self.base = os.path.join(inp["base_dir"], name)
        self.top = f"{inp['top']}/{name}"
        os.makedirs(self.base, exist_ok=True)
        kube = Kube(self.ctd, self.top, os.path.join(self.base, "pod-logs"))
        kube.exec_timeout = inp["exec_timeout"]
        self.k = PoolKube(kube, Claims(self.ctd.cdi_dir))
        self.plugins: list = []

    def step(self, name: str, **values) -> None:
        self.res.step(f"{self.name}:{name}", **values)

    def plugin(self, config: str, reconcile_interval=None):
        from cri_kube import Plugin  # noqa: PLC0415

        path = os.path.join(self.base, f"config-{len(self.plugins)}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"state_dir: {self.base}/state\nfailure_policy: fail\nallowed_namespaces: [mixed-ns]\n"
                    f"reserved_cpus: \"0\"\nshared_cpus: pool\n"
                    f"cdi_spec_dirs: [{json.dumps(self.ctd.cdi_dir)}]\n{config}")  # where the claims are written
        p = Plugin(path, self.ctd.nri_sock, os.path.join(self.base, f"plugin-{len(self.plugins)}.log"), self.ctd,
                   env={"MIXED_CPUS_HOOK_CACHE_DIR": os.path.join(self.base, "cache")},
                   reconcile_interval=reconcile_interval)
        p.ready_timeout = self.inp["plugin_timeout"]
        self.plugins.append(p)
        p.start()
        return p

    def cleanup(self) -> dict:
        problems = []
        if self.ctd.proc is None:  # the phase stopped containerd and failed before starting it again
            self.ctd.start()
        problems += self.k.kube.cleanup()
        codes = [p.stop() for p in self.plugins]
        problems += remove_cgroups(self.top)
        self.k.claims.cleanup()
        logs = [p.log()[-6000:] for p in self.plugins]
        shutil.rmtree(self.base, ignore_errors=True)
        return {"problems": problems, "plugin_exit_codes": codes, "plugin_logs": logs}


def until_value(read, expected: str, timeout: float, pause: float = 0.02):
    """(seconds until ``read()`` returned ``expected`` or None when it never did, the last value)."""
    t0 = time.monotonic()
    while True:
        value = read()
        if value == expected:
            return round(time.monotonic() - t0, 3), value
        if time.monotonic() - t0 > timeout:
            return None, value
        time.sleep(pause)


# ---------------------------------------------------------------------------------------------
# exclusive_source dra


def phase_dra(ph: Phase) -> None:
    from pool_kube import PoolWatcher, Window, find_violations, parse_cpus  # noqa: PLC0415

    k, settle = ph.k, ph.inp["settle"]
    plugin = ph.plugin("exclusive_source: dra\n")
    pods, cids = {}, {}
    windows, excluded = [], []

    def create(name: str, claims=(), shares: int = 2):
        pods[name] = k.pod(name)
        cids[name] = k.container(pods[name], name, claims=claims, shares=shares, start=False)
        return cids[name]

    def start(name: str, watch) -> float:
        t = time.monotonic()
        k.kube.cri.start(cids[name])
        k.watch(watch, name, pods[name], cids[name])
        return t

    def cpus(*names: str) -> dict:
        return {n: k.cpus(pods[n], cids[n]) for n in names}

    def release(name: str, watch) -> float:
        t = time.monotonic()
        watch.remove(name)
        k.release(cids[name])
        return t

    with PoolWatcher(pause=ph.inp["watch_pause"]) as w:
        for name, shares in (("s1", 2), ("s2", 102)):
            create(name, shares=shares)
            start(name, w)
        ph.step("standard", cpus=cpus("s1", "s2"))
        claim_a = k.claims.prepare("3")
        create("cA", claims=(claim_a,))
        after_create = cpus("s1", "s2")
        t_a = start("cA", w)
        ph.step("claim_only", after_create=after_create, cpus=cpus("s1", "s2", "cA"), inside=k.inside(cids["cA"]))
        claim_b = k.claims.prepare("2")
        create("M", claims=(claim_b,), shares=512)
        after_create = cpus("s1", "s2")
        t_m = start("M", w)
        ph.step("mixed", after_create=after_create, cpus=cpus("s1", "s2", "cA", "M"), inside=k.inside(cids["M"]),
                claims={"A": claim_a.uid, "B": claim_b.uid})

        # thread pins: M's PID 1 pinned to its claimed CPU 2, then a claim elsewhere changes the pool
        pid = k.kube.pid(cids["M"])
        os.sched_setaffinity(pid, {2})
        pinned = k.allowed(cids["M"], pid)
        windows.append(Window("cA", parse_cpus("3"), t_a, release("cA", w)))
        k.claims.unprepare(claim_a)
        grown = until_value(lambda: k.cpus(pods["M"], cids["M"]), "1-3", settle)
        after_grow = k.allowed(cids["M"], pid)
        os.sched_setaffinity(pid, {2})
        claim_c = k.claims.prepare("3")
        create("cC", claims=(claim_c,))
        shrunk = k.cpus(pods["M"], cids["M"])
        after_shrink = k.allowed(cids["M"], pid)
        t_c = start("cC", w)
        ph.step("thread_pin", kernel=os.uname().release, pinned=pinned, grown=grown, after_grow=after_grow,
                shrunk=shrunk, after_shrink=after_shrink, cpus=cpus("s1", "s2", "M", "cC"))

        # the plugin killed; meanwhile cC goes and cD claims CPU 1; the plugin restarted (Synchronize)
        t_kill = time.monotonic()
        plugin.kill()
        windows.append(Window("cC", parse_cpus("3"), t_c, release("cC", w)))
        k.claims.unprepare(claim_c)
        claim_d = k.claims.prepare("1")
        create("cD", claims=(claim_d,))
        t_d = start("cD", w)
        while_down = cpus("s1", "s2", "M", "cD")
        plugin = ph.plugin("exclusive_source: dra\n")
        synced = until_value(lambda: k.cpus(pods["s1"], cids["s1"]), "3", settle)
        excluded.append((t_kill, time.monotonic()))
        after_sync = cpus("s1", "s2", "M", "cD")
        ph.step("plugin_restart", while_down=while_down, synced=synced, after_sync=after_sync)

        # containerd restarted: the plugin reconnects; cD goes, cE claims CPU 1
        mark = ph.ctd.log_mark()
        t0 = time.monotonic()
        ph.ctd.restart()
        plugin.wait_synchronized(mark)
        reconnect = round(time.monotonic() - t0, 2)
        after_restart = cpus("s1", "s2", "M", "cD")
        windows.append(Window("cD", parse_cpus("1"), t_d, release("cD", w)))
        k.claims.unprepare(claim_d)
        regrown = until_value(lambda: k.cpus(pods["s1"], cids["s1"]), "1,3", settle)
        claim_e = k.claims.prepare("1")
        create("cE", claims=(claim_e,))
        after_create = cpus("s1", "s2", "M")
        t_e = start("cE", w)
        ph.step("containerd_restart", seconds=reconnect, plugin_running=plugin.running(), after_restart=after_restart,
                regrown=regrown, after_create=after_create, cpus=cpus("s1", "s2", "M", "cE"))

        windows.append(Window("cE", parse_cpus("1"), t_e, release("cE", w)))
        after_e = until_value(lambda: k.cpus(pods["s1"], cids["s1"]), "1,3", settle)
        windows.append(Window("M", parse_cpus("2"), t_m, release("M", w)))
        after_m = until_value(lambda: k.cpus(pods["s1"], cids["s1"]), "1-3", settle)
        until = time.monotonic()
    violations = find_violations(w.transitions, windows, until, excluded)
    seen_while_down = find_violations(w.transitions, windows, until)
    ph.step("end", after_e=after_e, after_m=after_m, violations=violations,
            violations_while_no_plugin=len(seen_while_down) - len(violations), rounds=w.samples, writes=w.writes,
            history={n: [v for _t, v in h] for n, h in w.transitions.items()})


# ---------------------------------------------------------------------------------------------
# exclusive_source kubelet


def phase_kubelet(ph: Phase, grow_by: str) -> None:
    """``grow_by`` "reconcile": the plugin's default --reconcile-interval (10 s) and no event after kubelet's
    entry goes; "next_reply": no periodic reconcile in reach (an hour) and another container's
    CreateContainer right after the entry goes."""
    from pool_kube import PoolWatcher, Window, find_violations, parse_cpus, write_checkpoint  # noqa: PLC0415

    k, settle = ph.k, ph.inp["settle"]
    state = os.path.join(ph.base, "kubelet", "cpu_manager_state")
    app_pod = k.pod("du", quota=100000, asks="app")
    write_checkpoint(state, {app_pod.uid: {"app": "1"}}, "0,2-3")
    plugin = ph.plugin(f"exclusive_source: kubelet\npool_quota_cpus: 1\nkubelet_state_file: {state}\n",
                       reconcile_interval=None if grow_by == "reconcile" else 3600)
    app = k.container(app_pod, "app", cpus="1", quota=100000, shares=1024)
    ph.step("mixed", values=k.kube.values(app_pod, app), inside=k.inside(app))
    with PoolWatcher(pause=ph.inp["watch_pause"]) as w:
        k.watch(w, "app", app_pod, app)
        pod = k.pod("b", quota=100000)
        write_checkpoint(state, {app_pod.uid: {"app": "1"}, pod.uid: {"b": "2"}}, "0,3")  # kubelet's admission
        cid = k.container(pod, "b", cpus="2", quota=100000, shares=1024, start=False)
        after_create = k.cpus(app_pod, app)
        t0 = time.monotonic()
        k.kube.cri.start(cid)
        k.watch(w, "b", pod, cid)
        values = {"app": k.cpus(app_pod, app), "b": k.cpus(pod, cid)}
        window = Window("b", parse_cpus("2"), t0, time.monotonic())
        w.remove("b")
        k.release(cid)
        write_checkpoint(state, {app_pod.uid: {"app": "1"}}, "0,2-3")  # kubelet's removeStaleState, later
        t_entry = time.monotonic()
        other = None
        if grow_by == "next_reply":
            other = k.container(k.pod("s"), "std", cpus="0,2-3", shares=2, start=False)
        delay, last = until_value(lambda: k.cpus(app_pod, app), "1-3", settle)
        grow_back = {"seconds": None if delay is None else round(time.monotonic() - t_entry, 3), "last": last,
                     "other_created_in": None if other is None else round(time.monotonic() - t_entry, 3)}
        until = time.monotonic()
    ph.step("exclusive", after_create=after_create, values=values)
    ph.step("end", violations=find_violations(w.transitions, [window], until), grow_back=grow_back, grow_by=grow_by,
            by_reply=[line for line in plugin.log().splitlines() if "node changed: cpus 1,3 -> 1-3" in line],
            history={n: [v for _t, v in h] for n, h in w.transitions.items()})


PHASES = {"dra": phase_dra, "kubelet": phase_kubelet}


def main(argv) -> int:
    with open(argv[1], encoding="utf-8") as f:
        inp = json.load(f)
    res = Results(argv[2])
    sys.path.insert(0, inp["integration_dir"])
    with open("/sys/devices/system/cpu/online", encoding="ascii") as f:
        online = f.read().strip()
    res.doc["env"] = {"online": online, "kernel": os.uname().release,
                      "cgroup2": os.path.isfile("/sys/fs/cgroup/cgroup.controllers")}
    res.doc["phases"], res.doc["runtimes"] = {}, {}
    res.save()
    versions = []
    for _name, version, *_args in inp["phases"]:
        if version not in versions:
            versions.append(version)
    for version in versions:  # one containerd per version, its phases in turn
        runtime = None
        try:
            runtime = Runtime(inp, version, res)
            for name, _v, *args in [p for p in inp["phases"] if p[1] == version]:
                run_phase(inp, f"{name}-{version}", PHASES[name], args, runtime, res)
            res.doc["runtimes"][version] = {"error": None}
        except Exception:
            res.doc["runtimes"][version] = {"error": traceback.format_exc(),
                                            "containerd_log": runtime.ctd.log_tail(60) if runtime else None}
        finally:
            if runtime is not None:
                res.doc["runtimes"][version]["problems"] = runtime.cleanup()
            res.save()
    problems = remove_cgroups(inp["top"])
    res.doc["done"] = True
    res.doc["cleanup"] = problems
    res.save()
    return 0


def run_phase(inp: dict, key: str, phase, args: list, runtime: Runtime, res: Results) -> None:
    ph = None
    started = time.monotonic()
    try:
        ph = Phase(inp, key, runtime, res)
        phase(ph, *args)
        res.doc["phases"][key] = {"error": None}
    except Exception:
        res.doc["phases"][key] = {"error": traceback.format_exc(), "containerd_log": runtime.ctd.log_tail(60)}
    finally:
        if ph is not None:
            res.doc["phases"][key]["cleanup"] = ph.cleanup()
        res.doc["phases"][key]["seconds"] = round(time.monotonic() - started, 1)
        res.save()


if __name__ == "__main__":
    v2_lifecycle._started = time.monotonic()
    sys.exit(main(sys.argv))
