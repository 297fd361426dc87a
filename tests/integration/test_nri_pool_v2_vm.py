"""The pool (shared_cpus: pool) on cgroup v2 with 4 vCPUs, in one throwaway VM (vm.py).

``vm_scenarios/nri_pool_v2.py`` runs each phase with its own private containerd (CDI on) and
plugin, over CRI as kubelet does, and writes exact values into a results file; the tests below
assert them. reserved_cpus "0": the pool starts as 1-3.

One containerd (CDI on) per version serves its phases:

* ``dra`` on containerd 2.1.9: two claims, a mixed and two standard containers, every
  container's cpuset.cpus.effective read by a watcher while claims come and go; the thread pin
  of a mixed container when a claim elsewhere changes the pool (the VM's 6.1 kernel drops it);
  the plugin killed and restarted (Synchronize rebuilds the pool); containerd restarted.
* ``kubelet`` on containerd 2.1.9 and 1.7.24: kubelet's checkpoint in its real format whose
  entries change; the delay until the pool grows back after an entry goes: by the next reply
  (2.1.9: another container created right after) and by the periodic reconcile (1.7.24, the
  default 10 s).

One VM boot for all (the VM is emulated: slow). ``MIXED_CPUS_HOOK_VM_RESULTS=/some/file.json``
keeps a copy of the results file.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest

try:  # tests/integration as a package
    from . import containerd as ctd_mod
    from . import vm
    from .images import write_oci_archive
except ImportError:  # rootdir-relative import (no __init__.py)
    import containerd as ctd_mod  # type: ignore[no-redef]
    import vm  # type: ignore[no-redef]
    from images import write_oci_archive  # type: ignore[no-redef]

pytestmark = [pytest.mark.integration, pytest.mark.vm]

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "vm_scenarios", "nri_pool_v2.py")
# [phase, containerd version, argument]: one containerd per version serves its phases
PHASES = [["dra", "2.1"], ["kubelet", "2.1", "next_reply"], ["kubelet", "1.7", "reconcile"]]
KUBELET_PHASES = {f"kubelet-{p[1]}": p[2] for p in PHASES if p[0] == "kubelet"}
VM_TIMEOUT = 1500  # a cap
RECONCILE_INTERVAL = 10.0  # the plugin's default --reconcile-interval (the kubelet phase runs with it)
INPUT = {
    "integration_dir": HERE,
    "base_dir": "/run/mch-pool",  # tmpfs in the VM (its /tmp is an overlay: no overlayfs upper there)
    "top": "/mch-pool-v2",
    "phases": PHASES,
    "request_timeout": "60s",  # NRI's per-request timeout: a Python plugin under emulation needs more than 2 s
    "cri_timeout": 120.0, "start_timeout": 300.0, "plugin_timeout": 180.0, "exec_timeout": 60, "settle": 60.0,
    "watch_pause": 0.002,
}


@pytest.fixture(scope="module")
def run():
    reason = vm.skip_reason()
    if reason:
        pytest.skip(reason)
    caches = {}
    for version in sorted({p[1] for p in PHASES}):
        try:
            ctd_mod.ensure_binaries(ctd_mod.CACHES[version], release=version)
        except RuntimeError as exc:
            pytest.fail(f"containerd {version} is not in the cache: {exc}")
    with tempfile.TemporaryDirectory(prefix="mch-pool-vm-") as rwdir:
        for version in sorted({p[1] for p in PHASES}):  # the VM does not see the host's /var/cache
            caches[version] = os.path.join(rwdir, f"containerd-{version}")
            vm.link_tree(ctd_mod.CACHES[version], caches[version])
        archive = os.path.join(rwdir, "images.tar")  # built here: a Python tar under emulation takes half a minute
        write_oci_archive(archive)
        run = vm.run_scenario(SCENARIO, dict(INPUT, containerd_caches=caches, image_archive=archive), rwdir, cpus=4,
                              timeout=VM_TIMEOUT)
    if run.problem():
        pytest.fail(run.problem())
    result, doc = run.result, run.doc
    print(f"\npool v2 VM: {result.elapsed:.1f} s in all, scenario {doc.get('elapsed')} s, phases "
          + ", ".join(f"{k} {v.get('seconds')} s" for k, v in doc.get("phases", {}).items()))
    return Run(result, doc)


class Run:
    def __init__(self, result, doc: dict) -> None:
        self.result, self.doc = result, doc

    def step(self, phase: str, name: str) -> dict:
        steps = self.doc.get("steps", {})
        key = f"{phase}:{name}"
        if key not in steps:
            info = self.doc.get("phases", {}).get(phase, {})
            pytest.fail(f"step {key!r} did not run; steps run: {self.doc.get('order')}\n"
                        f"phase error: {info.get('error')}\ncontainerd log:\n{info.get('containerd_log')}\n"
                        f"plugin logs: {(info.get('cleanup') or {}).get('plugin_logs')}\n{self.result.describe()}")
        return steps[key]


def show(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True)[:8000]


def test_vm_phases_ran_and_left_nothing(run):
    assert run.doc["env"]["online"] == "0-3" and run.doc["env"]["cgroup2"], show(run.doc["env"])
    assert run.doc["done"] is True, show(run.doc.get("order"))
    for name, phase in run.doc["phases"].items():
        assert phase["error"] is None, f"{name}: {phase['error']}\n{phase.get('containerd_log')}"
        assert phase["cleanup"]["problems"] == [], show(phase["cleanup"])
    assert sorted(run.doc["phases"]) == sorted(f"{p[0]}-{p[1]}" for p in PHASES), show(run.doc["phases"])
    for version, runtime in run.doc["runtimes"].items():
        assert runtime["error"] is None and runtime["problems"] == [], f"containerd {version}: {show(runtime)}"
    assert run.doc["cleanup"] == [], show(run.doc["cleanup"])


# ---------------------------------------------------------------------------------------------
# exclusive_source dra


def test_dra_claims_shrink_the_pool_before_the_claimant_starts(run):
    s = run.step("dra-2.1", "standard")
    assert s["cpus"] == {"s1": "1-3", "s2": "1-3"}, show(s)  # reserved 0 is never in the pool
    s = run.step("dra-2.1", "claim_only")
    assert s["after_create"] == {"s1": "1-2", "s2": "1-2"}, show(s)
    assert s["cpus"] == {"s1": "1-2", "s2": "1-2", "cA": "3"}, show(s)
    assert s["inside"]["Cpus_allowed_list"] == "3", show(s)
    s = run.step("dra-2.1", "mixed")
    assert s["after_create"] == {"s1": "1", "s2": "1"}, show(s)
    assert s["cpus"] == {"s1": "1", "s2": "1", "cA": "3", "M": "1-2"}, show(s)
    assert s["inside"] == {"Cpus_allowed_list": "1-2", "OPENSHIFT_ISOLATED_CPUS": "2",
                           f"DRA_CPUSET_{s['claims']['B']}": "2"}, show(s)


def test_dra_the_watcher_never_sees_a_claimed_cpu_elsewhere(run):
    s = run.step("dra-2.1", "end")
    assert s["violations"] == [], show(s)
    assert s["violations_while_no_plugin"] > 0, show(s)  # the watcher does see what the plugin's absence lets in
    assert s["after_e"][0] is not None and s["after_m"][0] is not None, show(s)  # grown back: 1,3 then 1-3
    assert s["rounds"] > 100 and s["writes"]["s1"] >= 5, show(s)  # sampled, and read at every write


def test_dra_a_claim_elsewhere_resets_a_pinned_thread_on_the_vm_kernel(run):
    """Kernels before 6.2 replace every thread's mask when the cpuset changes: with the pool, a claim
    anywhere on the node changes every mixed container's set, so an application's pin is lost."""
    s = run.step("dra-2.1", "thread_pin")
    print(f"\nkernel {s['kernel']}: pinned to {s['pinned']}; the pool grew (M on {s['grown'][1]}): "
          f"{s['after_grow']}; the pool shrank (M on {s['shrunk']}): {s['after_shrink']}")
    assert s["pinned"] == "2" and s["grown"][1] == "1-3" and s["shrunk"] == "1-2", show(s)
    major, minor = (int(x) for x in s["kernel"].split("-")[0].split(".")[:2])
    if (major, minor) >= (6, 2):  # commits 8f9ea86fdf99, da019032819a: the requested mask is kept
        assert (s["after_grow"], s["after_shrink"]) == ("2", "2"), show(s)
    else:
        assert (s["after_grow"], s["after_shrink"]) == ("1-3", "1-2"), show(s)


def test_dra_plugin_killed_then_restarted_rebuilds_the_pool(run):
    s = run.step("dra-2.1", "plugin_restart")
    # while no plugin ran: cD (claim 1) was created unadjusted; the others kept the set of before
    assert s["while_down"] == {"s1": "1", "s2": "1", "M": "1-2", "cD": "0-3"}, show(s)
    assert s["synced"][0] is not None, show(s)
    assert s["after_sync"] == {"s1": "3", "s2": "3", "M": "2-3", "cD": "1"}, show(s)


def test_dra_containerd_restarted_plugin_reconnects(run):
    s = run.step("dra-2.1", "containerd_restart")
    assert s["plugin_running"] is True, show(s)
    assert s["after_restart"] == {"s1": "3", "s2": "3", "M": "2-3", "cD": "1"}, show(s)
    assert s["regrown"][0] is not None, show(s)  # cD gone: 1 back in the pool
    assert s["after_create"] == {"s1": "3", "s2": "3", "M": "2-3"}, show(s)
    assert s["cpus"] == {"s1": "3", "s2": "3", "M": "2-3", "cE": "1"}, show(s)


# ---------------------------------------------------------------------------------------------
# exclusive_source kubelet


@pytest.mark.parametrize("phase", KUBELET_PHASES)
def test_kubelet_mixed_container_on_exclusive_plus_pool(run, phase):
    s = run.step(phase, "mixed")
    assert s["values"] == {"cpus": "1-3", "effective": "1-3", "quota": 200000, "pod_quota": 200000}, show(s)
    assert s["inside"] == {"Cpus_allowed_list": "1-3", "OPENSHIFT_ISOLATED_CPUS": "1",
                           "OPENSHIFT_SHARED_CPUS": "2-3"}, show(s)


@pytest.mark.parametrize("phase", KUBELET_PHASES)
def test_kubelet_new_exclusive_container_shrinks_the_mixed_one_first(run, phase):
    """kubelet's checkpoint gives CPU 2 to a new container before its creation: the reply to that
    CreateContainer moves the mixed container off it before it starts."""
    s = run.step(phase, "exclusive")
    assert s["after_create"] == "1,3" and s["values"] == {"app": "1,3", "b": "2"}, show(s)
    assert run.step(phase, "end")["violations"] == [], show(run.step(phase, "end"))


@pytest.mark.parametrize("phase", KUBELET_PHASES)
def test_kubelet_pool_grows_back_after_the_entry_goes(run, phase):
    """kubelet removes a gone container's entry later (its own reconcile), with no NRI event: the pool grows
    back at the plugin's periodic reconcile (10 s by default), or at the next reply, whichever comes first."""
    s = run.step(phase, "end")
    grow_by, back = KUBELET_PHASES[phase], s["grow_back"]
    print(f"\n{phase}: the pool grew back {back['seconds']} s after kubelet's entry went, by the {grow_by} "
          f"(another container created in {back['other_created_in']} s)")
    assert back["seconds"] is not None and back["last"] == "1-3", show(s)
    if grow_by == "reconcile":
        assert back["seconds"] <= RECONCILE_INTERVAL + 30 and not s["by_reply"], show(s)
    else:
        assert s["by_reply"] and back["seconds"] <= back["other_created_in"] + 5, show(s)
