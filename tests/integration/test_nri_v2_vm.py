"""The NRI plugin with a real containerd 1.7 on cgroup v2, in one throwaway VM.

The machine has no cgroup v2 controllers (hybrid layout), so the scenario runs in a virtme-ng
VM (vm.py: Debian's kernel under qemu without KVM, 4 vCPUs, the host's files read-only, so the
containerd binaries in the host's cache, runc, busybox and the venv with grpcio are all there).
``vm_scenarios/nri_v2.py`` starts containerd and the plugin with the harness of the v1 tests,
performs every step over CRI and writes exact values into a results file; the tests below
assert each step from it.

Shared CPUs "0-1", the container's exclusive "2-3": mixed is "0-3" (cpuset.cpus and
cpuset.cpus.effective), its cpu.max quota 200000 + 2 x 100000 = 400000, its pod's
300000 + 200000 = 500000. One VM boot runs every check (the VM is emulated: slow).

Then issue 14's stale checkpoint: a plugin that reads kubelet's checkpoint (written in kubelet's
format, replaced by rename) and has no periodic reconcile, so only an NRI answer changes a
cgroup. A mixed container is admitted on X = CPU 2 (mixed "0-2"); the checkpoint moves it to
Y = CPU 3 and kubelet's cpuset-only update is answered "0-1,3", never the old "0-2"; moved back,
a resize without a cpuset is answered "0-2"; moved to Y again with X given to a new container,
the new one's CreateContainer reply moves the first one off X before kubelet's update for it.
Set ``MIXED_CPUS_HOOK_VM_RESULTS=/some/file.json`` to keep a copy of the results file.
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest

try:  # tests/integration as a package
    from . import containerd as ctd_mod
    from . import vm
except ImportError:  # rootdir-relative import (no __init__.py)
    import containerd as ctd_mod  # type: ignore[no-redef]
    import vm  # type: ignore[no-redef]

pytestmark = [pytest.mark.integration, pytest.mark.vm]

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "vm_scenarios", "nri_v2.py")
SHARED, EXCLUSIVE, MIXED = "0-1", "2-3", "0-3"
MOVE_FROM, MOVE_TO = "2", "3"  # X and Y: one exclusive CPU each beside the shared two
ON_X, ON_Y = "0-2", "0-1,3"
PERIOD, QUOTA, POD_QUOTA = 100000, 200000, 300000
RAISED, POD_RAISED = QUOTA + 2 * PERIOD, POD_QUOTA + 2 * PERIOD
VM_TIMEOUT = 900  # a cap; ~3 min on an idle 2-CPU host
INPUT = {
    "integration_dir": HERE,
    "base_dir": "/run/mch-nri",  # tmpfs in the VM (its /tmp is an overlay: no overlayfs upper there)
    "top": "/mch-nri-v2",
    "shared": SHARED, "exclusive": EXCLUSIVE, "mixed": MIXED, "move_from": MOVE_FROM, "move_to": MOVE_TO,
    "quota": QUOTA, "pod_quota": POD_QUOTA, "period": PERIOD,
    "request_timeout": "60s",  # NRI's per-request timeout: a Python plugin under emulation needs more than 2 s
    "reconcile_interval": 5.0,  # the plugin's periodic reconcile (default 10 s), exercised after the rewrites
    "cri_timeout": 120.0, "start_timeout": 300.0, "plugin_timeout": 180.0, "exec_timeout": 60, "settle": 60.0,
}


@pytest.fixture(scope="module")
def run():
    reason = vm.skip_reason()
    if reason:
        pytest.skip(reason)
    try:
        ctd_mod.ensure_binaries()
    except RuntimeError as exc:
        pytest.fail(f"containerd is not in the cache: {exc}")
    with tempfile.TemporaryDirectory(prefix="mch-nri-vm-") as rwdir:
        # The VM does not see the host's /var/cache: the binaries go into the shared rwdir
        # (hard links when on the same file system, else copies).
        cache = os.path.join(rwdir, "containerd")
        vm.link_tree(ctd_mod.CACHE, cache)
        run = vm.run_scenario(SCENARIO, dict(INPUT, containerd_cache=cache), rwdir, cpus=4, timeout=VM_TIMEOUT)
    if run.problem():
        pytest.fail(run.problem())
    result, doc = run.result, run.doc
    print(f"\nNRI v2 VM: {result.elapsed:.1f} s in all, scenario {doc.get('elapsed')} s")
    return Run(result, doc)


class Run:
    def __init__(self, result, doc: dict) -> None:
        self.result, self.doc = result, doc

    def step(self, name: str) -> dict:
        steps = self.doc.get("steps", {})
        if name not in steps:
            pytest.fail(f"step {name!r} did not run; steps run: {self.doc.get('order')}\n"
                        f"scenario error: {self.doc.get('error')}\ncontainerd log:\n{self.doc.get('containerd_log')}\n"
                        f"plugin logs: {self.doc.get('plugin_logs')}\n{self.result.describe()}")
        return steps[name]


def show(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True)[:6000]


def show_with_log(run: "Run", value) -> str:
    """A step's values and the tail of the first plugin's log: what it decided, and why."""
    logs = run.doc.get("plugin_logs") or [""]
    return f"{show(value)}\nplugin log (tail):\n{logs[0][-5000:]}"


def mixed(pod_quota: int = POD_RAISED) -> dict:
    return {"cpus": MIXED, "effective": MIXED, "quota": RAISED, "pod_quota": pod_quota}


def test_vm_runs_containerd_with_nri_on_cgroup_v2(run):
    assert run.doc["error"] is None, f"{run.doc['error']}\ncontainerd log:\n{run.doc.get('containerd_log')}"
    env = run.doc["env"]
    assert env["cgroup_fs"] == ["cgroup2"], show(env)
    assert {"cpuset", "cpu"} <= set(env["controllers"]), show(env)
    assert env["online"] == "0-3", show(env)
    assert env["containerd"].startswith("1.7."), show(env)
    s = run.step("containerd")
    assert "containerd 1.7" in s["version"], show(s)
    assert run.doc["done"] is True, show(run.doc["order"])
    assert run.doc["cleanup"]["problems"] == [], show(run.doc["cleanup"])


def test_created_mixed_with_env_sibling_untouched_on_v2(run):
    s = run.step("create")
    assert s["values"] == mixed(), show(s)
    assert s["inside"] == {"Cpus_allowed_list": MIXED, "OPENSHIFT_ISOLATED_CPUS": EXCLUSIVE,
                           "OPENSHIFT_SHARED_CPUS": SHARED}, show(s)
    assert s["side_values"] == {"cpus": SHARED, "effective": SHARED, "quota": 100000, "pod_quota": POD_RAISED}, show(s)
    assert s["side_inside"] == {"Cpus_allowed_list": SHARED}, show(s)
    assert s["records"] == [s["cid"]], show(s)


def test_kubelet_update_never_exclusive_only_on_v2(run):
    s = run.step("update")
    assert s["rewrite"]["cpus_events"] >= 2, show_with_log(run, s)
    assert s["rewrite"]["cpus_seen"] == [MIXED], show_with_log(run, s)
    assert s["rewrite"]["quota_seen"] == [f"{RAISED} {PERIOD}"], show_with_log(run, s)
    assert s["after"] == mixed(), show_with_log(run, s)
    assert s["resize"]["cpus_seen"] == [MIXED], show_with_log(run, s)
    assert (s["after_resize"]["cpus"], s["after_resize"]["quota"]) == (MIXED, RAISED + 100000), show_with_log(run, s)
    assert s["after_resize_back"] == mixed(), show_with_log(run, s)
    assert s["inside"]["Cpus_allowed_list"] == MIXED, show_with_log(run, s)


def test_plugin_killed_then_restarted_resyncs_on_v2(run):
    s = run.step("plugin_kill")
    assert EXCLUSIVE in s["rewrite"]["cpus_seen"], show(s)  # no plugin: kubelet's value lands (and is seen)
    assert s["values"]["cpus"] == EXCLUSIVE, show(s)
    s = run.step("plugin_restart")
    assert s["values"] == mixed(), show(s)  # back to mixed, the pod raised once only
    assert len(s["records"]) == 1, show(s)


def test_containerd_restart_plugin_reconnects_on_v2(run):
    s = run.step("containerd_restart")
    assert s["plugin_running"] is True, show(s)
    assert s["old"] == mixed(), show(s)
    assert s["new"] == mixed(), show(s)
    assert s["new_inside"]["Cpus_allowed_list"] == MIXED, show(s)
    assert s["old_pod_quota"] == POD_QUOTA, show(s)  # the first container removed first: its pod's share back
    assert len(s["records"]) == 1, show(s)


def test_stop_remove_and_failure_policy_on_v2(run):
    s = run.step("stop_remove")
    assert s["pod_quota_after_stop"] == POD_QUOTA, show(s)
    assert s["still_recorded"] is False, show(s)
    s = run.step("fail_policy")
    assert s["error"] and "value 'yes' is not 'enable'" in s["error"], show(s)
    assert s["pod_quota"] == POD_QUOTA and s["plugin_running"] is True, show(s)


def test_stale_checkpoint_kubelet_update_answered_with_the_new_set_on_v2(run):
    """The checkpoint moves a running mixed container from X to Y: kubelet's update (its CPU
    manager's: the cpuset only) is answered Y + shared from the checkpoint as it is now."""
    s = run.step("stale_checkpoint")
    assert s["created"] == {"cpus": ON_X, "effective": ON_X, "quota": 100000 + 2 * PERIOD,
                            "pod_quota": POD_QUOTA + 2 * PERIOD}, show(s)
    assert s["inside"]["Cpus_allowed_list"] == ON_X and s["inside"]["OPENSHIFT_ISOLATED_CPUS"] == MOVE_FROM, show(s)
    s = run.step("checkpoint_move")
    assert s["rewrite"]["cpus_events"] >= 1, show(s)
    assert s["rewrite"]["cpus_seen"] == sorted([ON_X, ON_Y]), show(s)  # never Y alone, nothing else
    assert (s["after"]["cpus"], s["after"]["effective"]) == (ON_Y, ON_Y), show(s)
    assert s["inside"]["Cpus_allowed_list"] == ON_Y, show(s)
    assert s["record"]["exclusive"] == MOVE_TO, show(s["record"])


def test_stale_checkpoint_resize_without_cpuset_follows_the_checkpoint_on_v2(run):
    """Moved back to X; kubelet's resize carries no cpuset: answered X + shared (the checkpoint
    now), never the recorded Y + shared; the new quota raised by the shared CPUs' share."""
    s = run.step("checkpoint_resize")
    assert s["rewrite"]["cpus_seen"] == sorted([ON_X, ON_Y]), show(s)
    assert s["rewrite"]["quota_seen"][-1:] == [f"{200000 + 2 * PERIOD} {PERIOD}"], show(s)
    assert (s["after"]["cpus"], s["after"]["effective"]) == (ON_X, ON_X), show(s)
    assert s["after"]["quota"] == 200000 + 2 * PERIOD, show(s)
    assert s["inside"]["Cpus_allowed_list"] == ON_X, show(s)
    assert s["record"]["exclusive"] == MOVE_FROM, show(s["record"])


def test_stale_checkpoint_create_reply_moves_the_other_container_off_its_old_cpus_on_v2(run):
    """The checkpoint moves the first container to Y and gives X to a new one, which kubelet
    creates before the first one's update: the CreateContainer reply carries the first one's
    update (no periodic reconcile runs, kubelet sent nothing for it), so when CreateContainer
    returns, before the new container starts, X is free."""
    s = run.step("checkpoint_create")
    assert s["first_when_created"]["cpus"] == ON_Y, show(s)
    assert s["first_seen"] == sorted([ON_X, ON_Y]), show(s)
    assert (s["first"]["cpus"], s["first"]["effective"]) == (ON_Y, ON_Y), show(s)
    assert s["first_inside"]["Cpus_allowed_list"] == ON_Y, show(s)
    assert (s["new"]["cpus"], s["new"]["effective"]) == (ON_X, ON_X), show(s)
    assert s["new_inside"] == {"Cpus_allowed_list": ON_X, "OPENSHIFT_ISOLATED_CPUS": MOVE_FROM,
                               "OPENSHIFT_SHARED_CPUS": SHARED}, show(s)
    assert sorted(s["records"]) == sorted([run.step("stale_checkpoint")["cid"], s["cid2"]]), show(s)
    s = run.step("checkpoint_update_after")  # kubelet's update for the first one comes after all
    assert s["rewrite"]["cpus_seen"] == [ON_Y], show(s)
    assert (s["first"]["cpus"], s["new"]["cpus"]) == (ON_Y, ON_X), show(s)
